// Every tuning switch of the CUDA module, in one table: the enum name, the
// environment variable, and what it turns off. A switch is on unless its
// variable is "1"; each exists for same-run comparisons of a kernel against
// the path it replaced (docs/optimization-log.md has the measurements). The
// environment is read once per process, on the first query.
#pragma once

#include <array>
#include <cstdlib>

namespace im2col {

#define IM2COL_SWITCHES(X) \
  X(kHalo, "JAX_IM2COL_NO_HALO", \
    "the Hopper implicit GEMM from staged input halos for unit-stride windows (conv/implicit/implicit_halo_sm90.cu)") \
  X(kWholeFill, "JAX_IM2COL_NO_WHOLE_FILL", \
    "whole-input tiles filled flat rather than line by line (common/tile.cuh)") \
  X(kClPairs, "JAX_IM2COL_NO_CL_PAIRS", \
    "channels-last tiled unfold rows written two positions at a time (columns/unfold_cl_write.cuh)") \
  X(kClPlainTaps, "JAX_IM2COL_NO_CL_PLAIN_TAPS", \
    "channels-last vector unfold: taps without lhs dilation in a tight loop (columns/unfold_cl_taps.cuh)") \
  X(kCfVectors, "JAX_IM2COL_NO_CF_VECTORS", \
    "channels-first unfold on 16-byte vectors of positions (columns/unfold_cf_vectors.cuh)") \
  X(kClTapLines, "JAX_IM2COL_NO_CL_TAP_LINES", \
    "channels-last vector unfold: three lines of taps loaded at a time in 2-D and 3-D (columns/unfold_cl_taps.cuh)") \
  X(kClFastIndex, "JAX_IM2COL_NO_CL_FAST_INDEX", \
    "channels-last vector unfold: index math by multiply-shift divisions (columns/unfold_cl_index.cuh)") \
  X(kCfStreaming, "JAX_IM2COL_NO_CF_STREAMING", \
    "2-D 4-byte channels-first columns of the unfold primitive stored streaming (columns/unfold_write.cuh)") \
  X(kUnfoldPairs, "JAX_IM2COL_NO_UNFOLD_PAIRS", \
    "2-byte channels-first columns written a pair of positions at a time (columns/unfold_write.cuh)") \
  X(kClUnfoldBound, "JAX_IM2COL_NO_CL_UNFOLD_BOUND", \
    "channels-last tiled unfold launched under a register bound (columns/columns.cu)") \
  X(kVectorFill, "JAX_IM2COL_NO_VECTOR_FILL", \
    "tiles filled a 16-, 8- or 4-byte vector at a time where input lines allow (common/tile.cuh)") \
  X(kPlanesUnfold, "JAX_IM2COL_NO_PLANES_UNFOLD", \
    "channels-first unfold of small maps a run of planes at a time (columns/unfold_planes.cuh)") \
  X(kCfStrided, "JAX_IM2COL_NO_CF_STRIDED", \
    "channels-first vector unfold at stride 2 for float32 windows of 5-7 taps a line (columns/unfold_cf_strided.cuh)") \
  X(kCfFlatStrided, "JAX_IM2COL_NO_CF_FLAT_STRIDED", \
    "1-D channels-first unfold at stride 2 written flat (columns/unfold_cf_flat_strided.cuh)") \
  X(kPlanesSkew, "JAX_IM2COL_NO_PLANES_SKEW", \
    "the planes unfold's staging skewed against bank conflicts (columns/unfold_planes.cuh)") \
  X(kClGroups, "JAX_IM2COL_NO_CL_GROUPS", \
    "2-D channels-last unfold of few channels in groups of whole 16-byte vectors (columns/unfold_cl_groups.cuh)") \
  X(kFoldWindow, "JAX_IM2COL_NO_CF_FOLD_WINDOW", \
    "channels-first fold of 3-tap windows fixed at compile time (columns/fold_cf_window.cuh)") \
  X(kFoldWindowS2Half, "JAX_IM2COL_NO_CF_FOLD_WINDOW_S2_HALF", \
    "channels-first 2-byte fold of 2-D and 3-D 3-tap stride-2 windows in cells whose taps are known at compile time (columns/fold_cf_window.cuh)") \
  X(kStagedFold, "JAX_IM2COL_NO_STAGED_FOLD", \
    "channels-first fold of planes staged whole in shared memory (columns/fold_staged.cuh)") \
  X(kFoldTaps, "JAX_IM2COL_NO_FOLD_TAPS", \
    "channels-last fold with a thread's taps unrolled (columns/fold_cl_taps.cuh)") \
  X(kDwRing, "JAX_IM2COL_NO_DW_RING", \
    "depthwise kernels: inputs held in a register ring along the row, one load per row step (conv/depthwise/depthwise_kernels.cuh)") \
  X(kDwNarrowRuns, "JAX_IM2COL_NO_DW_NARROW_RUNS", \
    "depthwise tiles: channel runs narrower than 128 bytes where their smaller halo costs less (conv/depthwise/depthwise_plan.h)") \
  X(kDwSectorCost, "JAX_IM2COL_NO_DW_SECTOR_COST", \
    "depthwise forward tile plans charge a channels-last run under 32 bytes its whole L2 sectors, rather than a flat 1.25 (conv/depthwise/depthwise_plan.h)") \
  X(kDwStream, "JAX_IM2COL_NO_DW_STREAM", \
    "channels-last 3x3 depthwise forwards, unit-stride input gradients and filter gradients streamed down the rows, window in registers (conv/depthwise/depthwise_stream{,_filter}.cuh)") \
  X(kDwStaged, "JAX_IM2COL_NO_DW_STAGED", \
    "channels-last 3x3 depthwise forwards and unit-stride input gradients with their input rows staged in shared memory ahead of the products, rather than loaded a step ahead into registers (conv/depthwise/depthwise_stream_staged.cuh)") \
  X(kDwStagedFilter, "JAX_IM2COL_NO_DW_STAGED_FILTER", \
    "channels-last 3x3 depthwise filter gradients with their input and dy rows staged in shared memory ahead of the products, rather than streamed into registers or tiled (conv/depthwise/depthwise_stream_staged_filter.cuh)") \
  X(kDwCells, "JAX_IM2COL_NO_DW_CELLS", \
    "channels-last 3x3 depthwise input gradients at stride 2 by 2x2 cells, one thread a channel vector and cell column, rather than as four phases on the tiles (conv/depthwise/depthwise_cells.cuh)") \
  X(kDwStreamFilterS1, "JAX_IM2COL_NO_DW_STREAM_FILTER_S1", \
    "unit-stride 3x3 depthwise filter gradients on maps of 56 rows or more streamed, rather than tiled (conv/depthwise/depthwise_stream_filter.cuh)") \
  X(kDwTiles, "JAX_IM2COL_NO_DW_TILES", \
    "depthwise kernels on shared-memory tiles, rather than one thread per output element (conv/depthwise/depthwise_conv.cu)") \
  X(kDwMma, "JAX_IM2COL_NO_DW_MMA", \
    "channels-last 16-bit depthwise forwards and unit-stride input gradients on the tensor cores (conv/depthwise/depthwise_mma.cuh)") \
  X(kDwMmaFilter, "JAX_IM2COL_NO_DW_MMA_FILTER", \
    "channels-last 16-bit depthwise filter gradients of windows of 7 taps or more along W at unit stride along W on the tensor cores (conv/depthwise/depthwise_mma_filter.cuh)")

enum class Switch : int {
#define IM2COL_SWITCH_ID(id, env, meaning) id,
  IM2COL_SWITCHES(IM2COL_SWITCH_ID)
#undef IM2COL_SWITCH_ID
};

struct SwitchInfo {
  const char* env;
  const char* meaning;
};

inline constexpr SwitchInfo kSwitches[] = {
#define IM2COL_SWITCH_INFO(id, env, meaning) {env, meaning},
    IM2COL_SWITCHES(IM2COL_SWITCH_INFO)
#undef IM2COL_SWITCH_INFO
};

inline constexpr int kSwitchCount = static_cast<int>(sizeof(kSwitches) / sizeof(kSwitches[0]));

// Whether switch `s` leaves its kernel on.
inline bool switch_on(Switch s) {
  static const std::array<bool, kSwitchCount> on = [] {
    std::array<bool, kSwitchCount> table{};
    for (int i = 0; i < kSwitchCount; ++i) {
      const char* v = std::getenv(kSwitches[i].env);
      table[i] = v == nullptr || v[0] != '1';
    }
    return table;
  }();
  return on[static_cast<int>(s)];
}

}  // namespace im2col
