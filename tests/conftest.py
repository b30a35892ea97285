"""Shared test setup: float64 on, and the platforms every check runs on.

Tests take a `platform` parameter from PLATFORMS and run inside
`on_platform(platform)`. The GPU variant is marked `gpu` and skipped when JAX
sees no CUDA device, so the same checks run on the CPU in CI and on the GPU on
the device machine.
"""

import contextlib

import jax
import pytest

import jax_im2col

jax.config.update("jax_enable_x64", True)
# Every test exercises the project's own kernels unless it asks otherwise:
# with "auto", the measured rules would send some convolutions to XLA's, and
# a GPU test meant for a kernel would test cuDNN. Tests of the routing itself
# set "auto" (force_algorithm).
jax_im2col.set_algorithm("own")


def _gpu_devices():
  try:
    return jax.devices("gpu")
  except RuntimeError:
    return []


GPU_DEVICES = _gpu_devices()

PLATFORMS = [
    pytest.param("cpu", id="cpu"),
    pytest.param("gpu", id="gpu", marks=[
        pytest.mark.gpu,
        pytest.mark.skipif(not GPU_DEVICES, reason="no CUDA device visible to JAX"),
    ]),
]


@contextlib.contextmanager
def on_platform(platform: str):
  with jax.default_device(jax.devices(platform)[0]):
    yield
