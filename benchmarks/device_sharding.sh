#!/usr/bin/env bash
# Sharding on a machine of 2+ GPUs in one call (from the repository root):
#
#   bash benchmarks/device_sharding.sh
#
# 1. builds and installs the package (benchmarks/device_check.sh's build);
# 2. the partitioning checks on GPUs (benchmarks/gpu_sharding_check.py) -> gpu_checks.log;
# 3. the CPU partitioning checks under this machine's jax (8 host devices)
#    -> cpu_checks.log;
# 4. the data-parallel train step benchmark (benchmarks/multi_gpu.py, MG_ARGS,
#    default the small preset) -> mg/multi_gpu.{json,md}.
# Wheels in .whl/ (flax, optax and their needs, for step 4) are installed into
# /tmp/site first. Steps share TOTAL_BUDGET seconds (default 570).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/bench_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
T0=$SECONDS
left() { echo $(( ${TOTAL_BUDGET:-570} - (SECONDS - T0) )); }
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
SKIP_MAIN=1 SKIP_SMOKE=1 SKIP_TESTS=1 SKIP_BENCH=1 bash benchmarks/device_check.sh
(cd / && python3 -c "import jax, jaxlib; print('jax', jax.__version__, jaxlib.__version__, jax.devices())")

echo "[$((SECONDS - T0))s] GPU partitioning checks -> gpu_checks.log"
timeout -k 5 "$(( $(left) * 2 / 5 ))" python3 benchmarks/gpu_sharding_check.py \
  > "$OUT/gpu_checks.log" 2>&1
echo "rc=$?"; grep -E "^(ok|FAIL)|failed$" "$OUT/gpu_checks.log" | tail -n 40

echo "[$((SECONDS - T0))s] CPU partitioning checks (8 host devices) -> cpu_checks.log"
XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu \
  timeout -k 5 "$(( $(left) / 2 ))" python3 -m pytest -q -p no:cacheprovider \
  tests/sharding_checks.py tests/test_halo_plans.py > "$OUT/cpu_checks.log" 2>&1
echo "rc=$?"; tail -n 5 "$OUT/cpu_checks.log"

echo "[$((SECONDS - T0))s] data-parallel train steps -> mg/"
timeout -k 5 "$(( $(left) - 5 ))" python3 benchmarks/multi_gpu.py --out "$OUT/mg" \
  ${MG_ARGS:---preset small --steps 5 --repeats 3} 2>&1 | grep -v "^{" | tail -n 20
echo "[$((SECONDS - T0))s] done"
