"""The package's user settings, in one registry.

Each setting has an environment variable (read when no value was set in
Python), a default and a meaning, listed in SETTINGS. Values are read at
trace time and are part of JAX's tracing cache key (jax.make_user_context), so
a jitted function traced under one value is traced again under another.

The CUDA kernels' own tuning switches (JAX_IM2COL_NO_*: each turns one kernel
off, for same-run comparisons) are a separate registry, lib/common/switches.h.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os

import jax
import numpy as np

DEFAULT_WORKSPACE_LIMIT = 256 << 20

# The convolution's algorithms (src/jax_im2col/conv/selection.py says when
# each applies). "xla" is XLA's own convolution (cuDNN on the GPU).
ALGORITHMS = ("xla", "gemm", "gemm_channels_last", "gemm_per_image", "implicit",
              "implicit_packed", "direct", "depthwise", "conv1d_cf", "columns_dot")
# Besides a name: "auto" (the measured rules choose, XLA included) and "own"
# (the project's kernels only: the rules without XLA).
ALGORITHM_MODES = ("auto", "own")


@dataclasses.dataclass(frozen=True)
class Setting:
  env: str
  default: str
  meaning: str


SETTINGS = (
    Setting("JAX_IM2COL_WORKSPACE_LIMIT", str(DEFAULT_WORKSPACE_LIMIT),
            "bytes of scratch (columns, channels-last copies, partial sums) one convolution call "
            "may hold at once; larger batches run in chunks inside the call"),
    Setting("JAX_IM2COL_ALGORITHM", "auto",
            "'auto': the measured rules choose, per op, between the project's kernels and XLA's "
            "convolution; 'own': the project's kernels only; or one algorithm's name (" +
            ", ".join(ALGORITHMS) + ") for every op it applies to (an op it does not apply to "
            "raises ValueError at trace time). fold and unfold read it too: 'auto' their measured "
            "rules, 'xla' their lax routes (fold: every float16-float64 fold; unfold: every dtype but "
            "bfloat16 and float8), any other value their kernels"),
)

_workspace_limit = jax.make_user_context(default_value=None)
_algorithm = jax.make_user_context(default_value=None)


def _check_limit(nbytes) -> int:
  if isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer)) or nbytes < 1:
    raise ValueError(f"workspace limit must be a positive number of bytes, got {nbytes!r}")
  return int(nbytes)


def _check_algorithm(name) -> str:
  if not isinstance(name, str) or name not in ALGORITHMS + ALGORITHM_MODES:
    raise ValueError(f"algorithm must be one of {ALGORITHM_MODES + ALGORITHMS}, got {name!r}")
  return name


def get_workspace_limit() -> int:
  """Bytes of scratch one convolution call may hold at once."""
  if _workspace_limit.value is not None:
    return _workspace_limit.value
  env = os.environ.get("JAX_IM2COL_WORKSPACE_LIMIT")
  return _check_limit(int(env)) if env else DEFAULT_WORKSPACE_LIMIT


def set_workspace_limit(nbytes: int | None) -> None:
  """Sets the cap for convolutions traced from now on (None: the default)."""
  _workspace_limit.set_global(None if nbytes is None else _check_limit(nbytes))


@contextlib.contextmanager
def workspace_limit(nbytes: int):
  """Context manager form of :func:`set_workspace_limit`."""
  with _workspace_limit(_check_limit(nbytes)):
    yield


def get_algorithm() -> str:
  """The algorithm setting: "auto", "own" or one algorithm's name."""
  if _algorithm.value is not None:
    return _algorithm.value
  return _check_algorithm(os.environ.get("JAX_IM2COL_ALGORITHM", "auto"))


def set_algorithm(name: str | None) -> None:
  """Sets the algorithm for convolutions traced from now on (None: "auto")."""
  _algorithm.set_global(None if name is None else _check_algorithm(name))


@contextlib.contextmanager
def force_algorithm(name: str):
  """Convolutions traced inside take algorithm `name` ("own", "auto", or an
  algorithm's name: see :data:`ALGORITHMS`) for every op; where a named
  algorithm does not apply to an op, tracing raises ValueError."""
  with _algorithm(_check_algorithm(name)):
    yield
