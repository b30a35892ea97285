// Runs a CUDA kernel with no barrier on the host: every thread of the grid,
// one after another (tests/host/*.cc; include after host_cuda.h and the
// kernel's header).
#pragma once

#include <cstdint>

#include "common/device_util.cuh"

namespace im2col::cuda {

// `blocks` blocks of kThreads threads; kernel() reads the thread indices.
template <typename Kernel>
void run_grid(unsigned blocks, Kernel&& kernel) {
  gridDim.x = blocks;
  blockDim.x = kThreads;
  for (unsigned b = 0; b < blocks; ++b) {
    blockIdx.x = b;
    for (unsigned t = 0; t < kThreads; ++t) {
      threadIdx.x = t;
      kernel();
    }
  }
}

// The grid the launchers give `threads` threads of work (blocks_for).
template <typename Kernel>
void run_threads(int64_t threads, Kernel&& kernel) {
  run_grid(blocks_for(threads), kernel);
}

}  // namespace im2col::cuda
