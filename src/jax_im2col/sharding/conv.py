"""How the three convolution primitives partition over a mesh.

Each op relates three arrays in the forward's terms: the image x (N, C,
*S), the filter w (O, C/G, *K) and the image y (N, O, *T) (channels-last:
channels last). The forward takes (x, w) to y, the input gradient (dy, w) to
dx, the filter gradient (dy, x) to dw. Their dimensions are tied by factors:

  n      x[N], y[N]                     the batch
  c      x[C], w[C/G]          G == 1   input features
  o      w[O], y[O]            G == 1   output features
  g      x[C], w[O], y[O]      G > 1    whole feature groups (a shard holds
                                        G/p groups; splitting a group falls back)
  s_i    x[S_i], y[T_i]                 spatial (halo exchange: halo.py)

A factor missing from the result is contracted, and its axes are summed with
one psum: c in the forward, o in the input gradient, n and s_i in the filter
gradient. So data parallelism costs the filter gradient one all-reduce, model
parallelism over output features or groups costs the input gradient one,
over input features the forward one, as XLA's own convolution.

``ConvRules.plan`` picks each factor's mesh axes from the operands' shardings
(in operand order, then the result's proposed sharding), keeping only axes
that divide the factor (whole groups for g, lined-up windows for s_i) and no
axis twice; everything else is replicated. The per-shard function runs the
inner primitive, whose lowering selects the algorithm on the shard's shapes.
"""

from __future__ import annotations

import dataclasses

from jax.experimental.custom_partitioning import ArrayMapping, CompoundFactor, SdyShardingRule

from ..conv.primitives import (FILTER_GRADIENT, FORWARD, INPUT_GRADIENT, conv_backward_data_p,
                               conv_backward_filter_p, conv_forward_p)
from .all_reduce import all_reduce_sum
from .halo import exchange, plan_halo
from .partitioned import Call, Plan, Shape, axes_size, first_appearance

_OPS = {conv_forward_p.name: FORWARD, conv_backward_data_p.name: INPUT_GRADIENT,
        conv_backward_filter_p.name: FILTER_GRADIENT}
# (operand roles, result role) of each op.
_ROLES = {FORWARD: (("x", "w"), "y"), INPUT_GRADIENT: (("y", "w"), "x"),
          FILTER_GRADIENT: (("y", "x"), "w")}


@dataclasses.dataclass(frozen=True)
class Layout:
  """Where a canonical image's channel and spatial dimensions are (filters: the same)."""
  nd: int
  channels_last: bool

  def channel(self) -> int:
    return self.nd + 1 if self.channels_last else 1

  def spatial(self, i: int) -> int:
    return 1 + i if self.channels_last else 2 + i


def _shapes(op, operands, result):
  roles_in, role_out = _ROLES[op]
  shapes = dict(zip(roles_in, (o.shape for o in operands)))
  shapes[role_out] = result.shape
  return shapes


def _factors(op, spec, shapes):
  """{factor: [(role, dim), ...]} and the contracted factors of `op`."""
  lay = Layout(spec.window.nd, spec.channels_last)
  ch = lay.channel()
  f = {"n": [("x", 0), ("y", 0)]}
  if spec.groups == 1:
    f["c"] = [("x", ch), ("w", ch)]
    f["o"] = [("w", 0), ("y", ch)]
  else:
    f["g"] = [("x", ch), ("w", 0), ("y", ch)]
  for i in range(lay.nd):
    f[f"s{i}"] = [("x", lay.spatial(i)), ("y", lay.spatial(i))]
  contracted = {FORWARD: {"c"}, INPUT_GRADIENT: {"o"},
                FILTER_GRADIENT: {"n", *(f"s{i}" for i in range(lay.nd))}}[op]
  return f, contracted & f.keys()


def _valid(op, spec, shapes, factor, p):
  """Whether `p` shards of `factor` compute with no communication beyond the
  factor's own (a Halo for a spatial factor)."""
  lay = Layout(spec.window.nd, spec.channels_last)
  x, w, y = shapes["x"], shapes["w"], shapes["y"]
  if factor == "n":
    return x[0] % p == 0
  if factor == "c":
    return x[lay.channel()] % p == 0
  if factor == "o":
    return w[0] % p == 0
  if factor == "g":
    return spec.groups % p == 0
  i = int(factor[1:])
  win = spec.window
  return plan_halo(op == INPUT_GRADIENT, win.kernel[i], win.stride[i], win.rhs_dilation[i],
                   win.lhs_dilation[i], win.padding[i], x[lay.spatial(i)], y[lay.spatial(i)], p)


@dataclasses.dataclass(frozen=True)
class ConvPlan:
  axes: dict          # factor -> mesh axes
  sizes: dict         # factor -> number of shards
  halos: dict         # spatial index -> (axes, parts, Halo)
  contracted: tuple   # mesh axes summed over


def choose(op, spec, shapes, operand_specs, result_spec, mesh_shape, only=None,
           taken=()) -> ConvPlan:
  """Each factor's mesh axes (see the module docstring); with `only`, those
  of the factors it accepts alone, past the axes `taken` (batch_groups.py)."""
  roles_in, role_out = _ROLES[op]
  factors, contracted = _factors(op, spec, shapes)
  if only is not None:
    factors = {name: places for name, places in factors.items() if only(name)}
  specs = dict(zip(roles_in, operand_specs))
  order = list(roles_in) + ([role_out] if result_spec is not None else [])
  if result_spec is not None:
    specs[role_out] = result_spec
  used, axes, halos = set(taken), {}, {}
  for name, places in factors.items():
    places = sorted(places, key=lambda rd: order.index(rd[0]) if rd[0] in order else 99)
    for role, dim in places:
      if role not in specs:
        continue
      cand = tuple(specs[role][dim])
      if not cand or used & set(cand):
        continue
      ok = _valid(op, spec, shapes, name, axes_size(mesh_shape, cand))
      if not ok:
        continue
      axes[name] = cand
      used |= set(cand)
      if name.startswith("s"):
        halos[int(name[1:])] = (cand, axes_size(mesh_shape, cand), ok)
      break
  summed = tuple(a for name in factors if name in contracted for a in axes.get(name, ()))
  sizes = {name: axes_size(mesh_shape, a) for name, a in axes.items()}
  return ConvPlan(axes, sizes, halos, summed)


def exchange_halos(op, spec, plan: ConvPlan, operands):
  """The operands in the forward's roles with the image whose windows the op
  reads (x; the input gradient's dy) extended by each planned halo."""
  lay = Layout(spec.window.nd, spec.channels_last)
  ops = list(operands)
  index = _ROLES[op][0].index("y" if op == INPUT_GRADIENT else "x")
  for i, (axes, parts, halo) in sorted(plan.halos.items()):
    ops[index] = exchange(ops[index], lay.spatial(i), axes, parts, halo)
  return ops


def _spec_of_role(op, spec, shapes, plan: ConvPlan, role, drop=()):
  factors, _ = _factors(op, spec, shapes)
  out = [()] * len(shapes[role])
  for name, places in factors.items():
    if name in drop:
      continue
    for r, d in places:
      if r == role:
        out[d] = plan.axes.get(name, ())
  return tuple(out)


def local_spec(op, spec, shapes, plan: ConvPlan):
  """The per-shard ConvSpec (groups per shard; each halo'd dimension's
  padding) and, for the input gradient, the per-shard input extents."""
  lay = Layout(spec.window.nd, spec.channels_last)
  win = spec.window
  padding = list(win.padding)
  for i, (_, _, halo) in plan.halos.items():
    padding[i] = halo.padding
  groups = spec.groups // plan.sizes.get("g", 1)
  local = dataclasses.replace(spec, groups=groups,
                              window=dataclasses.replace(win, padding=tuple(padding)))
  in_spatial = tuple(shapes["x"][lay.spatial(i)] // (plan.halos[i][1] if i in plan.halos else 1)
                     for i in range(lay.nd))
  return local, in_spatial


class ConvRules:
  """Rules of the three convolution primitives (partitioned.Rules)."""

  def __init__(self, inner_prims):
    self.inner = inner_prims  # outer primitive name -> inner primitive

  def plan(self, call: Call, operands, result, operand_specs, result_spec, mesh_shape) -> Plan:
    op = _OPS[call.prim]
    params = call.kwargs
    spec = params["spec"]
    shapes = _shapes(op, operands, result)
    if spec.batch_groups > 1:
      from . import batch_groups  # it builds on this module
      return batch_groups.plan(op, spec, params, shapes, operand_specs, result_spec, mesh_shape,
                               self.inner[call.prim].bind)
    chosen = choose(op, spec, shapes, operand_specs, result_spec, mesh_shape)
    roles_in, role_out = _ROLES[op]
    _, contracted = _factors(op, spec, shapes)
    in_specs = tuple(_spec_of_role(op, spec, shapes, chosen, r) for r in roles_in)
    out_spec = _spec_of_role(op, spec, shapes, chosen, role_out, drop=contracted)
    local, in_spatial = local_spec(op, spec, shapes, chosen)
    inner = self.inner[call.prim]
    summed = chosen.contracted
    extra = {k: v for k, v in params.items() if k not in ("spec", "in_spatial")}
    if op == INPUT_GRADIENT:
      extra["in_spatial"] = in_spatial

    def per_shard(a, b):
      ops = exchange_halos(op, spec, chosen, [a, b])
      out = inner.bind(*ops, spec=local, **extra)
      if summed:
        out = all_reduce_sum(out, summed)
      return out

    return Plan(in_specs, out_spec, per_shard)

  def reads_sub_axes(self, call: Call) -> bool:
    # Batch groups only: feature groups split over part of an axis keep
    # falling back to replicated, which costs XLA no more gathers than lax.
    return call.kwargs["spec"].batch_groups > 1

  def user_spec(self, call: Call, result: Shape, spec) -> tuple:
    """A result sharding the plan can produce, from a user's: the kernel
    dimensions of a filter and invalid channel splits are dropped."""
    op = _OPS[call.prim]
    cspec = call.kwargs["spec"]
    _, role_out = _ROLES[op]
    lay = Layout(cspec.window.nd, cspec.channels_last)
    out = list(spec)
    if role_out == "w":
      for i in range(lay.nd):
        out[lay.spatial(i)] = ()
      if cspec.groups > 1:
        out[lay.channel()] = ()
    return tuple(out)

  def sharding_rule(self, call: Call, operand_shapes, result_shape):
    op = _OPS[call.prim]
    spec = call.kwargs["spec"]
    roles_in, role_out = _ROLES[op]
    shapes = dict(zip(roles_in, operand_shapes))
    shapes[role_out] = result_shape
    if spec.batch_groups > 1:
      from . import batch_groups
      return batch_groups.sdy_rule(op, spec, shapes)
    return sdy_rule(op, spec, shapes)


def spatial_rule(op, spec, shapes, dims, known, replicate, permute, reduce) -> None:
  """The spatial factors of a Shardy rule, into `dims` (role -> factor per
  dimension) and the lists: s_i a permutation (halo; in the filter gradient a
  reduction) where x's and y's extents relate by the stride, the kernel's
  dimensions and the rest need replication."""
  lay = Layout(spec.window.nd, spec.channels_last)
  x, y = shapes["x"], shapes["y"]
  win = spec.window
  for i in range(lay.nd):
    d = lay.spatial(i)
    s, t = x[d], y[d]
    dims["w"][d] = f"k{i}"
    replicate.append(f"k{i}")
    related = t > 0 and t * win.stride[i] == s * win.lhs_dilation[i]
    if related and s == t:
      dims["x"][d] = dims["y"][d] = f"s{i}"
    elif related and s % t == 0:  # strided: x's rows are (output row, phase)
      dims["x"][d], dims["y"][d] = CompoundFactor(f"s{i}", f"r{i}"), f"s{i}"
      known[f"r{i}"] = s // t
      replicate.append(f"r{i}")
    elif related and t % s == 0:  # lhs-dilated: y's rows are (input row, phase)
      dims["x"][d], dims["y"][d] = f"s{i}", CompoundFactor(f"s{i}", f"r{i}")
      known[f"r{i}"] = t // s
      replicate.append(f"r{i}")
    else:
      dims["x"][d], dims["y"][d] = f"a{i}", f"b{i}"
      replicate += [f"a{i}", f"b{i}"]
      continue
    (reduce if op == FILTER_GRADIENT else permute).append(f"s{i}")


def sdy_rule(op, spec, shapes) -> SdyShardingRule:
  """The Shardy rule: the factors above, with the contracted ones as
  reductions, spatial ones as permutations (halo) where the extents relate by
  the stride, and what the plan never shards as need-replication."""
  lay = Layout(spec.window.nd, spec.channels_last)
  roles_in, role_out = _ROLES[op]
  x, w, y = shapes["x"], shapes["w"], shapes["y"]
  ch = lay.channel()
  dims = {"x": [None] * len(x), "w": [None] * len(w), "y": [None] * len(y)}
  known, replicate, permute, reduce = {}, [], [], []
  dims["x"][0] = dims["y"][0] = "n"
  g = spec.groups
  if g == 1:
    dims["x"][ch] = dims["w"][ch] = "c"
    dims["w"][0] = dims["y"][ch] = "o"
  else:
    cg, og = w[ch], w[0] // g
    dims["x"][ch] = CompoundFactor("g", "cg") if cg > 1 else "g"
    dims["w"][ch] = "cg"
    dims["w"][0] = dims["y"][ch] = CompoundFactor("g", "og") if og > 1 else "g"
    known.update(g=g, og=og)
    replicate += ["cg", "og"] if og > 1 else ["cg"]
  spatial_rule(op, spec, shapes, dims, known, replicate, permute, reduce)
  if op == FORWARD and g == 1:
    reduce.append("c")
  if op == INPUT_GRADIENT and g == 1:
    reduce.append("o")
  if op == FILTER_GRADIENT:
    reduce.insert(0, "n")
  operands = tuple(ArrayMapping(*dims[r]) for r in roles_in)
  results = (ArrayMapping(*dims[role_out]),)
  order, whole = first_appearance(operands + results)
  key = lambda f: order.index(f)
  sizes = {f: known[f] for f in order if f not in whole}
  return SdyShardingRule(operands, results,
                         reduction_factors=tuple(sorted(set(reduce), key=key)),
                         need_replication_factors=tuple(sorted(set(replicate), key=key)),
                         permutation_factors=tuple(sorted(set(permute), key=key)),
                         **sizes)
