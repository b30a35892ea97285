"""Where and with what a benchmark ran."""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import pathlib
import platform
import subprocess
import sys

import jax

import jax_im2col

REPO = pathlib.Path(__file__).resolve().parents[2]


def _version(package: str) -> str | None:
  try:
    return importlib.metadata.version(package)
  except importlib.metadata.PackageNotFoundError:
    return None


def _git(*args: str) -> str | None:
  try:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                          check=True, timeout=10).stdout.strip()
  except (OSError, subprocess.SubprocessError):
    return None


def environment() -> dict:
  """Device (platform, kind, count), package versions, the git commit of the
  benchmark's checkout (and whether tracked files differ from it; a copy of
  the tree without its history names the commit in JAX_IM2COL_COMMIT), the
  date."""
  device = jax.devices()[0]
  status = _git("status", "--porcelain", "--untracked-files=no")
  return {
      "platform": device.platform,
      "device_kind": device.device_kind,
      "device_count": jax.device_count(),
      "versions": {name: _version(name) for name in
                   ("jax", "jaxlib", "flax", "optax", "numpy", "jax_im2col")},
      "jax_im2col_cuda": jax_im2col.has_cuda(),
      "git_commit": os.environ.get("JAX_IM2COL_COMMIT") or _git("rev-parse", "HEAD"),
      "git_dirty": None if status is None else bool(status),
      "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
      "python": sys.version.split()[0],
      "host_cpus": os.cpu_count(),
      "machine": platform.machine(),
  }
