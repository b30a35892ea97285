#!/usr/bin/env bash
# Builds the package (unless SKIP_BUILD=1) and profiles with ncu the kernels
# that a benchmarks/profile_*.py script runs (clock control off: the card's
# clocks are left alone). Writes $OUT/ncu.txt and prints its key lines.
#
#   bash benchmarks/ncu_profile.sh [columns|depthwise|grouped|implicit]
#     columns:   unfold / fold (benchmarks/profile_columns.py), the default
#     depthwise: the direct depthwise kernels (benchmarks/profile_depthwise.py)
#     grouped:   the direct grouped kernels (benchmarks/profile_grouped.py)
#     implicit:  the implicit GEMM and its layout kernels (benchmarks/profile_implicit.py)
#     filter:    the implicit filter gradient (benchmarks/profile_filter.py)
#     phases:    the phases of strided input gradients (benchmarks/profile_phases.py)
#     kernels:   every kernel of ours (and XLA's) ops, duration only, one line
#                each under a marker per op (benchmarks/kernel_times.py with
#                KERNEL_ARGS, e.g. "--cases resnext_g32 --dtypes bf16 --xla")
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/bench_out}
mkdir -p "$OUT"
case "${1:-columns}" in
  columns) script=benchmarks/profile_columns.py; kernels="(unfold|fold)_c[fl]" ;;
  depthwise) script=benchmarks/profile_depthwise.py; kernels="(depthwise|filter)_" ;;
  grouped) script=benchmarks/profile_grouped.py; kernels="(grouped|filter_|forward_kernel|backward_data_kernel)" ;;
  implicit) script=benchmarks/profile_implicit.py; kernels="(implicit_|to_channels_last)" ;;
  filter) script=benchmarks/profile_filter.py; kernels="filter_(gradient|finish)" ;;
  phases) script=benchmarks/profile_phases.py; kernels="(implicit_|sum_parts|memset)" ;;
  kernels) script=kernels ;;
  *) echo "unknown profile: $1" >&2; exit 2 ;;
esac
[ "${SKIP_BUILD:-0}" = 1 ] || JAX_IM2COL_CUDA=ON python3 -m pip install -q --no-build-isolation --no-deps \
  --config-settings=cmake.define.CMAKE_CUDA_ARCHITECTURES=90a . > "$OUT/build.log" 2>&1 || tail -20 "$OUT/build.log"
if [ "$script" = kernels ]; then
  # shellcheck disable=SC2086
  cd /tmp && XLA_PYTHON_CLIENT_PREALLOCATE=false ncu --clock-control none --profile-from-start off \
    --metrics gpu__time_duration.sum --print-units base --csv \
    python3 "$OLDPWD/benchmarks/kernel_times.py" ${KERNEL_ARGS:-} > "$OUT/ncu_kernels.csv" 2>&1
  python3 - "$OUT/ncu_kernels.csv" <<'PY'
import csv, sys
lines = open(sys.argv[1]).read().splitlines()
markers = [l for l in lines if l.startswith("===")]
rows = list(csv.reader(l for l in lines if l.startswith('"')))
head, rows = rows[0], rows[1:]
name, value = head.index("Kernel Name"), head.index("Metric Value")
ops, total = iter(markers), 0.0
for r in rows:
  if "FillFunctor" in r[name]:  # kernel_times.py's marker before each op
    if total:
      print(f"{total:9.2f} us  total")
    print(next(ops, "=== ?"))
    total = 0.0
    continue
  us = float(r[value]) / 1e3
  total += us
  print(f"{us:9.2f} us  {r[name][:110]}")
if total:
  print(f"{total:9.2f} us  total")
PY
  exit 0
fi
cd /tmp && XLA_PYTHON_CLIENT_PREALLOCATE=false ncu --clock-control none --kernel-name regex:"$kernels" \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
  --section Occupancy --section LaunchStats python3 "$OLDPWD/$script" > "$OUT/ncu.txt" 2>&1
grep -E "_kernel|Memory Throughput|DRAM Throughput|Duration|Compute \(SM\)|Achieved Occupancy|Stall|Registers Per|L1/TEX Hit|L2 Hit|Grid Size" \
  "$OUT/ncu.txt" | cut -c1-150 | head -${NCU_LINES:-80}
