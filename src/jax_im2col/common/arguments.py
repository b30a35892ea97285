"""Checks of the public functions' array arguments, shared by every family."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax

FLOAT_DTYPES = tuple(np.dtype(d) for d in (jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64))
HALF_DTYPES = (np.dtype(jnp.float16), np.dtype(jnp.bfloat16))
# unfold / fold / conv_general_dilated_patches: every dtype JAX computes with
# but the sub-byte ones (int4 and friends, which XLA may pack) and the float8
# formats other than the two OCP ones. unfold copies elements by their size
# (1, 2, 4, 8 or 16 bytes); fold sums them (lib/common/fold_elements.h).
COLUMNS_DTYPES = tuple(np.dtype(d) for d in (
    jnp.bool_, jnp.int8, jnp.int16, jnp.int32, jnp.int64, jnp.uint8, jnp.uint16, jnp.uint32,
    jnp.uint64, jnp.float8_e4m3fn, jnp.float8_e5m2, jnp.float16, jnp.bfloat16, jnp.float32,
    jnp.float64, jnp.complex64, jnp.complex128))


def as_array(x, name: str):
  """x itself if it is an array (or a tracer), else jnp.asarray(x)."""
  if hasattr(x, "dtype") and hasattr(x, "shape"):
    return x
  try:
    return jnp.asarray(x)
  except TypeError:
    raise TypeError(f"{name} must be an array, got {type(x).__name__}") from None


def check_float_array(x, name: str):
  """x as an array of a floating dtype (the convolution's), else a TypeError naming `name`."""
  x = as_array(x, name)
  if np.dtype(x.dtype) not in FLOAT_DTYPES:
    raise TypeError(f"{name} must have a floating dtype (float16, bfloat16, float32 or float64), "
                    f"got {x.dtype}")
  return x


def check_columns_array(x, name: str, function: str):
  """x as an array of one of COLUMNS_DTYPES (unfold, fold and the patches'),
  else a TypeError naming `name` and the `function` it was passed to."""
  x = as_array(x, name)
  if np.dtype(x.dtype) not in COLUMNS_DTYPES:
    names = ", ".join(d.name for d in COLUMNS_DTYPES)
    raise TypeError(f"{name} must have a dtype that {function} takes ({names}), got {x.dtype}")
  return x


def conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers) -> lax.ConvDimensionNumbers:
  """lax's own parsing, with its errors re-raised as ValueError naming the argument."""
  try:
    return lax.conv_dimension_numbers(lhs_shape, rhs_shape, dimension_numbers)
  except (TypeError, ValueError, AssertionError) as e:
    raise ValueError(f"dimension_numbers: {e}") from None
