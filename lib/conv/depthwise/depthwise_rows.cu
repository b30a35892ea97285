// Launcher of the channels-first depthwise strip kernel (depthwise_rows.h).
#include "conv/depthwise/depthwise_rows.cuh"
#include "conv/depthwise/depthwise_rows.h"
#include "conv/direct/direct_util.cuh"

namespace im2col::cuda {

cudaError_t depthwise_rows(const void* x, const void* w, void* y, xla::ffi::DataType in,
                           xla::ffi::DataType out, const Geometry& g, int64_t n, int64_t c,
                           bool flip, bool* done, cudaStream_t stream) {
  *done = false;
  if (!depthwise_rows_applies(g)) return cudaSuccess;
  return with_types(in, out, [&](auto tag, auto out_tag) -> cudaError_t {
    using T = decltype(tag);
    using TY = decltype(out_tag);
    using A = typename Acc<TY>::type;
    RowsPlan p;
    if (!plan_depthwise_rows(g, c, sizeof(T), sizeof(A), &p)) return cudaSuccess;
    const int64_t blocks = tile_blocks(p.tile, n);
    if (blocks >= (int64_t{1} << 31)) return cudaSuccess;
    auto launch = [&](auto kh) {
      constexpr int KH = decltype(kh)::value;
      return dispatch_rank(g.nd, [&](auto rank) {
        constexpr int ND = decltype(rank)::value;
        if constexpr (ND >= 2) {
          depthwise_rows_kernel<KH, ND, T, TY>
              <<<static_cast<unsigned>(blocks), p.threads, p.tile.smem, stream>>>(
                  static_cast<const T*>(x), static_cast<const T*>(w), static_cast<TY*>(y), g, p, flip);
        }
        return cudaGetLastError();
      });
    };
    *done = true;
    switch (g.kernel[g.nd - 2]) {
      case 3: return launch(std::integral_constant<int, 3>{});
      case 5: return launch(std::integral_constant<int, 5>{});
      default: return launch(std::integral_constant<int, 7>{});
    }
  });
}

}  // namespace im2col::cuda
