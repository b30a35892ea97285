"""CUDA kernels compiled as host code and run thread by thread (tests/host/*.cc;
a kernel with a barrier as its phases, each for all threads of a block, one
after the other) against float64 references, the tiled unfold's plan
against its coverage of the columns, and the CPU unfold against the same
reference:
CI has no GPU, and this checks their index math there too. Their GPU runs
are the `gpu` variants of the other tests."""

import os
import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _cuda_include() -> pathlib.Path | None:
  """The CUDA toolkit's headers (cuda_bf16.h and friends), as the CUDA build finds them."""
  roots = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")]
  nvcc = shutil.which("nvcc")
  if nvcc:
    roots.append(str(pathlib.Path(nvcc).resolve().parents[1]))
  roots.append("/usr/local/cuda")
  for root in filter(None, roots):
    include = pathlib.Path(root) / "include"
    if (include / "cuda_bf16.h").exists():
      return include
  return None


HOST_TESTS = sorted(str(p.relative_to(ROOT / "tests" / "host"))
                    for p in (ROOT / "tests" / "host").rglob("*_on_host.cc"))


def test_every_host_test_is_found():
  # The folders mirror lib/; a test moved or added anywhere under tests/host runs.
  assert len(HOST_TESTS) >= 17, HOST_TESTS


@pytest.mark.parametrize("source", HOST_TESTS)
def test_cuda_kernel_on_host(source, tmp_path):
  cxx, include = shutil.which("g++") or shutil.which("c++"), _cuda_include()
  if cxx is None or include is None:
    pytest.skip("needs a C++ compiler and the CUDA toolkit's headers (the CUDA module's build needs them too)")
  exe = tmp_path / "kernel_on_host"
  build = subprocess.run([cxx, "-std=c++17", "-O1", f"-I{include}", f"-I{ROOT / 'lib'}", f"-I{ROOT / 'tests' / 'host'}",
                          str(ROOT / "tests" / "host" / source), "-o", str(exe)],
                         capture_output=True, text=True, timeout=300)
  assert build.returncode == 0, build.stderr[-4000:]
  run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
  counts = re.search(r"(\d+) passed, (\d+) failed", run.stdout)
  assert run.returncode == 0 and counts, run.stdout[-4000:]
  assert int(counts[1]) > 0 and int(counts[2]) == 0, run.stdout[-4000:]
