"""Every private JAX API the package uses, in one module.

Checked against jax 0.10.2 and 0.11.x (the sources of both agree on each name
used here). Where a later jax moves one of them, this is the only file to
change; each function says what it stands in for.

- ``dispatch.prim_requires_devices_during_lowering``: a primitive whose
  lowering emits a ``custom_partitioning`` call must be in it, or JAX lowers
  without the device assignment that custom_partitioning needs (jaxlib's own
  cuDNN attention registers its primitives the same way).
- ``ShapedArray(..., sharding=, manual_axis_type=)``: an abstract value that
  carries its sharding type (Explicit mesh axes) and the manual axes it
  varies over inside ``shard_map`` (``.manual_axis_type.varying``; jax <= 0.9
  called it ``.vma``).
- ``mlir.lower_with_sharding_in_types``: the sharding constraint lax's own
  lowerings put on results of Explicit-axis types.
- ``ShardingContext.abstract_mesh`` / ``SPMDAxisContext.manual_axes`` and
  ``mesh.thread_resources``: the mesh a lowering partitions over, read the way
  custom_partitioning's own lowering reads it.
- ``Sharding._to_xla_hlo_sharding`` and ``sharding_impls.parse_flatten_op_sharding``:
  reading the HLO shardings custom_partitioning's callbacks receive as mesh
  axes. custom_partitioning's own decoding (``decode_shardings=True``) raises
  inside XLA's partitioner on a sharding over part of a mesh axis (which
  Shardy creates, e.g. for 2 groups on a 4-device axis); this one reads such
  a sharding on the mesh of prime axes (``partitioned.refined``) where the
  op's rules plan on it, and as replicated elsewhere, which is always correct.
"""

from __future__ import annotations

import jax
from jax._src import core as _core
from jax._src import dispatch as _dispatch
from jax._src import mesh as _mesh_lib
from jax._src import sharding_impls as _sharding_impls
from jax._src.interpreters import mlir as _mlir
from jax.interpreters import mlir
from jax.sharding import AxisType, NamedSharding, PartitionSpec


def require_devices_during_lowering(prim) -> None:
  """Marks `prim` as one whose lowering needs the device assignment (it
  emits custom_partitioning)."""
  _dispatch.prim_requires_devices_during_lowering.add(prim)


def varying_axes(aval) -> frozenset:
  """The manual mesh axes a value varies over inside shard_map."""
  mat = getattr(aval, "manual_axis_type", None)
  if mat is not None:
    return frozenset(mat.varying)
  return frozenset(getattr(aval, "vma", ()))


def aval_mesh(aval):
  """The (abstract) mesh of an abstract value's sharding type."""
  sharding = getattr(aval, "sharding", None)
  return getattr(sharding, "mesh", None)


def explicit_axes(mesh) -> frozenset:
  """The Explicit axes of an (abstract) mesh."""
  if mesh is None or getattr(mesh, "empty", True):
    return frozenset()
  return frozenset(n for n, t in zip(mesh.axis_names, mesh.axis_types) if t == AxisType.Explicit)


def shaped_array(shape, dtype, like, spec=None):
  """A ShapedArray of `shape` and `dtype` on the mesh of the abstract values
  `like` (the operands), varying over the union of their manual axes, with
  the partition spec `spec` (a tuple of axis-name tuples, one per dimension;
  only Explicit axes matter; None: unsharded)."""
  mesh = next((m for m in map(aval_mesh, like) if m is not None and not m.empty), None)
  varying = frozenset().union(*map(varying_axes, like))
  if mesh is None:
    return _core.ShapedArray(shape, dtype)
  entries = [None] * len(shape)
  if spec is not None:
    explicit = explicit_axes(mesh)
    for d, axes in enumerate(spec):
      axes = tuple(a for a in axes if a in explicit)
      entries[d] = None if not axes else axes[0] if len(axes) == 1 else axes
  sharding = NamedSharding(mesh, PartitionSpec(*entries))
  mat = next(a.manual_axis_type for a in like if hasattr(a, "manual_axis_type"))
  if varying != frozenset(mat.varying):
    mat = type(mat)(varying=varying)
  return _core.ShapedArray(shape, dtype, sharding=sharding, manual_axis_type=mat)


def constrain_to_type(ctx, value, aval):
  """Constrains a lowered result to the sharding of its type, as lax's
  lowerings do (a no-op unless the type has Explicit axes)."""
  return _mlir.lower_with_sharding_in_types(ctx, value, aval)


def partitioning_mesh(ctx):
  """The concrete mesh custom_partitioning would partition this lowering
  over, or None where it would not partition: a single device, a context
  with manual axes (inside shard_map: the operands already are the shards),
  or no mesh known (no NamedSharding anywhere in the computation)."""
  axis_context = ctx.module_context.axis_context
  if isinstance(axis_context, mlir.SPMDAxisContext):
    return None  # shard_map: fully or partly manual
  if not isinstance(axis_context, mlir.ShardingContext):
    return None
  devices = axis_context.device_assignment
  if devices is None or len(devices) <= 1:
    return None
  abstract = getattr(axis_context, "abstract_mesh", None)
  if abstract is not None:
    import numpy as np
    return _mesh_lib.Mesh(np.array(devices).reshape(abstract.axis_sizes), abstract.axis_names)
  mesh = _mesh_lib.thread_resources.env.physical_mesh
  return None if mesh.empty else mesh


def pvary(x, axes):
  """Marks `x` as varying over the manual axes `axes` (whose transpose is a
  psum): what lax's binds insert when operands vary over different axes."""
  if not axes:
    return x
  return jax.lax.pcast(x, tuple(axes), to="varying")


def partition_spec_of(sharding, mesh, ndim: int):
  """The PartitionSpec over `mesh` of an HLO-level sharding, or None where it
  is no tiling by whole axes of `mesh` (read it as replicated)."""
  try:
    hlo = sharding._to_xla_hlo_sharding(ndim)
    if hlo.is_replicated():
      return PartitionSpec()
    (spec,) = _sharding_impls.parse_flatten_op_sharding(hlo, mesh)
  except Exception:  # noqa: BLE001 - any sharding it cannot read is replicated
    return None
  return spec
