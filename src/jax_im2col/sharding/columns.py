"""How unfold and fold partition over a mesh.

Both keep the batch N and the channels C on whatever mesh axes divide them,
with no communication, and replicate the spatial dimensions (an unfold or
fold of a spatial block needs a halo; these ops are memory-bound copies,
where gathering the image is the cheaper plan):

  channels-first   image (N, C, *S)   columns (N, C*K, L)   C is the major
                   part of C*K, so a block of channels is a block of rows.
  channels-last    image (N, *S, C)   columns (N, L, K*C)   C is the minor
                   part of K*C: a block of channels is no block of the
                   columns (except for K == 1).

Channels-last with K > 1 therefore cannot keep a channel sharding through
the op. The plan with the least communication:

- unfold: gather the image's channels (an all-gather of the image, 1/K of
  the columns' size; any exchange of the columns themselves moves more as
  soon as K exceeds the number of shards) and return columns replicated
  over those axes;
- fold: its columns must hold every channel of a tap (a gather where they
  arrive split on K*C); where the result is wanted channel-sharded, each
  shard folds only its own channels, sliced locally out of the columns,
  so the gradient of an unfold of channel-sharded images is channel-sharded
  again at no further cost.

``conv_general_dilated_patches`` orders its features channel-major in every
layout, so it is a channels-first unfold between transposes and partitions
on N and C in both layouts.
"""

from __future__ import annotations

from jax import lax
from jax.experimental.custom_partitioning import ArrayMapping, CompoundFactor, SdyShardingRule

from .partitioned import Call, Plan, Shape, axes_size


def _channel_dims(ndim: int, channels_last: bool):
  """(image channel dim, columns row dim)."""
  return (ndim - 1, 2) if channels_last else (1, 1)


class ColumnsRules:
  """Rules of unfold (unfold=True) or fold (partitioned.Rules)."""

  def __init__(self, inner, unfold: bool):
    self.inner = inner
    self.unfold = unfold

  def _image_cols(self, operands, result):
    return (operands[0], result) if self.unfold else (result, operands[0])

  def plan(self, call: Call, operands, result, operand_specs, result_spec, mesh_shape) -> Plan:
    params = call.kwargs
    window, cl = params["window"], params["channels_last"]
    image, cols = self._image_cols(operands, result)
    k = window.kernel_size
    ich, cch = _channel_dims(image.ndim, cl)
    n, c = image.shape[0], image.shape[ich]
    specs = {"in": operand_specs[0], "out": result_spec}
    image_key = "in" if self.unfold else "out"
    # The columns' channel dim carries a channel sharding unless channels-last with K > 1.
    cols_carry = not cl or k == 1
    used = set()

    def pick(candidates, size):
      for cand in candidates:
        cand = tuple(cand or ())
        if cand and not used & set(cand) and size % axes_size(mesh_shape, cand) == 0:
          used.update(cand)
          return cand
      return ()

    def at(key, dim):
      return specs[key][dim] if specs[key] is not None else ()

    order = ("in", "out")
    n_axes = pick([at(key, 0) for key in order], n)
    if cols_carry:
      c_cands = [at(key, ich if key == image_key else cch) for key in order]
    elif self.unfold:
      c_cands = []                # the image's channels are gathered
    else:
      c_cands = [at("out", ich)]  # each shard folds its channels, sliced out of whole columns
    c_axes = pick(c_cands, c)

    image_spec = [()] * image.ndim
    cols_spec = [()] * cols.ndim
    image_spec[0] = cols_spec[0] = n_axes
    image_spec[ich] = c_axes
    if cols_carry:
      cols_spec[cch] = c_axes
    image_spec, cols_spec = tuple(image_spec), tuple(cols_spec)
    inner = self.inner
    parts = axes_size(mesh_shape, c_axes)

    if self.unfold:
      def per_shard(x):
        return inner.bind(x, **params)
      return Plan((image_spec,), cols_spec, per_shard)

    def per_shard(v):
      if c_axes and not cols_carry:  # this shard's channels of every tap
        positions, cp = v.shape[1], c // parts
        v = v.reshape((v.shape[0], positions, k, c))
        v = lax.dynamic_slice_in_dim(v, lax.axis_index(c_axes) * cp, cp, axis=3)
        v = v.reshape((v.shape[0], positions, k * cp))
      return inner.bind(v, **params)
    return Plan((cols_spec,), image_spec, per_shard)

  def reads_sub_axes(self, call: Call) -> bool:
    return False

  def user_spec(self, call: Call, result: Shape, spec) -> tuple:
    """The batch and the channels of a user's sharding of the result (the
    columns' rows only where they carry channels)."""
    params = call.kwargs
    cl = params["channels_last"]
    out = [()] * result.ndim
    out[0] = spec[0]
    if self.unfold:
      if not cl or params["window"].kernel_size == 1:
        out[_channel_dims(result.ndim, cl)[1]] = spec[_channel_dims(result.ndim, cl)[1]]
    else:
      ich = _channel_dims(result.ndim, cl)[0]
      out[ich] = spec[ich]
    return tuple(out)

  def sharding_rule(self, call: Call, operand_shapes, result_shape):
    params = call.kwargs
    window, cl = params["window"], params["channels_last"]
    image, cols = ((operand_shapes[0], result_shape) if self.unfold
                   else (result_shape, operand_shapes[0]))
    nd, k = len(image) - 2, window.kernel_size
    spatial = [f"s{i}" for i in range(nd)]
    replicate = list(spatial) + ["l"]
    sizes = {}
    if k == 1:
      rows = "c"
    else:
      rows = CompoundFactor("k", "c") if cl else CompoundFactor("c", "k")
      sizes["k"] = k
    if cl:
      image_map = ArrayMapping("n", *spatial, "c")
      cols_map = ArrayMapping("n", "l", rows)
    else:
      image_map = ArrayMapping("n", "c", *spatial)
      cols_map = ArrayMapping("n", rows, "l")
    if k > 1:
      replicate.append("k")
      if cl:
        replicate.append("c")  # a channel block is no block of K*C
    operands, results = ((image_map,), (cols_map,)) if self.unfold else ((cols_map,), (image_map,))
    order = []
    for m in operands + results:
      for d in m:
        for f in (d if isinstance(d, CompoundFactor) else (d,)):
          if f not in order:
            order.append(f)
    return SdyShardingRule(operands, results,
                           need_replication_factors=tuple(sorted(set(replicate), key=order.index)),
                           **sizes)
