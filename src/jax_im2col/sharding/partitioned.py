"""Partitioning the package's primitives over a mesh: the glue between a
primitive and ``jax.experimental.custom_partitioning``.

Every partitionable primitive P (unfold, fold, the three convolutions) has an
inner twin P_shard with the same abstract evaluation and P's old lowerings.
P's lowering is ``partitioned_lowering``: where the computation is
partitioned over a mesh it emits one custom_partitioning call whose body
binds P_shard, so that

- XLA's partitioner (Shardy, or GSPMD) calls back into ``Rules.plan`` with
  the operands' shardings; the plan says which mesh axes each dimension keeps,
  and gives the per-shard function: halo exchanges, P_shard on the shards'
  shapes (whose lowering runs the algorithm selection on those shapes, so the
  workspace plan is per shard), and a psum over the axes of a contracted
  dimension;
- the JVP, transpose and batching rules stay on P: custom_partitioning has
  none of its own, and it exists only inside P's lowering;
- where there is no mesh to partition over (one device, inside shard_map,
  no NamedSharding anywhere), P lowers as P_shard directly.

The callbacks are module-level functions (stable identity), and every call
shares one custom_partitioning object whose static argument (a ``Call``: the
primitive's name and params) selects the rules. custom_partitioning puts the
id of a per-lowering Python object into the custom call (its
``backend_config``), so the persistent compilation cache misses across
processes unless ``jax_remove_custom_partitioning_ptr_from_cache_key`` is set;
for that setting to be safe, the call also carries the full ``Call`` and the
package's source digest as a frontend attribute, so two different ops (or two
versions of the package) never share a key. In-process, JAX's tracing,
lowering and compilation caches hit as for any other primitive.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import pathlib
from typing import Callable, NamedTuple, Protocol, Sequence

import jax
from jax.experimental.custom_partitioning import CompoundFactor, custom_partitioning
from jax.interpreters import mlir
from jax.sharding import NamedSharding, PartitionSpec

from ..common import jax_internals
from ..common.primitive import empty_safe

Spec = tuple  # one tuple of mesh axis names per dimension, major to minor


def spec_of(sharding, ndim: int, mesh=None) -> Spec:
  """A sharding as one tuple of mesh axis names per dimension. One that is
  no tiling by whole axes of the mesh reads as replicated: asking for
  replicated operands is always correct."""
  spec = _read_spec(sharding, ndim, mesh)
  return spec if spec is not None else ((),) * ndim


def _read_spec(sharding, ndim: int, mesh):
  """spec_of, or None for a sharding that is no tiling by whole axes of mesh."""
  if isinstance(sharding, NamedSharding):
    entries = tuple(sharding.spec)
  elif mesh is None or sharding is None:
    entries = ()
  else:
    entries = jax_internals.partition_spec_of(sharding, mesh, ndim)
    if entries is None:
      return None
    entries = tuple(entries)
  entries += (None,) * (ndim - len(entries))
  out = []
  for e in entries[:ndim]:
    if e is None or e is PartitionSpec.UNCONSTRAINED:
      out.append(())
    elif isinstance(e, str):
      out.append((e,))
    else:
      out.append(tuple(e))
  return tuple(out)


def _prime_factors(n: int) -> list:
  out, f = [], 2
  while n > 1:
    while n % f == 0:
      out.append(f)
      n //= f
    f += 1
  return out


@functools.lru_cache(maxsize=None)
def refined(mesh):
  """`mesh` with each axis split into its prime factors, major first: axis
  "a" of 4 devices becomes "a#0" and "a#1" of 2. A sharding over part of an
  axis (Shardy makes them, e.g. 2 groups on a 4-device axis) is a tiling by
  whole axes of this mesh."""
  names, sizes, types = [], [], []
  axis_types = getattr(mesh, "axis_types", None) or (None,) * len(mesh.axis_names)
  for name, size, kind in zip(mesh.axis_names, mesh.devices.shape, axis_types):
    factors = _prime_factors(size) or [1]
    if len(factors) == 1:
      names.append(name)
    else:
      names += [f"{name}#{i}" for i in range(len(factors))]
    sizes += factors
    types += [kind] * len(factors)
  devices = mesh.devices.reshape(sizes)
  if any(t is None for t in types):
    return jax.sharding.Mesh(devices, tuple(names))
  return jax.sharding.Mesh(devices, tuple(names), axis_types=tuple(types))


def read_specs(mesh, shardings, ndims, sub_axes: bool = True):
  """The mesh to plan on and each sharding's Spec on it: `mesh`, or where a
  sharding is no tiling by its whole axes but is one of refined(mesh) (and
  `sub_axes`), that one (whole axes read the same on it, as tuples of their
  parts)."""
  specs = [_read_spec(s, n, mesh) for s, n in zip(shardings, ndims)]
  if sub_axes and any(s is None for s in specs):
    fine = refined(mesh)
    fine_specs = [_read_spec(s, n, fine) for s, n in zip(shardings, ndims)]
    if all(s is not None for s in fine_specs):
      return fine, fine_specs
  return mesh, [s if s is not None else ((),) * n for s, n in zip(specs, ndims)]


def named(mesh, spec: Spec) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec(*[
      None if not axes else axes[0] if len(axes) == 1 else tuple(axes) for axes in spec]))


def axes_size(mesh_shape, axes) -> int:
  size = 1
  for a in axes:
    size *= mesh_shape[a]
  return size


@dataclasses.dataclass(frozen=True)
class Call:
  """One application of a partitionable primitive, as custom_partitioning's
  static argument: the outer primitive's name and its params."""
  prim: str
  params: tuple  # sorted (name, value) pairs

  @property
  def kwargs(self) -> dict:
    return dict(self.params)


class Plan(NamedTuple):
  """How one call runs on a mesh: the sharding each operand must have, the
  result's, and the function that computes one shard of the result from the
  operands' shards (traced with the mesh's axes bound: collectives allowed)."""
  operand_specs: tuple
  result_spec: Spec
  per_shard: Callable


class Rules(Protocol):
  def plan(self, call: Call, operands: Sequence, result, operand_specs: Sequence[Spec],
           result_spec: Spec | None, mesh_shape: dict) -> Plan: ...

  def sharding_rule(self, call: Call, operand_shapes, result_shape): ...

  def user_spec(self, call: Call, result_shape, spec: Spec) -> Spec: ...

  def reads_sub_axes(self, call: Call) -> bool:
    """Whether the call is planned on refined(mesh) where its shardings need it."""


@dataclasses.dataclass(frozen=True)
class Shape:
  """An operand's or result's global shape and dtype, as the rules see it."""
  shape: tuple
  dtype: object

  @property
  def ndim(self) -> int:
    return len(self.shape)


_RULES: dict[str, Rules] = {}
_INNER: dict[str, object] = {}


def _shape(s) -> Shape:
  return Shape(tuple(s.shape), s.dtype)


def _plan(call, arg_shapes, result_shape, use_result: bool, mesh):
  """The mesh the call is planned on (read_specs) and its Plan."""
  rules = _RULES[call.prim]
  shaped = list(arg_shapes) + ([result_shape] if use_result else [])
  mesh, specs = read_specs(mesh, [a.sharding for a in shaped], [len(a.shape) for a in shaped],
                           rules.reads_sub_axes(call))
  result_spec = specs.pop() if use_result else None
  return mesh, rules.plan(call, [_shape(a) for a in arg_shapes], _shape(result_shape), specs,
                          result_spec, dict(mesh.shape))


# --- custom_partitioning's callbacks (module level: stable identity) -----------

def _partition(call, mesh, arg_shapes, result_shape):
  mesh, plan = _plan(call, arg_shapes, result_shape, True, mesh)
  return (mesh, plan.per_shard, named(mesh, plan.result_spec),
          tuple(named(mesh, s) for s in plan.operand_specs))


def _infer_sharding_from_operands(call, mesh, arg_shapes, result_shape):
  mesh, plan = _plan(call, arg_shapes, result_shape, False, mesh)
  return named(mesh, plan.result_spec)


def _propagate_user_sharding(call, mesh, user_shape):
  rules = _RULES[call.prim]
  mesh, (spec,) = read_specs(mesh, [user_shape.sharding], [len(user_shape.shape)],
                             rules.reads_sub_axes(call))
  return named(mesh, rules.user_spec(call, _shape(user_shape), spec))


def _sharding_rule(call, mesh, operand_types, result_types):
  shapes = [tuple(mlir.ir.RankedTensorType(t).shape) for t in operand_types]
  result = tuple(mlir.ir.RankedTensorType(result_types[0]).shape)
  return _RULES[call.prim].sharding_rule(call, shapes, result)


def _body(call, *operands):
  return _INNER[call.prim].bind(*operands, **call.kwargs)


_partitioned = custom_partitioning(_body, static_argnums=(0,))
# decode_shardings=False: the callbacks read the HLO shardings themselves
# (spec_of), tolerating those that are no tiling by whole mesh axes.
_partitioned.def_partition(
    partition=_partition,
    infer_sharding_from_operands=_infer_sharding_from_operands,
    propagate_user_sharding=_propagate_user_sharding,
    decode_shardings=False,
    sharding_rule=_sharding_rule)


# --- lowering ----------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def source_digest() -> str:
  """The package's version and a digest of its Python sources: part of
  every partitioned call's attributes, so that a persistent-cache key that
  ignores custom_partitioning's callback id still changes with the code
  that partitions."""
  from .. import __version__
  root = pathlib.Path(__file__).resolve().parent.parent
  h = hashlib.sha256(__version__.encode())
  for path in sorted(root.rglob("*.py")):
    h.update(path.relative_to(root).as_posix().encode())
    h.update(path.read_bytes())
  return f"{__version__}+{h.hexdigest()[:16]}"


def _tag(values, call: Call) -> None:
  """Names the call in the custom_partitioning op's frontend attributes (see
  the module docstring: the persistent cache key)."""
  for v in values:
    op = getattr(v, "owner", None)
    if op is None or getattr(op, "name", None) != "stablehlo.custom_call":
      continue
    attrs = {"jax_im2col_call": mlir.ir.StringAttr.get(repr(call)),
             "jax_im2col_source": mlir.ir.StringAttr.get(source_digest())}
    op.attributes["mhlo.frontend_attributes"] = mlir.ir.DictAttr.get(attrs)


def _flat(values):
  out = []
  for v in values:
    if isinstance(v, (list, tuple)):
      out.extend(v)
    else:
      out.append(v)
  return out


def partitioned_lowering(prim, inner, rules: Rules):
  """Registers `rules` for `prim` and returns its lowering rule (for every
  platform): one custom_partitioning call of `inner` where the computation is
  partitioned, else `inner` itself."""
  _RULES[prim.name] = rules
  _INNER[prim.name] = inner
  jax_internals.require_devices_during_lowering(prim)

  @empty_safe
  def rule(ctx, *args, **params):
    mesh = jax_internals.partitioning_mesh(ctx)
    if mesh is None:
      outs = mlir.lower_fun(lambda *v: inner.bind(*v, **params), multiple_results=False)(
          ctx, *args)
    else:
      call = Call(prim.name, tuple(sorted(params.items())))
      outs = mlir.lower_fun(lambda *v: _partitioned(call, *v), multiple_results=False)(ctx, *args)
      _tag(_flat(outs), call)
    (out,) = _flat(outs)
    return [jax_internals.constrain_to_type(ctx, out, ctx.avals_out[0])]

  return rule


def result_type(prim_name: str, params: dict, operands: Sequence, shape, dtype):
  """A primitive's abstract result: on its operands' mesh, varying over the
  union of their manual axes (shard_map), and with Explicit mesh axes, the
  sharding type its plan gives the result for the operands' types (so that
  a primitive's type and its partitioning agree)."""
  shape = tuple(shape)
  spec = None
  mesh = next((m for m in map(jax_internals.aval_mesh, operands)
               if m is not None and not m.empty), None)
  if jax_internals.explicit_axes(mesh) and prim_name in _RULES:
    specs = [spec_of(a.sharding, len(a.shape)) for a in operands]
    plan = _RULES[prim_name].plan(Call(prim_name, tuple(sorted(params.items()))),
                                  [_shape(a) for a in operands], Shape(shape, dtype), specs,
                                  None, dict(mesh.shape))
    spec = plan.result_spec
  return jax_internals.shaped_array(shape, dtype, operands, spec)


def like_primal(ct, primal_aval):
  """A cotangent with its primal's sharding type: with Explicit mesh axes,
  JAX requires it, and an op's plan may shard its transpose's result
  otherwise (a reshard, where the types differ)."""
  want = getattr(primal_aval, "sharding", None)
  have = getattr(jax.typeof(ct), "sharding", None)
  if (want is None or have is None or want == have
      or not jax_internals.explicit_axes(jax_internals.aval_mesh(primal_aval))):
    return ct
  return jax.sharding.reshard(ct, want.spec)


def first_appearance(mappings):
  """The factors in order of first appearance, and those that are a whole
  dimension somewhere (the others need their sizes given)."""
  order, whole = [], set()
  for m in mappings:
    for d in m:
      if not isinstance(d, CompoundFactor):
        whole.add(d)
      for f in (d if isinstance(d, CompoundFactor) else (d,)):
        if f not in order:
          order.append(f)
  return order, whole
