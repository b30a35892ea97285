"""``python -m jax_im2col``: checks every installed backend against lax and
prints correctness and timings against ``lax.conv_general_dilated_patches``
(unfold) and its VJP (fold)."""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import jax
import jax.numpy as jnp
from jax import lax

import jax_im2col as j

# (name, x shape NCHW..., kernel, stride, padding, dilation)
SHAPES = [
    ("2d 3x3", (8, 32, 28, 28), (3, 3), (1, 1), 1, (1, 1)),
    ("2d 7x7/2", (4, 3, 64, 64), (7, 7), (2, 2), 3, (1, 1)),
    ("2d dil2", (4, 32, 24, 24), (3, 3), (1, 1), 2, (2, 2)),
    ("1d k3/2", (4, 64, 400), (3,), (2,), 0, (1,)),
    ("3d 3x3x3", (2, 8, 12, 16, 16), (3, 3, 3), (1, 1, 1), 1, (1, 1, 1)),
]


def _median_ms(fn, *args, repeats: int) -> float:
  jax.block_until_ready(fn(*args))
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append((time.perf_counter() - t0) * 1e3)
  return statistics.median(times)


def _check(device, name, shape, kernel, stride, pad, dil, repeats):
  nd = len(kernel)
  pads = [(pad, pad)] * nd
  x = jax.device_put(jax.random.normal(jax.random.PRNGKey(0), shape, jnp.float32), device)
  ours_u = jax.jit(lambda v: j.unfold(v, kernel, dil, pads, stride))
  lax_u = jax.jit(lambda v: lax.conv_general_dilated_patches(
      v, kernel, stride, pads, rhs_dilation=dil, precision=lax.Precision.HIGHEST))
  cols = ours_u(x)
  ref = lax_u(x).reshape(cols.shape)
  unfold_err = float(jnp.max(jnp.abs(cols - ref)))
  spatial = shape[2:]
  ours_f = jax.jit(lambda c: j.fold(c, spatial, kernel, dil, pads, stride))
  _, lax_vjp = jax.vjp(lax_u, x)
  ct = jax.random.normal(jax.random.PRNGKey(1), cols.shape, jnp.float32)
  ct_lax = ct.reshape(lax_u(x).shape)
  fold_ref = lax_vjp(ct_lax)[0]
  fold_err = float(jnp.max(jnp.abs(ours_f(ct) - fold_ref)) / (jnp.max(jnp.abs(fold_ref)) + 1e-30))
  w = jax.device_put(jax.random.normal(jax.random.PRNGKey(2), (16, shape[1], *kernel)), device)
  conv_ref = lax.conv_general_dilated(x, w, stride, pads, rhs_dilation=dil,
                                      precision=lax.Precision.HIGHEST)
  conv = j.conv_general_dilated(x, w, stride, pads, rhs_dilation=dil, precision=lax.Precision.HIGHEST)
  conv_err = float(jnp.max(jnp.abs(conv - conv_ref)) / (jnp.max(jnp.abs(conv_ref)) + 1e-30))
  times = (_median_ms(ours_u, x, repeats=repeats), _median_ms(lax_u, x, repeats=repeats),
           _median_ms(ours_f, ct, repeats=repeats),
           _median_ms(jax.jit(lambda c: lax_vjp(c)[0]), ct_lax, repeats=repeats))
  ok = unfold_err == 0.0 and fold_err < 1e-5 and conv_err < 1e-5
  return ok, (name, unfold_err, fold_err, conv_err, *times)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog="python -m jax_im2col", description=__doc__)
  parser.add_argument("--repeats", type=int, default=10)
  args = parser.parse_args(argv)
  platforms = ["cpu"] + (["gpu"] if _has_gpu() else [])
  print(f"jax {jax.__version__}, jax_im2col {j.__version__}, CUDA module: "
        f"{'built' if j.has_cuda() else 'absent'}, platforms: {', '.join(platforms)}")
  all_ok = True
  for platform in platforms:
    device = jax.devices(platform)[0]
    print(f"\n{platform} ({device.device_kind})")
    header = ("shape", "unfold err", "fold rel", "conv rel", "unfold ms", "patches ms",
              "fold ms", "patches VJP ms", "speedup u/f")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    with jax.default_device(device):
      for spec in SHAPES:
        ok, row = _check(device, *spec, repeats=args.repeats)
        all_ok &= ok
        name, ue, fe, ce, tu, tp, tf, tv = row
        print(f"| {name} | {ue:.1e} | {fe:.1e} | {ce:.1e} | {tu:.3f} | {tp:.3f} | {tf:.3f} | "
              f"{tv:.3f} | {tp / tu:.1f}x / {tv / tf:.1f}x |{'' if ok else ' MISMATCH'}")
  print("\nall backends agree with lax" if all_ok else "\nMISMATCH against lax")
  return 0 if all_ok else 1


def _has_gpu() -> bool:
  try:
    return bool(jax.devices("gpu")) and j.has_cuda()
  except RuntimeError:
    return False


if __name__ == "__main__":
  sys.exit(main())
