"""Batching rules of the convolution primitives.

Roles: every primitive relates an image x, a filter w and an output image y.
A mapped axis that touches only images folds into N. Once the filter is
mapped (per-example weights, or a filter gradient of mapped operands), the
mapped axis B folds into the groups instead: images (B, N, C, ...) become
(N, B*C, ...), filters (B, O, ...) become (B*O, ...) and groups G become
B*G, so the work stays one call of B*G grouped convolutions. A batch-grouped
call is stacked into feature groups first (stacking.py).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.interpreters import batching

from .primitives import (OPS, bind_varying, conv_backward_data_p, conv_backward_filter_p,
                         conv_forward_p)
from .stacking import bind_stacked, images_from_channels, images_into_channels


def _to_front(v, d):
  return v if d is None else jnp.moveaxis(v, d, 0)


def _images_into_n(v):
  b, n = v.shape[:2]
  return v.reshape((b * n, *v.shape[2:]))


def _broadcast(v, b):
  return jnp.broadcast_to(v, (b, *v.shape))


def _batch_rule(prim):
  image_roles = {conv_forward_p: ("image", "filter"), conv_backward_data_p: ("image", "filter"),
                 conv_backward_filter_p: ("image", "image")}[prim]

  def rule(args, dims, *, spec, out_dtype, **extra):
    if spec.batch_groups > 1:  # stacked, each mapped slice alike
      def one(u, v):
        return bind_stacked(OPS[prim], functools.partial(bind_varying, prim), u, v, spec=spec,
                            out_dtype=out_dtype, **extra)
      return jax.vmap(one, in_axes=tuple(dims))(*args), 0
    b = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    if b == 0:
      unmapped = [jax.ShapeDtypeStruct(a.shape if d is None else a.shape[:d] + a.shape[d + 1:],
                                       a.dtype) for a, d in zip(args, dims)]
      out = jax.eval_shape(
          lambda *v: bind_varying(prim, *v, spec=spec, out_dtype=out_dtype, **extra),
                           *unmapped)
      return jnp.zeros((0, *out.shape), out.dtype), 0
    args = [_to_front(a, d) for a, d in zip(args, dims)]
    mapped = [d is not None for d in dims]
    filter_mapped = prim is conv_backward_filter_p or mapped[1]
    if not filter_mapped:  # only the image operand is mapped
      out = bind_varying(prim, _images_into_n(args[0]), args[1], spec=spec,
                         out_dtype=out_dtype, **extra)
      return out.reshape((b, args[0].shape[1], *out.shape[1:])), 0
    cl = spec.channels_last
    if prim is conv_forward_p and not mapped[0] and spec.groups == 1:
      # Shared input, mapped filters: one conv with B*O output channels.
      w = args[1]
      out = bind_varying(prim, args[0], w.reshape((b * w.shape[1], *w.shape[2:])), spec=spec,
                      out_dtype=out_dtype, **extra)
      return images_from_channels(out, b, cl), 0
    new = []
    for a, m, role in zip(args, mapped, image_roles):
      a = a if m else _broadcast(a, b)
      new.append(images_into_channels(a, cl) if role == "image" else
                 a.reshape((b * a.shape[1], *a.shape[2:])))
    out = bind_varying(prim, *new, spec=spec.with_groups(spec.groups * b), out_dtype=out_dtype,
                       **extra)
    if prim is conv_backward_filter_p:
      return out.reshape((b, out.shape[0] // b, *out.shape[1:])), 0
    return images_from_channels(out, b, cl), 0

  return rule


for _prim in (conv_forward_p, conv_backward_data_p, conv_backward_filter_p):
  batching.primitive_batchers[_prim] = _batch_rule(_prim)


