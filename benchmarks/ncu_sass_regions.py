"""Where a kernel's instructions go, from ncu's source page (ncu_profile.sh
with NCU_SOURCE=1 writes it as ncu_sass.csv): for each profiled kernel, its
executed warp instructions and stall samples, and its largest runs of
consecutive executed SASS (straight code or a loop body) with their share of
both. Addresses are printed from the kernel's start, as benchmarks/sass_loops.py
--dump prints them, so that a run can be read in the dumped SASS.

  python benchmarks/ncu_sass_regions.py OUT/ncu_sass.csv [--top 12]
"""

import argparse
import csv


def kernels(path):
  """[(name, [row dict])] in the file's order."""
  rows = list(csv.reader(open(path, newline="")))
  out, i = [], 0
  while i < len(rows):
    if rows[i] and rows[i][0] == "Kernel Name":
      name, header, body, i = rows[i][1], rows[i + 1], [], i + 2
      while i < len(rows) and not (rows[i] and rows[i][0] == "Kernel Name"):
        if len(rows[i]) == len(header):
          body.append(dict(zip(header, rows[i])))
        i += 1
      out.append((name, body))
    else:
      i += 1
  return out


def number(text):
  try:
    return float(text.replace(",", ""))
  except ValueError:
    return 0.0


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("csv")
  parser.add_argument("--top", type=int, default=12)
  args = parser.parse_args()
  for name, body in kernels(args.csv):
    if not body:
      continue
    base = int(body[0]["Address"], 16)
    total = sum(number(r["Instructions Executed"]) for r in body)
    samples = sum(number(r["Warp Stall Sampling (All Samples)"]) for r in body) or 1
    runs, run = [], None
    for r in body:
      at, executed = int(r["Address"], 16) - base, number(r["Instructions Executed"])
      if executed <= 0:
        run = None
        continue
      if run is None or at != run["end"] + 16:
        run = dict(start=at, end=at, count=0, executed=0.0, samples=0.0)
        runs.append(run)
      run["end"] = at
      run["count"] += 1
      run["executed"] += executed
      run["samples"] += number(r["Warp Stall Sampling (All Samples)"])
    print(f"{name[:110]}\n  {total:.0f} warp instructions executed, {samples:.0f} stall samples")
    for run in sorted(sorted(runs, key=lambda r: -r["executed"])[:args.top], key=lambda r: r["start"]):
      print(f"  {run['start']:#07x}-{run['end']:#07x} ({run['count']:4d} instructions): "
            f"{100 * run['executed'] / total:5.1f}% of executed, {100 * run['samples'] / samples:5.1f}% of samples")


if __name__ == "__main__":
  main()
