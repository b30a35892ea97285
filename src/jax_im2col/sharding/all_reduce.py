"""The sum over mesh axes inside a per-shard body: one all-reduce whose
reduction is a bare add.

``lax.psum`` builds its reduction region from abstract values that carry the
mesh of the operand's sharding type. Under Explicit mesh axes (``jax.set_mesh``
with ``AxisType.Explicit``) jax >= 0.11 then wraps the region's add in
sharding custom calls, and XLA refuses the all-reduce ("Unsupported reduction
computation", CPU and GPU alike). The per-shard body of a custom_partitioning
call is already partitioned, so it needs no sharding annotations at all; this
primitive emits the all-reduce directly.

Only the per-shard functions of ``partitioned.py`` bind it (inside the
partitioner, never differentiated or batched).
"""

from __future__ import annotations

import math

import numpy as np
from jax.extend.core import Primitive
from jax.extend.mlir.dialects import stablehlo as hlo
from jax.interpreters import mlir
from jax.interpreters.mlir import ir

all_reduce_sum_p = Primitive("jax_im2col_all_reduce_sum")
all_reduce_sum_p.def_abstract_eval(lambda x, *, axes: x)

# XLA's channel of cross-device collectives, as lax's own collectives use it.
_COLLECTIVE_CHANNEL_ID = 1
_DEVICE_TO_DEVICE = 1


def all_reduce_sum(x, axes: tuple):
  """x summed over the mesh axes `axes` (names), within the per-shard body."""
  return all_reduce_sum_p.bind(x, axes=tuple(axes))


def replica_groups(axis_names: tuple, axis_sizes: tuple, axes: tuple) -> np.ndarray:
  """The devices (positions in the mesh's device order) that sum together:
  one row per group, the devices along `axes` with every other mesh index
  fixed."""
  ids = np.arange(math.prod(axis_sizes)).reshape(axis_sizes)
  where = [axis_names.index(a) for a in axes]
  rest = [i for i in range(len(axis_sizes)) if i not in where]
  return ids.transpose(rest + where).reshape(-1, math.prod(axis_sizes[i] for i in where))


def _lowering(ctx, x, *, axes):
  mesh = ctx.module_context.axis_context.mesh
  groups = replica_groups(tuple(mesh.axis_names), tuple(mesh.axis_sizes), axes)
  op = hlo.AllReduceOp(
      [x.type], [x],
      replica_groups=ir.DenseIntElementsAttr.get(np.ascontiguousarray(groups, dtype=np.int64)),
      channel_handle=hlo.ChannelHandle.get(_COLLECTIVE_CHANNEL_ID, _DEVICE_TO_DEVICE),
      use_global_device_ids=ir.BoolAttr.get(True))
  scalar = ir.RankedTensorType.get([], mlir.dtype_to_ir_type(ctx.avals_in[0].dtype))
  block = op.regions[0].blocks.append(scalar, scalar)
  with ir.InsertionPoint(block):
    hlo.return_([hlo.add(*block.arguments)])
  return op.results


mlir.register_lowering(all_reduce_sum_p, _lowering)
