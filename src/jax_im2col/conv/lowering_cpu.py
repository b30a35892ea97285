"""The CPU lowering of the convolution primitives: unfold / fold custom calls
and XLA dots per group ("columns_dot"), in chunks of images (or of output
rows) under the workspace cap; or XLA's own convolution where forced."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import mlir

from ..columns import primitives as columns
from ..common.arguments import HALF_DTYPES
from ..common.device import device_caps
from ..common.geometry import dilated
from ..common.primitive import empty_safe
from . import xla_conv
from .primitives import (FILTER_GRADIENT, FORWARD, INPUT_GRADIENT, PRECISION_HIGHEST,
                         backward_data_abstract, backward_filter_abstract,
                         conv_backward_data_shard_p, conv_backward_filter_shard_p,
                         conv_forward_shard_p, filter_shape)
from .selection import problem_of, select
from .stacking import stacking_lowering


def _dot_precision(spec):
  return lax.Precision.HIGHEST if spec.precision == PRECISION_HIGHEST else None


def _acc_dtype(dtype):
  return np.dtype(np.float32) if np.dtype(dtype) in HALF_DTYPES else np.dtype(dtype)


def _grouped_columns(x, spec):
  """Columns of x split by group: (N, G, Cg*K, L) cf or (N, L, K, G, Cg) cl."""
  cols = columns.unfold(x, window=spec.window, channels_last=spec.channels_last, algorithm=spec.algorithm)
  n, g, k = x.shape[0], spec.groups, spec.window.kernel_size
  if spec.channels_last:
    return cols.reshape((n, cols.shape[1], k, g, -1))
  return cols.reshape((n, g, -1, cols.shape[2]))


def _grouped_filter(w, spec):
  """(G, Og, Cg*K) cf or (G, Og, K, Cg) cl."""
  g = spec.groups
  if spec.channels_last:
    return w.reshape((g, w.shape[0] // g, spec.window.kernel_size, w.shape[-1]))
  return w.reshape((g, w.shape[0] // g, -1))


def _grouped_image(y, spec):
  """(N, G, Og, L) cf or (N, L, G, Og) cl."""
  n, g = y.shape[0], spec.groups
  if spec.channels_last:
    return y.reshape((n, -1, g, y.shape[-1] // g))
  return y.reshape((n, g, y.shape[1] // g, -1))


def _forward_cpu_chunk(x, w, *, spec, out_dtype):
  cols, wg = _grouped_columns(x, spec), _grouped_filter(w, spec)
  dn = ((((2, 4), (2, 3)), ((3,), (0,))) if spec.channels_last else (((2,), (2,)), ((1,), (0,))))
  y = lax.dot_general(cols, wg, dn, precision=_dot_precision(spec),
                      preferred_element_type=_acc_dtype(out_dtype))  # (G, N, L, Og)
  out_spatial = spec.window.output_spatial(columns.image_spatial(x.shape, spec.channels_last))
  n = x.shape[0]
  if spec.channels_last:
    y = jnp.transpose(y, (1, 2, 0, 3)).reshape((n, *out_spatial, -1))
  else:
    y = jnp.transpose(y, (1, 0, 3, 2)).reshape((n, -1, *out_spatial))
  return y.astype(out_dtype)


def _backward_data_cpu_chunk(dy, w, *, spec, out_dtype, in_spatial):
  dyg, wg = _grouped_image(dy, spec), _grouped_filter(w, spec)
  n = dy.shape[0]
  acc = _acc_dtype(out_dtype)
  if spec.channels_last:
    dcols = lax.dot_general(dyg, wg, (((3,), (1,)), ((2,), (0,))), precision=_dot_precision(spec),
                            preferred_element_type=acc)  # (G, N, L, K, Cg)
    dcols = jnp.transpose(dcols, (1, 2, 3, 0, 4)).reshape((n, dcols.shape[2], -1))
  else:
    dcols = lax.dot_general(dyg, wg, (((2,), (1,)), ((1,), (0,))), precision=_dot_precision(spec),
                            preferred_element_type=acc)  # (G, N, L, Cg*K)
    dcols = jnp.transpose(dcols, (1, 0, 3, 2)).reshape((n, -1, dcols.shape[2]))
  dx = columns.fold(dcols, window=spec.window, channels_last=spec.channels_last,
                    spatial=tuple(in_spatial), algorithm=spec.algorithm)
  return dx.astype(out_dtype)


def _backward_filter_cpu_chunk(dy, x, *, spec, out_dtype):
  cols, dyg = _grouped_columns(x, spec), _grouped_image(dy, spec)
  acc = _acc_dtype(out_dtype)
  if spec.channels_last:  # dy (N, L, G, Og), cols (N, L, K, G, Cg) -> (G, Og, K, Cg)
    dw = lax.dot_general(dyg, cols, (((0, 1), (0, 1)), ((2,), (3,))),
                         precision=_dot_precision(spec), preferred_element_type=acc)
  else:  # dy (N, G, Og, L), cols (N, G, CgK, L) -> (G, Og, CgK)
    dw = lax.dot_general(dyg, cols, (((0, 3), (0, 3)), ((1,), (1,))),
                         precision=_dot_precision(spec), preferred_element_type=acc)
  o = dy.shape[-1] if spec.channels_last else dy.shape[1]
  cg = columns.image_channels(x.shape, spec.channels_last) // spec.groups
  return dw.reshape(filter_shape(o, cg, spec)).astype(out_dtype)


def _cpu_images_per_chunk(image_shape, spec, item):
  cl = spec.channels_last
  c = columns.image_channels(image_shape, cl)
  positions = int(np.prod(spec.window.output_spatial(columns.image_spatial(image_shape, cl))))
  per_image = max(1, c * spec.window.kernel_size * positions * item)
  return max(1, spec.workspace_limit // per_image)


def _map_images(fn, image, other, chunk):
  """fn over chunks of `image`'s leading axis (padded to whole chunks)."""
  n = image.shape[0]
  if chunk >= n:
    return fn(image, other)
  steps = -(-n // chunk)
  padded = jnp.pad(image, [(0, steps * chunk - n)] + [(0, 0)] * (image.ndim - 1))
  out = lax.map(lambda part: fn(part, other), padded.reshape((steps, chunk, *image.shape[1:])))
  return out.reshape((steps * chunk, *out.shape[2:]))[:n]


def _forward_cpu_images(x, w, *, spec, out_dtype):
  chunk = _cpu_images_per_chunk(x.shape, spec, np.dtype(x.dtype).itemsize)
  return _map_images(lambda a, b: _forward_cpu_chunk(a, b, spec=spec, out_dtype=out_dtype),
                     x, w, chunk)


def _backward_data_cpu_images(dy, w, *, spec, out_dtype, in_spatial):
  dx_shape = backward_data_abstract(dy, w, spec=spec, out_dtype=out_dtype,
                                     in_spatial=in_spatial).shape
  chunk = _cpu_images_per_chunk(dx_shape, spec, _acc_dtype(out_dtype).itemsize)
  fn = lambda a, b: _backward_data_cpu_chunk(a, b, spec=spec, out_dtype=out_dtype,
                                             in_spatial=in_spatial)
  return _map_images(fn, dy, w, chunk)


def _backward_filter_cpu_images(dy, x, *, spec, out_dtype):
  n = x.shape[0]
  chunk = _cpu_images_per_chunk(x.shape, spec, np.dtype(x.dtype).itemsize)
  if chunk >= n:
    return _backward_filter_cpu_chunk(dy, x, spec=spec, out_dtype=out_dtype)
  steps = -(-n // chunk)
  pad = lambda v: jnp.pad(v, [(0, steps * chunk - n)] + [(0, 0)] * (v.ndim - 1)).reshape(
      (steps, chunk, *v.shape[1:]))
  acc = _acc_dtype(out_dtype)

  def step(total, parts):
    return total + _backward_filter_cpu_chunk(*parts, spec=spec, out_dtype=acc), None

  zero = jnp.zeros(backward_filter_abstract(dy, x, spec=spec, out_dtype=acc).shape, acc)
  total, _ = lax.scan(step, zero, (pad(dy), pad(x)))
  return total.astype(out_dtype)


def _row_chunks(spec, image_shape, item):
  """When one image's columns exceed the cap: (r0, rows, spec) for windows
  that compute output rows [r0, r0 + rows) of the first spatial dimension,
  each under the cap (None when no such split is needed). Each window is the
  original one moved by a lower low padding, so it needs no new kernels."""
  cl, w = spec.channels_last, spec.window
  in_spatial = columns.image_spatial(image_shape, cl)
  out_spatial = w.output_spatial(in_spatial)
  row_bytes = (columns.image_channels(image_shape, cl) * w.kernel_size
               * int(np.prod(out_spatial[1:], dtype=np.int64)) * item)
  if row_bytes * out_spatial[0] <= spec.workspace_limit or out_spatial[0] <= 1:
    return None
  rows = max(1, spec.workspace_limit // max(1, row_bytes))
  window0 = dilated(w.kernel[0], w.rhs_dilation[0])
  span0 = dilated(in_spatial[0], w.lhs_dilation[0])
  chunks = []
  for r0 in range(0, out_spatial[0], rows):
    r = min(rows, out_spatial[0] - r0)
    lo = w.padding[0][0] - r0 * w.stride[0]
    hi = (r - 1) * w.stride[0] + window0 - span0 - lo
    moved = dataclasses.replace(w, padding=((lo, hi),) + w.padding[1:])
    chunks.append((r0, r, dataclasses.replace(spec, window=moved)))
  return chunks


def _rows(y, r0, r, spec):
  return lax.slice_in_dim(y, r0, r0 + r, axis=1 if spec.channels_last else 2)


def _forward_cpu(x, w, *, spec, out_dtype):
  chunks = _row_chunks(spec, x.shape, np.dtype(x.dtype).itemsize)
  if chunks is None:
    return _forward_cpu_images(x, w, spec=spec, out_dtype=out_dtype)
  parts = [_forward_cpu_images(x, w, spec=s, out_dtype=out_dtype) for _, _, s in chunks]
  return jnp.concatenate(parts, axis=1 if spec.channels_last else 2)


def _backward_data_cpu(dy, w, *, spec, out_dtype, in_spatial):
  dx_shape = backward_data_abstract(dy, w, spec=spec, out_dtype=out_dtype,
                                     in_spatial=in_spatial).shape
  chunks = _row_chunks(spec, dx_shape, _acc_dtype(out_dtype).itemsize)  # columns in acc dtype
  if chunks is None:
    return _backward_data_cpu_images(dy, w, spec=spec, out_dtype=out_dtype,
                                     in_spatial=in_spatial)
  acc = _acc_dtype(out_dtype)
  total = sum(_backward_data_cpu_images(_rows(dy, r0, r, spec), w, spec=s, out_dtype=acc,
                                        in_spatial=in_spatial) for r0, r, s in chunks)
  return total.astype(out_dtype)


def _backward_filter_cpu(dy, x, *, spec, out_dtype):
  chunks = _row_chunks(spec, x.shape, np.dtype(x.dtype).itemsize)
  if chunks is None:
    return _backward_filter_cpu_images(dy, x, spec=spec, out_dtype=out_dtype)
  acc = _acc_dtype(out_dtype)
  total = sum(_backward_filter_cpu_images(_rows(dy, r0, r, spec), x, spec=s, out_dtype=acc)
              for r0, r, s in chunks)
  return total.astype(out_dtype)


def _lowering(op, columns_dot, xla):
  @empty_safe
  def rule(ctx, a, b, *, spec, **params):
    choice = select(problem_of(op, spec, ctx.avals_in, ctx.avals_out[0]), device_caps("cpu"))
    fn = xla if choice.algorithm == "xla" else columns_dot
    return mlir.lower_fun(lambda u, v: fn(u, v, spec=spec, **params), multiple_results=False)(
        ctx, a, b)
  return rule


for _prim, _op, _fn, _xla in (
    (conv_forward_shard_p, FORWARD, _forward_cpu, xla_conv.forward),
    (conv_backward_data_shard_p, INPUT_GRADIENT, _backward_data_cpu, xla_conv.input_gradient),
    (conv_backward_filter_shard_p, FILTER_GRADIENT, _backward_filter_cpu,
     xla_conv.filter_gradient)):
  mlir.register_lowering(_prim, stacking_lowering(_op, _prim, _lowering(_op, _fn, _xla)),
                         platform="cpu")
