"""Checks of the public functions' array arguments, shared by every family."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

FLOAT_DTYPES = tuple(np.dtype(d) for d in (jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64))
HALF_DTYPES = (np.dtype(jnp.float16), np.dtype(jnp.bfloat16))


def as_array(x, name: str):
  """x itself if it is an array (or a tracer), else jnp.asarray(x)."""
  if hasattr(x, "dtype") and hasattr(x, "shape"):
    return x
  try:
    return jnp.asarray(x)
  except TypeError:
    raise TypeError(f"{name} must be an array, got {type(x).__name__}") from None


def check_float_array(x, name: str):
  x = as_array(x, name)
  if np.dtype(x.dtype) not in FLOAT_DTYPES:
    raise TypeError(f"{name} must have a floating dtype (float16, bfloat16, float32 or float64), "
                    f"got {x.dtype}")
  return x


def conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers) -> lax.ConvDimensionNumbers:
  """lax's own parsing, with its errors re-raised as ValueError naming the argument."""
  try:
    return lax.conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers)
  except (TypeError, ValueError, AssertionError) as e:
    raise ValueError(f"dimension_numbers: {e}") from None
