"""The plans of batch-grouped convolutions over a mesh
(src/jax_im2col/sharding/batch_groups.py) and the mesh of prime axes they are
read on (sharding/partitioned.py): pure functions, no devices needed beyond
the host's one."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jax_im2col.sharding.batch_groups import split
from jax_im2col.sharding.partitioned import refined

MESH = {"data": 2, "model": 4, "pipe": 3}


@pytest.mark.parametrize("axes,groups,n,want", [
    ((), 2, 8, ("none", (), ())),
    (("data",), 2, 8, ("whole", (), ())),            # one group a shard
    (("data",), 4, 8, ("whole", (), ())),            # two groups a shard
    (("model",), 2, 8, ("gather", (), ())),          # a group spans half the axis
    (("data", "model"), 2, 16, ("named", ("data",), ("model",))),
    (("model", "data"), 4, 16, ("named", ("model",), ("data",))),
    (("data", "model"), 4, 16, ("gather", (), ())),  # 4 groups: half of "model" each
    (("data",), 3, 6, ("none", (), ())),             # neither divides the other
    (("pipe",), 2, 6, ("none", (), ())),
    (("data",), 2, 3, ("none", (), ())),             # the batch does not split
    (("data", "model"), 8, 16, ("whole", (), ())),
])
def test_split(axes, groups, n, want):
  how = split(axes, groups, n, MESH)
  assert (how.mode, how.group_axes, how.image_axes) == want
  if how.mode != "none":
    assert how.axes == tuple(axes)


def test_refined_mesh_splits_axes_into_primes():
  devices = np.array(jax.devices()[:1] * 1).reshape(1, 1)
  mesh = jax.sharding.Mesh(devices, ("a", "b"))
  assert refined(mesh).axis_names == ("a", "b")  # size-1 axes stay
  fake = np.empty((2, 12), dtype=object)
  fake[...] = jax.devices()[0]
  fine = refined(jax.sharding.Mesh(fake, ("data", "model")))
  assert fine.axis_names == ("data", "model#0", "model#1", "model#2")
  assert fine.devices.shape == (2, 2, 2, 3)
