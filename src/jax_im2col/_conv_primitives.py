"""The three convolution primitives: conv_forward, conv_backward_data and
conv_backward_filter.

Canonical layouts (channels-first / channels-last), G groups:
  x  (N, C, *in)   / (N, *in, C)
  w  (O, C/G, *K)  / (O, *K, C/G)
  y  (N, O, *out)  / (N, *out, O)
conv_forward(x, w) = y; conv_backward_data(dy, w) = dx;
conv_backward_filter(dy, x) = dw. Each is bilinear, and the transpose of each
with respect to either operand is one of the three, so reverse mode, forward
mode and higher orders never leave this family (and never reach XLA's own
convolution). On CUDA each lowers to one FFI call (im2col/col2im + cuBLAS);
on the CPU to unfold/fold custom calls and XLA dots.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.interpreters import ad, batching, mlir

from . import _ffi, _unfold
from ._geometry import Window, dilated, gradient_phases
from ._primitive import make_primitive
from ._workspace import BLAS_WORKSPACE_BYTES, align, plan_chunks
from ._zeros import empty_safe

PRECISION_DEFAULT = 0  # float32 may use TF32 tensor cores on the GPU
PRECISION_HIGHEST = 1  # full float32


@dataclasses.dataclass(frozen=True)
class ConvSpec:
  window: Window
  channels_last: bool
  groups: int
  precision: int
  workspace_limit: int

  def with_groups(self, groups: int) -> "ConvSpec":
    return dataclasses.replace(self, groups=groups)


conv_forward_p = make_primitive("im2col_conv_forward")
conv_backward_data_p = make_primitive("im2col_conv_backward_data")
conv_backward_filter_p = make_primitive("im2col_conv_backward_filter")

_HALF = (np.dtype(jnp.float16), np.dtype(jnp.bfloat16))


def _native_out(prim, in_dtype, out_dtype):
  """The result dtype the kernels produce for these operands."""
  if prim is conv_forward_p and in_dtype in _HALF and out_dtype == np.float32:
    return np.dtype(np.float32)
  return in_dtype


def bind(prim, a, b, *, spec: ConvSpec, out_dtype, in_spatial=None):
  """Binds a conv primitive with operands of one dtype and a result dtype the
  kernels support, casting around it where the caller's dtypes differ."""
  out_dtype = np.dtype(out_dtype)
  common = np.dtype(jnp.promote_types(a.dtype, b.dtype))
  a, b = a.astype(common), b.astype(common)
  native = _native_out(prim, common, out_dtype)
  params = dict(spec=spec, out_dtype=native)
  if prim is conv_backward_data_p:
    params["in_spatial"] = tuple(in_spatial)
  out = prim.bind(a, b, **params)
  return out if native == out_dtype else out.astype(out_dtype)


# --- shapes ------------------------------------------------------------------

def _filter_shape(o, cg, spec):
  k = spec.window.kernel
  return (o, *k, cg) if spec.channels_last else (o, cg, *k)


def _filter_in_channels(w_shape, spec):
  return w_shape[-1] if spec.channels_last else w_shape[1]


def _forward_abstract(x, w, *, spec, out_dtype):
  cl = spec.channels_last
  out = spec.window.output_spatial(_unfold.image_spatial(x.shape, cl))
  return jax.core.ShapedArray(_unfold.image_shape(x.shape[0], w.shape[0], out, cl), out_dtype)


def _backward_data_abstract(dy, w, *, spec, out_dtype, in_spatial):
  c = _filter_in_channels(w.shape, spec) * spec.groups
  return jax.core.ShapedArray(
      _unfold.image_shape(dy.shape[0], c, in_spatial, spec.channels_last), out_dtype)


def _backward_filter_abstract(dy, x, *, spec, out_dtype):
  cl = spec.channels_last
  o = _unfold.image_channels(dy.shape, cl)
  cg = _unfold.image_channels(x.shape, cl) // spec.groups
  return jax.core.ShapedArray(_filter_shape(o, cg, spec), out_dtype)


conv_forward_p.def_abstract_eval(_forward_abstract)
conv_backward_data_p.def_abstract_eval(_backward_data_abstract)
conv_backward_filter_p.def_abstract_eval(_backward_filter_abstract)


# --- transposes (JVPs follow from bilinearity) ---------------------------------

def _spatial_of(aval, spec):
  return _unfold.image_spatial(aval.shape, spec.channels_last)


def _forward_t_x(ct, x, w, *, spec, out_dtype):
  return bind(conv_backward_data_p, ct, w, spec=spec, out_dtype=x.aval.dtype,
              in_spatial=_spatial_of(x.aval, spec))


def _forward_t_w(ct, x, w, *, spec, out_dtype):
  return bind(conv_backward_filter_p, ct, x, spec=spec, out_dtype=w.aval.dtype)


def _backward_data_t_dy(ct, dy, w, *, spec, out_dtype, in_spatial):
  return bind(conv_forward_p, ct, w, spec=spec, out_dtype=dy.aval.dtype)


def _backward_data_t_w(ct, dy, w, *, spec, out_dtype, in_spatial):
  return bind(conv_backward_filter_p, dy, ct, spec=spec, out_dtype=w.aval.dtype)


def _backward_filter_t_dy(ct, dy, x, *, spec, out_dtype):
  return bind(conv_forward_p, x, ct, spec=spec, out_dtype=dy.aval.dtype)


def _backward_filter_t_x(ct, dy, x, *, spec, out_dtype):
  return bind(conv_backward_data_p, dy, ct, spec=spec, out_dtype=x.aval.dtype,
              in_spatial=_spatial_of(x.aval, spec))


ad.defbilinear(conv_forward_p, _forward_t_x, _forward_t_w)
ad.defbilinear(conv_backward_data_p, _backward_data_t_dy, _backward_data_t_w)
ad.defbilinear(conv_backward_filter_p, _backward_filter_t_dy, _backward_filter_t_x)


# --- batching ----------------------------------------------------------------
#
# Roles: every primitive relates an image x, a filter w and an output image y.
# A mapped axis that touches only images folds into N. Once the filter is
# mapped (per-example weights, or a filter gradient of mapped operands), the
# mapped axis B folds into the groups instead: images (B, N, C, ...) become
# (N, B*C, ...), filters (B, O, ...) become (B*O, ...) and groups G become
# B*G, so the work stays one call of B*G grouped GEMMs.

def _to_front(v, d):
  return v if d is None else jnp.moveaxis(v, d, 0)


def _images_into_n(v):
  b, n = v.shape[:2]
  return v.reshape((b * n, *v.shape[2:]))


def images_into_channels(v, cl):
  """(B, N, ...) -> (N, ..., B*C) on the channel axis."""
  b, n = v.shape[:2]
  if cl:
    v = jnp.moveaxis(v, 0, -2)  # (N, *S, B, C)
    return v.reshape((*v.shape[:-2], b * v.shape[-1]))
  v = jnp.moveaxis(v, 0, 1)  # (N, B, C, *S)
  return v.reshape((n, b * v.shape[2], *v.shape[3:]))


def images_from_channels(v, b, cl):
  """(N, ..., B*C) -> (B, N, ..., C)."""
  if cl:
    v = v.reshape((*v.shape[:-1], b, v.shape[-1] // b))
    return jnp.moveaxis(v, -2, 0)
  v = v.reshape((v.shape[0], b, v.shape[1] // b, *v.shape[2:]))
  return jnp.moveaxis(v, 1, 0)


def _broadcast(v, b):
  return jnp.broadcast_to(v, (b, *v.shape))


def _batch_rule(prim):
  image_roles = {conv_forward_p: ("image", "filter"), conv_backward_data_p: ("image", "filter"),
                 conv_backward_filter_p: ("image", "image")}[prim]

  def rule(args, dims, *, spec, out_dtype, **extra):
    b = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    if b == 0:
      unmapped = [jax.ShapeDtypeStruct(a.shape if d is None else a.shape[:d] + a.shape[d + 1:],
                                       a.dtype) for a, d in zip(args, dims)]
      out = jax.eval_shape(lambda *v: prim.bind(*v, spec=spec, out_dtype=out_dtype, **extra),
                           *unmapped)
      return jnp.zeros((0, *out.shape), out.dtype), 0
    args = [_to_front(a, d) for a, d in zip(args, dims)]
    mapped = [d is not None for d in dims]
    filter_mapped = prim is conv_backward_filter_p or mapped[1]
    if not filter_mapped:  # only the image operand is mapped
      out = prim.bind(_images_into_n(args[0]), args[1], spec=spec, out_dtype=out_dtype, **extra)
      return out.reshape((b, args[0].shape[1], *out.shape[1:])), 0
    cl = spec.channels_last
    if prim is conv_forward_p and not mapped[0] and spec.groups == 1:
      # Shared input, mapped filters: one conv with B*O output channels.
      w = args[1]
      out = prim.bind(args[0], w.reshape((b * w.shape[1], *w.shape[2:])), spec=spec,
                      out_dtype=out_dtype, **extra)
      return images_from_channels(out, b, cl), 0
    new = []
    for a, m, role in zip(args, mapped, image_roles):
      a = a if m else _broadcast(a, b)
      new.append(images_into_channels(a, cl) if role == "image" else
                 a.reshape((b * a.shape[1], *a.shape[2:])))
    out = prim.bind(*new, spec=spec.with_groups(spec.groups * b), out_dtype=out_dtype, **extra)
    if prim is conv_backward_filter_p:
      return out.reshape((b, out.shape[0] // b, *out.shape[1:])), 0
    return images_from_channels(out, b, cl), 0

  return rule


for _prim in (conv_forward_p, conv_backward_data_p, conv_backward_filter_p):
  batching.primitive_batchers[_prim] = _batch_rule(_prim)


# --- CUDA lowering: one FFI call with workspace from XLA ----------------------

def _plan(ctx, spec, image_aval, y_aval, *, columns, transposed_dy, accumulator):
  cl = spec.channels_last
  c = _unfold.image_channels(image_aval.shape, cl)
  o = _unfold.image_channels(y_aval.shape, cl)
  k = spec.window.kernel_size
  positions = _positions(y_aval, spec)
  in_item = np.dtype(ctx.avals_in[0].dtype).itemsize
  return plan_chunks(n=image_aval.shape[0], positions=positions,
                     cols_row_bytes=c * k * columns, extra_row_bytes=o * in_item if transposed_dy else 0,
                     limit=spec.workspace_limit, needs_columns=columns > 0,
                     groups=spec.groups, acc_bytes=o * (c // spec.groups) * k * 4 if accumulator else 0)


# The `algorithm` attribute (Algorithm in lib/cuda/conv.cu).
ALGORITHM_GEMM = 0
ALGORITHM_DIRECT = 1
ALGORITHM_IMPLICIT = 2
ALGORITHM_PACKED = 3  # the implicit GEMM on packed groups (_packed)
ALGORITHM_GEMM_CHANNELS_LAST = 4  # filter gradient: im2col + GEMM on channels-last copies
ALGORITHM_GEMM_PER_IMAGE = 5  # channels-first 1x1 filter gradient: a GEMM per image
ALGORITHM_CONV_1D_CF = 6  # channels-first 1-D kernels (conv_1d_cf)
# Small groups take the scalar direct kernels up to this many filter taps per
# output channel (kDirectMaxTaps in lib/cuda/direct_conv.h: past it they sum
# in rounds).
DIRECT_MAX_TAPS = 32
# Keep in sync with kGroupedMaxChannels in lib/cuda/direct_conv.h.
GROUPED_MAX_CHANNELS = 16


def _depthwise(spec, c, o):
  return spec.groups == c == o


def _grouped(spec, c, o):
  """The grouped kernels (grouped_applies in lib/cuda/grouped_conv.cu): groups
  of at most GROUPED_MAX_CHANNELS input and output channels, depthwise
  excepted."""
  cg, og = c // spec.groups, o // spec.groups
  return (spec.groups > 1 and not _depthwise(spec, c, o)
          and cg <= GROUPED_MAX_CHANNELS and og <= GROUPED_MAX_CHANNELS)


def _algorithm(spec, c, o):
  """Direct kernels for depthwise and small groups, where each group's GEMM is
  too thin for tensor cores and columns cost more traffic than they feed."""
  cg, og = c // spec.groups, o // spec.groups
  small = (spec.groups > 1 and cg <= 4 and og <= 4
           and cg * spec.window.kernel_size <= DIRECT_MAX_TAPS)
  return ALGORITHM_DIRECT if small or _grouped(spec, c, o) else ALGORITHM_GEMM


_MAX_GROUPS_IMPLICIT = 65535  # the kernel's grid z
_INT32_LIMIT = 1 << 31


@functools.lru_cache(maxsize=None)
def _ampere_or_newer():
  """Whether every visible CUDA device can run the implicit GEMM (compute
  capability 8.0 or newer: cp.async, ldmatrix, mma.sync). True when none is
  visible, so that lowering for CUDA on a machine without a GPU shows the plan
  a current GPU gets."""
  try:
    devices = jax.devices("cuda")
  except RuntimeError:
    return True
  return all(float(getattr(d, "compute_capability", "8.0")) >= 8.0 for d in devices)


@functools.lru_cache(maxsize=None)
def _hopper_kernels():
  """Whether the implicit GEMM runs its Hopper kernels (implicit_gemm_sm90.cu):
  every visible CUDA device of compute capability 9.0 and a module built for
  sm_90a. False with no GPU: lowering for CUDA on a machine without one shows
  the Ampere plan."""
  if _ffi._cuda is None or not _ffi._cuda.hopper_kernels():
    return False
  try:
    devices = jax.devices("cuda")
  except RuntimeError:
    return False
  return bool(devices) and all(getattr(d, "compute_capability", "") == "9.0" for d in devices)


def implicit_truncates_tf32():
  """Whether the implicit GEMM multiplies float32 operands truncated to TF32
  (the Hopper kernels, as cuBLAS's and cuDNN's Hopper kernels do) rather than
  rounded to nearest (the mma.sync kernel)."""
  return _hopper_kernels()


# Small groups packed for the implicit GEMM on Hopper (packed_groups in
# lib/cuda/conv.cu): consecutive groups whose image channels make
# _PACKED_CHANNELS become one group with a block-diagonal filter, so that the
# TMA kernel takes whole runs of channels; at most _MAX_PACK of them (the
# arithmetic grows by the factor; BENCHMARKS.md, step 23).
_PACKED_CHANNELS = 64
_MAX_PACK = 8


# The input gradient of a strided convolution runs as one implicit GEMM per
# phase of the input (gradient_phase in lib/geometry.h): at most _MAX_PHASES
# of them (kMaxGradientPhases in lib/cuda/conv.cu).
_MAX_PHASES = 64


def _implicit_operands(spec, dtype, *, input_gradient):
  """What every implicit-GEMM kernel needs of a call: float16 / bfloat16, or
  float32 at DEFAULT precision (TF32); no lhs dilation; for the input
  gradient, at most _MAX_PHASES phases."""
  dtype = np.dtype(dtype)
  if not (dtype in _HALF or (dtype == np.float32 and spec.precision == PRECISION_DEFAULT)):
    return False
  w = spec.window
  return not (any(d != 1 for d in w.lhs_dilation)
              or (input_gradient and int(np.prod(w.stride)) > _MAX_PHASES))


def implicit_pass_extent(spec, out_spatial, *, input_gradient=False):
  """(output positions per image, taps) of the implicit GEMM's largest pass
  (implicit_passes in lib/cuda/conv.cu), and the number of passes: the
  forward's own, or the phases of the input gradient that some tap reaches
  (0 positions where none does: the input gradient is all zeros; or with lhs
  dilation, which no implicit GEMM takes). out_spatial: the spatial extents
  of the image the call writes."""
  w = spec.window
  if any(d != 1 for d in w.lhs_dilation):
    return 0, 0, 0
  if not input_gradient:
    return int(np.prod(out_spatial, dtype=np.int64)), w.kernel_size, 1
  passes = [ph for ph in gradient_phases(w, out_spatial) if ph.window is not None and all(ph.positions)]
  if not passes:
    return 0, 0, 0
  return (max(int(np.prod(ph.positions, dtype=np.int64)) for ph in passes),
          max(ph.window.kernel_size for ph in passes), len(passes))


def _packed(spec, dtype, c, o, *, input_gradient=False):
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
  if pack > _MAX_PACK or spec.groups % pack or spec.groups // pack > _MAX_GROUPS_IMPLICIT:
    return 0
  if max(c, o) * w.kernel_size * pack >= _INT32_LIMIT or not _hopper_kernels():
    return 0
  return pack


def _implicit_gemm_call(spec, dtype, c, o, *, input_gradient):
  """What every unpacked implicit GEMM (forward, input and filter gradients)
  needs of a call that would otherwise take im2col + GEMM: operands it takes
  (_implicit_operands), an Ampere or newer GPU, channels within 32 bits, at
  most _MAX_GROUPS_IMPLICIT groups. A 1x1 window without stride or padding
  stays a plain GEMM."""
  w = spec.window
  return (_implicit_operands(spec, dtype, input_gradient=input_gradient) and _ampere_or_newer()
          and _algorithm(spec, c, o) == ALGORITHM_GEMM and not w.is_identity
          and spec.groups <= _MAX_GROUPS_IMPLICIT and max(c, o) < _INT32_LIMIT)


def _whole_vectors(channels, dtype):
  """Whether runs of `channels` elements are whole 16-byte vectors."""
  return channels % (16 // np.dtype(dtype).itemsize) == 0


def _implicit(spec, dtype, c, o, *, input_gradient=False):
  """The implicit GEMM on tensor cores (implicit_applies in
  lib/cuda/implicit_gemm.cu): _implicit_gemm_call, and the image it reads (x,
  or dy for the input gradient) with channels per group in whole 16-byte
  vectors."""
  if not _implicit_gemm_call(spec, dtype, c, o, input_gradient=input_gradient):
    return False
  channels = (o if input_gradient else c) // spec.groups
  return _whole_vectors(channels, dtype) and channels * spec.window.kernel_size < _INT32_LIMIT


# Where the implicit GEMM is faster than im2col + cuBLAS. The mma.sync kernel
# (BENCHMARKS.md, step 18): up to this many channels per group in the image it
# reads, and for channels-first half types with fewer output positions per
# image than _IMPLICIT_CF_POSITIONS (there the GEMM path's per-image products
# are thin). The Hopper kernels (step 22): everywhere but channels-last calls
# with over _HOPPER_GEMM_CHANNELS channels per group whose 128 x 64 output
# tiles do not fill the GPU once (cuBLAS splits those reductions better).
# The phases of a strided input gradient (step 27) write the input's channels
# per group as the tile's columns: fewer than _PHASE_MIN_CHANNELS (the stem's
# 3) would leave most of the narrowest tile (64) idle.
IMPLICIT_MAX_CHANNELS = 128
_IMPLICIT_CF_POSITIONS = 2048
_HOPPER_GEMM_CHANNELS = 256
_PHASE_MIN_CHANNELS = 32


def use_implicit(spec, dtype, c, o, positions, *, input_gradient=False, images=1):
  """Whether the CUDA lowering takes the implicit GEMM: where it applies
  (_implicit) and is the faster path. positions: output positions per image
  of the call's largest pass (implicit_pass_extent), of `images` images."""
  if not _implicit(spec, dtype, c, o, input_gradient=input_gradient):
    return False
  if (input_gradient and any(s != 1 for s in spec.window.stride)
      and c // spec.groups < _PHASE_MIN_CHANNELS):
    return False
  channels = (o if input_gradient else c) // spec.groups
  if _hopper_kernels():
    out_channels = (c if input_gradient else o) // spec.groups
    tiles = -(-images * positions // 128) * -(-out_channels // 64) * spec.groups
    return not (spec.channels_last and channels > _HOPPER_GEMM_CHANNELS
                and tiles < _multiprocessors())
  return channels <= IMPLICIT_MAX_CHANNELS or (
      not spec.channels_last and np.dtype(dtype) in _HALF and positions < _IMPLICIT_CF_POSITIONS)


@functools.lru_cache(maxsize=None)
def _multiprocessors():
  """Multiprocessors of the first CUDA device (an H100's 132 with none)."""
  try:
    return int(getattr(jax.devices("cuda")[0], "core_count", 132))
  except RuntimeError:
    return 132


# Passes of one launch (kMaxPasses in lib/cuda/implicit_gemm.h).
_PASSES_PER_LAUNCH = 8


def implicit_splits(*, m, og, o, groups, reduction_bytes, limit, passes=1):
  """Parts of the implicit GEMM's reduction (ImplicitConv::splits): where even
  its smallest tiles (64 x 64) of the m x og outputs per group and pass leave
  over half the multiprocessors without a block (a batch of one at 7 x 7,
  say) and the reduction spans at least 16 k-tiles of 128 bytes, enough parts
  of its 128 x 64 tiles for two blocks per multiprocessor, each part at least
  8 k-tiles, their float32 partial sums under the workspace cap. (Splitting
  grids of a wave or more measured no faster: BENCHMARKS.md, step 17; nor
  grids of most of one, whose second kernel, the sum, costs more than the
  idle multiprocessors: step 44.) passes: the phases of a strided input
  gradient, up to _PASSES_PER_LAUNCH of which share a launch unsplit (a
  split reduction runs them one a launch, each with its own sum)."""
  sms = _multiprocessors()
  k_tiles = -(-reduction_bytes // 128)
  launch_passes = max(1, min(passes, _PASSES_PER_LAUNCH))
  if 2 * launch_passes * -(-m // 64) * -(-og // 64) * groups >= sms or k_tiles < 16:
    return 1
  blocks = -(-m // 128) * -(-og // 64) * groups
  splits = min(8, -(-2 * sms // blocks), k_tiles // 8, _MAX_GROUPS_IMPLICIT // groups)
  while splits > 1 and splits * m * o * 4 > limit:
    splits -= 1
  return max(1, splits)


def _implicit_pack(spec, dtype, c, o, *, positions, images, input_gradient=False):
  """How the CUDA lowering takes the implicit GEMM: the packing factor of
  small groups (_packed), 1 unpacked (use_implicit), 0 not at all."""
  pack = _packed(spec, dtype, c, o, input_gradient=input_gradient)
  if pack:
    return pack
  return int(use_implicit(spec, dtype, c, o, positions, input_gradient=input_gradient,
                          images=images))


# Channels-first 1-D convolutions read as they are (lib/cuda/conv_1d_cf.cu):
# tiles of _CONV_1D_CF_POSITIONS positions of a group's rows in shared memory,
# multiplied by mma.sync in TF32 (operands truncated), for every op at stride
# 1. Where they apply they replace the implicit GEMM and its channels-last
# copies of x and dy (jax#13800's grouped 1-D convolution: BENCHMARKS.md,
# step 49). Keep in sync with lib/cuda/conv_1d_cf.h.
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


def conv_1d_cf(spec, dtype, c, o, *, in_w, out_w, op):
  """Whether the CUDA lowering takes the channels-first 1-D kernels
  (conv_1d_cf_applies in lib/cuda/conv_1d_cf.cu) for op "forward",
  "input_gradient" or "filter": float32 at DEFAULT precision, one spatial
  dimension, stride 1, no lhs dilation, a call that would otherwise take
  im2col + GEMM or the implicit GEMM; the channels per group of the image
  the op reads and of the one it writes multiples of 16 up to
  _CONV_1D_CF_MAX_CHANNELS, the rows it reads (x's, dy's, both for the filter
  gradient) in whole 16-byte vectors, tiles within
  _CONV_1D_CF_SHARED_BYTES. c, o, in_w, out_w: the forward's."""
  w = spec.window
  if (spec.channels_last or w.nd != 1 or np.dtype(dtype) != np.float32
      or spec.precision != PRECISION_DEFAULT or w.stride != (1,) or w.lhs_dilation != (1,)
      or w.is_identity or not _ampere_or_newer() or _algorithm(spec, c, o) != ALGORITHM_GEMM
      or max(in_w, out_w, abs(w.padding[0][0])) >= _CONV_1D_CF_MAX_WIDTH):
    return False
  cg, og = c // spec.groups, o // spec.groups
  ci, co, image_w = {"forward": (cg, og, in_w), "input_gradient": (og, cg, out_w),
                     "filter": (cg, og, in_w)}[op]
  if op == "filter" and (out_w % 4 or spec.groups > _MAX_GROUPS_IMPLICIT):
    return False
  if any(ch % 16 or not 0 < ch <= _CONV_1D_CF_MAX_CHANNELS for ch in (ci, co)) or image_w % 4:
    return False
  taps, dilation = w.kernel[0], w.rhs_dilation[0]
  return ((taps - 1) * dilation <= _CONV_1D_CF_SHARED_BYTES
          and _conv_1d_cf_shared(ci, co, taps, dilation) <= _CONV_1D_CF_SHARED_BYTES)


def conv_1d_cf_slices(*, n, out_w, groups, o, kg, limit):
  """The most parts of the channels-first 1-D filter gradient (the kernel
  writes as many as one wave of its blocks holds, within these): enough for
  four blocks per multiprocessor, at most one per tile of positions, their
  float32 sums (o x kg each) under the workspace cap."""
  tiles = n * -(-out_w // _CONV_1D_CF_POSITIONS)
  slices = min(-(-4 * _multiprocessors() // groups), tiles, limit // max(1, o * kg * 4))
  return max(1, slices)


def _conv_1d_cf_call(target, ctx, a, b, spec):
  return _cuda_call(target, ctx, a, b, spec, images=1, positions=1, workspace_bytes=1,
                    algorithm=ALGORITHM_CONV_1D_CF)


def _images_per_chunk(n, per_image_bytes, limit):
  """Channels-first images an implicit GEMM makes channels-last at once: as
  many of the n as fit the workspace cap, at least one."""
  return max(1, min(n, limit // max(1, per_image_bytes)))


def _implicit_call(target, ctx, a, b, spec, *, image_aval, out_aval, extent, pack,
                   input_gradient=False):
  """image_aval / out_aval: the image the kernel reads and the one it writes;
  extent: implicit_pass_extent's (positions, taps, passes) of the call;
  channels-first input is made channels-last in chunks of images under the
  workspace cap. The filter goes into the kernel's row layout in the
  workspace (pack times its size; the input gradient's phases partition its
  taps) unless the forward reads channels-last rows as they are
  (implicit_call in lib/cuda/conv.cu)."""
  cl = spec.channels_last
  wa = ctx.avals_in[1]
  relayout = input_gradient or pack > 1 or not cl
  filter_bytes = pack * wa.size * np.dtype(wa.dtype).itemsize if relayout else 0
  item = np.dtype(image_aval.dtype).itemsize
  n = image_aval.shape[0]
  images, image_bytes = max(1, n), 0
  if not cl and n > 0:
    per_image = int(np.prod(image_aval.shape[1:], dtype=np.int64)) * item
    images = _images_per_chunk(n, per_image, spec.workspace_limit)
    image_bytes = images * per_image
  c_in, o = _unfold.image_channels(image_aval.shape, cl), _unfold.image_channels(out_aval.shape, cl)
  positions, taps, passes = extent
  m = images * positions
  groups = spec.groups // pack
  splits = 1 if m == 0 else implicit_splits(
      m=m, og=o // groups, o=o, groups=groups, reduction_bytes=c_in // groups * taps * item,
      limit=spec.workspace_limit, passes=passes)
  partials = splits * m * o * 4 if splits > 1 else 0
  return _cuda_call(target, ctx, a, b, spec, images=images, positions=splits,
                    workspace_bytes=max(1, align(filter_bytes) + align(image_bytes) + align(partials)),
                    algorithm=ALGORITHM_PACKED if pack > 1 else ALGORITHM_IMPLICIT)


# The implicit filter gradient (lib/cuda/implicit_filter_gradient.cu): tiles
# of 64 or 128 output channels (_filter_tile_o) x 128 of the reduction,
# k-tiles of 32 positions.
_FILTER_TILE_K, _FILTER_POSITIONS = 128, 32


def _filter_tile_o(og):
  """Output channels per tile of the implicit filter gradient (launch_for in
  lib/cuda/implicit_filter_gradient.cu)."""
  return 128 if og >= 128 else 64


_FILTER_MAX_POSITIONS = (1 << 31) - 64  # kMaxFilterPositions: per call


def _implicit_filter(spec, dtype, c, o, *, positions, images):
  """The filter gradient as an implicit GEMM (implicit_filter_applies in
  lib/cuda/implicit_filter_gradient.cu): _implicit_gemm_call (strides are
  fine: they only skip positions), channels per group of x and of dy in whole
  16-byte vectors, and at most _FILTER_MAX_POSITIONS positions per kernel
  call: all `images` images of `positions` output positions each for
  channels-last operands, one image at least for channels-first ones (made
  channels-last in chunks of images)."""
  if not _implicit_gemm_call(spec, dtype, c, o, input_gradient=False):
    return False
  cg, og = c // spec.groups, o // spec.groups
  per_call = images * positions if spec.channels_last else positions
  return (_whole_vectors(cg, dtype) and _whole_vectors(og, dtype)
          and per_call <= _FILTER_MAX_POSITIONS and cg * spec.window.kernel_size < _INT32_LIMIT
          and og // _filter_tile_o(0) < _MAX_GROUPS_IMPLICIT)  # the grid's y


# Where the implicit filter gradient beats im2col + cuBLAS (BENCHMARKS.md, step
# 25, H100): up to this many output channels per group (r50_3x3_c64 0.53-0.71x
# of the GEMM path's time, c3d 0.43-0.58x, r50_3x3s2_c128 0.69-0.97x). Wider
# groups feed cuBLAS's GEMM enough arithmetic per column that its tensor-core
# rate wins (256 and 512 channels: 1.0-1.7x slower implicit).
IMPLICIT_FILTER_MAX_CHANNELS = 128


def use_implicit_filter(spec, dtype, c, o, *, positions, images):
  """Whether the CUDA lowering takes the implicit filter gradient: where it
  applies (_implicit_filter) with at most IMPLICIT_FILTER_MAX_CHANNELS output
  channels per group."""
  return (o // spec.groups <= IMPLICIT_FILTER_MAX_CHANNELS
          and _implicit_filter(spec, dtype, c, o, positions=positions, images=images))


def packed_filter(spec, dtype, c, o, *, positions, images):
  """The packing factor with which the CUDA lowering takes a grouped filter
  gradient as one implicit GEMM per `pack` groups (the forward's _packed), or
  0. Where the grouped direct kernel would take it (_grouped), in half types
  only: their Hopper TMA kernel multiplies the packs' whole blocks at the
  dense c64 rate (resnext_g32 bf16 0.15 -> 0.04-0.06 ms), where float32's
  mma.sync kernel would gain nothing on the grouped kernel (BENCHMARKS.md,
  step 40). Wider groups keep their unpacked paths, which pay no extra
  arithmetic."""
  if np.dtype(dtype) not in _HALF or not _grouped(spec, c, o):
    return 0
  pack = _packed(spec, dtype, c, o)
  if not pack or not _implicit_filter(spec.with_groups(spec.groups // pack), dtype, c, o,
                                      positions=positions, images=images):
    return 0
  return pack


def implicit_filter_splits(*, m, og, kg, o, groups, limit):
  """Parts of the implicit filter gradient's positions (m per call): the
  gradient's tiles (og x kg per group) are few (5 for 64 channels and a 3x3
  window), so enough parts for three blocks per multiprocessor, each at least
  8 k-tiles of positions, their float32 sums under the workspace cap."""
  tiles = -(-og // _filter_tile_o(og)) * -(-kg // _FILTER_TILE_K) * groups
  k_tiles = -(-m // _FILTER_POSITIONS)
  splits = min(-(-3 * _multiprocessors() // tiles), k_tiles // 8, _MAX_GROUPS_IMPLICIT // groups)
  while splits > 1 and splits * o * kg * 4 > limit:
    splits -= 1
  return max(1, splits)


def _implicit_filter_call(ctx, dy, x, spec, pack=1):
  """Channels-first x and dy are made channels-last in chunks of images under
  the workspace cap (implicit_backward_filter in lib/cuda/conv.cu); `pack`
  groups at a time (packed_filter), whose float32 parts hold their whole
  block of the gradient."""
  dya, xa = ctx.avals_in
  cl = spec.channels_last
  item = np.dtype(xa.dtype).itemsize
  c, o = _channels(spec, xa, dya)
  n, positions = xa.shape[0], _positions(dya, spec)
  images, image_bytes, gradient_bytes = max(1, n), 0, 0
  if not cl and n > 0:
    x_image = int(np.prod(xa.shape[1:], dtype=np.int64)) * item
    dy_image = o * positions * item
    images = min(_images_per_chunk(n, x_image + dy_image, spec.workspace_limit),
                 max(1, _FILTER_MAX_POSITIONS // max(1, positions)))
    image_bytes, gradient_bytes = images * x_image, images * dy_image
  groups = spec.groups // pack
  kg = c // groups * spec.window.kernel_size
  splits = implicit_filter_splits(m=images * positions, og=o // groups, kg=kg, o=o, groups=groups,
                                  limit=spec.workspace_limit)
  partials = splits * o * kg * 4
  return _cuda_call(_ffi.CONV_BACKWARD_FILTER, ctx, dy, x, spec, images=images, positions=splits,
                    workspace_bytes=align(image_bytes) + align(gradient_bytes) + align(partials),
                    algorithm=ALGORITHM_PACKED if pack > 1 else ALGORITHM_IMPLICIT)


def _positions(image_aval, spec):
  return int(np.prod(_unfold.image_spatial(image_aval.shape, spec.channels_last), dtype=np.int64))


def _channels(spec, image_aval, y_aval):
  cl = spec.channels_last
  return _unfold.image_channels(image_aval.shape, cl), _unfold.image_channels(y_aval.shape, cl)


def _cuda_call(target, ctx, a, b, spec, *, images, positions, workspace_bytes, algorithm):
  ws = jax.core.ShapedArray((workspace_bytes,), np.uint8)
  rule = jax.ffi.ffi_lowering(target)
  out, _ = rule(ctx.replace(avals_out=[ctx.avals_out[0], ws]), a, b,
                channels_last=spec.channels_last, groups=np.int64(spec.groups),
                precision=np.int64(spec.precision), chunk_images=np.int64(images),
                chunk_positions=np.int64(positions), algorithm=np.int64(algorithm),
                **spec.window.ffi_attributes())
  return [out]


def _gemm_call(target, ctx, a, b, spec, plan):
  return _cuda_call(target, ctx, a, b, spec, images=plan.images, positions=plan.positions,
                    workspace_bytes=plan.workspace_bytes, algorithm=ALGORITHM_GEMM)


def _direct_call(target, ctx, a, b, spec):
  return _cuda_call(target, ctx, a, b, spec, images=1, positions=1, workspace_bytes=1,
                    algorithm=ALGORITHM_DIRECT)


def _widths(spec, image_aval, y_aval):
  """(in_w, out_w) of a 1-D call; (0, 0) otherwise."""
  if spec.window.nd != 1:
    return 0, 0
  return (_unfold.image_spatial(image_aval.shape, spec.channels_last)[0],
          _unfold.image_spatial(y_aval.shape, spec.channels_last)[0])


@empty_safe
def _forward_cuda(ctx, x, w, *, spec, out_dtype):
  xa, ya = ctx.avals_in[0], ctx.avals_out[0]
  c, o = _channels(spec, xa, ya)
  in_w, out_w = _widths(spec, xa, ya)
  if conv_1d_cf(spec, xa.dtype, c, o, in_w=in_w, out_w=out_w, op="forward"):
    return _conv_1d_cf_call(_ffi.CONV_FORWARD, ctx, x, w, spec)
  extent = implicit_pass_extent(spec, _unfold.image_spatial(ya.shape, spec.channels_last))
  pack = _implicit_pack(spec, xa.dtype, c, o, positions=extent[0], images=xa.shape[0])
  if pack:
    return _implicit_call(_ffi.CONV_FORWARD, ctx, x, w, spec, image_aval=xa, out_aval=ya,
                          extent=extent, pack=pack)
  if _algorithm(spec, c, o) == ALGORITHM_DIRECT:
    return _direct_call(_ffi.CONV_FORWARD, ctx, x, w, spec)
  item = np.dtype(xa.dtype).itemsize
  plan = _plan(ctx, spec, xa, ya, columns=0 if spec.window.is_identity else item,
               transposed_dy=False, accumulator=False)
  return _gemm_call(_ffi.CONV_FORWARD, ctx, x, w, spec, plan)


@empty_safe
def _backward_data_cuda(ctx, dy, w, *, spec, out_dtype, in_spatial):
  dya, dxa = ctx.avals_in[0], ctx.avals_out[0]
  c, o = _channels(spec, dxa, dya)
  in_w, out_w = _widths(spec, dxa, dya)
  if conv_1d_cf(spec, dya.dtype, c, o, in_w=in_w, out_w=out_w, op="input_gradient"):
    return _conv_1d_cf_call(_ffi.CONV_BACKWARD_DATA, ctx, dy, w, spec)
  extent = implicit_pass_extent(spec, in_spatial, input_gradient=True)
  pack = _implicit_pack(spec, dya.dtype, c, o, positions=extent[0], images=dya.shape[0],
                        input_gradient=True)
  if pack:
    return _implicit_call(_ffi.CONV_BACKWARD_DATA, ctx, dy, w, spec, image_aval=dya,
                          out_aval=dxa, extent=extent, pack=pack, input_gradient=True)
  if _algorithm(spec, c, o) == ALGORITHM_DIRECT:
    return _direct_call(_ffi.CONV_BACKWARD_DATA, ctx, dy, w, spec)
  dtype = np.dtype(dya.dtype)
  cols_item = 4 if dtype in _HALF else dtype.itemsize  # half columns are float32
  plan = _plan(ctx, spec, dxa, dya, columns=0 if spec.window.is_identity else cols_item,
               transposed_dy=False, accumulator=False)
  return _gemm_call(_ffi.CONV_BACKWARD_DATA, ctx, dy, w, spec, plan)


# Direct filter gradient: partial sums per slice of output rows of one image
# (FilterSlices in lib/cuda/direct_conv.h), by one of three kernels (`kind`):
# - "depthwise_cf" stages about _TILE_POSITIONS (position, channel) pairs of
#   input per block in shared memory (keep in sync with kTileWork in
#   lib/cuda/tile.cuh); its slices span at most that many positions (one tile
#   band where it fits), so that each thread sums many positions before the
#   reduction. 2-D slices (the strip kernel of lib/cuda/depthwise_rows.cuh
#   for 3x3 and 5x5 filters at unit stride along rows) span about
#   _STRIP_POSITIONS: a block fills its tile before it computes, so many
#   small blocks keep more loads in flight than a few large ones. Where slices
#   split an image, their rows are whole strips of _STRIP_ROWS.
# - "depthwise_cl" (2-D, channels-last: depthwise_filter_cl_tile_kernel)
#   takes a slice and a few channels per block, in tiles of its rows staged in
#   shared memory: slices of about _DEPTHWISE_CL_POSITIONS positions, rows
#   spread evenly over an image's slices (each slice's last tile is as full
#   as the others).
# - "grouped" (grouped_conv.cu) takes one slice and one group per block:
#   slices of about _GROUPED_POSITIONS positions, fewer where the partial sums
#   would pass _GROUPED_PARTIALS elements.
# - "scalar" (every other direct case) gets about _DIRECT_FILTER_PAIRS
#   (slice, output channel) pairs in all: enough blocks to fill the GPU, few
#   enough partial sums to stay a small part of the traffic.
_DIRECT_FILTER_PAIRS = 1 << 17
_TILE_POSITIONS = 2048
_STRIP_ROWS = 8  # kStripRows in lib/cuda/depthwise_rows.cuh
_STRIP_POSITIONS = 1024
_DEPTHWISE_CL_POSITIONS = 1024
_GROUPED_POSITIONS = 512
_GROUPED_PARTIALS = 1 << 24


def direct_filter_slices(n, out_spatial, o, kind, taps=1):
  """(output rows per slice, number of slices) of the direct filter gradient;
  `taps`: filter elements per output channel (Cg * K)."""
  out0 = out_spatial[0]
  rest = int(np.prod(out_spatial[1:], dtype=np.int64))
  if kind == "depthwise_cf":
    positions = _STRIP_POSITIONS if len(out_spatial) == 2 else _TILE_POSITIONS
    rows = max(1, min(out0, positions // rest))
    if _STRIP_ROWS < rows < out0:  # whole strips for the strip kernel
      rows -= rows % _STRIP_ROWS
  elif kind == "depthwise_cl":
    rows = max(1, min(out0, _DEPTHWISE_CL_POSITIONS // rest))
    rows = -(-out0 // -(-out0 // rows))
  elif kind == "grouped":
    rows = max(1, min(out0, _GROUPED_POSITIONS // rest))
    per_image_cap = max(1, _GROUPED_PARTIALS // max(1, n * o * taps))
    rows = max(rows, -(-out0 // per_image_cap))
  else:
    per_image = max(1, min(out0, -(-max(1, _DIRECT_FILTER_PAIRS // o) // n)))
    rows = -(-out0 // per_image)
  return rows, n * -(-out0 // rows)


def _depthwise_cl_tiles(spec, c, dtype):
  """Whether the channels-last depthwise filter gradient takes its tiles
  (plan_depthwise_filter_tile in lib/cuda/depthwise_tile.cuh): 2-D, no lhs
  dilation, channels in whole 16-byte vectors. The tiles must also fit in
  96 KB of shared memory, which only wide windows miss (with 64-byte channel
  slices, a 3x3 window from dilation 8, or 5 at stride 2); those run the
  per-position kernel on these coarser slices."""
  w = spec.window
  return w.nd == 2 and all(d == 1 for d in w.lhs_dilation) and _whole_vectors(c, dtype)


def _filter_kind(spec, c, o, dtype):
  if _depthwise(spec, c, o) and not spec.channels_last:
    return "depthwise_cf"  # depthwise_filter_cf in lib/cuda/direct_filter.cu
  if _depthwise(spec, c, o) and _depthwise_cl_tiles(spec, c, dtype):
    return "depthwise_cl"  # depthwise_filter_cl_tiled in lib/cuda/direct_filter.cu
  return "grouped" if _grouped(spec, c, o) else "scalar"


@empty_safe
def _backward_filter_cuda(ctx, dy, x, *, spec, out_dtype):
  dya, xa = ctx.avals_in
  dtype = np.dtype(xa.dtype)
  c, o = _channels(spec, xa, dya)
  in_w, out_w = _widths(spec, xa, dya)
  if conv_1d_cf(spec, dtype, c, o, in_w=in_w, out_w=out_w, op="filter"):
    kg = c // spec.groups * spec.window.kernel_size
    slices = conv_1d_cf_slices(n=xa.shape[0], out_w=out_w, groups=spec.groups, o=o, kg=kg,
                               limit=spec.workspace_limit)
    return _cuda_call(_ffi.CONV_BACKWARD_FILTER, ctx, dy, x, spec, images=1, positions=slices,
                      workspace_bytes=slices * o * kg * 4, algorithm=ALGORITHM_CONV_1D_CF)
  pack = packed_filter(spec, dtype, c, o, positions=_positions(dya, spec), images=xa.shape[0])
  if pack:
    return _implicit_filter_call(ctx, dy, x, spec, pack)
  if _algorithm(spec, c, o) == ALGORITHM_DIRECT:
    taps = (c // spec.groups) * spec.window.kernel_size
    rows, slices = direct_filter_slices(xa.shape[0], _unfold.image_spatial(dya.shape, spec.channels_last),
                                        o, _filter_kind(spec, c, o, dtype), taps)
    acc = 8 if dtype == np.float64 else 4
    return _cuda_call(_ffi.CONV_BACKWARD_FILTER, ctx, dy, x, spec, images=xa.shape[0],
                      positions=rows, workspace_bytes=slices * o * taps * acc,
                      algorithm=ALGORITHM_DIRECT)
  if use_implicit_filter(spec, dtype, c, o, positions=_positions(dya, spec), images=xa.shape[0]):
    return _implicit_filter_call(ctx, dy, x, spec)
  if per_image_filter_gradient(spec, xa, dya):
    slots, workspace = _per_image_filter_plan(spec, xa, dya)
    return _cuda_call(_ffi.CONV_BACKWARD_FILTER, ctx, dy, x, spec, images=slots, positions=1,
                      workspace_bytes=workspace, algorithm=ALGORITHM_GEMM_PER_IMAGE)
  if gemm_filter_channels_last(spec, xa, dya):
    plan = _channels_last_filter_plan(spec, xa, dya)
    if plan is not None:
      return _cuda_call(_ffi.CONV_BACKWARD_FILTER, ctx, dy, x, spec, images=plan.images,
                        positions=plan.positions, workspace_bytes=plan.workspace_bytes,
                        algorithm=ALGORITHM_GEMM_CHANNELS_LAST)
  no_columns = spec.window.is_identity and spec.channels_last
  plan = _plan(ctx, spec, xa, dya, columns=0 if no_columns else dtype.itemsize,
               transposed_dy=not spec.channels_last, accumulator=dtype in _HALF)
  return _gemm_call(_ffi.CONV_BACKWARD_FILTER, ctx, dy, x, spec, plan)


# A channels-first 1x1 filter gradient is, per image, dy (Og x L) times x^T
# (L x Cg): with at least _PER_IMAGE_MIN_POSITIONS positions per image these
# products are thick enough for one strided batched cuBLAS call on x and dy as
# they are, where the im2col + GEMM path first copies both into rows spanning
# the images (r50_1x1_c256 channels-first: 135 + 36 us of copies before a
# 54 us GEMM; BENCHMARKS.md, step 45). Smaller planes keep that path.
_PER_IMAGE_MIN_POSITIONS = 1024


def per_image_filter_gradient(spec, xa, dya):
  """Whether the filter gradient runs as one GEMM per image (algorithm 5):
  channels-first, a 1x1 window without stride, padding or dilation, float32
  or half types (summed as float32), at least _PER_IMAGE_MIN_POSITIONS
  positions per image."""
  dtype = np.dtype(xa.dtype)
  return (not spec.channels_last and spec.window.is_identity
          and (dtype in _HALF or dtype == np.float32)
          and _positions(dya, spec) >= _PER_IMAGE_MIN_POSITIONS)


def _per_image_filter_plan(spec, xa, dya):
  """(slots, workspace bytes) of algorithm 5: as many float32 slots of dw as
  images, within the workspace cap (image n adds to slot n % slots), and
  cuBLAS's workspace and pointers (conv_workspace in lib/conv_workspace.h)."""
  c, o = _channels(spec, xa, dya)
  per_slot = o * (c // spec.groups) * 4
  slots = max(1, min(xa.shape[0], spec.workspace_limit // max(1, per_slot)))
  return slots, (align(BLAS_WORKSPACE_BYTES) + align(3 * slots * spec.groups * 8)
                 + align(slots * per_slot))


# The channels-first filter gradient on im2col + cuBLAS unfolds x's planes
# into columns and dy's into rows, which runs far below copy bandwidth on
# small planes (14 x 14 c256: 32 us where the channels-last unfold and two
# swizzled copies take ~17; BENCHMARKS.md, step 43). Where the columns are at
# least _FILTER_CL_COLUMNS_RATIO times x, copying x and dy channels-last first
# costs little next to them.
_FILTER_CL_COLUMNS_RATIO = 3


def gemm_filter_channels_last(spec, xa, dya):
  """Whether the GEMM filter gradient of a channels-first call runs on
  channels-last copies (algorithm 4): half types (float32 measured slower:
  cuBLAS's TF32 GEMM on the channels-last operands, 53 us against 31 for
  c512), x's channels in whole 16-byte vectors (the channels-last unfold's
  vector path), windows that are not 1x1 (whose channels-first columns are
  plain copies of x's planes) with columns at least _FILTER_CL_COLUMNS_RATIO
  times x."""
  c = _unfold.image_channels(xa.shape, spec.channels_last)
  dtype = np.dtype(xa.dtype)
  if (spec.channels_last or spec.window.is_identity or not _whole_vectors(c, dtype)
      or dtype not in _HALF):
    return False
  columns = spec.window.kernel_size * _positions(dya, spec)
  return columns >= _FILTER_CL_COLUMNS_RATIO * _positions(xa, spec)


def _channels_last_filter_plan(spec, xa, dya):
  """Algorithm 4's chunks: whole images of x and dy made channels-last, their
  columns and a float32 accumulator; None where one image's exceed the
  workspace cap (then the channels-first path takes the call in chunks of
  positions)."""
  dtype = np.dtype(xa.dtype)
  c, o = _channels(spec, xa, dya)
  k, positions = spec.window.kernel_size, _positions(dya, spec)
  plan = plan_chunks(n=xa.shape[0], positions=positions, cols_row_bytes=c * k * dtype.itemsize,
                     extra_row_bytes=o * dtype.itemsize, limit=spec.workspace_limit,
                     needs_columns=True, groups=spec.groups,
                     acc_bytes=o * (c // spec.groups) * k * 4,
                     image_bytes=c * _positions(xa, spec) * dtype.itemsize)
  return plan if plan.positions >= positions else None


mlir.register_lowering(conv_forward_p, _forward_cuda, platform="cuda")
mlir.register_lowering(conv_backward_data_p, _backward_data_cuda, platform="cuda")
mlir.register_lowering(conv_backward_filter_p, _backward_filter_cuda, platform="cuda")


# --- CPU lowering: unfold / fold custom calls and XLA dots ---------------------

def _dot_precision(spec):
  return lax.Precision.HIGHEST if spec.precision == PRECISION_HIGHEST else None


def _acc_dtype(dtype):
  return np.dtype(np.float32) if np.dtype(dtype) in _HALF else np.dtype(dtype)


def _grouped_columns(x, spec):
  """Columns of x split by group: (N, G, Cg*K, L) cf or (N, L, K, G, Cg) cl."""
  cols = _unfold.unfold(x, window=spec.window, channels_last=spec.channels_last)
  n, g, k = x.shape[0], spec.groups, spec.window.kernel_size
  if spec.channels_last:
    return cols.reshape((n, cols.shape[1], k, g, -1))
  return cols.reshape((n, g, -1, cols.shape[2]))


def _grouped_filter(w, spec):
  """(G, Og, Cg*K) cf or (G, Og, K, Cg) cl."""
  g = spec.groups
  if spec.channels_last:
    return w.reshape((g, w.shape[0] // g, spec.window.kernel_size, w.shape[-1]))
  return w.reshape((g, w.shape[0] // g, -1))


def _grouped_image(y, spec):
  """(N, G, Og, L) cf or (N, L, G, Og) cl."""
  n, g = y.shape[0], spec.groups
  if spec.channels_last:
    return y.reshape((n, -1, g, y.shape[-1] // g))
  return y.reshape((n, g, y.shape[1] // g, -1))


def _forward_cpu_chunk(x, w, *, spec, out_dtype):
  cols, wg = _grouped_columns(x, spec), _grouped_filter(w, spec)
  dn = ((((2, 4), (2, 3)), ((3,), (0,))) if spec.channels_last else (((2,), (2,)), ((1,), (0,))))
  y = lax.dot_general(cols, wg, dn, precision=_dot_precision(spec),
                      preferred_element_type=_acc_dtype(out_dtype))  # (G, N, L, Og)
  out_spatial = spec.window.output_spatial(_unfold.image_spatial(x.shape, spec.channels_last))
  n = x.shape[0]
  if spec.channels_last:
    y = jnp.transpose(y, (1, 2, 0, 3)).reshape((n, *out_spatial, -1))
  else:
    y = jnp.transpose(y, (1, 0, 3, 2)).reshape((n, -1, *out_spatial))
  return y.astype(out_dtype)


def _backward_data_cpu_chunk(dy, w, *, spec, out_dtype, in_spatial):
  dyg, wg = _grouped_image(dy, spec), _grouped_filter(w, spec)
  n, k = dy.shape[0], spec.window.kernel_size
  acc = _acc_dtype(out_dtype)
  if spec.channels_last:
    dcols = lax.dot_general(dyg, wg, (((3,), (1,)), ((2,), (0,))), precision=_dot_precision(spec),
                            preferred_element_type=acc)  # (G, N, L, K, Cg)
    dcols = jnp.transpose(dcols, (1, 2, 3, 0, 4)).reshape((n, dcols.shape[2], -1))
  else:
    dcols = lax.dot_general(dyg, wg, (((2,), (1,)), ((1,), (0,))), precision=_dot_precision(spec),
                            preferred_element_type=acc)  # (G, N, L, Cg*K)
    dcols = jnp.transpose(dcols, (1, 0, 3, 2)).reshape((n, -1, dcols.shape[2]))
  dx = _unfold.fold(dcols, window=spec.window, channels_last=spec.channels_last,
                    spatial=tuple(in_spatial))
  return dx.astype(out_dtype)


def _backward_filter_cpu_chunk(dy, x, *, spec, out_dtype):
  cols, dyg = _grouped_columns(x, spec), _grouped_image(dy, spec)
  acc = _acc_dtype(out_dtype)
  if spec.channels_last:  # dy (N, L, G, Og), cols (N, L, K, G, Cg) -> (G, Og, K, Cg)
    dw = lax.dot_general(dyg, cols, (((0, 1), (0, 1)), ((2,), (3,))),
                         precision=_dot_precision(spec), preferred_element_type=acc)
  else:  # dy (N, G, Og, L), cols (N, G, CgK, L) -> (G, Og, CgK)
    dw = lax.dot_general(dyg, cols, (((0, 3), (0, 3)), ((1,), (1,))),
                         precision=_dot_precision(spec), preferred_element_type=acc)
  o = dy.shape[-1] if spec.channels_last else dy.shape[1]
  cg = _unfold.image_channels(x.shape, spec.channels_last) // spec.groups
  return dw.reshape(_filter_shape(o, cg, spec)).astype(out_dtype)


def _cpu_images_per_chunk(image_shape, spec, item):
  cl = spec.channels_last
  c = _unfold.image_channels(image_shape, cl)
  positions = int(np.prod(spec.window.output_spatial(_unfold.image_spatial(image_shape, cl))))
  per_image = max(1, c * spec.window.kernel_size * positions * item)
  return max(1, spec.workspace_limit // per_image)


def _map_images(fn, image, other, chunk):
  """fn over chunks of `image`'s leading axis (padded to whole chunks)."""
  n = image.shape[0]
  if chunk >= n:
    return fn(image, other)
  steps = -(-n // chunk)
  padded = jnp.pad(image, [(0, steps * chunk - n)] + [(0, 0)] * (image.ndim - 1))
  out = lax.map(lambda part: fn(part, other), padded.reshape((steps, chunk, *image.shape[1:])))
  return out.reshape((steps * chunk, *out.shape[2:]))[:n]


def _forward_cpu_images(x, w, *, spec, out_dtype):
  chunk = _cpu_images_per_chunk(x.shape, spec, np.dtype(x.dtype).itemsize)
  return _map_images(lambda a, b: _forward_cpu_chunk(a, b, spec=spec, out_dtype=out_dtype),
                     x, w, chunk)


def _backward_data_cpu_images(dy, w, *, spec, out_dtype, in_spatial):
  dx_shape = _backward_data_abstract(dy, w, spec=spec, out_dtype=out_dtype,
                                     in_spatial=in_spatial).shape
  chunk = _cpu_images_per_chunk(dx_shape, spec, _acc_dtype(out_dtype).itemsize)
  fn = lambda a, b: _backward_data_cpu_chunk(a, b, spec=spec, out_dtype=out_dtype,
                                             in_spatial=in_spatial)
  return _map_images(fn, dy, w, chunk)


def _backward_filter_cpu_images(dy, x, *, spec, out_dtype):
  n = x.shape[0]
  chunk = _cpu_images_per_chunk(x.shape, spec, np.dtype(x.dtype).itemsize)
  if chunk >= n:
    return _backward_filter_cpu_chunk(dy, x, spec=spec, out_dtype=out_dtype)
  steps = -(-n // chunk)
  pad = lambda v: jnp.pad(v, [(0, steps * chunk - n)] + [(0, 0)] * (v.ndim - 1)).reshape(
      (steps, chunk, *v.shape[1:]))
  acc = _acc_dtype(out_dtype)

  def step(total, parts):
    return total + _backward_filter_cpu_chunk(*parts, spec=spec, out_dtype=acc), None

  zero = jnp.zeros(_backward_filter_abstract(dy, x, spec=spec, out_dtype=acc).shape, acc)
  total, _ = lax.scan(step, zero, (pad(dy), pad(x)))
  return total.astype(out_dtype)


def _row_chunks(spec, image_shape, item):
  """When one image's columns exceed the cap: (r0, rows, spec) for windows
  that compute output rows [r0, r0 + rows) of the first spatial dimension,
  each under the cap (None when no such split is needed). Each window is the
  original one moved by a lower low padding, so it needs no new kernels."""
  cl, w = spec.channels_last, spec.window
  in_spatial = _unfold.image_spatial(image_shape, cl)
  out_spatial = w.output_spatial(in_spatial)
  row_bytes = (_unfold.image_channels(image_shape, cl) * w.kernel_size
               * int(np.prod(out_spatial[1:], dtype=np.int64)) * item)
  if row_bytes * out_spatial[0] <= spec.workspace_limit or out_spatial[0] <= 1:
    return None
  rows = max(1, spec.workspace_limit // max(1, row_bytes))
  window0 = dilated(w.kernel[0], w.rhs_dilation[0])
  span0 = dilated(in_spatial[0], w.lhs_dilation[0])
  chunks = []
  for r0 in range(0, out_spatial[0], rows):
    r = min(rows, out_spatial[0] - r0)
    lo = w.padding[0][0] - r0 * w.stride[0]
    hi = (r - 1) * w.stride[0] + window0 - span0 - lo
    moved = dataclasses.replace(w, padding=((lo, hi),) + w.padding[1:])
    chunks.append((r0, r, dataclasses.replace(spec, window=moved)))
  return chunks


def _rows(y, r0, r, spec):
  return lax.slice_in_dim(y, r0, r0 + r, axis=1 if spec.channels_last else 2)


def _forward_cpu(x, w, *, spec, out_dtype):
  chunks = _row_chunks(spec, x.shape, np.dtype(x.dtype).itemsize)
  if chunks is None:
    return _forward_cpu_images(x, w, spec=spec, out_dtype=out_dtype)
  parts = [_forward_cpu_images(x, w, spec=s, out_dtype=out_dtype) for _, _, s in chunks]
  return jnp.concatenate(parts, axis=1 if spec.channels_last else 2)


def _backward_data_cpu(dy, w, *, spec, out_dtype, in_spatial):
  dx_shape = _backward_data_abstract(dy, w, spec=spec, out_dtype=out_dtype,
                                     in_spatial=in_spatial).shape
  chunks = _row_chunks(spec, dx_shape, _acc_dtype(out_dtype).itemsize)  # columns in acc dtype
  if chunks is None:
    return _backward_data_cpu_images(dy, w, spec=spec, out_dtype=out_dtype,
                                     in_spatial=in_spatial)
  acc = _acc_dtype(out_dtype)
  total = sum(_backward_data_cpu_images(_rows(dy, r0, r, spec), w, spec=s, out_dtype=acc,
                                        in_spatial=in_spatial) for r0, r, s in chunks)
  return total.astype(out_dtype)


def _backward_filter_cpu(dy, x, *, spec, out_dtype):
  chunks = _row_chunks(spec, x.shape, np.dtype(x.dtype).itemsize)
  if chunks is None:
    return _backward_filter_cpu_images(dy, x, spec=spec, out_dtype=out_dtype)
  acc = _acc_dtype(out_dtype)
  total = sum(_backward_filter_cpu_images(_rows(dy, r0, r, spec), x, spec=s, out_dtype=acc)
              for r0, r, s in chunks)
  return total.astype(out_dtype)


for _prim, _fn in ((conv_forward_p, _forward_cpu), (conv_backward_data_p, _backward_data_cpu),
                   (conv_backward_filter_p, _backward_filter_cpu)):
  mlir.register_lowering(_prim, empty_safe(mlir.lower_fun(_fn, multiple_results=False)),
                         platform="cpu")
