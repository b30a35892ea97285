#!/usr/bin/env bash
# Builds the package (unless SKIP_BUILD=1) and profiles with ncu the kernels
# that a benchmarks/profile_*.py script runs (clock control off: the card's
# clocks are left alone). Writes $OUT/ncu.txt and prints its key lines.
#
#   bash benchmarks/ncu_profile.sh [columns|depthwise|grouped|implicit]
#     columns:   unfold / fold (benchmarks/profile_columns.py), the default
#     folds:     the staged, vector and unrolled-taps folds (benchmarks/profile_folds.py)
#     depthwise: the depthwise kernels (benchmarks/profile_depthwise.py; PROFILE_CASE=mbv2|convnext)
#     grouped:   the direct grouped kernels (benchmarks/profile_grouped.py)
#     implicit:  the implicit GEMM and its layout kernels (benchmarks/profile_implicit.py)
#     filter:    the implicit filter gradient (benchmarks/profile_filter.py)
#     phases:    the phases of strided input gradients (benchmarks/profile_phases.py)
#     conv_1d_cf: the channels-first 1-D kernels on jax#13800's grouped conv
#                (benchmarks/profile_grouped.py)
#     cases ARGS: ours on named suite cases (benchmarks/profile_cases.py ARGS:
#                --cases, --ops, --dtypes, --layouts), every kernel, with the
#                compute, instruction, scheduler and memory tables
#
# NCU_SOURCE=1 (with cases) also records the kernels' source counters and
# writes $OUT/ncu_sass.csv: every SASS instruction with its executed count
# and stall samples (ncu's source page), and $OUT/ncu_sass_regions.txt, its
# largest runs of executed code (benchmarks/ncu_sass_regions.py), to see
# which part of a kernel its instructions go to.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/bench_out}
mkdir -p "$OUT"
case "${1:-columns}" in
  columns) script=benchmarks/profile_columns.py; kernels="(unfold|fold)_c[fl]" ;;
  folds) script=benchmarks/profile_folds.py; kernels="fold_(planes|cf_vector|cl_taps)" ;;
  depthwise) script=benchmarks/profile_depthwise.py; kernels="(dw_|depthwise_)" ;;
  grouped) script=benchmarks/profile_grouped.py; kernels="(grouped|filter_|forward_kernel|backward_data_kernel)" ;;
  implicit) script=benchmarks/profile_implicit.py; kernels="(implicit_|to_channels_last)" ;;
  filter) script=benchmarks/profile_filter.py; kernels="filter_(gradient|finish)" ;;
  phases) script=benchmarks/profile_phases.py; kernels="(implicit_|sum_parts|memset)" ;;
  conv_1d_cf) script=benchmarks/profile_grouped.py; kernels="^(conv_kernel|filter_kernel)" ;;
  cases) script=benchmarks/profile_cases.py; kernels="${NCU_KERNELS:-im2col::}" ;;
  *) echo "unknown profile: $1" >&2; exit 2 ;;
esac
mode=${1:-columns}
shift $(( $# > 0 ? 1 : 0 ))
sections=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats
          --section Occupancy --section LaunchStats)
base=function
if [ "$mode" = cases ]; then
  # The package's kernels by namespace; the tables that say which unit or
  # stall bounds a kernel, and how many sectors its requests touch.
  sections=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats
            --section SchedulerStats --section WarpStateStats --section MemoryWorkloadAnalysis
            --section MemoryWorkloadAnalysis_Tables --section Occupancy --section LaunchStats)
  base=demangled
fi
[ "${SKIP_BUILD:-0}" = 1 ] || JAX_IM2COL_CUDA=ON python3 -m pip install -q --no-build-isolation --no-deps \
  --config-settings=cmake.define.CMAKE_CUDA_ARCHITECTURES=90a . > "$OUT/build.log" 2>&1 || tail -20 "$OUT/build.log"
report=()
[ "${NCU_SOURCE:-0}" = 1 ] && sections+=(--section SourceCounters) && report=(-f -o "$OUT/ncu")
cd /tmp && XLA_PYTHON_CLIENT_PREALLOCATE=false ncu --clock-control none --kernel-name-base "$base" \
  --kernel-name regex:"$kernels" "${sections[@]}" "${report[@]}" python3 "$OLDPWD/$script" "$@" > "$OUT/ncu.txt" 2>&1
if [ "${NCU_SOURCE:-0}" = 1 ]; then
  ncu -i "$OUT/ncu.ncu-rep" --print-details all >> "$OUT/ncu.txt" 2>&1
  ncu -i "$OUT/ncu.ncu-rep" --page source --print-source sass --csv > "$OUT/ncu_sass.csv" 2>&1
  rm -f "$OUT/ncu.ncu-rep"
  python3 "$OLDPWD/benchmarks/ncu_sass_regions.py" "$OUT/ncu_sass.csv" > "$OUT/ncu_sass_regions.txt" 2>&1
fi
grep -E "_kernel|Memory Throughput|DRAM Throughput|Duration|Compute \(SM\)|Achieved Occupancy|Stall|Registers Per|L1/TEX Hit|L2 Hit|Grid Size" \
  "$OUT/ncu.txt" | cut -c1-150 | head -${NCU_LINES:-80}
