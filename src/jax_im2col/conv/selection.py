"""The choice of algorithm for each op of a convolution.

The core is one pure function, ``select(problem, device)``: from the op
(forward, input gradient, filter gradient), its geometry, dtype, precision,
layout and the device's capabilities, it returns the algorithm and every
parameter the lowering passes on (chunks, splits, workspace bytes), with the
reason. The CUDA lowering, ``explain`` and the tests all call it.

The order of preference (PyTorch's ``select_conv_backend`` has the same
shape): an algorithm the user forced; XLA's own convolution where the
measured rules say cuDNN is faster (routing.py); then the project's
algorithms, most specialised first (_candidates). When each applies is
applicability.py's; the sizes each plan needs, workspace.py's.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import numpy as np

from ..columns.primitives import image_channels, image_spatial
from ..common.device import DeviceCaps
from . import applicability, routing
from .depthwise_plan import depthwise_applies, depthwise_filter_plan
from .primitives import FILTER_GRADIENT, FORWARD, INPUT_GRADIENT, ConvSpec
from .workspace import (BLAS_WORKSPACE_BYTES, align, conv_1d_cf_slices, direct_filter_slices,
                        images_per_chunk, implicit_filter_splits, implicit_splits, plan_chunks)

# The `algorithm` attribute of the FFI calls (Algorithm in lib/conv/conv_call.h).
FFI_ALGORITHMS = {"gemm": 0, "direct": 1, "implicit": 2, "implicit_packed": 3,
                  "gemm_channels_last": 4, "gemm_per_image": 5, "conv1d_cf": 6, "depthwise": 7}

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
                 max(1, applicability.FILTER_MAX_POSITIONS // max(1, positions)))
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
          and (applicability.is_half(p.dtype) or np.dtype(p.dtype) == np.float32))


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
          and applicability.whole_vectors(p.c, p.dtype)
          and (applicability.is_half(p.dtype) or np.dtype(p.dtype) == np.float32))


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
  return (applicability.is_half(p.dtype) and p.spec.window.kernel_size * p.out_positions
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
                                      applicability.direct_filter_kind(spec, p.c, p.o, p.dtype), taps)
  acc = 8 if np.dtype(p.dtype) == np.float64 else 4
  return Choice("direct", why, p.n, rows, slices * p.o * taps * acc)


def _depthwise_choice(p: ConvProblem) -> Choice:
  """The depthwise kernels (lib/conv/depthwise/): tensor-core Toeplitz GEMMs,
  streamed 3x3 windows or register-blocked tiles for any window (the kernel
  is picked in depthwise_conv.cu); the filter gradient in slices of rows
  (of column tiles too, for the staged 3x3 kernel, and groups of bands for
  the tensor-core one, within the same count) whose partial sums are added
  in order (depthwise_filter_plan)."""
  why = ("depthwise kernel: 16-bit channels-last windows of 7+ taps along W at unit stride as Toeplitz GEMMs "
         "on the tensor cores, 3x3 windows streamed down the rows, else halo tiles in shared memory with a "
         "register ring along each row"
         if p.op != FILTER_GRADIENT else
         "depthwise filter gradient: 16-bit channels-last windows of 7+ taps along W at unit stride along W "
         "as GEMMs on the tensor cores whose accumulators are the taps, 3x3 windows with their input and dy "
         "rows staged in shared memory, else register rings over taps; slices summed in order")
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
  if applicability.conv_1d_cf_applies(spec, dtype, c, o, device, in_w=in_w, out_w=out_w, op=p.op):
    found["conv1d_cf"] = lambda: _conv1d_choice(p, device)
  if depthwise_applies(op=p.op, nd=spec.window.nd, channels_last=spec.channels_last, dtype=dtype,
                       groups=spec.groups, c=c, o=o, lhs_dilation=spec.window.lhs_dilation):
    found["depthwise"] = lambda: _depthwise_choice(p)
  if p.op in (FORWARD, INPUT_GRADIENT):
    grad = p.op == INPUT_GRADIENT
    extent = applicability.implicit_pass_extent(spec, p.in_spatial if grad else p.out_spatial,
                                  input_gradient=grad)
    pack = applicability.packed_factor(spec, dtype, c, o, device, input_gradient=grad)
    if pack:
      found["implicit_packed"] = lambda: _implicit_choice(p, device, pack=pack, extent=extent,
                                                          input_gradient=grad)
    elif applicability.use_implicit(spec, dtype, c, o, extent[0], device, input_gradient=grad,
                                    images=p.n, passes=extent[2]):
      found["implicit"] = lambda: _implicit_choice(p, device, pack=1, extent=extent,
                                                   input_gradient=grad)
    if applicability.direct_applies(spec, c, o):
      found["direct"] = lambda: _direct_choice(p)
    if grad:
      found["gemm"] = lambda: _gemm_choice(
          p, columns_item=0 if spec.window.is_identity else (4 if applicability.is_half(dtype) else p.item),
          transposed_dy=False, accumulator=False, why="GEMM into columns, then fold (col2im)")
    else:
      found["gemm"] = lambda: _gemm_choice(
          p, columns_item=0 if spec.window.is_identity else p.item, transposed_dy=False,
          accumulator=False)
    return found
  positions = p.out_positions
  pack = applicability.packed_filter_factor(spec, dtype, c, o, device, positions=positions, images=p.n)
  if pack:
    found["implicit_packed"] = lambda: _implicit_filter_choice(p, device, pack)
  if applicability.direct_applies(spec, c, o):
    found["direct"] = lambda: _direct_choice(p)
  if applicability.use_implicit_filter(spec, dtype, c, o, device, positions=positions, images=p.n):
    found["implicit"] = lambda: _implicit_filter_choice(p, device)
  if _per_image_filter_applies(p) and positions >= _PER_IMAGE_MIN_POSITIONS:
    found["gemm_per_image"] = lambda: _per_image_filter_choice(p)
  if _gemm_channels_last_filter_applies(p) and _prefer_gemm_channels_last(p):
    found["gemm_channels_last"] = lambda: _gemm_channels_last_filter_choice(p)
  no_columns = spec.window.is_identity and spec.channels_last
  found["gemm"] = lambda: _gemm_choice(p, columns_item=0 if no_columns else p.item,
                                       transposed_dy=not spec.channels_last,
                                       accumulator=applicability.is_half(dtype))
  return found


def _applicable(p: ConvProblem, device: DeviceCaps) -> dict[str, Callable[[], Optional[Choice]]]:
  """Every algorithm that can run p, preferred or not (for forcing one by
  name): the candidates, and those the preference rules passed over."""
  spec, dtype, c, o = p.spec, p.dtype, p.c, p.o
  found = dict(_candidates(p, device))
  if p.op in (FORWARD, INPUT_GRADIENT):
    grad = p.op == INPUT_GRADIENT
    extent = applicability.implicit_pass_extent(spec, p.in_spatial if grad else p.out_spatial,
                                  input_gradient=grad)
    if "implicit" not in found and applicability.implicit_applies(spec, dtype, c, o, device, input_gradient=grad):
      found["implicit"] = lambda: _implicit_choice(p, device, pack=1, extent=extent,
                                                   input_gradient=grad)
    return found
  if "implicit" not in found and applicability.implicit_filter_applies(spec, dtype, c, o, device,
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
  y, input gradient (dy, w) -> dx, filter gradient (dy, x) -> dw. A
  batch-grouped op's is that of the grouped op on stacked images
  (conv/stacking.py), which its lowering runs."""
  cl, bg = spec.channels_last, spec.batch_groups
  if op == FORWARD:
    x, y = avals_in[0], aval_out
  elif op == INPUT_GRADIENT:
    x, y = aval_out, avals_in[0]
  else:
    x, y = avals_in[1], avals_in[0]
  return ConvProblem(op, dataclasses.replace(spec, batch_groups=1), np.dtype(avals_in[0].dtype),
                     np.dtype(aval_out.dtype), x.shape[0] // bg, image_channels(x.shape, cl) * bg,
                     image_channels(y.shape, cl),
                     tuple(image_spatial(x.shape, cl)), tuple(image_spatial(y.shape, cl)))
