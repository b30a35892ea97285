"""The loss, its gradient, the jitted train step and the inference step."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

OPTIMIZER = optax.sgd(0.01, momentum=0.9)


def jit_once(fn):
  """`fn` jitted for a program run once or a few times (initialisation, the
  agreement checks): compiled without LLVM's backend optimisation (XLA's own
  passes and autotuning still run), which cuts XLA's CPU compile time by a
  third to a half; the code's speed does not matter there."""
  return jax.jit(fn, compiler_options={"xla_backend_optimization_level": 0})


def cross_entropy(logits, labels):
  """Mean softmax cross-entropy over every labelled position, in float32 at
  least (bfloat16 logits are widened)."""
  logits = logits.astype(jnp.promote_types(logits.dtype, jnp.float32))
  log_p = jax.nn.log_softmax(logits)
  return -jnp.mean(jnp.take_along_axis(log_p, labels[..., None], axis=-1))


def loss_and_grad(module: nn.Module):
  """(params, state, x, labels) -> ((loss, new state), gradient w.r.t. params),
  in training mode: BatchNorm normalises with the batch's statistics and
  updates its running averages (the mutable `state`)."""
  def loss(params, state, x, labels):
    logits, new_state = module.apply({"params": params, **state}, x, train=True,
                                     mutable=list(state))
    return cross_entropy(logits, labels), new_state
  return jax.value_and_grad(loss, has_aux=True)


def init_train_state(params, state):
  """(params, state, optimizer state) as fresh buffers: the train step
  donates its train state, so each implementation gets its own copy."""
  params, state = jax.tree.map(jnp.copy, (params, state))
  return params, state, OPTIMIZER.init(params)


def step_function(module: nn.Module):
  """The train step (train state, x, labels) -> (new train state, loss),
  unjitted: value_and_grad of the loss, then an SGD-with-momentum update."""
  grad = loss_and_grad(module)

  def step(train_state, x, labels):
    params, state, opt_state = train_state
    (loss, state), grads = grad(params, state, x, labels)
    updates, opt_state = OPTIMIZER.update(grads, opt_state, params)
    return (optax.apply_updates(params, updates), state, opt_state), loss
  return step


def train_step(module: nn.Module):
  """step_function jitted, the train state donated."""
  return jax.jit(step_function(module), donate_argnums=0)


def infer_step(module: nn.Module):
  """The jitted forward in evaluation mode: (variables, x) -> logits."""
  return jax.jit(lambda variables, x: module.apply(variables, x, train=False))
