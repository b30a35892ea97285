"""When each of the project's convolution algorithms applies, and the rules
that prefer one over another where several do: predicates of a call's
geometry, dtype, channels and device, each mirroring its kernel's own check
in C++. selection.py ranks them and builds the chosen algorithm's plan.
Where a rule cites a step, the measurement behind it is in
docs/optimization-log.md."""

from __future__ import annotations

import numpy as np

from ..common.arguments import HALF_DTYPES
from ..common.device import DeviceCaps
from ..common.geometry import gradient_phases
from .primitives import FILTER_GRADIENT, FORWARD, INPUT_GRADIENT, PRECISION_DEFAULT
from .workspace import MAX_GROUPS_IMPLICIT, PASSES_PER_LAUNCH, filter_tile_o

_INT32_LIMIT = 1 << 31


# --- shapes of operations ------------------------------------------------------

def is_half(dtype) -> bool:
  return np.dtype(dtype) in HALF_DTYPES


def whole_vectors(channels, dtype) -> bool:
  """Whether runs of `channels` elements are whole 16-byte vectors."""
  return channels % (16 // np.dtype(dtype).itemsize) == 0


def is_depthwise(spec, c, o) -> bool:
  return spec.groups == c == o


# Small groups take the scalar direct kernels up to this many filter taps per
# output channel (kDirectMaxTaps in lib/conv/direct/direct_conv.h: past it
# they sum in rounds).
DIRECT_MAX_TAPS = 32
# Keep in sync with kGroupedMaxChannels in lib/conv/direct/direct_conv.h.
GROUPED_MAX_CHANNELS = 16


def is_grouped(spec, c, o) -> bool:
  """The grouped kernels (grouped_applies in lib/conv/direct/grouped_conv.cu):
  groups of at most GROUPED_MAX_CHANNELS input and output channels,
  depthwise excepted."""
  cg, og = c // spec.groups, o // spec.groups
  return (spec.groups > 1 and not is_depthwise(spec, c, o)
          and cg <= GROUPED_MAX_CHANNELS and og <= GROUPED_MAX_CHANNELS)


def direct_applies(spec, c, o) -> bool:
  """Direct kernels for depthwise and small groups, where each group's GEMM is
  too thin for tensor cores and columns cost more traffic than they feed."""
  cg, og = c // spec.groups, o // spec.groups
  small = (spec.groups > 1 and cg <= 4 and og <= 4
           and cg * spec.window.kernel_size <= DIRECT_MAX_TAPS)
  return small or is_grouped(spec, c, o)


# --- the implicit GEMM ---------------------------------------------------------

# Small groups packed for the implicit GEMM on Hopper (packed_groups in
# lib/conv/conv_call.h): consecutive groups whose image channels make
# _PACKED_CHANNELS become one group with a block-diagonal filter, so that the
# TMA kernel takes whole runs of channels; at most _MAX_PACK of them (the
# arithmetic grows by the factor; step 23).
_PACKED_CHANNELS = 64
_MAX_PACK = 8
# The input gradient of a strided convolution runs as one implicit GEMM per
# phase of the input (gradient_phase in lib/common/geometry.h): at most
# MAX_PHASES of them (kMaxGradientPhases in lib/conv/implicit/implicit_conv.cu).
MAX_PHASES = 64


def implicit_truncates_tf32(device: DeviceCaps) -> bool:
  """Whether the implicit GEMM multiplies float32 operands truncated to TF32
  (the Hopper kernels, as cuBLAS's and cuDNN's Hopper kernels do) rather than
  rounded to nearest (the mma.sync kernel)."""
  return device.hopper_kernels


def _implicit_operands(spec, dtype, *, input_gradient) -> bool:
  """What every implicit-GEMM kernel needs of a call: float16 / bfloat16, or
  float32 at DEFAULT precision (TF32); no lhs dilation; for the input
  gradient, at most MAX_PHASES phases."""
  dtype = np.dtype(dtype)
  if not (is_half(dtype) or (dtype == np.float32 and spec.precision == PRECISION_DEFAULT)):
    return False
  w = spec.window
  return not (any(d != 1 for d in w.lhs_dilation)
              or (input_gradient and int(np.prod(w.stride)) > MAX_PHASES))


def implicit_pass_extent(spec, out_spatial, *, input_gradient=False):
  """(output positions per image, taps) of the implicit GEMM's largest pass
  (implicit_passes in lib/conv/implicit/implicit_conv.cu), and the number of
  passes: the forward's own, or the phases of the input gradient that some
  tap reaches (0 positions where none does: the input gradient is all zeros;
  or with lhs dilation, which no implicit GEMM takes). out_spatial: the
  spatial extents of the image the call writes."""
  w = spec.window
  if any(d != 1 for d in w.lhs_dilation):
    return 0, 0, 0
  if not input_gradient:
    return int(np.prod(out_spatial, dtype=np.int64)), w.kernel_size, 1
  passes = [ph for ph in gradient_phases(w, out_spatial)
            if ph.window is not None and all(ph.positions)]
  if not passes:
    return 0, 0, 0
  return (max(int(np.prod(ph.positions, dtype=np.int64)) for ph in passes),
          max(ph.window.kernel_size for ph in passes), len(passes))


def packed_factor(spec, dtype, c, o, device, *, input_gradient=False) -> int:
  """The packing factor for a grouped convolution on Hopper, or 0: operands the
  implicit GEMM takes (_implicit_operands), 8 to 32 image channels per group
  dividing 64, and groups a multiple of the factor."""
  if spec.groups == 1 or not _implicit_operands(spec, dtype, input_gradient=input_gradient):
    return 0
  w = spec.window
  cg = (o if input_gradient else c) // spec.groups
  if cg >= _PACKED_CHANNELS or _PACKED_CHANNELS % cg:
    return 0
  pack = _PACKED_CHANNELS // cg
  if pack > _MAX_PACK or spec.groups % pack or spec.groups // pack > MAX_GROUPS_IMPLICIT:
    return 0
  if max(c, o) * w.kernel_size * pack >= _INT32_LIMIT or not device.hopper_kernels:
    return 0
  return pack


def _implicit_gemm_call(spec, dtype, c, o, device, *, input_gradient) -> bool:
  """What every unpacked implicit GEMM (forward, input and filter gradients)
  needs of a call that would otherwise take im2col + GEMM: operands it takes
  (_implicit_operands), an Ampere or newer GPU, channels within 32 bits, at
  most MAX_GROUPS_IMPLICIT groups. A 1x1 window without stride or padding
  stays a plain GEMM."""
  w = spec.window
  return (_implicit_operands(spec, dtype, input_gradient=input_gradient)
          and device.ampere_or_newer and not direct_applies(spec, c, o) and not w.is_identity
          and spec.groups <= MAX_GROUPS_IMPLICIT and max(c, o) < _INT32_LIMIT)


def implicit_applies(spec, dtype, c, o, device, *, input_gradient=False) -> bool:
  """The implicit GEMM on tensor cores (implicit_applies in
  lib/conv/implicit/implicit_gemm.cu): _implicit_gemm_call, and the image it
  reads (x, or dy for the input gradient) with channels per group in whole
  16-byte vectors."""
  if not _implicit_gemm_call(spec, dtype, c, o, device, input_gradient=input_gradient):
    return False
  channels = (o if input_gradient else c) // spec.groups
  return whole_vectors(channels, dtype) and channels * spec.window.kernel_size < _INT32_LIMIT


# Where the implicit GEMM is faster than im2col + cuBLAS. The mma.sync kernel
# (step 18): up to this many channels per group in the image it reads, and for
# channels-first half types with fewer output positions per image than
# _IMPLICIT_CF_POSITIONS (there the GEMM path's per-image products are thin).
# The Hopper kernels (step 22): everywhere but channels-last calls with over
# _HOPPER_GEMM_CHANNELS channels per group whose 128 x 64 output tiles do not
# fill the GPU once (cuBLAS splits those reductions better). The phases of a
# strided input gradient (step 27) write the input's channels per group as the
# tile's columns: fewer than _PHASE_MIN_CHANNELS (the stem's 3) would leave
# most of the narrowest tile (64) idle.
IMPLICIT_MAX_CHANNELS = 128
_IMPLICIT_CF_POSITIONS = 2048
_HOPPER_GEMM_CHANNELS = 256
_PHASE_MIN_CHANNELS = 32


def use_implicit(spec, dtype, c, o, positions, device, *, input_gradient=False, images=1,
                 passes=1) -> bool:
  """Whether the implicit GEMM is taken: where it applies and is the faster
  path. positions: output positions per image of the call's largest pass
  (implicit_pass_extent), of `images` images; passes: how many (the phases
  of a strided input gradient, whose tiles one launch holds: kMaxPasses)."""
  if not implicit_applies(spec, dtype, c, o, device, input_gradient=input_gradient):
    return False
  if (input_gradient and any(s != 1 for s in spec.window.stride)
      and c // spec.groups < _PHASE_MIN_CHANNELS):
    return False
  channels = (o if input_gradient else c) // spec.groups
  if device.hopper_kernels:
    out_channels = (c if input_gradient else o) // spec.groups
    tiles = (-(-images * positions // 128) * -(-out_channels // 64) * spec.groups
             * min(max(passes, 1), PASSES_PER_LAUNCH))
    return not (spec.channels_last and channels > _HOPPER_GEMM_CHANNELS
                and tiles < device.multiprocessors)
  return channels <= IMPLICIT_MAX_CHANNELS or (
      not spec.channels_last and is_half(dtype) and positions < _IMPLICIT_CF_POSITIONS)


# --- the implicit filter gradient ---------------------------------------------

FILTER_MAX_POSITIONS = (1 << 31) - 64  # kMaxFilterPositions: per call
# Where the implicit filter gradient beats im2col + cuBLAS (step 25, H100): up
# to this many output channels per group (r50_3x3_c64 0.53-0.71x of the GEMM
# path's time, c3d 0.43-0.58x, r50_3x3s2_c128 0.69-0.97x). Wider groups feed
# cuBLAS's GEMM enough arithmetic per column that its tensor-core rate wins
# (256 and 512 channels: 1.0-1.7x slower implicit).
IMPLICIT_FILTER_MAX_CHANNELS = 128


def implicit_filter_applies(spec, dtype, c, o, device, *, positions, images) -> bool:
  """The filter gradient as an implicit GEMM (implicit_filter_applies in
  lib/conv/implicit/implicit_filter_gradient.cu): _implicit_gemm_call
  (strides are fine: they only skip positions), channels per group of x and
  of dy in whole 16-byte vectors, and at most FILTER_MAX_POSITIONS positions
  per kernel call: all `images` images of `positions` output positions each
  for channels-last operands, one image at least for channels-first ones
  (made channels-last in chunks of images)."""
  if not _implicit_gemm_call(spec, dtype, c, o, device, input_gradient=False):
    return False
  cg, og = c // spec.groups, o // spec.groups
  per_call = images * positions if spec.channels_last else positions
  return (whole_vectors(cg, dtype) and whole_vectors(og, dtype)
          and per_call <= FILTER_MAX_POSITIONS and cg * spec.window.kernel_size < _INT32_LIMIT
          and og // filter_tile_o(0) < MAX_GROUPS_IMPLICIT)  # the grid's y


def use_implicit_filter(spec, dtype, c, o, device, *, positions, images) -> bool:
  """Whether the implicit filter gradient is taken: where it applies with at
  most IMPLICIT_FILTER_MAX_CHANNELS output channels per group."""
  return (o // spec.groups <= IMPLICIT_FILTER_MAX_CHANNELS
          and implicit_filter_applies(spec, dtype, c, o, device, positions=positions,
                                      images=images))


def packed_filter_factor(spec, dtype, c, o, device, *, positions, images) -> int:
  """The packing factor with which a grouped filter gradient runs as one
  implicit GEMM per `pack` groups (the forward's packed_factor), or 0. Where
  the grouped direct kernel would take it (_grouped), in half types only:
  their Hopper TMA kernel multiplies the packs' whole blocks at the dense c64
  rate (resnext_g32 bf16 0.15 -> 0.04-0.06 ms), where float32's mma.sync
  kernel would gain nothing on the grouped kernel (step 40). Wider groups
  keep their unpacked paths, which pay no extra arithmetic."""
  if not is_half(dtype) or not is_grouped(spec, c, o):
    return 0
  pack = packed_factor(spec, dtype, c, o, device)
  if not pack or not implicit_filter_applies(spec.with_groups(spec.groups // pack), dtype, c, o,
                                             device, positions=positions, images=images):
    return 0
  return pack


# --- channels-first 1-D kernels ------------------------------------------------

# Channels-first 1-D convolutions read as they are (lib/conv/conv1d/
# conv_1d_cf.cu): tiles of positions of a group's rows in shared memory,
# multiplied by mma.sync in TF32 (operands truncated), for every op at stride
# 1. Where they apply they replace the implicit GEMM and its channels-last
# copies of x and dy (jax#13800's grouped 1-D convolution: step 49). Keep in
# sync with lib/conv/conv1d/conv_1d_cf.h.
_CONV_1D_CF_POSITIONS = 128
_CONV_1D_CF_MAX_CHANNELS = 64
_CONV_1D_CF_SHARED_BYTES = 96 * 1024
_CONV_1D_CF_MAX_WIDTH = 1 << 30


def _conv_1d_cf_shared(ci, co, taps, dilation):
  """Shared memory of the convolution's blocks or the filter gradient's,
  whichever is larger (conv_1d_cf_shared_bytes and
  conv_1d_cf_filter_shared_bytes)."""
  span = -(-(_CONV_1D_CF_POSITIONS + (taps - 1) * dilation + 3) // 4) * 4
  conv_stride = span + (8 - span % 16) % 16
  filter_stride = span + 4 if span % 8 == 0 else span
  return max((co * (taps * ci + 4) + 2 * ci * conv_stride) * 4,
             2 * (co * (_CONV_1D_CF_POSITIONS + 4) + ci * filter_stride) * 4)


def conv_1d_cf_applies(spec, dtype, c, o, device, *, in_w, out_w, op) -> bool:
  """Whether the channels-first 1-D kernels (conv_1d_cf_applies in
  lib/conv/conv1d/conv_1d_cf.cu) take op FORWARD, INPUT_GRADIENT or
  FILTER_GRADIENT: float32 at DEFAULT precision, one spatial dimension,
  stride 1, no lhs dilation, a call that would otherwise take im2col + GEMM
  or the implicit GEMM; the channels per group of the image the op reads and
  of the one it writes multiples of 16 up to _CONV_1D_CF_MAX_CHANNELS, the
  rows it reads (x's, dy's, both for the filter gradient) in whole 16-byte
  vectors, tiles within _CONV_1D_CF_SHARED_BYTES. c, o, in_w, out_w: the
  forward's."""
  w = spec.window
  if (spec.channels_last or w.nd != 1 or np.dtype(dtype) != np.float32
      or spec.precision != PRECISION_DEFAULT or w.stride != (1,) or w.lhs_dilation != (1,)
      or w.is_identity or not device.ampere_or_newer or direct_applies(spec, c, o)
      or max(in_w, out_w, abs(w.padding[0][0])) >= _CONV_1D_CF_MAX_WIDTH):
    return False
  cg, og = c // spec.groups, o // spec.groups
  ci, co, image_w = {FORWARD: (cg, og, in_w), INPUT_GRADIENT: (og, cg, out_w),
                     FILTER_GRADIENT: (cg, og, in_w)}[op]
  if op == FILTER_GRADIENT and (out_w % 4 or spec.groups > MAX_GROUPS_IMPLICIT):
    return False
  if any(ch % 16 or not 0 < ch <= _CONV_1D_CF_MAX_CHANNELS for ch in (ci, co)) or image_w % 4:
    return False
  taps, dilation = w.kernel[0], w.rhs_dilation[0]
  return ((taps - 1) * dilation <= _CONV_1D_CF_SHARED_BYTES
          and _conv_1d_cf_shared(ci, co, taps, dilation) <= _CONV_1D_CF_SHARED_BYTES)


# --- the direct kernels' filter gradient -------------------------------------

def _depthwise_cl_tiles(spec, c, dtype) -> bool:
  """Whether the channels-last depthwise filter gradient takes its tiles
  (plan_depthwise_filter_tile in lib/conv/depthwise/depthwise_tile.cuh): 2-D,
  no lhs dilation, channels in whole 16-byte vectors. The tiles must also fit
  in 96 KB of shared memory, which only wide windows miss (with 64-byte
  channel slices, a 3x3 window from dilation 8, or 5 at stride 2); those run
  the per-position kernel on these coarser slices."""
  w = spec.window
  return w.nd == 2 and all(d == 1 for d in w.lhs_dilation) and whole_vectors(c, dtype)


def direct_filter_kind(spec, c, o, dtype) -> str:
  """Which direct filter-gradient kernel runs (direct_filter.cu)."""
  if is_depthwise(spec, c, o) and not spec.channels_last:
    return "depthwise_cf"
  if is_depthwise(spec, c, o) and _depthwise_cl_tiles(spec, c, dtype):
    return "depthwise_cl"
  return "grouped" if is_grouped(spec, c, o) else "scalar"
