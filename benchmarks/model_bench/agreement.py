"""How closely ours agrees with XLA: losses, logits and gradient pytrees.

Two measures for gradients. In float64 (on the CPU) rounding is far below
any bug, so ours vs XLA is judged directly (relative difference of the whole
pytree and of the worst leaf). In float32 (TF32 on the GPU) and bfloat16,
BatchNorm networks at initialisation amplify rounding chaotically, so ours vs
XLA is set against XLA's own sensitivity: XLA's gradients for the input
changed by a tiny relative amount, and XLA's gradients computed twice. In
float32 a third measure takes a finer oracle: XLA's gradients at HIGHEST
precision (full float32 products instead of TF32), against which ours at
DEFAULT must be about as close as XLA at DEFAULT is (two correct TF32
computations that round in different places differ by ~1e-3 where a 1e-6
input change moves XLA's own gradients by far less).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .problem import Problem, make_problem
from .steps import jit_once, loss_and_grad

AGREEMENT_FACTOR = 3.0  # ours vs XLA within this factor of XLA's own sensitivity
LEAF_FLOOR = 1e-10  # a leaf's norm below this share of the tree's is rounding noise


def _leaves(tree) -> dict[str, np.ndarray]:
  return {jax.tree_util.keystr(path): np.asarray(leaf, np.float64)
          for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


def tree_difference(tree, reference) -> dict:
  """|tree - reference| / |reference| over the whole pytree (Frobenius
  norms, in float64), and the leaf with the largest own relative difference
  among the leaves that carry at least LEAF_FLOOR of the reference's norm
  (small leaves count: ConvNeXt's depthwise kernels get ~1e-6 of it through
  the layer scale; leaves whose gradient is zero but for rounding do not: a
  BatchNorm bias feeding another BatchNorm)."""
  a, b = _leaves(tree), _leaves(reference)
  if a.keys() != b.keys():
    raise ValueError(f"pytrees differ in structure: {sorted(a.keys() ^ b.keys())}")
  diff = np.sqrt(sum(float(np.sum((a[k] - b[k])**2)) for k in b))
  norm = np.sqrt(sum(float(np.sum(b[k]**2)) for k in b))
  worst_leaf, worst = None, 0.0
  for k in b:
    n = float(np.linalg.norm(b[k]))
    if n > LEAF_FLOOR * norm:
      rel = float(np.linalg.norm(a[k] - b[k])) / n
      if worst_leaf is None or rel > worst:
        worst_leaf, worst = k, rel
  return {"rel": float(diff / norm) if norm else float(diff),
          "worst_leaf_rel": worst, "worst_leaf": worst_leaf}


def relative(a, b) -> float:
  """|a - b| / |b| for scalars (the loss)."""
  a, b = float(a), float(b)
  return abs(a - b) / abs(b) if b else abs(a - b)


def perturbation(problem: Problem) -> float:
  """The relative input change of the sensitivity check: 1e-6, or one unit
  in the last place of the compute dtype where that is coarser (bfloat16:
  a 1e-6 change would vanish when the input is rounded)."""
  return max(1e-6, float(jnp.finfo(problem.compute_dtype).eps))


def gradient_sensitivity(problem: Problem, seed: int = 0) -> dict:
  """Gradients at the problem's precision: ours vs XLA, XLA vs XLA for the
  input times (1 + eps * standard normal), XLA vs XLA run again; in float32
  also ours and XLA against XLA at HIGHEST precision. `agrees` when ours vs
  XLA is within AGREEMENT_FACTOR of the larger of XLA's two, or ours is within
  AGREEMENT_FACTOR of XLA's distance from the HIGHEST-precision gradients."""
  grad = {impl: jit_once(loss_and_grad(m)) for impl, m in problem.modules.items()}
  args = (problem.params, problem.state, problem.x, problem.labels)

  def grads(impl, x=problem.x):
    return jax.device_get(grad[impl](*args[:2], x, args[3])[1])

  eps = perturbation(problem)
  noise = np.random.default_rng(seed + 1).standard_normal(problem.x.shape).astype(problem.x.dtype)
  reference = grads("xla")
  out = {"perturbation": eps,
         "ours_vs_xla": tree_difference(grads("ours"), reference)["rel"],
         "xla_perturbed": tree_difference(grads("xla", problem.x * (1 + eps * noise)), reference)["rel"],
         "xla_repeat": tree_difference(grads("xla"), reference)["rel"]}
  out["agrees"] = out["ours_vs_xla"] <= AGREEMENT_FACTOR * max(out["xla_perturbed"], out["xla_repeat"])
  if problem.compute_dtype == jnp.float32:
    with jax.default_matmul_precision("highest"):  # read when the step is traced
      precise = jax.device_get(jit_once(loss_and_grad(problem.modules["xla"]))(*args)[1])
    out["xla_vs_highest"] = tree_difference(reference, precise)["rel"]
    out["ours_vs_highest"] = tree_difference(grads("ours"), precise)["rel"]
    out["agrees"] = out["agrees"] or (
        out["ours_vs_highest"] <= AGREEMENT_FACTOR * out["xla_vs_highest"])
  return out


def float64_agreement(spec, preset: str, variables: dict, seed: int = 0) -> dict:
  """Loss and gradients of ours and XLA in float64 (parameters, statistics,
  inputs; from `variables`, see init_variables): the losses, their relative
  difference, the gradient pytrees' difference (see tree_difference). Turns
  x64 on for its own duration."""
  with jax.enable_x64(True):
    problem = make_problem(spec, preset, "f64", variables, seed)
    out = {}
    for impl, module in problem.modules.items():
      (loss, _), grads = jit_once(loss_and_grad(module))(
          problem.params, problem.state, problem.x, problem.labels)
      out[impl] = (float(loss), jax.device_get(grads))
  grad = tree_difference(out["ours"][1], out["xla"][1])
  return {"loss_xla": out["xla"][0], "loss_ours": out["ours"][0],
          "loss_rel": relative(out["ours"][0], out["xla"][0]),
          "grad_rel": grad["rel"], "grad_worst_leaf_rel": grad["worst_leaf_rel"],
          "grad_worst_leaf": grad["worst_leaf"]}
