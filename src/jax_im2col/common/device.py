"""What the algorithm choice needs to know of the GPUs a computation runs on."""

from __future__ import annotations

import dataclasses
import functools

import jax

from . import ffi


@dataclasses.dataclass(frozen=True)
class DeviceCaps:
  """Capabilities of the devices of one platform ("cuda" or "cpu").

  compute_capability: the lowest of the visible CUDA devices; multiprocessors:
  the first device's; hopper_kernels: every device is sm_90 and the CUDA
  module was built with the sm_90a (wgmma) kernels.
  """
  platform: str
  compute_capability: tuple[int, int] = (0, 0)
  multiprocessors: int = 0
  hopper_kernels: bool = False

  @property
  def ampere_or_newer(self) -> bool:
    """cp.async, ldmatrix and mma.sync: what every implicit GEMM needs."""
    return self.compute_capability >= (8, 0)


# Lowering for CUDA on a machine without a GPU shows the plan a current
# non-Hopper GPU gets (an H100's multiprocessor count, the Ampere kernels).
CUDA_WITHOUT_DEVICE = DeviceCaps("cuda", (8, 0), 132, False)
CPU = DeviceCaps("cpu")


def _capability(device) -> tuple[int, int]:
  major, _, minor = str(getattr(device, "compute_capability", "8.0")).partition(".")
  return int(major), int(minor or 0)


@functools.lru_cache(maxsize=None)
def device_caps(platform: str) -> DeviceCaps:
  """The capabilities of the visible devices of `platform`."""
  if platform != "cuda":
    return CPU
  try:
    devices = jax.devices("cuda")
  except RuntimeError:
    return CUDA_WITHOUT_DEVICE
  if not devices:
    return CUDA_WITHOUT_DEVICE
  capability = min(_capability(d) for d in devices)
  hopper = ffi.hopper_kernels_compiled() and all(_capability(d) == (9, 0) for d in devices)
  return DeviceCaps("cuda", capability, int(getattr(devices[0], "core_count", 132)), hopper)


def default_platform() -> str:
  """"cuda" where JAX's default backend is a CUDA GPU, else "cpu"."""
  return "cuda" if jax.default_backend() == "gpu" else "cpu"
