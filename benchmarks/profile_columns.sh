#!/usr/bin/env bash
# Builds the package (unless SKIP_BUILD=1) and profiles the unfold / fold
# kernels of benchmarks/profile_columns.py with ncu (clock control off: the
# card's clocks are left alone). Writes $OUT/ncu.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/bench_out}
mkdir -p "$OUT"
[ "${SKIP_BUILD:-0}" = 1 ] || JAX_IM2COL_CUDA=ON python3 -m pip install -q --no-build-isolation --no-deps \
  --config-settings=cmake.define.CMAKE_CUDA_ARCHITECTURES=90 . > "$OUT/build.log" 2>&1 || tail -20 "$OUT/build.log"
cd /tmp && XLA_PYTHON_CLIENT_PREALLOCATE=false ncu --clock-control none --kernel-name regex:"(unfold|fold)_c[fl]" \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
  --section Occupancy --section LaunchStats python3 "$OLDPWD/benchmarks/profile_columns.py" > "$OUT/ncu.txt" 2>&1
grep -E "unfold_c|fold_c|Memory Throughput|DRAM Throughput|Duration|Compute \(SM\)|Achieved Occupancy|Stall|Registers Per|L1/TEX Hit|L2 Hit|Grid Size" "$OUT/ncu.txt" | cut -c1-150 | head -80
