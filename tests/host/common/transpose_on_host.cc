// The channels-first to channels-last copy's tile (lib/cuda/transpose_tile.cuh)
// compiled as host code and run thread by thread, phase by phase, against a
// plain transpose over random images: 2-, 4- and 8-byte elements, with and
// without 16-byte loads and stores, ragged tiles of positions and channels,
// tiles spanning images (small images, and runs crossing into the next one),
// positions in order or reversed within runs (a filter's taps read
// backwards).
// It also checks the swizzle's purpose, from the addresses each warp touches:
// the load phase's writes and the store phase's 16-byte reads meet no bank
// conflict (two ways for 8-byte elements). Run by
// tests/test_kernels_on_host.py; prints "N passed, M failed".
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <vector>

#include "host_cuda.h"
#include "common/transpose_tile.cuh"
#include "host_reference.h"

using namespace im2col;
using namespace im2col::cuda;
using namespace im2col::cuda::transpose;

namespace {

template <typename T, bool kVecLoad, bool kVecStore>
bool one_case(int n, int c, int size, int run = 1) {
  using S = Tile<T>;
  std::vector<T> x(static_cast<size_t>(n) * c * size), out(x.size(), T(~T{0}));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<T>(i * 2654435761u + 1);
  alignas(16) T tile[S::kElements];
  const int total = n * size;  // positions across images
  const int tiles_s = (total + kPositions - 1) / kPositions;
  const int tiles_c = (c + S::kChannels - 1) / S::kChannels;
  for (int bs = 0; bs < tiles_s; ++bs)
    for (int bc = 0; bc < tiles_c; ++bc) {
      for (int t = 0; t < kThreads; ++t)
        load_tile<T, kVecLoad>(x.data(), c, FastDiv(size), total, bs * kPositions,
                               bc * S::kChannels, tile, t);
      for (int t = 0; t < kThreads; ++t)
        store_tile<T, kVecStore>(tile, c, total, bs * kPositions, bc * S::kChannels, FastDiv(run),
                                 out.data(), t);
    }
  for (int image = 0; image < n; ++image)
    for (int ch = 0; ch < c; ++ch)
      for (int s = 0; s < size; ++s) {
        const size_t base = static_cast<size_t>(image) * c * size;
        const int row = s / run * run + (run - 1 - s % run);
        if (out[base + static_cast<size_t>(row) * c + ch] != x[base + static_cast<size_t>(ch) * size + s]) {
          std::printf("FAIL e=%zu vec=%d%d n=%d c=%d size=%d run=%d at image %d channel %d position %d\n",
                      sizeof(T), kVecLoad, kVecStore, n, c, size, run, image, ch, s);
          return false;
        }
      }
  return true;
}

// The most distinct 4-byte words that one bank serves in one access.
int worst_bank(const std::vector<int64_t>& byte_offsets, int bytes_each) {
  std::map<int, std::set<int64_t>> words;
  for (int64_t b : byte_offsets)
    for (int64_t w = b / 4; w < (b + bytes_each + 3) / 4; ++w) words[w % 32].insert(w);
  size_t worst = 0;
  for (const auto& [bank, set] : words) worst = std::max(worst, set.size());
  return static_cast<int>(worst);
}

// Replays the phases' tile addresses per warp (all positions and channels in
// range): the load's writes per element i of a run, the store's 16-byte reads
// per quarter warp (the hardware serves 128 bytes a cycle).
template <typename T>
bool no_bank_conflicts(int allowed) {
  using S = Tile<T>;
  constexpr int V = S::V;
  int worst = 0;
  for (int warp = 0; warp < kThreads / 32; ++warp)
    for (int k = 0; k < S::kChannels * S::kRuns / kThreads; ++k)
      for (int i = 0; i < V; ++i) {
        std::vector<int64_t> offsets;
        for (int lane = 0; lane < 32; ++lane) {
          int run, ch;
          load_slot<T>(warp * 32 + lane + k * kThreads, run, ch);
          offsets.push_back(int64_t{tile_index<T>(run * V + i, ch)} * sizeof(T));
        }
        worst = std::max(worst, worst_bank(offsets, sizeof(T)));
      }
  for (int quarter = 0; quarter < kThreads / 8; ++quarter)
    for (int k = 0; k < kPositions * kChunks / kThreads; ++k) {
      std::vector<int64_t> offsets;
      for (int lane = 0; lane < 8; ++lane) {
        const int f = quarter * 8 + lane + k * kThreads;
        offsets.push_back(int64_t{tile_index<T>(f / kChunks, f % kChunks * V)} * sizeof(T));
      }
      worst = std::max(worst, worst_bank(offsets, 16));
    }
  if (worst > allowed)
    std::printf("FAIL e=%zu: %d-way bank conflict (allowed %d)\n", sizeof(T), worst, allowed);
  return worst <= allowed;
}

template <typename T>
void cases(Tally& run) {
  constexpr int V = 16 / sizeof(T);
  for (int i = 0; i < 40; ++i) {
    const int n = draw(1, 5);
    const int c_vec = V * draw(1, 24), size_vec = V * draw(1, 40);
    const int c_any = draw(1, 150), size_any = draw(1, 3) == 1 ? draw(1, 20) : draw(1, 300);
    run(one_case<T, true, true>(n, c_vec, size_vec));
    run(one_case<T, true, false>(n, c_any, size_vec));
    run(one_case<T, false, true>(n, c_vec, size_any));
    run(one_case<T, false, false>(n, c_any, size_any));
    const int taps = draw(1, 27);  // a filter's rows: (channels, taps) per output channel
    run(one_case<T, false, true>(n, c_vec, taps * draw(1, 20), taps));
    run(one_case<T, true, true>(n, c_vec, V * taps * draw(1, 4), taps));
  }
}

}  // namespace

int main() {
  Tally run;
  cases<uint16_t>(run);
  cases<uint32_t>(run);
  cases<uint64_t>(run);
  run(no_bank_conflicts<uint16_t>(1));
  run(no_bank_conflicts<uint32_t>(1));
  run(no_bank_conflicts<uint64_t>(2));
  return run.report();
}
