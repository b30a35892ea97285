"""The replica groups of the per-shard all-reduce (src/jax_im2col/sharding/
all_reduce.py): two devices sum together exactly when their mesh coordinates
agree off the summed axes, each group lists its devices in the order of the
summed axes, and every device is in one group. Pure numpy."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from jax_im2col.sharding.all_reduce import replica_groups

MESHES = [(("data",), (8,)), (("data", "model"), (2, 4)), (("a", "b", "c"), (2, 3, 2))]


@pytest.mark.parametrize("names, sizes", MESHES)
def test_groups_are_the_devices_that_differ_only_on_the_summed_axes(names, sizes):
  for r in range(1, len(names) + 1):
    for axes in itertools.permutations(names, r):
      groups = replica_groups(names, sizes, axes)
      assert sorted(groups.ravel().tolist()) == list(range(int(np.prod(sizes))))
      summed = [names.index(a) for a in axes]
      kept = [i for i in range(len(names)) if i not in summed]
      for group in groups:
        coords = np.array(np.unravel_index(group, sizes)).T
        assert (coords[:, kept] == coords[0, kept]).all()
        assert len(group) == np.prod([sizes[i] for i in summed])
        # Major to minor in the order the axes are named.
        order = [tuple(c[summed]) for c in coords]
        assert order == sorted(order)
