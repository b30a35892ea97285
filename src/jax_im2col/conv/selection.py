"""The choice of algorithm for each op of a convolution.

The core is one pure function, ``select(problem, device)``: from the op
(forward, input gradient, filter gradient), its geometry, dtype, precision,
layout and the device's capabilities, it returns the algorithm and every
parameter the lowering passes on (chunks, splits, workspace bytes), with the
reason. The CUDA lowering, ``explain`` and the tests all call it.

The order of preference (PyTorch's ``select_conv_backend`` has the same
shape): an algorithm the user forced; XLA's own convolution where the
measured rules say cuDNN is faster (routing.py); then the project's
algorithms, most specialised first. Where a rule cites a step, the
measurement behind it is in docs/optimization-log.md.

This module is long because every algorithm's applicability and preference
live together here, so that their order can be read in one place; the sizes
they need are in workspace.py.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import numpy as np

from ..columns.primitives import image_channels, image_spatial
from ..common.arguments import HALF_DTYPES
from ..common.device import DeviceCaps
from ..common.geometry import gradient_phases
from . import routing
from .depthwise_plan import depthwise_applies, depthwise_filter_plan
from .primitives import (FILTER_GRADIENT, FORWARD, INPUT_GRADIENT, PRECISION_DEFAULT,
                         ConvSpec)
from .workspace import (BLAS_WORKSPACE_BYTES, MAX_GROUPS_IMPLICIT, align, conv_1d_cf_slices,
                        direct_filter_slices, filter_tile_o, images_per_chunk,
                        implicit_filter_splits, implicit_splits, plan_chunks)

# The `algorithm` attribute of the FFI calls (Algorithm in lib/conv/conv_call.h).
FFI_ALGORITHMS = {"gemm": 0, "direct": 1, "implicit": 2, "implicit_packed": 3,
                  "gemm_channels_last": 4, "gemm_per_image": 5, "conv1d_cf": 6, "depthwise": 7}

_INT32_LIMIT = 1 << 31


@dataclasses.dataclass(frozen=True)
class ConvProblem:
  """One op of a convolution, described in the forward's terms: x has c
  channels and in_spatial positions, y has o channels and out_spatial
  positions, n images. dtype: the operands'; out_dtype: the result's."""
  op: str
  spec: ConvSpec
  dtype: np.dtype
  out_dtype: np.dtype
  n: int
  c: int
  o: int
  in_spatial: tuple[int, ...]
  out_spatial: tuple[int, ...]

  @property
  def in_positions(self) -> int:
    return int(np.prod(self.in_spatial, dtype=np.int64))

  @property
  def out_positions(self) -> int:
    return int(np.prod(self.out_spatial, dtype=np.int64))

  @property
  def cg(self) -> int:
    return self.c // self.spec.groups

  @property
  def og(self) -> int:
    return self.o // self.spec.groups

  @property
  def item(self) -> int:
    return np.dtype(self.dtype).itemsize

  @property
  def filter_elements(self) -> int:
    return self.o * self.cg * self.spec.window.kernel_size


@dataclasses.dataclass(frozen=True)
class Choice:
  """The algorithm for one op, and what its FFI call carries (unused for
  "xla" and "columns_dot")."""
  algorithm: str
  reason: str
  chunk_images: int = 1
  chunk_positions: int = 1
  workspace_bytes: int = 1

  @property
  def ffi_algorithm(self) -> Optional[int]:
    return FFI_ALGORITHMS.get(self.algorithm)


# --- shapes of operations ------------------------------------------------------

def _is_half(dtype) -> bool:
  return np.dtype(dtype) in HALF_DTYPES


def _whole_vectors(channels, dtype) -> bool:
  """Whether runs of `channels` elements are whole 16-byte vectors."""
  return channels % (16 // np.dtype(dtype).itemsize) == 0


def _depthwise(spec, c, o) -> bool:
  return spec.groups == c == o


# Small groups take the scalar direct kernels up to this many filter taps per
# output channel (kDirectMaxTaps in lib/conv/direct/direct_conv.h: past it
# they sum in rounds).
DIRECT_MAX_TAPS = 32
# Keep in sync with kGroupedMaxChannels in lib/conv/direct/direct_conv.h.
GROUPED_MAX_CHANNELS = 16


def _grouped(spec, c, o) -> bool:
  """The grouped kernels (grouped_applies in lib/conv/direct/grouped_conv.cu):
  groups of at most GROUPED_MAX_CHANNELS input and output channels,
  depthwise excepted."""
  cg, og = c // spec.groups, o // spec.groups
  return (spec.groups > 1 and not _depthwise(spec, c, o)
          and cg <= GROUPED_MAX_CHANNELS and og <= GROUPED_MAX_CHANNELS)


def direct_applies(spec, c, o) -> bool:
  """Direct kernels for depthwise and small groups, where each group's GEMM is
  too thin for tensor cores and columns cost more traffic than they feed."""
  cg, og = c // spec.groups, o // spec.groups
  small = (spec.groups > 1 and cg <= 4 and og <= 4
           and cg * spec.window.kernel_size <= DIRECT_MAX_TAPS)
  return small or _grouped(spec, c, o)


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
  if not (_is_half(dtype) or (dtype == np.float32 and spec.precision == PRECISION_DEFAULT)):
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
  return _whole_vectors(channels, dtype) and channels * spec.window.kernel_size < _INT32_LIMIT


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


def use_implicit(spec, dtype, c, o, positions, device, *, input_gradient=False, images=1) -> bool:
  """Whether the implicit GEMM is taken: where it applies and is the faster
  path. positions: output positions per image of the call's largest pass
  (implicit_pass_extent), of `images` images."""
  if not implicit_applies(spec, dtype, c, o, device, input_gradient=input_gradient):
    return False
  if (input_gradient and any(s != 1 for s in spec.window.stride)
      and c // spec.groups < _PHASE_MIN_CHANNELS):
    return False
  channels = (o if input_gradient else c) // spec.groups
  if device.hopper_kernels:
    out_channels = (c if input_gradient else o) // spec.groups
    tiles = -(-images * positions // 128) * -(-out_channels // 64) * spec.groups
    return not (spec.channels_last and channels > _HOPPER_GEMM_CHANNELS
                and tiles < device.multiprocessors)
  return channels <= IMPLICIT_MAX_CHANNELS or (
      not spec.channels_last and _is_half(dtype) and positions < _IMPLICIT_CF_POSITIONS)


def _implicit_choice(p: ConvProblem, device, *, pack, extent, input_gradient) -> Choice:
  """The implicit GEMM's plan (implicit_conv in lib/conv/implicit/
  implicit_conv.cu): channels-first input is made channels-last in chunks of
  images under the workspace cap; the filter goes into the kernel's row
  layout in the workspace (pack times its size; the input gradient's phases
  partition its taps) unless the forward reads channels-last rows as they
  are; the reduction is split into parts (implicit_splits) where the grid is
  small."""
  spec = p.spec
  cl = spec.channels_last
  relayout = input_gradient or pack > 1 or not cl
  filter_bytes = pack * p.filter_elements * p.item if relayout else 0
  c_in, c_out = (p.o, p.c) if input_gradient else (p.c, p.o)
  image_positions = p.out_positions if input_gradient else p.in_positions
  images, image_bytes = max(1, p.n), 0
  if not cl and p.n > 0:
    per_image = c_in * image_positions * p.item
    images = images_per_chunk(p.n, per_image, spec.workspace_limit)
    image_bytes = images * per_image
  positions, taps, passes = extent
  m = images * positions
  groups = spec.groups // pack
  splits = 1 if m == 0 else implicit_splits(
      m=m, og=c_out // groups, o=c_out, groups=groups,
      reduction_bytes=c_in // groups * taps * p.item, limit=spec.workspace_limit,
      multiprocessors=device.multiprocessors, passes=passes)
  partials = splits * m * c_out * 4 if splits > 1 else 0
  name = "implicit_packed" if pack > 1 else "implicit"
  why = (f"{pack} groups of {p.cg if not input_gradient else p.og} channels packed into one "
         "for the Hopper implicit GEMM" if pack > 1 else
         "implicit GEMM on tensor cores: columns gathered into shared memory, never written")
  return Choice(name, why, images, splits,
                max(1, align(filter_bytes) + align(image_bytes) + align(partials)))


# --- the implicit filter gradient ---------------------------------------------

_FILTER_MAX_POSITIONS = (1 << 31) - 64  # kMaxFilterPositions: per call
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
  of dy in whole 16-byte vectors, and at most _FILTER_MAX_POSITIONS positions
  per kernel call: all `images` images of `positions` output positions each
  for channels-last operands, one image at least for channels-first ones
  (made channels-last in chunks of images)."""
  if not _implicit_gemm_call(spec, dtype, c, o, device, input_gradient=False):
    return False
  cg, og = c // spec.groups, o // spec.groups
  per_call = images * positions if spec.channels_last else positions
  return (_whole_vectors(cg, dtype) and _whole_vectors(og, dtype)
          and per_call <= _FILTER_MAX_POSITIONS and cg * spec.window.kernel_size < _INT32_LIMIT
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
  if not _is_half(dtype) or not _grouped(spec, c, o):
    return 0
  pack = packed_factor(spec, dtype, c, o, device)
  if not pack or not implicit_filter_applies(spec.with_groups(spec.groups // pack), dtype, c, o,
                                             device, positions=positions, images=images):
    return 0
  return pack


def _implicit_filter_choice(p: ConvProblem, device, pack=1) -> Choice:
  """Channels-first x and dy are made channels-last in chunks of images under
  the workspace cap (implicit_backward_filter in lib/conv/implicit/
  implicit_conv.cu); `pack` groups at a time, whose float32 parts hold their
  whole block of the gradient."""
  spec = p.spec
  positions = p.out_positions
  images, image_bytes, gradient_bytes = max(1, p.n), 0, 0
  if not spec.channels_last and p.n > 0:
    x_image = p.c * p.in_positions * p.item
    dy_image = p.o * positions * p.item
    images = min(images_per_chunk(p.n, x_image + dy_image, spec.workspace_limit),
                 max(1, _FILTER_MAX_POSITIONS // max(1, positions)))
    image_bytes, gradient_bytes = images * x_image, images * dy_image
  groups = spec.groups // pack
  kg = p.c // groups * spec.window.kernel_size
  splits = implicit_filter_splits(m=images * positions, og=p.o // groups, kg=kg, o=p.o,
                                  groups=groups, limit=spec.workspace_limit,
                                  multiprocessors=device.multiprocessors)
  partials = splits * p.o * kg * 4
  name = "implicit_packed" if pack > 1 else "implicit"
  why = (f"{pack} small groups packed for the implicit filter gradient on Hopper" if pack > 1
         else "implicit filter gradient: columns gathered beside dy, parts summed in order")
  return Choice(name, why, images, splits,
                align(image_bytes) + align(gradient_bytes) + align(partials))


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
  return w.nd == 2 and all(d == 1 for d in w.lhs_dilation) and _whole_vectors(c, dtype)


def direct_filter_kind(spec, c, o, dtype) -> str:
  """Which direct filter-gradient kernel runs (direct_filter.cu)."""
  if _depthwise(spec, c, o) and not spec.channels_last:
    return "depthwise_cf"
  if _depthwise(spec, c, o) and _depthwise_cl_tiles(spec, c, dtype):
    return "depthwise_cl"
  return "grouped" if _grouped(spec, c, o) else "scalar"


# --- im2col + GEMM ---------------------------------------------------------------

def _gemm_choice(p: ConvProblem, *, columns_item, transposed_dy, accumulator,
                 name="gemm", why="im2col + cuBLAS GEMM") -> Choice:
  """Chunks of images (or of one image's positions) whose columns fit the
  workspace cap (plan_chunks). columns_item: bytes per column element, 0 for
  none (a 1x1 window reads the image as it is)."""
  spec = p.spec
  k = spec.window.kernel_size
  plan = plan_chunks(n=p.n, positions=p.out_positions, cols_row_bytes=p.c * k * columns_item,
                     extra_row_bytes=p.o * p.item if transposed_dy else 0,
                     limit=spec.workspace_limit, needs_columns=columns_item > 0,
                     groups=spec.groups, acc_bytes=p.o * p.cg * k * 4 if accumulator else 0)
  return Choice(name, why, plan.images, plan.positions, plan.workspace_bytes)


# A channels-first 1x1 filter gradient is, per image, dy (Og x L) times x^T
# (L x Cg): with at least _PER_IMAGE_MIN_POSITIONS positions per image these
# products are thick enough for one strided batched cuBLAS call on x and dy as
# they are, where the im2col + GEMM path first copies both into rows spanning
# the images (r50_1x1_c256 channels-first: 135 + 36 us of copies before a
# 54 us GEMM; step 45). Smaller planes keep that path.
_PER_IMAGE_MIN_POSITIONS = 1024


def _per_image_filter_applies(p: ConvProblem) -> bool:
  """Channels-first, a 1x1 window without stride, padding or dilation,
  float32 or half types (summed as float32)."""
  return (not p.spec.channels_last and p.spec.window.is_identity
          and (_is_half(p.dtype) or np.dtype(p.dtype) == np.float32))


def _per_image_filter_choice(p: ConvProblem) -> Choice:
  """As many float32 slots of dw as images, within the workspace cap (image n
  adds to slot n % slots), and cuBLAS's workspace and pointers
  (conv_workspace in lib/conv/gemm/conv_workspace.h)."""
  per_slot = p.o * p.cg * 4
  slots = max(1, min(p.n, p.spec.workspace_limit // max(1, per_slot)))
  workspace = (align(BLAS_WORKSPACE_BYTES) + align(3 * slots * p.spec.groups * 8)
               + align(slots * per_slot))
  return Choice("gemm_per_image", "channels-first 1x1 filter gradient: one cuBLAS GEMM per "
                "image on x and dy as they are", slots, 1, workspace)


# The channels-first filter gradient on im2col + cuBLAS unfolds x's planes
# into columns and dy's into rows, which runs far below copy bandwidth on
# small planes (14 x 14 c256: 32 us where the channels-last unfold and two
# swizzled copies take ~17; step 43). Where the columns are at least
# _FILTER_CL_COLUMNS_RATIO times x, copying x and dy channels-last first costs
# little next to them.
_FILTER_CL_COLUMNS_RATIO = 3


def _gemm_channels_last_filter_applies(p: ConvProblem) -> bool:
  """Channels-first operands in whole 16-byte channel vectors (the
  channels-last unfold's vector path), any type the GEMM takes in float32
  accumulation, windows that are not 1x1 (whose channels-first columns are
  plain copies of x's planes)."""
  return (not p.spec.channels_last and not p.spec.window.is_identity
          and _whole_vectors(p.c, p.dtype)
          and (_is_half(p.dtype) or np.dtype(p.dtype) == np.float32))


def _gemm_channels_last_filter_choice(p: ConvProblem) -> Optional[Choice]:
  """Whole images of x and dy made channels-last, their columns and a float32
  accumulator; None where one image's exceed the workspace cap."""
  spec = p.spec
  k = spec.window.kernel_size
  plan = plan_chunks(n=p.n, positions=p.out_positions, cols_row_bytes=p.c * k * p.item,
                     extra_row_bytes=p.o * p.item, limit=spec.workspace_limit,
                     needs_columns=True, groups=spec.groups, acc_bytes=p.o * p.cg * k * 4,
                     image_bytes=p.c * p.in_positions * p.item)
  if plan.positions < p.out_positions:
    return None
  return Choice("gemm_channels_last", "im2col + GEMM on channels-last copies of x and dy",
                plan.images, plan.positions, plan.workspace_bytes)


def _prefer_gemm_channels_last(p: ConvProblem) -> bool:
  """Where the channels-last copies pay: half types (float32 measured slower:
  cuBLAS's TF32 GEMM on the channels-last operands, 53 us against 31 for
  c512) and columns at least _FILTER_CL_COLUMNS_RATIO times x."""
  return (_is_half(p.dtype) and p.spec.window.kernel_size * p.out_positions
          >= _FILTER_CL_COLUMNS_RATIO * p.in_positions)


# --- the candidates of each op -------------------------------------------------

def _direct_choice(p: ConvProblem) -> Choice:
  why = ("direct kernel: depthwise or small groups, too thin for tensor cores"
         if p.op != FILTER_GRADIENT else
         "direct filter gradient: partial sums per slice of rows, summed in order")
  if p.op != FILTER_GRADIENT:
    return Choice("direct", why)
  spec = p.spec
  taps = p.cg * spec.window.kernel_size
  rows, slices = direct_filter_slices(p.n, p.out_spatial, p.o,
                                      direct_filter_kind(spec, p.c, p.o, p.dtype), taps)
  acc = 8 if np.dtype(p.dtype) == np.float64 else 4
  return Choice("direct", why, p.n, rows, slices * p.o * taps * acc)


def _depthwise_choice(p: ConvProblem) -> Choice:
  """The depthwise kernels (lib/conv/depthwise/): register-blocked tiles for
  any window; the filter gradient in slices of rows whose partial sums are
  added in order (depthwise_filter_plan)."""
  why = ("depthwise kernel: halo tiles in shared memory, a register ring along each row"
         if p.op != FILTER_GRADIENT else
         "depthwise filter gradient: register rings over taps, slices summed in order")
  if p.op != FILTER_GRADIENT:
    return Choice("depthwise", why)
  spec = p.spec
  rows, _, workspace = depthwise_filter_plan(
      n=p.n, out_spatial=p.out_spatial, c=p.c, kernel_size=spec.window.kernel_size,
      dtype=p.dtype, channels_last=spec.channels_last, workspace_limit=spec.workspace_limit)
  return Choice("depthwise", why, 1, rows, workspace)


def _conv1d_choice(p: ConvProblem, device) -> Choice:
  why = "channels-first 1-D kernel: rows read as they are, mma.sync in TF32"
  if p.op != FILTER_GRADIENT:
    return Choice("conv1d_cf", why)
  kg = p.cg * p.spec.window.kernel_size
  slices = conv_1d_cf_slices(n=p.n, out_w=p.out_spatial[0], groups=p.spec.groups, o=p.o, kg=kg,
                             limit=p.spec.workspace_limit, multiprocessors=device.multiprocessors)
  return Choice("conv1d_cf", why, 1, slices, slices * p.o * kg * 4)


def _widths(p: ConvProblem):
  return (p.in_spatial[0], p.out_spatial[0]) if p.spec.window.nd == 1 else (0, 0)


def _candidates(p: ConvProblem, device: DeviceCaps) -> dict[str, Callable[[], Optional[Choice]]]:
  """Every algorithm of the project that applies to p, most preferred first,
  each a thunk that returns its Choice (None: it does not apply after all)
  and whether the rules prefer it is the thunk's business: the first that
  returns a Choice runs."""
  spec, dtype, c, o = p.spec, p.dtype, p.c, p.o
  in_w, out_w = _widths(p)
  found: dict[str, Callable[[], Optional[Choice]]] = {}
  if conv_1d_cf_applies(spec, dtype, c, o, device, in_w=in_w, out_w=out_w, op=p.op):
    found["conv1d_cf"] = lambda: _conv1d_choice(p, device)
  if depthwise_applies(op=p.op, nd=spec.window.nd, channels_last=spec.channels_last, dtype=dtype,
                       groups=spec.groups, c=c, o=o, lhs_dilation=spec.window.lhs_dilation):
    found["depthwise"] = lambda: _depthwise_choice(p)
  if p.op in (FORWARD, INPUT_GRADIENT):
    grad = p.op == INPUT_GRADIENT
    extent = implicit_pass_extent(spec, p.in_spatial if grad else p.out_spatial,
                                  input_gradient=grad)
    pack = packed_factor(spec, dtype, c, o, device, input_gradient=grad)
    if pack:
      found["implicit_packed"] = lambda: _implicit_choice(p, device, pack=pack, extent=extent,
                                                          input_gradient=grad)
    elif use_implicit(spec, dtype, c, o, extent[0], device, input_gradient=grad, images=p.n):
      found["implicit"] = lambda: _implicit_choice(p, device, pack=1, extent=extent,
                                                   input_gradient=grad)
    if direct_applies(spec, c, o):
      found["direct"] = lambda: _direct_choice(p)
    if grad:
      found["gemm"] = lambda: _gemm_choice(
          p, columns_item=0 if spec.window.is_identity else (4 if _is_half(dtype) else p.item),
          transposed_dy=False, accumulator=False, why="GEMM into columns, then fold (col2im)")
    else:
      found["gemm"] = lambda: _gemm_choice(
          p, columns_item=0 if spec.window.is_identity else p.item, transposed_dy=False,
          accumulator=False)
    return found
  positions = p.out_positions
  pack = packed_filter_factor(spec, dtype, c, o, device, positions=positions, images=p.n)
  if pack:
    found["implicit_packed"] = lambda: _implicit_filter_choice(p, device, pack)
  if direct_applies(spec, c, o):
    found["direct"] = lambda: _direct_choice(p)
  if use_implicit_filter(spec, dtype, c, o, device, positions=positions, images=p.n):
    found["implicit"] = lambda: _implicit_filter_choice(p, device)
  if _per_image_filter_applies(p) and positions >= _PER_IMAGE_MIN_POSITIONS:
    found["gemm_per_image"] = lambda: _per_image_filter_choice(p)
  if _gemm_channels_last_filter_applies(p) and _prefer_gemm_channels_last(p):
    found["gemm_channels_last"] = lambda: _gemm_channels_last_filter_choice(p)
  no_columns = spec.window.is_identity and spec.channels_last
  found["gemm"] = lambda: _gemm_choice(p, columns_item=0 if no_columns else p.item,
                                       transposed_dy=not spec.channels_last,
                                       accumulator=_is_half(dtype))
  return found


def _applicable(p: ConvProblem, device: DeviceCaps) -> dict[str, Callable[[], Optional[Choice]]]:
  """Every algorithm that can run p, preferred or not (for forcing one by
  name): the candidates, and those the preference rules passed over."""
  spec, dtype, c, o = p.spec, p.dtype, p.c, p.o
  found = dict(_candidates(p, device))
  if p.op in (FORWARD, INPUT_GRADIENT):
    grad = p.op == INPUT_GRADIENT
    extent = implicit_pass_extent(spec, p.in_spatial if grad else p.out_spatial,
                                  input_gradient=grad)
    if "implicit" not in found and implicit_applies(spec, dtype, c, o, device, input_gradient=grad):
      found["implicit"] = lambda: _implicit_choice(p, device, pack=1, extent=extent,
                                                   input_gradient=grad)
    return found
  if "implicit" not in found and implicit_filter_applies(spec, dtype, c, o, device,
                                                         positions=p.out_positions, images=p.n):
    found["implicit"] = lambda: _implicit_filter_choice(p, device)
  if "gemm_per_image" not in found and _per_image_filter_applies(p):
    found["gemm_per_image"] = lambda: _per_image_filter_choice(p)
  if "gemm_channels_last" not in found and _gemm_channels_last_filter_applies(p):
    found["gemm_channels_last"] = lambda: _gemm_channels_last_filter_choice(p)
  return found


def _first(candidates) -> Choice:
  for make in candidates.values():
    choice = make()
    if choice is not None:
      return choice
  raise AssertionError("im2col + GEMM applies to every convolution")


def select(p: ConvProblem, device: DeviceCaps) -> Choice:
  """The algorithm that runs op p on `device`, and its parameters.

  spec.algorithm decides first: a name forces that algorithm (ValueError
  where it does not apply to p); "own" takes the project's preferred kernel;
  "auto" also weighs XLA's convolution by the measured rules (routing.py).
  On the CPU the project's path is unfold / fold custom calls and XLA dots
  ("columns_dot").
  """
  setting = p.spec.algorithm
  if setting == "xla":
    return Choice("xla", "forced: XLA's convolution")
  if device.platform != "cuda":
    if setting not in ("auto", "own", "columns_dot"):
      raise ValueError(f"algorithm {setting!r} runs on CUDA GPUs only; on the CPU the "
                       "convolution runs as 'columns_dot' or 'xla'")
    return Choice("columns_dot", "CPU: unfold / fold custom calls and XLA dots")
  if setting not in ("auto", "own"):
    make = _applicable(p, device).get(setting)
    choice = None if make is None else make()
    if choice is None:
      raise ValueError(f"algorithm {setting!r} does not apply to the {p.op.replace('_', ' ')} "
                       f"of this convolution (dtype {np.dtype(p.dtype).name}, groups "
                       f"{p.spec.groups}, {p.c} -> {p.o} channels, window {p.spec.window}); "
                       f"these do: {sorted(_applicable(p, device))}")
    return dataclasses.replace(choice, reason="forced: " + choice.reason)
  own = _first(_candidates(p, device))
  if setting == "auto":
    why = routing.xla_is_faster(p, own.algorithm, device)
    if why:
      return Choice("xla", why)
  return own


def problem_of(op: str, spec: ConvSpec, avals_in, aval_out) -> ConvProblem:
  """The ConvProblem of a primitive's operands and result: forward (x, w) ->
  y, input gradient (dy, w) -> dx, filter gradient (dy, x) -> dw."""
  cl = spec.channels_last
  if op == FORWARD:
    x, y = avals_in[0], aval_out
  elif op == INPUT_GRADIENT:
    x, y = aval_out, avals_in[0]
  else:
    x, y = avals_in[1], avals_in[0]
  return ConvProblem(op, spec, np.dtype(avals_in[0].dtype), np.dtype(aval_out.dtype), x.shape[0],
                     image_channels(x.shape, cl), image_channels(y.shape, cl),
                     tuple(image_spatial(x.shape, cl)), tuple(image_spatial(y.shape, cl)))
