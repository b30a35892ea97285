"""im2col / col2im primitives and an im2col + GEMM convolution for JAX."""

from . import _ffi
from ._api import (conv_general_dilated_patches, fold, fold_channels_last, unfold,
                   unfold_channels_last)
from ._conv import conv_general_dilated
from ._workspace import (DEFAULT_WORKSPACE_LIMIT, get_workspace_limit, set_workspace_limit,
                         workspace_limit)

__all__ = [
    "unfold",
    "fold",
    "unfold_channels_last",
    "fold_channels_last",
    "conv_general_dilated_patches",
    "conv_general_dilated",
    "DEFAULT_WORKSPACE_LIMIT",
    "get_workspace_limit",
    "set_workspace_limit",
    "workspace_limit",
    "has_cuda",
]
__version__ = "0.1.0"


def has_cuda() -> bool:
  """Whether the CUDA module was built and loaded (a GPU may still be absent)."""
  return _ffi.has_cuda_module()
