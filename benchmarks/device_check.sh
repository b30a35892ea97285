#!/usr/bin/env bash
# Build, test and benchmark jax_im2col on a GPU machine in one call.
#
#   bash benchmarks/device_check.sh            (from the repository root; writes under $OUT)
#
# Files written under $OUT (few, flat): env.txt, build.log, tests.log (the GPU
# smoke check, then pytest), sanitizer.log (with SANITIZE), bench.log
# (benchmark progress), bench.json, bench.md, bench.png. Each step runs even if
# the one before failed; a short summary is printed last.
#
# The whole benchmark takes longer than one 10-minute command allows: run it in parts
# (BENCH_ARGS="--only ceil,unfold,fold", then "--only fwd,bwd --layouts cf", ...)
# and join the parts' bench.json files with benchmarks/merge_results.py.
#
# Optional environment:
#   SKIP_BUILD=1   use the jax_im2col already installed (a warm machine)
#   SKIP_MAIN=1    skip `python -m jax_im2col`
#   SKIP_SMOKE=1   skip benchmarks/gpu_smoke.py
#   SKIP_TESTS=1   skip pytest
#   SKIP_BENCH=1   skip the benchmark
#   SANITIZE=memcheck   compute-sanitizer with that tool on SANITIZE_CMD (default
#                  benchmarks/gpu_smoke.py) -> sanitizer.log; SANITIZE_TIMEOUT=180
#   PYTEST_ARGS="-k conv -x"          pytest arguments (default: the GPU variants of every
#                                     test, "-m gpu", in 8 workers; CI runs the CPU ones)
#   BENCH_ARGS="--only conv --layouts cf"   extra benchmark arguments
#   RUN_AFTER="python3 benchmarks/models.py --out \$OUT/models ..."   commands run after the
#                  tests (before the benchmark), each line on its own, output -> after.log;
#                  RUN_AFTER_TIMEOUT=300 caps them together
#   TOTAL_BUDGET=570   seconds for the whole script (one device command may run 600 s);
#                      the tests get what the build left, less the benchmark's share
#   BUILD_TIMEOUT=240  TESTS_TIMEOUT=300  BENCH_TIMEOUT=240   caps per step (seconds)
#   CUDA_ARCH=90a
set -uo pipefail
cd "$(dirname "$0")/.."

OUT=${OUT:-$PWD/bench_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
T0=$SECONDS
TOTAL_BUDGET=${TOTAL_BUDGET:-570}
step() { echo "[$((SECONDS - T0))s] $*"; }
left() { echo $((TOTAL_BUDGET - (SECONDS - T0))); }
min() { if [ "$1" -lt "$2" ]; then echo "$1"; else echo "$2"; fi; }
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="$PATH:/usr/local/cuda/bin"
fi

# ---------------------------------------------------------------- environment
step "environment -> env.txt"
{
  date -u
  uname -a
  nvidia-smi || echo "nvidia-smi failed"
  nvcc --version || echo "nvcc not found"
  command -v python3 && python3 --version
  python3 -m pip list 2>/dev/null | grep -iE '^(jax|jaxlib|torch|numpy|nanobind|scikit-build|cmake|ninja|pytest|hypothesis|flax|equinox|matplotlib|nvidia-(cublas|cudnn|cuda-runtime))' || true
  (cd / && python3 -c "import jax; print(jax.devices()); jax.print_environment_info()") 2>&1 || true
} > "$OUT/env.txt" 2>&1

# ---------------------------------------------------------------- build
build_rc=skipped
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  step "build and install (CUDA arch ${CUDA_ARCH:-90a}) -> build.log"
  export JAX_IM2COL_CUDA=ON
  export CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCH:-90a}"
  export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
  timeout -k 10 "${BUILD_TIMEOUT:-240}" python3 -m pip install --no-build-isolation --no-deps -v \
    --config-settings=cmake.define.CMAKE_CUDA_ARCHITECTURES="${CUDA_ARCH:-90a}" . > "$OUT/build.log" 2>&1
  build_rc=$?
  step "build rc=$build_rc"
  [ "$build_rc" = 0 ] || tail -n 30 "$OUT/build.log"
fi

# The installed package, imported from outside the source tree (the source
# folder has no compiled modules and would shadow it).
step "import check"
import_line=$(cd / && python3 -c "import jax, jax_im2col as j; print(jax.devices(), 'has_cuda', j.has_cuda(), \
'conv', hasattr(j, 'conv_general_dilated'), 'cuda_error', j._ffi.cuda_import_error)" 2>&1 | tail -n 3)
echo "$import_line"

# ---------------------------------------------------------------- main job
# `python -m jax_im2col`: every backend against lax, with timings (appended to env.txt).
if [ "${SKIP_MAIN:-0}" != 1 ]; then
  step "python -m jax_im2col -> env.txt"
  (cd / && timeout -k 10 120 python3 -m jax_im2col --repeats 5) >> "$OUT/env.txt" 2>&1
  main_rc=$?
  step "main job rc=$main_rc"
  tail -n 16 "$OUT/env.txt"
fi

# ---------------------------------------------------------------- tests
smoke_rc=skipped
tests_rc=skipped
: > "$OUT/tests.log"
if [ "${SKIP_SMOKE:-0}" != 1 ] && [ -f benchmarks/gpu_smoke.py ]; then
  step "gpu smoke check -> tests.log"
  timeout -k 10 "$(min 120 "$(left)")" python3 benchmarks/gpu_smoke.py > /tmp/gpu_smoke.log 2>&1
  smoke_rc=$?
  { echo "===== benchmarks/gpu_smoke.py (rc=$smoke_rc)"; cat /tmp/gpu_smoke.log; } >> "$OUT/tests.log"
  step "smoke rc=$smoke_rc"
fi
bench_share=0
[ "${SKIP_BENCH:-0}" = 1 ] || bench_share=${BENCH_TIMEOUT:-240}
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  tests_cap=$(min "${TESTS_TIMEOUT:-300}" $(($(left) - bench_share - 10)))
  if [ "$tests_cap" -lt 20 ]; then
    step "pytest skipped: ${tests_cap}s left for it"
    tests_rc="skipped (no time left)"
  else
    step "pytest (cap ${tests_cap}s) -> tests.log"
    echo "===== pytest (cap ${tests_cap}s)" >> "$OUT/tests.log"
    per_test=""
    python3 -c "import pytest_timeout" 2>/dev/null && per_test="--timeout=120"
    paths="tests"
    case " ${PYTEST_ARGS:-} " in *" tests/"*) paths="" ;; esac
    # -P: do not put the repository root on sys.path, so the installed package is tested.
    # shellcheck disable=SC2086
    # Workers share the GPU: no preallocation, so each takes what it uses.
    XLA_PYTHON_CLIENT_PREALLOCATE=false timeout -k 10 "$tests_cap" python3 -P -m pytest $paths \
      -q -rfEs -p no:cacheprovider $per_test --maxfail=25 ${PYTEST_ARGS:--m gpu -n 8} \
      >> "$OUT/tests.log" 2>&1
    tests_rc=$?
    [ "$tests_rc" = 124 ] && echo "===== pytest stopped by the ${tests_cap}s cap" >> "$OUT/tests.log"
    step "pytest rc=$tests_rc"
  fi
fi

# ---------------------------------------------------------------- sanitizer
# SANITIZE=memcheck (or racecheck, initcheck, synccheck): compute-sanitizer on
# SANITIZE_CMD (default: the GPU smoke check), only on this package's kernels
# (kernel names holding "im2col"). XLA's allocator hands out
# pieces of one big allocation, so out-of-bounds accesses within it go
# unseen: the platform allocator gives each buffer its own. XLA's autotuning
# is off: with it on, compute-sanitizer itself died (SIGSEGV, no report, no
# Python fault) partway through tests/test_conv.py; with it off the same tests
# ran to the end (H200, 2026-11-25).
sanitize_rc=skipped
if [ -n "${SANITIZE:-}" ]; then
  san_cap=$(min "${SANITIZE_TIMEOUT:-180}" $(($(left) - bench_share - 10)))
  step "compute-sanitizer --tool $SANITIZE (cap ${san_cap}s) -> sanitizer.log"
  # shellcheck disable=SC2086
  (cd / && XLA_PYTHON_CLIENT_ALLOCATOR=platform XLA_PYTHON_CLIENT_PREALLOCATE=false \
    XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_autotune_level=0" \
    timeout -k 10 "$san_cap" compute-sanitizer --tool "$SANITIZE" --kernel-name kns=im2col \
    --error-exitcode 86 --print-limit 50 \
    python3 ${SANITIZE_CMD:-$OLDPWD/benchmarks/gpu_smoke.py}) > "$OUT/sanitizer.log" 2>&1
  sanitize_rc=$?
  step "sanitizer rc=$sanitize_rc"
fi

# ---------------------------------------------------------------- other commands
after_rc=skipped
if [ -n "${RUN_AFTER:-}" ]; then
  after_cap=$(min "${RUN_AFTER_TIMEOUT:-300}" $(($(left) - bench_share - 5)))
  step "RUN_AFTER (cap ${after_cap}s) -> after.log"
  XLA_PYTHON_CLIENT_PREALLOCATE=false timeout -k 10 "$after_cap" bash -c "$RUN_AFTER" \
    > "$OUT/after.log" 2>&1
  after_rc=$?
  step "RUN_AFTER rc=$after_rc"
fi

# ---------------------------------------------------------------- benchmark
bench_rc=skipped
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  bench_cap=$(min "${BENCH_TIMEOUT:-240}" $(($(left) - 5)))
  [ "$bench_cap" -ge 45 ] || bench_cap=45  # never 0 (= no limit); overruns the budget a little
  # bench.py stops measuring at its deadline and then writes its files.
  bench_deadline=$((bench_cap - 25))
  step "benchmark (cap ${bench_cap}s, deadline ${bench_deadline}s) -> bench.log, bench.json, bench.md, bench.png"
  # shellcheck disable=SC2086
  timeout -k 15 "$bench_cap" python3 benchmarks/bench.py --out "$OUT" --deadline-s "$bench_deadline" \
    ${BENCH_ARGS:-} > "$OUT/bench.log" 2>&1
  bench_rc=$?
  step "benchmark rc=$bench_rc"
fi

# ---------------------------------------------------------------- summary
echo
echo "================ summary ($((SECONDS - T0))s)"
echo "device:  $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
echo "build:   rc=$build_rc"
echo "import:  $import_line"
if [ "$smoke_rc" != skipped ]; then
  echo "smoke:   rc=$smoke_rc; $(tail -n 1 /tmp/gpu_smoke.log | cut -c1-200)"
  grep '^FAIL' /tmp/gpu_smoke.log | head -n 10 | cut -c1-200
fi
if [ "$tests_rc" != skipped ]; then
  echo "pytest:  rc=$tests_rc; $(grep -E '(passed|failed|error|no tests ran|stopped by)' "$OUT/tests.log" | tail -n 1 | cut -c1-200)"
  grep -E '^(FAILED|ERROR) ' "$OUT/tests.log" | head -n 15 | cut -c1-250
fi
if [ "$sanitize_rc" != skipped ]; then
  echo "sanitizer: rc=$sanitize_rc; $(grep -E 'ERROR SUMMARY' "$OUT/sanitizer.log" | tail -n 1)"
  grep -E '^========= (Invalid|Race|Uninitialized|Barrier|Program hit)' "$OUT/sanitizer.log" | sort | uniq -c | head -n 10
fi
if [ "$after_rc" != skipped ]; then
  echo "after:   rc=$after_rc"
  tail -n 40 "$OUT/after.log" | cut -c1-250
fi
if [ "$bench_rc" != skipped ]; then
  echo "bench:   rc=$bench_rc; $(tail -n 1 "$OUT/bench.log")"
  if [ -f "$OUT/bench.md" ]; then
    echo
    # The header, ceilings and summary table, then the extra cases and notes.
    awk '/^### Convolution forward/{skip=1} /^(### Cases reported slow|Skipped measurements|Errors)/{skip=0} !skip' \
      "$OUT/bench.md" | cut -c1-250 | head -n 110
  else
    tail -n 20 "$OUT/bench.log"
  fi
fi
echo "files:   $(cd "$OUT" && ls -m)"

status=0
for rc in "$build_rc" "$smoke_rc" "$tests_rc" "$sanitize_rc" "$after_rc" "$bench_rc"; do
  case "$rc" in 0 | skipped*) ;; *) status=1 ;; esac
done
exit $status
