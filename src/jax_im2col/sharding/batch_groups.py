"""How batch-grouped convolutions (lax's batch_group_count G) partition.

The image x holds G*M images, group-major, and group g's images meet only the
filters of output-feature group g; y has M images. The primitives take x
unstacked (conv/stacking.py), so x keeps the batch sharding it comes with,
over mesh axes A of p devices, and the plan is one of:

  whole   G % p == 0: a shard holds G/p whole groups. w and y are split by
          output features over A; each shard stacks its groups. No
          communication.
  named   p % G == 0 and a leading part A_g of A has G devices: a shard holds
          images of one group. w and y's features are split over A_g, y's
          images over the rest, A_m; each shard runs one ungrouped op.
  gather  p % G == 0 otherwise (a group spans part of a mesh axis, which a
          NamedSharding cannot name): w and y are replicated; each shard
          takes its group's filters by its index along A, and the forward
          gathers the shards' results (one all-gather).
  none    anything else: x's batch replicated.

In both split plans the filter gradient gathers each shard's part of its
group's filter gradient (one all-gather of p filter groups) and sums the
parts, into a replicated result: the sum over A_m alone would be an
all-reduce where lax's convolution has none (it gathers the images instead).

Input channels and spatial dimensions keep their split as in conv.py (its
`choose` on those factors alone, past the batch's axes): a channel split is
summed in the forward (one all-reduce), spatial splits exchange halos. The
features within a group are replicated. The operand roles follow
conv.py: forward (x, w) -> y, input gradient (dy, w) -> dx, filter gradient
(dy, x) -> dw.
"""

from __future__ import annotations

import dataclasses

from jax import lax
from jax.experimental.custom_partitioning import ArrayMapping, CompoundFactor, SdyShardingRule

from ..conv.primitives import FILTER_GRADIENT, FORWARD, INPUT_GRADIENT
from .all_reduce import all_reduce_sum
from .conv import Layout, choose, exchange_halos, local_spec, spatial_rule
from .partitioned import Plan, axes_size, first_appearance

_ROLES = {FORWARD: (("x", "w"), "y"), INPUT_GRADIENT: (("y", "w"), "x"),
          FILTER_GRADIENT: (("y", "x"), "w")}


@dataclasses.dataclass(frozen=True)
class GroupSplit:
  mode: str                 # "none", "whole", "named" or "gather"
  axes: tuple = ()          # mesh axes of x's batch
  group_axes: tuple = ()    # "named": the leading ones, over the groups
  image_axes: tuple = ()    # "named": the others, over y's images


def split(axes, groups: int, n: int, mesh_shape) -> GroupSplit:
  """The plan for x's batch of n images over `axes` (see the docstring)."""
  axes = tuple(axes)
  p = axes_size(mesh_shape, axes)
  if p == 1 or n % p:
    return GroupSplit("none")
  if groups % p == 0:
    return GroupSplit("whole", axes)
  if p % groups:
    return GroupSplit("none")
  for i in range(1, len(axes)):
    if axes_size(mesh_shape, axes[:i]) == groups:
      return GroupSplit("named", axes, axes[:i], axes[i:])
  return GroupSplit("gather", axes)


def _batch_axes(op, specs, result_spec, groups, channel, mesh_shape):
  """x's batch axes: x's own, or (input gradient) those dy's features and
  images imply, else the result's proposal."""
  if op != INPUT_GRADIENT:
    return specs["x"][0]
  feature_axes, image_axes = specs["y"][channel], specs["y"][0]
  size = axes_size(mesh_shape, feature_axes)
  if feature_axes and size == groups:
    return feature_axes + image_axes
  if feature_axes and not image_axes and groups % size == 0:
    return feature_axes
  return result_spec[0] if result_spec is not None else ()


def _role_specs(how: GroupSplit, rest, shapes, spec) -> dict:
  """Each role's Spec under the plan `how` for the batch and `rest` (a
  ConvPlan) for the channels and spatial dimensions (roles x, w, y)."""
  lay = Layout(spec.window.nd, spec.channels_last)
  channel = lay.channel()
  out = {r: [()] * len(s) for r, s in shapes.items()}
  out["x"][channel] = out["w"][channel] = rest.axes.get("c", ())
  if how.mode in ("whole", "named"):
    out["x"][0] = how.axes
    features = how.axes if how.mode == "whole" else how.group_axes
    out["w"][0] = out["y"][channel] = features
    out["y"][0] = how.image_axes
  elif how.mode == "gather":
    out["x"][0] = how.axes
  for i, (axes, _, _) in rest.halos.items():
    out["x"][lay.spatial(i)] = out["y"][lay.spatial(i)] = axes
  return {r: tuple(s) for r, s in out.items()}


def plan(op, spec, params, shapes, operand_specs, result_spec, mesh_shape, inner) -> Plan:
  """The Plan of one batch-grouped op; `inner` binds the per-shard primitive."""
  roles_in, role_out = _ROLES[op]
  g = spec.batch_groups
  channel = Layout(spec.window.nd, spec.channels_last).channel()
  specs = dict(zip(roles_in, operand_specs))
  axes = _batch_axes(op, specs, result_spec, g, channel, mesh_shape)
  how = split(axes, g, shapes["x"][0], mesh_shape)
  rest = choose(op, dataclasses.replace(spec, groups=1), shapes, operand_specs, result_spec,
                mesh_shape, only=lambda name: name == "c" or name.startswith("s"), taken=how.axes)
  by_role = _role_specs(how, rest, shapes, spec)
  shard_spec, in_spatial = local_spec(op, spec, shapes, rest)
  extra = {k: v for k, v in params.items() if k not in ("spec", "in_spatial")}
  if op == INPUT_GRADIENT:
    extra["in_spatial"] = in_spatial
  p = axes_size(mesh_shape, how.axes)

  if how.mode in ("none", "whole"):
    local = dataclasses.replace(shard_spec, groups=g // p, batch_groups=g // p)

    def compute(a, b):
      return inner(a, b, spec=local, **extra)
  else:
    if op == FILTER_GRADIENT:  # each shard's part of its group's filter gradient, gathered
      by_role["w"] = tuple(axes if d == channel else () for d, axes in enumerate(by_role["w"]))
    compute = _split_groups(op, shard_spec, shapes, how, p, inner, extra)

  def per_shard(a, b):
    a, b = exchange_halos(op, spec, rest, [a, b])
    out = compute(a, b)
    if rest.contracted:  # the forward's over channel blocks, the filter gradient's over spatial ones
      out = all_reduce_sum(out, rest.contracted)
    return out
  return Plan(tuple(by_role[r] for r in roles_in), by_role[role_out], per_shard)


def _split_groups(op, spec, shapes, how, p, inner, extra):
  """The per-shard function of the "named" and "gather" plans: shard i along
  the batch's axes holds images of group i // q, part i % q of them."""
  cl, g = spec.channels_last, spec.batch_groups
  flat = dataclasses.replace(spec, groups=1, batch_groups=1)
  channel = Layout(spec.window.nd, cl).channel()
  q = p // g                       # shards a group spans
  per = shapes["x"][0] // p        # images a shard holds
  og = shapes["w"][0] // g         # output features of a group
  sliced = how.mode == "gather"    # w and dy come whole: take the shard's block

  def group_and_part():
    i = lax.axis_index(how.axes)
    return i // q, i % q

  def w_block(w):
    if not sliced:
      return w
    group, _ = group_and_part()
    return lax.dynamic_slice_in_dim(w, group * og, og, axis=0)

  def dy_block(dy):
    if not sliced:
      return dy
    group, part = group_and_part()
    dy = lax.dynamic_slice_in_dim(dy, part * per, per, axis=0)
    return lax.dynamic_slice_in_dim(dy, group * og, og, axis=channel)

  if op == FORWARD:
    def per_shard(x, w):
      y = inner(x, w_block(w), spec=flat, **extra)
      return _assemble(lax.all_gather(y, how.axes), g, q, cl) if sliced else y
  elif op == INPUT_GRADIENT:
    def per_shard(dy, w):
      return inner(dy_block(dy), w_block(w), spec=flat, **extra)
  else:
    def per_shard(dy, x):
      dw = lax.all_gather(inner(dy_block(dy), x, spec=flat, **extra), how.axes)
      dw = dw.reshape((g, q, *dw.shape[1:])).sum(axis=1)
      return dw.reshape((g * dw.shape[1], *dw.shape[2:]))
  return per_shard


def _assemble(parts, g, q, cl):
  """y from the forward's gathered shards (p, M/q, O/G, *T) (channels-last:
  (p, M/q, *T, O/G)), shard i holding group i // q's part i % q."""
  parts = parts.reshape((g, q, *parts.shape[1:]))
  nd = parts.ndim - 4
  if cl:  # (G, q, m, *T, og) -> (q, m, *T, G, og)
    order = (1, 2, *range(3, 3 + nd), 0, 3 + nd)
  else:   # (G, q, m, og, *T) -> (q, m, G, og, *T)
    order = (1, 2, 0, 3, *range(4, 4 + nd))
  y = parts.transpose(order)
  shape = y.shape
  if cl:
    return y.reshape((shape[0] * shape[1], *shape[2:2 + nd], shape[-2] * shape[-1]))
  return y.reshape((shape[0] * shape[1], shape[2] * shape[3], *shape[4:]))


def sdy_rule(op, spec, shapes) -> SdyShardingRule:
  """The Shardy rule: x's batch is (g, m), w's and y's features (g, og), y's
  images m, input channels c (summed in the forward) and spatial dimensions
  as conv.py's (spatial_rule). The features within a group are never split
  (need replication). The filter gradient reduces x's batch and
  y's images as two factors: tied through x, its result would inherit a split
  of x's batch over part of a mesh axis ("gather"), which XLA undoes with an
  all-gather after the call; tied through dy alone, it is split as dy is."""
  roles_in, role_out = _ROLES[op]
  cl, g, nd = spec.channels_last, spec.batch_groups, spec.window.nd
  channel = Layout(nd, cl).channel()
  m, og = shapes["y"][0], shapes["w"][0] // g
  group = lambda inner: CompoundFactor("g", inner)
  dims = {r: [None] * len(s) for r, s in shapes.items()}
  if op == FILTER_GRADIENT:
    dims["x"][0] = "n"
  else:
    dims["x"][0] = group("m") if m > 1 else "g"
  dims["y"][0] = "m"
  dims["w"][0] = dims["y"][channel] = group("og") if og > 1 else "g"
  dims["x"][channel] = dims["w"][channel] = "c"
  replicate = ["og"] if og > 1 else []
  known, permute = dict(g=g, m=m, og=og), []
  reduce = {FORWARD: ["c"], INPUT_GRADIENT: [], FILTER_GRADIENT: ["m", "n"]}[op]
  spatial_rule(op, spec, shapes, dims, known, replicate, permute, reduce)
  operands = tuple(ArrayMapping(*dims[r]) for r in roles_in)
  results = (ArrayMapping(*dims[role_out]),)
  order, whole = first_appearance(operands + results)
  sizes = {f: known[f] for f in order if f not in whole}
  key = order.index
  return SdyShardingRule(operands, results,
                         reduction_factors=tuple(sorted(set(reduce), key=key)),
                         need_replication_factors=tuple(sorted(set(replicate), key=key)),
                         permutation_factors=tuple(sorted(set(permute), key=key)),
                         **sizes)
