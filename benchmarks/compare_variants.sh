#!/usr/bin/env bash
# Same-run comparison of source variants on the device. Each variant is a
# folder of files laid over the repository at the same relative paths (an
# empty folder: the working tree as it is; files the tree lacks are added,
# then removed); for each in turn the package is rebuilt (incrementally: the
# build folder is kept) and installed, then CMD runs with VARIANT set to the
# folder's name. The working tree is restored after each variant, and the
# working tree's own build is installed last.
#
#   VARIANTS="ab/old ab/new" CMD='python3 benchmarks/kernel_times.py --out $OUT/$VARIANT ...' \
#     bash benchmarks/compare_variants.sh
#
# Writes $OUT/variants.log (builds) and whatever CMD writes.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/bench_out}
mkdir -p "$OUT"
: "${VARIANTS:?a space-separated list of variant folders}" "${CMD:?the command to run for each variant}"
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="$PATH:/usr/local/cuda/bin"
fi
export JAX_IM2COL_CUDA=ON PIP_DISABLE_PIP_VERSION_CHECK=1
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}
arch=${CUDA_ARCH:-90a}
saved=$(mktemp -d)

build() {
  local t0=$SECONDS
  python3 -m pip install --no-build-isolation --no-deps -v \
    --config-settings=cmake.define.CMAKE_CUDA_ARCHITECTURES="$arch" . >> "$OUT/variants.log" 2>&1
  local rc=$?
  echo "[$1] build rc=$rc ($((SECONDS - t0)) s)"
  return $rc
}

status=0
for dir in $VARIANTS; do
  name=$(basename "$dir")
  if [ ! -d "$dir" ]; then
    echo "[$name] no folder $dir"
    status=1
    continue
  fi
  files=$(cd "$dir" && find . -type f ! -name .keep | sed 's|^\./||')
  for f in $files; do
    if [ -f "$f" ]; then
      mkdir -p "$saved/$(dirname "$f")"
      cp "$f" "$saved/$f"
    fi
    mkdir -p "$(dirname "$f")"
    cp "$dir/$f" "$f"
  done
  if build "$name"; then
    VARIANT=$name OUT=$OUT bash -c "$CMD" || status=1
  else
    status=1
  fi
  for f in $files; do
    if [ -f "$saved/$f" ]; then cp "$saved/$f" "$f"; else rm -f "$f"; fi  # a file the variant added
  done
  rm -rf "${saved:?}"/*
done
build "working tree" || status=1
rm -rf "$saved"
exit $status
