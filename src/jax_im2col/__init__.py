"""unfold (im2col), fold (col2im) and conv_general_dilated for JAX, as JAX
primitives computed by XLA FFI custom calls on the CPU and on CUDA GPUs."""

from .columns.api import (conv_general_dilated_patches, fold, fold_channels_last, unfold,
                          unfold_channels_last)
from .common import ffi as _ffi
from .common.arguments import COLUMNS_DTYPES
from .common.config import (ALGORITHMS, DEFAULT_WORKSPACE_LIMIT, force_algorithm, get_algorithm,
                            get_workspace_limit, set_algorithm, set_workspace_limit,
                            workspace_limit)
from .conv.api import conv_general_dilated
from .conv.explain import explain
from .conv.selection import Choice

__all__ = [
    "unfold",
    "fold",
    "unfold_channels_last",
    "fold_channels_last",
    "conv_general_dilated_patches",
    "COLUMNS_DTYPES",
    "conv_general_dilated",
    "explain",
    "Choice",
    "ALGORITHMS",
    "force_algorithm",
    "get_algorithm",
    "set_algorithm",
    "DEFAULT_WORKSPACE_LIMIT",
    "get_workspace_limit",
    "set_workspace_limit",
    "workspace_limit",
    "has_cuda",
]
__version__ = "0.2.0"


def has_cuda() -> bool:
  """Whether the CUDA module was built and loaded (a GPU may still be absent)."""
  return _ffi.has_cuda_module()
