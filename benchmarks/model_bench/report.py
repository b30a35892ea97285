"""Markdown tables of a model benchmark's results, ready for BENCHMARKS.md."""

from __future__ import annotations

from typing import Any

DASH = "–"


def _get(d: Any, *keys):
  for k in keys:
    if not isinstance(d, dict) or d.get(k) is None:
      return None
    d = d[k]
  return d


def fmt_ms(v: float | None) -> str:
  if v is None:
    return DASH
  return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}" if v >= 1 else f"{v:.3f}"


def fmt_ratio(v: float | None) -> str:
  return DASH if v is None else f"{v:.3f}" if v < 0.1 else f"{v:.2f}"


def fmt_sci(v: float | None) -> str:
  return DASH if v is None else f"{v:.1e}"


def _pair(a, b, fmt) -> str:
  return DASH if a is None and b is None else f"{fmt(a)} -> {fmt(b)}"


def _mb(nbytes: int | None) -> float | None:
  return None if nbytes is None else nbytes / 2**20


def _shape(shape) -> str:
  return "x".join(str(s) for s in shape)


def _header(results: dict) -> list[str]:
  env, cfg = results["environment"], results["config"]
  v = env["versions"]
  if "sources" in results:  # joined runs (model_bench/join.py)
    return [f"Device: {env['device_kind']} ({env['platform']}); jax {v['jax']}, jaxlib {v['jaxlib']}, "
            f"flax {v['flax']}. Runs joined, the latest of each model and dtype kept:", "",
            *(f"- commit {(s['commit'] or 'unknown')[:10]}{'+changes' if s['dirty'] else ''}, "
              f"{s['date']}, {s['steps']} calls x {s['repeats']} repeats: {', '.join(s['runs'])}"
              for s in results["sources"]), "",
            f"Preset `{cfg['preset']}`; wall clock of a loop of N calls, median of the repeats "
            "after a warm-up loop, ours and XLA interleaved; ms per call. Ratio: ours / XLA "
            "(below 1: ours faster).", ""]
  commit = (env["git_commit"] or "unknown")[:10] + ("+changes" if env["git_dirty"] else "")
  return [f"Device: {env['device_kind']} ({env['platform']}); jax {v['jax']}, jaxlib {v['jaxlib']}, "
          f"flax {v['flax']}; commit {commit}; {env['date']}.",
          f"Preset `{cfg['preset']}`" + ("" if cfg["preset"] == "full" else
                                         " (depths and widths reduced: benchmarks/model_zoo)") +
          f"; wall clock of a loop of {cfg['steps']} calls, median of "
          f"{cfg['repeats']} repeats after a warm-up loop, ours and XLA interleaved; ms per call. "
          "Ratio: ours / XLA (below 1: ours faster).", ""]


def _timing_table(models: list[dict]) -> list[str]:
  lines = ["| model | batch, input | dtype | train step ms XLA -> ours | ratio | "
           "inference ms XLA -> ours | ratio | peak train MB XLA -> ours | ratio |",
           "|---|---|---|---|---|---|---|---|---|"]
  for m in models:
    for dtype, run in m["runs"].items():
      train, infer = run.get("train", {}), run.get("infer", {})
      mem = train.get("memory", {})
      lines.append(
          f"| {m['title']} | {m['batch']}, {_shape(m['input_shape'])} | {dtype} | "
          f"{_pair(_get(train, 'timing', 'xla_ms'), _get(train, 'timing', 'ours_ms'), fmt_ms)} | "
          f"{fmt_ratio(_get(train, 'timing', 'ratio'))} | "
          f"{_pair(_get(infer, 'timing', 'xla_ms'), _get(infer, 'timing', 'ours_ms'), fmt_ms)} | "
          f"{fmt_ratio(_get(infer, 'timing', 'ratio'))} | "
          f"{_pair(_mb(_get(mem, 'xla', 'peak')), _mb(_get(mem, 'ours', 'peak')), fmt_ms)} | "
          f"{fmt_ratio(mem.get('ratio'))} |")
  return lines + ["", "Peak: XLA's memory analysis of the compiled train step, argument + output + "
                  "temp - alias (donated) bytes; buffers outside XLA's (library handles, the runtime) "
                  "are not counted.", ""]


def _agreement_table(models: list[dict]) -> list[str]:
  lines = ["| model | dtype | loss XLA / ours | loss rel. diff step 1, 2 | gradients ours vs XLA | "
           "XLA perturbed (eps) | XLA again | vs HIGHEST: XLA, ours | agrees | logits rel. diff |",
           "|---|---|---|---|---|---|---|---|---|---|"]
  for m in models:
    for dtype, run in m["runs"].items():
      train = run.get("train", {})
      loss, grads = train.get("loss", {}), train.get("gradients", {})
      rel = loss.get("rel") or [None, None]
      losses = f"{loss['xla'][0]:.6g} / {loss['ours'][0]:.6g}" if loss else DASH
      agrees = grads.get("agrees")
      lines.append(
          f"| {m['model']} | {dtype} | "
          f"{losses} | "
          f"{fmt_sci(rel[0])}, {fmt_sci(rel[1])} | {fmt_sci(grads.get('ours_vs_xla'))} | "
          f"{fmt_sci(grads.get('xla_perturbed'))} ({fmt_sci(grads.get('perturbation'))}) | "
          f"{fmt_sci(grads.get('xla_repeat'))} | "
          f"{_highest(grads)} | "
          f"{DASH if agrees is None else 'yes' if agrees else 'NO'} | "
          f"{fmt_sci(_get(run, 'infer', 'logits_rel'))} |")
  return lines + ["", "Gradients: |g - g_XLA| / |g_XLA| over the whole pytree. XLA perturbed: XLA's "
                  "own gradients for the input times (1 + eps x standard normal); XLA again: XLA "
                  "run twice. vs HIGHEST (float32): XLA at DEFAULT and ours against XLA's gradients "
                  "at HIGHEST precision. Agrees: ours vs XLA within 3x the larger of XLA perturbed "
                  "and XLA again, or ours vs HIGHEST within 3x XLA's.", ""]


def _highest(grads: dict) -> str:
  if grads.get("xla_vs_highest") is None:
    return DASH
  return f"{fmt_sci(grads['xla_vs_highest'])}, {fmt_sci(grads['ours_vs_highest'])}"


def _f64_table(models: list[dict]) -> list[str]:
  rows = [m for m in models if m.get("f64")]
  if not rows:
    return []
  lines = ["Float64 (parameters, statistics, inputs), ours vs XLA's own float64 convolution:", "",
           "| model | loss rel. diff | gradients rel. diff | worst leaf rel. diff (leaf) |",
           "|---|---|---|---|"]
  for m in rows:
    f = m["f64"]
    lines.append(f"| {m['model']} | {fmt_sci(f['loss_rel'])} | {fmt_sci(f['grad_rel'])} | "
                 f"{fmt_sci(f['grad_worst_leaf_rel'])} (`{f['grad_worst_leaf']}`) |")
  return lines + [""]


def _padding(padding) -> str:
  if isinstance(padding, str):
    return padding
  if all(lo == hi for lo, hi in padding):
    return str(tuple(lo for lo, _ in padding))
  return str(tuple(tuple(p) for p in padding))


def _dilation(call: dict) -> str:
  parts = [f"{side} {_shape(call[f'{side}_dilation'])}" for side in ("lhs", "rhs")
           if call[f"{side}_dilation"] and any(d != 1 for d in call[f"{side}_dilation"])]
  return ", ".join(parts) or DASH


def _per_layer_section(model: dict, dtype: str, result: dict) -> list[str]:
  rows = result["convs"]
  explained = any(r.get("explain") for r in rows)
  share = result.get("own_kernel_share")
  title = f"#### {model['model']} {dtype}: {len(rows)} distinct convolutions"
  if share is not None:
    title += f"; {100 * share:.0f}% of ours' convolution time in the project's own kernels"
  lines = [title, "", "| x | w | stride | padding | dilation | groups | uses | XLA fwd / bwd ms | "
           "ours/XLA fwd | ours/XLA bwd |" + (" ours fwd / dgrad / wgrad |" if explained else ""),
           "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if explained else "")]
  for r in rows:
    c, t = r["call"], r.get("times", {})
    line = (f"| {tuple(c['lhs_shape'])} | {tuple(c['rhs_shape'])} | {tuple(c['window_strides'])} | "
            f"{_padding(c['padding'])} | {_dilation(c)} | {c['feature_group_count']} | {r['uses']} | ")
    if "error" in r:
      line += f"{r['error']} | | |"
    else:
      line += (f"{fmt_ms(t['fwd']['xla_ms'])} / {fmt_ms(t['bwd']['xla_ms'])} | "
               f"{fmt_ratio(t['fwd']['ratio'])} | {fmt_ratio(t['bwd']['ratio'])} |")
    if explained:
      e = r.get("explain") or {}
      line += " " + " / ".join(_get(e, op, "algorithm") or DASH
                               for op in ("forward", "input_gradient", "filter_gradient")) + " |"
    lines.append(line)
  timed = [r for r in rows if "times" in r]
  if timed:
    lines.append("")
    for op in ("fwd", "bwd"):
      worst = sorted(timed, key=lambda r: r["times"][op]["ratio"], reverse=True)[:3]
      lines.append(f"Worst {op} ratios: " + "; ".join(
          f"{fmt_ratio(r['times'][op]['ratio'])} (x {tuple(r['call']['lhs_shape'])}, "
          f"w {tuple(r['call']['rhs_shape'])})" for r in worst) + "  ")
  return lines + [""]


KERNEL_CLASSES = ("own", "xla conv", "gemm", "xla fusion", "copy", "collective")


def _kernels_table(models: list) -> list[str]:
  """Device microseconds per train step by class of kernel (CUPTI), where
  the run recorded them."""
  rows = [(m["model"], dtype, r["train"]["kernels"]) for m in models for dtype, r in m["runs"].items()
          if isinstance(r.get("train"), dict) and "kernels" in r["train"]]
  if not rows:
    return []
  lines = ["### Device time per train step, by class of kernel", "",
           "Microseconds per step under CUPTI: the project's kernels (own), XLA's convolutions, GEMMs, "
           "XLA's fusions, copies, collectives; busy is their sum, span adds the gaps between kernels. "
           "Share: own over own plus XLA's convolutions.", "",
           "| model | dtype | impl | " + " | ".join(KERNEL_CLASSES) + " | busy | span | own share |",
           "|---|---|---|" + "---|" * (len(KERNEL_CLASSES) + 3)]
  for model, dtype, k in rows:
    for impl in ("xla", "ours"):
      c = k[impl]["by_class"]
      conv = c.get("own", 0.0) + c.get("xla conv", 0.0)
      share = f"{100 * c.get('own', 0.0) / conv:.0f}%" if impl == "ours" and conv else DASH
      lines.append(f"| {model} | {dtype} | {impl} | " + " | ".join(f"{c.get(n, 0.0):.0f}" for n in KERNEL_CLASSES) +
                   f" | {k[impl]['busy_us']:.0f} | {k[impl]['span_us']:.0f} | {share} |")
  return lines + [""]


def markdown(results: dict) -> str:
  """The whole report: timing and memory, agreement, the float64 check, the
  per-layer tables, and the errors."""
  models = results["models"]
  lines = ["## Whole models, ours vs XLA", "", *_header(results), *_timing_table(models),
           *_kernels_table(models), "### Agreement", "", *_agreement_table(models), *_f64_table(models)]
  layered = [(m, d, r["per_layer"]) for m in models for d, r in m["runs"].items() if "per_layer" in r]
  if layered:
    lines += ["### Every distinct convolution, alone", "",
              "Forward and VJP (both gradients) jitted separately; wall clock per call.", ""]
    for m, dtype, result in layered:
      lines += _per_layer_section(m, dtype, result)
  errors = [(m["model"], where, e) for m in models for where, e in m["errors"].items()]
  if errors:
    lines += ["### Errors", "", *(f"- {m} {where}: {e}" for m, where, e in errors), ""]
  return "\n".join(lines)
