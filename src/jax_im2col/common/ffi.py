"""Loads the compiled modules and registers their FFI targets with XLA.

The CPU and CUDA modules register the same target names, so one lowering rule
per primitive serves both platforms.
"""

from __future__ import annotations

import jax

from .. import _cpu

for _name, _capsule in _cpu.registrations().items():
  jax.ffi.register_ffi_target(_name, _capsule, platform="cpu")

try:
  from .. import _cuda
except ImportError as e:  # built without CUDA, or cuBLAS not loadable
  _cuda = None
  cuda_import_error: str | None = str(e)
else:
  cuda_import_error = None
  for _name, _target in _cuda.registrations().items():
    jax.ffi.register_ffi_target(_name, _target, platform="CUDA")

UNFOLD = "jax_im2col_unfold"
FOLD = "jax_im2col_fold"
CONV_FORWARD = "jax_im2col_conv_forward"
CONV_BACKWARD_DATA = "jax_im2col_conv_backward_data"
CONV_BACKWARD_FILTER = "jax_im2col_conv_backward_filter"


def has_cuda_module() -> bool:
  return _cuda is not None


def hopper_kernels_compiled() -> bool:
  """Whether the CUDA module carries the sm_90a (wgmma) kernels."""
  return _cuda is not None and bool(_cuda.hopper_kernels())
