"""One model at one preset and precision, built twice: with XLA's
convolution and with ours, sharing one set of parameters."""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax import lax

import jax_im2col
from model_zoo import ModelSpec

from .steps import jit_once

IMPLS = {"xla": lax.conv_general_dilated, "ours": jax_im2col.conv_general_dilated}

# Precision modes: the modules' compute dtype. Parameters stay float32, except
# in f64, where parameters, statistics and inputs are float64 (x64 must be on).
COMPUTE_DTYPES = {"f32": None, "bf16": jnp.bfloat16, "f64": None}


@dataclasses.dataclass
class Problem:
  """The modules by implementation ("xla", "ours"), the variables both start
  from ({"params": ..., and "batch_stats" where there is BatchNorm}) and one
  input batch with its labels."""
  spec: ModelSpec
  dtype: str
  modules: dict[str, nn.Module]
  variables: dict[str, Any]
  x: jax.Array
  labels: jax.Array

  @property
  def params(self):
    return self.variables["params"]

  @property
  def state(self):
    """The non-parameter collections (BatchNorm's running statistics)."""
    return {k: v for k, v in self.variables.items() if k != "params"}

  @property
  def compute_dtype(self):
    return COMPUTE_DTYPES[self.dtype] or self.x.dtype


def init_variables(spec: ModelSpec, preset: str, seed: int = 0) -> dict[str, Any]:
  """The variables every problem of the model starts from: initialised from
  `seed` by XLA's float32 module (float32 parameters serve f32 and bf16 alike;
  f64 casts them). The key is an "rbg" key: XLA compiles its random bits in a
  fraction of threefry's time (15 s to 3 s for the tiny ResNet's init on the
  2-core CPU)."""
  module = spec.build(preset, IMPLS["xla"], None)
  x, _ = spec.batch(preset, seed)
  init = jit_once(lambda key, x: module.init(key, x, train=False))
  return init(jax.random.key(seed, impl="rbg"), x[:1])


def make_problem(spec: ModelSpec, preset: str, dtype: str, variables: dict[str, Any],
                 seed: int = 0) -> Problem:
  """Both modules at precision `dtype`, starting from `variables` (see
  init_variables), and a random batch from `seed`."""
  if dtype == "f64" and jax.dtypes.canonicalize_dtype(jnp.float64) != jnp.float64:
    raise RuntimeError("the f64 mode needs jax_enable_x64 (jax.enable_x64(True))")
  modules = {impl: spec.build(preset, conv, COMPUTE_DTYPES[dtype]) for impl, conv in IMPLS.items()}
  x, labels = spec.batch(preset, seed)
  if dtype == "f64":
    variables = jax.tree.map(lambda a: a.astype(jnp.float64), variables)
    x = x.astype(jnp.float64)
  return Problem(spec, dtype, modules, variables, x, labels)
