"""Quick GPU correctness smoke check: every kernel path against lax / numpy.

Run on the device before the full suite: prints one line per case and a
summary; exits non-zero on any mismatch.
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

jax.config.update("jax_enable_x64", True)
import jax_im2col as j  # noqa: E402

rng = np.random.default_rng(0)
failures = 0


def report(name, err, tol):
  global failures
  ok = err <= tol
  failures += not ok
  print(f"{'ok  ' if ok else 'FAIL'} {name}: {err:.3e} (tol {tol:.0e})", flush=True)


def rel(a, b):
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  return float(np.linalg.norm(a - b) / (np.linalg.norm(b) + 1e-300))


gpu = jax.devices("gpu")[0]
cpu = jax.devices("cpu")[0]
for dtype in (jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64):
  for cl in (False, True):
    for shape, k, kw in [((2, 5, 9, 11), (3, 3), dict(padding=1, stride=1)),
                         ((2, 8, 13, 10), (3, 2), dict(padding=((2, 0), (1, 1)), stride=(2, 1), dilation=(1, 2))),
                         ((2, 3, 5, 6, 7), (2, 3, 2), dict(padding=1, stride=2)),
                         ((3, 16, 31), (5,), dict(padding=2, stride=3, dilation=2))]:
      x = rng.standard_normal(shape).astype(dtype)
      if cl:
        x = np.moveaxis(x, 1, -1)
      un = j.unfold_channels_last if cl else j.unfold
      fo = j.fold_channels_last if cl else j.fold
      spatial = x.shape[1:-1] if cl else x.shape[2:]
      ref_u = jax.device_get(jax.jit(lambda v: un(v, k, **kw))(jax.device_put(x, cpu)))
      got_u = jax.device_get(jax.jit(lambda v: un(v, k, **kw))(jax.device_put(x, gpu)))
      report(f"unfold {np.dtype(dtype).name} cl={cl} {shape}", float(np.any(ref_u != got_u)), 0)
      ref_f = jax.device_get(jax.jit(lambda c: fo(c, spatial, k, **kw))(jax.device_put(ref_u, cpu)))
      got_f = jax.device_get(jax.jit(lambda c: fo(c, spatial, k, **kw))(jax.device_put(ref_u, gpu)))
      report(f"fold   {np.dtype(dtype).name} cl={cl} {shape}", rel(got_f, ref_f), 1e-6 if dtype in (jnp.float32, jnp.float64) else 1e-2)

cases = [
    ((4, 8, 12, 12), (16, 8, 3, 3), (1, 1), "SAME", None, None, None, 1, 1),
    ((4, 8, 12, 12), (16, 2, 3, 3), (2, 1), [(1, 0), (2, -1)], (2, 1), (1, 2), None, 4, 1),
    ((4, 32, 12, 12), (16, 8, 3, 3), (2, 1), [(1, 0), (2, -1)], (2, 1), (1, 2), None, 4, 1),
    ((4, 12, 12, 8), (3, 3, 8, 16), (1, 1), "VALID", None, None, ("NHWC", "HWIO", "NHWC"), 1, 1),
    ((4, 12, 12, 8), (3, 3, 1, 16), (1, 2), "SAME", None, (2, 2), ("NHWC", "HWIO", "NHWC"), 8, 1),
    ((4, 8, 12, 12), (8, 1, 3, 3), (1, 1), "SAME", None, (3, 3), None, 8, 1),
    ((8, 6, 40), (12, 6, 3), (2,), "SAME_LOWER", None, None, None, 1, 2),
    ((2, 4, 6, 7, 8), (6, 4, 3, 3, 3), (1, 1, 1), [(2, 1), (1, 2), (0, 0)], (2, 2, 2), None, None, 1, 1),
    ((4, 16, 10, 10), (32, 16, 1, 1), (1, 1), "VALID", None, None, None, 1, 1),
    ((4, 10, 10, 16), (1, 1, 16, 32), (1, 1), "VALID", None, None, ("NHWC", "HWIO", "NHWC"), 1, 1),
    ((4, 10, 10, 16), (3, 3, 8, 32), (1, 1), "SAME", None, None, ("NHWC", "HWIO", "NCHW"), 2, 1),
]
for limit in (None, 64 << 10):
  for dtype, prec, tol in ((jnp.float64, lax.Precision.HIGHEST, 1e-10),
                           (jnp.float32, lax.Precision.HIGHEST, 1e-5),
                           (jnp.float32, None, 5e-3), (jnp.bfloat16, None, 3e-2),
                           (jnp.float16, None, 1e-2)):
    for (xs, ws, st, pad, ld, rd, dn, g, b) in cases:
      x = jnp.asarray(rng.standard_normal(xs), dtype)
      w = jnp.asarray(rng.standard_normal(ws), dtype)
      kw = dict(window_strides=st, padding=pad, lhs_dilation=ld, rhs_dilation=rd,
                dimension_numbers=dn, feature_group_count=g, batch_group_count=b, precision=prec)
      ref_fn = lambda x, w: lax.conv_general_dilated(x.astype(jnp.float64), w.astype(jnp.float64), **{**kw, "precision": lax.Precision.HIGHEST})
      ours = lambda x, w: j.conv_general_dilated(x, w, **kw)
      ctx = j.workspace_limit(limit) if limit else j.workspace_limit(j.get_workspace_limit())
      with ctx:
        y = jax.jit(ours)(x, w)
        ct = jnp.asarray(rng.standard_normal(y.shape), dtype)
        _, vjp = jax.vjp(ours, x, w)
        dx, dw = jax.jit(vjp)(ct)
      yr, vjpr = jax.vjp(ref_fn, x, w)
      dxr, dwr = vjpr(ct.astype(jnp.float64))
      name = f"conv {np.dtype(dtype).name} {prec} {xs}x{ws} g={g} b={b} cap={limit}"
      report(name + " fwd", rel(y, yr), tol)
      report(name + " dx", rel(dx, dxr), tol)
      report(name + " dw", rel(dw, dwr), tol)

# per-example weight gradients
x = jnp.asarray(rng.standard_normal((6, 4, 9, 9)), jnp.float64)
w = jnp.asarray(rng.standard_normal((5, 4, 3, 3)), jnp.float64)
loss = lambda f: (lambda w, x: jnp.sum(jnp.sin(f(x[None], w, (1, 1), "SAME"))))
pe = jax.jit(jax.vmap(jax.grad(loss(j.conv_general_dilated)), (None, 0)))(w, x)
pr = jax.vmap(jax.grad(loss(lax.conv_general_dilated)), (None, 0))(w, x)
report("per-example grads", rel(pe, pr), 1e-10)

print(f"SMOKE SUMMARY: {failures} failures")
sys.exit(1 if failures else 0)
