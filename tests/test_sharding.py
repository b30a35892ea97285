"""Runs the partitioning checks (sharding_checks.py) on 8 host devices.

A mesh needs devices that exist before JAX starts, and the rest of the suite
runs on one CPU device; so the checks run in a subprocess of their own, with
``--xla_force_host_platform_device_count=8`` on the CPU, and this test fails
with the subprocess's report if any of them fails.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent


def _run_checks(*args: str, timeout: int = 1800) -> subprocess.CompletedProcess:
  env = dict(os.environ)
  env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
  env["JAX_PLATFORMS"] = "cpu"
  return subprocess.run(
      [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
       str(HERE / "sharding_checks.py"), *args],
      cwd=HERE.parent, env=env, capture_output=True, text=True, timeout=timeout)


def test_partitioning_on_8_host_devices():
  done = _run_checks()
  report = (done.stdout + done.stderr)[-20000:]
  assert done.returncode == 0, report
  assert " passed" in done.stdout and " skipped" not in done.stdout, report
