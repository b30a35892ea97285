// Prints the depthwise kernels' applicability and filter-gradient slice plan
// (lib/conv/depthwise/depthwise_plan.h) for the cases on stdin, one a line:
//   applies <op> <nd> <channels_last> <type> <groups> <c> <o> <lhs_dilation x nd>
//   plan <n> <nd> <out_spatial x nd> <c> <kernel_size> <elem_bytes> <f64> <channels_last> <workspace_limit>
// answering "1"/"0", or "<rows> <slices> <workspace_bytes>". Built and fed by
// tests/test_depthwise_plan.py, which checks that
// src/jax_im2col/conv/depthwise_plan.py gives the same answers (no
// "_on_host" in the name: tests/test_kernels_on_host.py does not run it).
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>

#include "host_cuda.h"
#include "conv/depthwise/depthwise_plan.h"

using namespace im2col::cuda;

int main() {
  std::string kind;
  while (std::cin >> kind) {
    if (kind == "applies") {
      int op, nd, cl, type;
      int64_t groups, c, o, lhs[3] = {1, 1, 1};
      std::cin >> op >> nd >> cl >> type >> groups >> c >> o;
      for (int d = 0; d < nd && d < 3; ++d) std::cin >> lhs[d];
      std::printf("%d\n", depthwise_applies(static_cast<DwOp>(op), nd, cl != 0, static_cast<DwType>(type), groups, c,
                                            o, lhs)
                              ? 1
                              : 0);
    } else {
      int nd, f64, cl;
      int64_t n, out[3] = {1, 1, 1}, c, k, elem, limit;
      std::cin >> n >> nd;
      for (int d = 0; d < nd; ++d) std::cin >> out[d];
      std::cin >> c >> k >> elem >> f64 >> cl >> limit;
      const DwFilterPlan p = depthwise_filter_plan(n, nd, out, c, k, elem, f64 != 0, cl != 0, limit);
      std::printf("%lld %lld %lld\n", static_cast<long long>(p.rows), static_cast<long long>(p.slices),
                  static_cast<long long>(p.workspace_bytes));
    }
  }
  return 0;
}
