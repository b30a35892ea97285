"""src/jax_im2col/conv/depthwise_plan.py against the C++ it mirrors
(lib/conv/depthwise/depthwise_plan.h): the depthwise kernels' applicability
and the filter gradient's slice plan, compiled as host code and asked the
same questions over a grid of cases. No GPU needed; skipped without a C++
compiler or the CUDA toolkit's headers."""

import importlib.util
import itertools
import pathlib
import random
import shutil
import subprocess

import numpy as np
import pytest

from test_kernels_on_host import _cuda_include

ROOT = pathlib.Path(__file__).resolve().parents[1]

# The module by its path: pure Python, so the worktree's file is what is
# checked, whichever build of the package is installed.
_spec = importlib.util.spec_from_file_location("depthwise_plan", ROOT / "src/jax_im2col/conv/depthwise_plan.py")
plan = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(plan)

OPS = {"forward": 0, "input_gradient": 1, "filter_gradient": 2}
TYPES = {"float16": 0, "bfloat16": 1, "float32": 2, "float64": 3, "int32": 4, "complex64": 4}


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
  cxx, include = shutil.which("g++") or shutil.which("c++"), _cuda_include()
  if cxx is None or include is None:
    pytest.skip("needs a C++ compiler and the CUDA toolkit's headers")
  exe = tmp_path_factory.mktemp("mirror") / "depthwise_plan_mirror"
  build = subprocess.run([cxx, "-std=c++17", "-O1", f"-I{include}", f"-I{ROOT / 'lib'}",
                          f"-I{ROOT / 'tests' / 'host'}",
                          str(ROOT / "tests/host/conv/depthwise/depthwise_plan_mirror.cc"), "-o", str(exe)],
                         capture_output=True, text=True, timeout=300)
  assert build.returncode == 0, build.stderr[-4000:]

  def ask(lines):
    run = subprocess.run([str(exe)], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout.split("\n")[:len(lines)]

  return ask


def test_applies_mirrors_cpp(mirror):
  cases = []
  for op, nd, cl, dtype in itertools.product(OPS, (1, 2, 3), (False, True), TYPES):
    for groups, c, o in ((8, 8, 8), (1, 1, 1), (4, 8, 8), (8, 8, 16), (8, 8, 4), (3, 3, 3), (96, 96, 96)):
      for lhs in ((1,) * nd, (2,) + (1,) * (nd - 1), (1,) * (nd - 1) + (3,)):
        cases.append((op, nd, cl, dtype, groups, c, o, lhs))
  lines = [f"applies {OPS[op]} {nd} {int(cl)} {TYPES[dtype]} {g} {c} {o} " + " ".join(map(str, lhs))
           for op, nd, cl, dtype, g, c, o, lhs in cases]
  answers = mirror(lines)
  for case, answer in zip(cases, answers):
    op, nd, cl, dtype, g, c, o, lhs = case
    got = plan.depthwise_applies(op=op, nd=nd, channels_last=cl, dtype=np.dtype(dtype), groups=g, c=c, o=o,
                                 lhs_dilation=lhs)
    assert got == (answer == "1"), case
  assert not plan.depthwise_applies(op="transpose", nd=2, channels_last=True, dtype=np.float32, groups=4, c=4, o=4,
                                    lhs_dilation=(1, 1))


def _plan_cases():
  rng = random.Random(7)
  cases = [
      # ConvNeXt-T, MobileNetV2, RepLKNet-31B layers; 1-D and 3-D.
      (32, (56, 56), 96, 49), (32, (28, 28), 192, 49), (32, (14, 14), 384, 49), (32, (7, 7), 768, 49),
      (64, (112, 112), 32, 9), (64, (56, 56), 96, 9), (64, (28, 28), 144, 9), (64, (7, 7), 960, 9),
      (16, (56, 56), 128, 961), (16, (28, 28), 256, 841), (16, (14, 14), 512, 729), (16, (7, 7), 1024, 169),
      (2, (1000,), 64, 63), (2, (8, 16, 16), 32, 27), (1, (1,), 1, 1), (0, (5, 5), 3, 9), (3, (0, 4), 5, 9),
  ]
  for _ in range(300):
    nd = rng.randint(1, 3)
    out = tuple(rng.randint(1, 200 if nd == 1 else 60 if nd == 2 else 12) for _ in range(nd))
    cases.append((rng.randint(1, 64), out, rng.randint(1, 1024), rng.randint(1, 1000)))
  return cases


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("limit", [1 << 14, 1 << 22, 1 << 30])
def test_filter_plan_mirrors_cpp(mirror, dtype, limit):
  d = np.dtype(dtype)
  cases = _plan_cases()
  lines = [f"plan {n} {len(out)} " + " ".join(map(str, out)) + f" {c} {k} {d.itemsize} {int(d == np.float64)} 1 {limit}"
           for n, out, c, k in cases]
  answers = mirror(lines)
  for (n, out, c, k), answer in zip(cases, answers):
    got = plan.depthwise_filter_plan(n=n, out_spatial=out, c=c, kernel_size=k, dtype=d, channels_last=True,
                                     workspace_limit=limit)
    assert got == tuple(int(v) for v in answer.split()), (n, out, c, k)
    rows, slices, workspace = got
    if n > 0 and out[0] > 0:
      per_image = -(-out[0] // rows)
      assert slices == n * per_image and (per_image - 1) * rows < out[0] <= per_image * rows
      assert workspace == max(1, slices * c * k * (8 if d == np.float64 else 4))


def test_filter_plan_fills_the_gpu_and_caps_the_partials():
  # ConvNeXt-T's first stage: about 1024 blocks of 32 channels, partial sums
  # well under the data.
  rows, slices, workspace = plan.depthwise_filter_plan(n=32, out_spatial=(56, 56), c=96, kernel_size=49,
                                                       dtype=np.float32, channels_last=True, workspace_limit=1 << 30)
  assert slices * 3 >= 900 and workspace <= 2 * 32 * 56 * 56 * 96 * 4 // 4
  # RepLKNet's 31x31: one slice an image keeps the partial sums small.
  rows, slices, workspace = plan.depthwise_filter_plan(n=16, out_spatial=(56, 56), c=128, kernel_size=961,
                                                       dtype=np.float32, channels_last=True, workspace_limit=1 << 30)
  assert (rows, slices) == (56, 16)
