"""Several runs of benchmarks/models.py as one report, for a benchmark split
over several machine runs: per model and dtype, the run of the latest part
(by its date) is kept; the report's header lists every part's commit, date
and what it contributed."""

from __future__ import annotations

import json
import pathlib

_DTYPES = ("f32", "bf16")


def load(argument: str) -> dict:
  """`path/models.json` or `path/models.json:model,model` (only those models)."""
  path, _, names = argument.partition(":")
  part = json.loads(pathlib.Path(path).read_text())
  if names:
    keep = set(names.split(","))
    unknown = keep - {m["model"] for m in part["models"]}
    if unknown:
      raise ValueError(f"{path} has no run of {sorted(unknown)}")
    part["models"] = [m for m in part["models"] if m["model"] in keep]
  return part


def join(parts: list[dict], order=()) -> dict:
  """`order`: model names in the order the report lists them (others after,
  as they first appear)."""
  parts = sorted(parts, key=lambda r: r["environment"]["date"])
  models: dict[str, dict] = {}
  sources = []
  for part in parts:
    env, covered = part["environment"], []
    for m in part["models"]:
      record = models.setdefault(m["model"], {**m, "runs": {}, "errors": {}})
      record["runs"].update(m["runs"])
      record["errors"] = dict(m["errors"])
      covered += [f"{m['model']} {dtype}" for dtype in m["runs"]]
    sources.append({"commit": env["git_commit"], "dirty": env["git_dirty"], "date": env["date"],
                    "steps": part["config"]["steps"], "repeats": part["config"]["repeats"],
                    "runs": covered})
  for record in models.values():
    record["runs"] = dict(sorted(record["runs"].items(), key=lambda kv: _DTYPES.index(kv[0])
                                 if kv[0] in _DTYPES else len(_DTYPES)))
  order = [*order, *(m["model"] for part in parts for m in part["models"])]
  ordered = sorted(models.values(), key=lambda m: order.index(m["model"]))
  return {"environment": parts[-1]["environment"], "config": parts[-1]["config"],
          "sources": sources, "models": ordered}
