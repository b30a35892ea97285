"""The CUDA lowering of the convolution primitives: the algorithm selection.py
chooses, as one FFI call whose scratch memory is an extra result XLA
allocates (never a cudaMalloc in the handler), or XLA's own convolution."""

from __future__ import annotations

import jax
import numpy as np
from jax.interpreters import mlir

from ..common import ffi
from ..common.device import device_caps
from ..common.primitive import empty_safe
from . import xla_conv
from .primitives import (FILTER_GRADIENT, FORWARD, INPUT_GRADIENT, conv_backward_data_shard_p,
                         conv_backward_filter_shard_p, conv_forward_shard_p)
from .selection import problem_of, select
from .stacking import stacking_lowering

_TARGETS = {FORWARD: ffi.CONV_FORWARD, INPUT_GRADIENT: ffi.CONV_BACKWARD_DATA,
            FILTER_GRADIENT: ffi.CONV_BACKWARD_FILTER}
_XLA = {FORWARD: xla_conv.forward, INPUT_GRADIENT: xla_conv.input_gradient,
        FILTER_GRADIENT: xla_conv.filter_gradient}


def _ffi_call(target, ctx, a, b, spec, choice):
  ws = jax.core.ShapedArray((choice.workspace_bytes,), np.uint8)
  rule = jax.ffi.ffi_lowering(target)
  out, _ = rule(ctx.replace(avals_out=[ctx.avals_out[0], ws]), a, b,
                channels_last=spec.channels_last, groups=np.int64(spec.groups),
                precision=np.int64(spec.precision), chunk_images=np.int64(choice.chunk_images),
                chunk_positions=np.int64(choice.chunk_positions),
                algorithm=np.int64(choice.ffi_algorithm), **spec.window.ffi_attributes())
  return [out]


def _lowering(op):
  @empty_safe
  def rule(ctx, a, b, *, spec, out_dtype, **extra):
    choice = select(problem_of(op, spec, ctx.avals_in, ctx.avals_out[0]), device_caps("cuda"))
    if choice.algorithm == "xla":
      xla = mlir.lower_fun(lambda u, v: _XLA[op](u, v, spec=spec, out_dtype=out_dtype, **extra),
                           multiple_results=False)
      return xla(ctx, a, b)
    return _ffi_call(_TARGETS[op], ctx, a, b, spec, choice)
  return rule


for _prim, _op in ((conv_forward_shard_p, FORWARD), (conv_backward_data_shard_p, INPUT_GRADIENT),
                   (conv_backward_filter_shard_p, FILTER_GRADIENT)):
  mlir.register_lowering(_prim, stacking_lowering(_op, _prim, _lowering(_op)), platform="cuda")
