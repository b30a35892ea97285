"""A bar chart of ours / XLA per model, mode and precision."""

from __future__ import annotations

import pathlib


def plot(results: dict, path: pathlib.Path) -> bool:
  """Writes the chart (log scale, a line at 1.0); False, writing nothing,
  where matplotlib is missing or nothing was timed."""
  try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker
  except ImportError:
    return False
  models = results["models"]
  series = sorted({(mode, dtype) for m in models for dtype, run in m["runs"].items()
                   for mode in ("train", "infer") if mode in run})
  if not series:
    return False
  width = 0.8 / len(series)
  fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(models)), 4.0))
  for i, (mode, dtype) in enumerate(series):
    xs, ratios = [], []
    for j, m in enumerate(models):
      ratio = m["runs"].get(dtype, {}).get(mode, {}).get("timing", {}).get("ratio")
      if ratio is not None:
        xs.append(j - 0.4 + (i + 0.5) * width)
        ratios.append(ratio)
    ax.bar(xs, ratios, width, label=f"{mode} {dtype}")
  ax.axhline(1.0, color="black", linewidth=0.8)
  ax.set_yscale("log")
  plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
  ax.yaxis.set_major_formatter(plain)
  # Minor ticks labelled at 2 and 5 only: all eight crowd each other over several decades.
  ax.yaxis.set_minor_formatter(matplotlib.ticker.FuncFormatter(
      lambda v, _: f"{v:g}" if f"{v:.0e}"[0] in "25" else ""))
  ax.set_xticks(range(len(models)), [m["model"] for m in models])
  ax.set_ylabel("time ours / XLA (below 1: ours faster)")
  env = results["environment"]
  ax.set_title(f"Whole models on {env['device_kind']} (preset {results['config']['preset']})")
  ax.legend(fontsize="small")
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
  return True
