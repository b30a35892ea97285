"""The halo plans of sharded spatial dimensions (src/jax_im2col/sharding/halo.py)
against a direct computation, on one-dimensional geometries: for each shard,
its block extended by the planned halo (zeros past the ends) and convolved
with the per-shard window gives exactly that shard's block of the result, for
the forward (and so the filter gradient, which reads the same rows of x) and
the input gradient. Pure numpy: no devices needed."""

from __future__ import annotations

import itertools

import numpy as np

from jax_im2col.sharding.halo import plan_halo


def _matrix(n, k, s, l, d, lo, hi):
  """The 1-D convolution (stride s, lhs dilation l, rhs dilation d, padding
  lo / hi) of an input of n as a (positions, n, taps) 0/1 tensor."""
  kd = (k - 1) * d + 1
  span = (n - 1) * l + 1 + lo + hi
  out = 0 if span < kd else (span - kd) // s + 1
  m = np.zeros((out, n, k))
  for r in range(out):
    for t in range(k):
      p = r * s - lo + t * d  # position in the dilated input
      if p % l == 0 and 0 <= p // l < n:
        m[r, p // l, t] = 1
  return m


def _extended(v, j, block, halo):
  """Shard j's block of v with its halo (zeros beyond v's ends)."""
  start, stop = j * block - halo.left, (j + 1) * block + halo.right
  out = np.zeros(stop - start)
  lo, hi = max(start, 0), min(stop, len(v))
  out[lo - start:hi - start] = v[lo:hi]
  return out


def test_halo_plans_reproduce_each_shard():
  rng = np.random.default_rng(0)
  planned = 0
  for k, s, l, d, lo, hi, n, parts in itertools.product(
      (1, 2, 3, 5), (1, 2, 3), (1, 2), (1, 2), range(-1, 4), range(-1, 4), (8, 12, 24), (2, 4)):
    m = _matrix(n, k, s, l, d, lo, hi)
    t = m.shape[0]
    if t == 0:
      continue
    w = rng.standard_normal(k)
    a = np.einsum("rit,t->ri", m, w)  # y = a @ x, dx = a.T @ dy
    for gradient_of_input in (False, True):
      halo = plan_halo(gradient_of_input, k, s, d, l, (lo, hi), n, t, parts)
      if halo is None:
        continue
      planned += 1
      sp, tp = n // parts, t // parts
      x, dy = rng.standard_normal(n), rng.standard_normal(t)
      for j in range(parts):
        if not gradient_of_input:
          ext = _extended(x, j, sp, halo)
          local = np.einsum("rit,t->ri", _matrix(len(ext), k, s, l, d, *halo.padding), w)
          assert local.shape[0] == tp, (k, s, l, d, lo, hi, n, parts, halo)
          np.testing.assert_allclose(local @ ext, (a @ x)[j * tp:(j + 1) * tp], atol=1e-12)
        else:
          ext = _extended(dy, j, tp, halo)
          local = np.einsum("rit,t->ri", _matrix(sp, k, s, l, d, *halo.padding), w)
          assert local.shape[0] == len(ext), (k, s, l, d, lo, hi, n, parts, halo)
          np.testing.assert_allclose(local.T @ ext, (a.T @ dy)[j * sp:(j + 1) * sp],
                                     atol=1e-12)
  assert planned > 1000, planned


def test_halos_are_planned_where_xla_exchanges_them():
  """'SAME' at stride 1 and 2 and the U-Net's transposed convolution keep
  their splits; 'VALID' windows do not line up and fall back."""
  same3 = plan_halo(False, 3, 1, 1, 1, (1, 1), 16, 16, 4)
  assert (same3.left, same3.right) == (1, 1)
  same3s2 = plan_halo(False, 3, 2, 1, 1, (0, 1), 16, 8, 4)
  assert (same3s2.left, same3s2.right) == (0, 1)
  up = plan_halo(False, 2, 1, 1, 2, (1, 1), 8, 16, 4)  # kernel 2, input dilation 2
  assert (up.left, up.right) == (0, 0)
  assert plan_halo(False, 3, 1, 1, 1, (0, 0), 16, 14, 2) is None
