"""Merges the bench.json files of several bench.py runs into one bench.json,
bench.md and bench.png.

The whole benchmark does not fit in one 10-minute command, so it runs in
parts (`--only`, `--layouts`, `--cases`). Files are given oldest first; a later
file's records replace an earlier file's for the same (section, case, dtype,
layout), so every row keeps all its peers from one run. Ceilings come from the
first file that measured them. Each record notes the file it came from.

  python benchmarks/merge_results.py --out DIR run1/bench.json run2/bench.json ...
"""

import argparse
import json
import sys

import bench


def merge(paths: list) -> tuple:
  rows, ceilings, metas = {}, {}, []
  for path in paths:
    with open(path) as f:
      blob = json.load(f)
    metas.append(blob["meta"])
    for key, value in blob.get("ceilings", {}).items():
      ceilings.setdefault(key, value)
    found = {}
    for r in blob["records"]:
      if r.get("skip") == "deadline":
        continue
      found.setdefault((r["section"], r["case"], r["dtype"], r["layout"]), []).append(dict(r, source=path))
    rows.update(found)
  records = [r for group in rows.values() for r in group]
  meta = dict(metas[-1], sources=[
      dict(path=p, date=m["date"], argv=m.get("argv")) for p, m in zip(paths, metas)])
  return records, ceilings, meta


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--out", required=True, help="output folder")
  p.add_argument("inputs", nargs="+", help="bench.json files, oldest first")
  args = p.parse_args(argv)
  records, ceilings, meta = merge(args.inputs)
  b = bench.Bench(bench.parse_args(["--out", args.out]), bench.TimingConfig())
  b.records, b.ceilings = records, ceilings
  bench.write_outputs(b, meta, final=True)
  print(f"{len(records)} records from {len(args.inputs)} files -> {args.out}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
