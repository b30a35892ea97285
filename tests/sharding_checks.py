"""Partitioning on a mesh of 8 host devices: every op against lax's on the
same shardings.

For each case the compiled HLO of ours holds no more collectives of each kind
than lax's (``jax.jit(f).lower(*a).compile().as_text()``), the outputs are
sharded as lax's, and the values equal the unsharded float64 result.

Needs 8 CPU devices before JAX starts, so ``test_sharding.py`` runs this file
in a subprocess with ``--xla_force_host_platform_device_count=8``; directly:

  XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu \\
      pytest tests/sharding_checks.py
"""

from __future__ import annotations

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import jax_im2col as j

pytestmark = pytest.mark.skipif(len(jax.devices()) < 8, reason="needs 8 devices")

KINDS = ("all-gather", "all-reduce", "reduce-scatter", "collective-permute", "all-to-all")


def collectives(compiled) -> dict:
  """Collectives of each kind in a compiled program (async forms included)."""
  text = compiled.as_text()
  return {k: len(re.findall(rf"= [^=]*? {k}(-start)?\(", text)) for k in KINDS}


_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "u16": 2, "f32": 4,
          "s32": 4, "u32": 4, "f64": 8, "s64": 8, "u64": 8, "c64": 8, "c128": 16}


def collective_bytes(compiled) -> int:
  """The bytes the collectives of a compiled program produce on one device
  (each one's result shapes; an async start's operand and result tuple
  counted by its results)."""
  total = 0
  for line in compiled.as_text().splitlines():
    m = re.search(rf"= (.*?) ({'|'.join(KINDS)})(-start)?\(", line)
    if not m:
      continue
    shapes = re.findall(r"(\w+)\[([0-9,]*)\]", m.group(1))
    if m.group(3):  # async start: (operands..., results...) - the second half
      shapes = shapes[len(shapes) // 2:]
    for dtype, dims in shapes:
      total += _BYTES.get(dtype, 0) * int(np.prod([int(d) for d in dims.split(",") if d] or [1]))
  return total


def _mesh(axis_type=AxisType.Auto):
  return jax.make_mesh((2, 4), ("data", "model"), axis_types=(axis_type,) * 2,
                       devices=jax.devices()[:8])


MESH = _mesh() if len(jax.devices()) >= 8 else None

LAYOUTS = {  # (x, w, y) dimension numbers per spatial rank
    "cl": {1: ("NWC", "WIO", "NWC"), 2: ("NHWC", "HWIO", "NHWC"), 3: ("NDHWC", "DHWIO", "NDHWC")},
    "cf": {1: ("NCW", "OIW", "NCW"), 2: ("NCHW", "OIHW", "NCHW"), 3: ("NCDHW", "OIDHW", "NCDHW")},
}


@dataclasses.dataclass(frozen=True)
class Case:
  """A convolution and the mesh axes of its operands' logical dimensions:
  x: N (batch), C (features), S (first spatial); w: O, I."""
  name: str
  x: dict
  w: dict = dataclasses.field(default_factory=dict)
  nd: int = 2
  n: int = 8
  c: int = 8
  o: int = 16
  size: int = 8
  kernel: int = 3
  stride: int = 1
  padding: object = "SAME"
  lhs_dilation: int = 1
  rhs_dilation: int = 1
  groups: int = 1
  batch_groups: int = 1


def _spec(letters: str, axes: dict) -> P:
  """A PartitionSpec for dimension letters (N, C, O, I and the spatial
  D/H/W; "S" names the first spatial one)."""
  spatial = [ch for ch in letters if ch in "DHW"]
  out = []
  for ch in letters:
    key = "S" if spatial and ch == spatial[0] else ch
    out.append(axes.get(key))
  return P(*out)


def _shape(letters: str, sizes: dict, size: int):
  return tuple(sizes.get(ch, size) for ch in letters)


def operands(case: Case, layout: str, seed=0):
  xl, wl, yl = LAYOUTS[layout][case.nd]
  rng = np.random.default_rng(seed)
  n = case.n
  x = rng.standard_normal(_shape(xl, dict(N=n, C=case.c), case.size))
  w = rng.standard_normal(_shape(wl, dict(O=case.o, I=case.c // case.groups // 1
                                         if case.batch_groups == 1 else case.c),
                                 case.kernel))
  return x, w, (xl, wl, yl)


def conv_fn(conv, case: Case, dn):
  nd = case.nd
  def f(x, w):
    return conv(x, w, (case.stride,) * nd, case.padding,
                lhs_dilation=(case.lhs_dilation,) * nd, rhs_dilation=(case.rhs_dilation,) * nd,
                dimension_numbers=dn, feature_group_count=case.groups,
                batch_group_count=case.batch_groups, precision=lax.Precision.HIGHEST)
  return f


def _specs_equal(a, b, ndim):
  def norm(s):
    entries = tuple(s.spec) + (None,) * (ndim - len(s.spec))
    return tuple(None if e is None else (e,) if isinstance(e, str) else tuple(e) for e in entries)
  return norm(a) == norm(b)


def _programs(f, case, layout):
  """forward, vjp (both gradients), input gradient and filter gradient."""
  def vjp_both(x, w, ct):
    return jax.vjp(f, x, w)[1](ct)

  def vjp_x(x, w, ct):
    return jax.vjp(lambda v: f(v, w), x)[1](ct)[0]

  def vjp_w(x, w, ct):
    return jax.vjp(lambda v: f(x, v), w)[1](ct)[0]
  return {"forward": f, "vjp": vjp_both, "input_gradient": vjp_x, "filter_gradient": vjp_w}


def compare(case: Case, layout: str, ops=("forward", "vjp"), mesh=None, expect=None,
            same_sharding=True):
  """Compiles each op of ours and lax's on the case's shardings; checks
  collectives, output shardings and values. Returns ours' collective counts
  per op."""
  mesh = mesh or MESH
  x, w, (xl, wl, yl) = operands(case, layout)
  xs = NamedSharding(mesh, _spec(xl, case.x))
  ws = NamedSharding(mesh, _spec(wl, {"O": case.w.get("O"), "I": case.w.get("I")}))
  ref_f = conv_fn(lax.conv_general_dilated, case, (xl, wl, yl))
  our_f = conv_fn(j.conv_general_dilated, case, (xl, wl, yl))
  y = ref_f(x, w)
  ct = np.random.default_rng(1).standard_normal(y.shape)
  xd, wd = jax.device_put(x, xs), jax.device_put(w, ws)
  # The cotangent comes sharded as lax's forward result.
  lax_fwd = jax.jit(ref_f).lower(xd, wd).compile()
  ctd = jax.device_put(ct, lax_fwd.output_shardings)
  counts = {}
  for op in ops:
    ref_p, our_p = _programs(ref_f, case, layout)[op], _programs(our_f, case, layout)[op]
    args = (xd, wd) if op == "forward" else (xd, wd, ctd)
    ref_c = jax.jit(ref_p).lower(*args).compile()
    our_c = jax.jit(our_p).lower(*args).compile()
    ref_n, our_n = collectives(ref_c), collectives(our_c)
    counts[op] = our_n
    where = f"{case.name} {layout} {op}: ours {our_n}, lax {ref_n}"
    if case.name in GATHER_FREE:
      # lax gathers here; ours exchanges halos and sums instead.
      assert our_n["all-gather"] == 0 and sum(our_n.values()) <= sum(ref_n.values()), where
    elif case.name in FEWER_BYTES and op != "forward":
      # lax's batch-grouped gradients gather the images; ours keep their split,
      # exchanging halo rows and summing the filter gradient: no all-gather,
      # fewer bytes.
      ours_b, ref_b = collective_bytes(our_c), collective_bytes(ref_c)
      assert our_n["all-gather"] == 0 and ours_b < ref_b, f"{where}, bytes {ours_b} vs {ref_b}"
    else:
      assert all(our_n[k] <= ref_n[k] for k in KINDS), where
    if expect is not None and op in expect:
      want = {k: 0 for k in KINDS} | expect[op]
      assert our_n == want, f"{where}, expected {want}"
    ref_out = jax.tree.leaves(ref_c.output_shardings)
    our_out = jax.tree.leaves(our_c.output_shardings)
    value = our_c(*args)
    unsharded = ref_p(*((x, w) if op == "forward" else (x, w, ct)))
    keeps_split = case.name in FEWER_BYTES and op != "forward"
    for r, o, v in zip(ref_out, our_out, jax.tree.leaves(unsharded)):
      assert _specs_equal(r, o, v.ndim) or not same_sharding or (
          keeps_split and _specs_equal(r, NamedSharding(mesh, P()), v.ndim)), (
          f"{where}: output sharding {o.spec} vs lax's {r.spec}")
    for got, want in zip(jax.tree.leaves(value), jax.tree.leaves(unsharded)):
      np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-9,
                                 atol=1e-9 * float(np.abs(want).max() + 1), err_msg=where)
  return counts


DATA, MODEL, BOTH = "data", "model", ("data", "model")
# Cases where lax all-gathers an operand and ours does not, at the price of a
# collective of another kind (fewer in all).
GATHER_FREE = {"transposed_spatial", "transposed_k2_spatial", "lhs_dilated_strided_spatial"}
# Batch groups with input features or a spatial dimension split: lax's
# gradients gather the images and return replicated results; ours keep the
# split (their results split where lax's are replicated) with fewer bytes.
FEWER_BYTES = {"batch_groups_spatial", "batch_groups_batch_spatial", "batch_groups_input_features"}

# case, and the collectives ours must have exactly (unlisted kinds: none).
CASES = [
    (Case("batch", x={"N": DATA}),
     {"forward": {}, "input_gradient": {}, "filter_gradient": {"all-reduce": 1}}),
    (Case("batch_2d_mesh", x={"N": BOTH}),
     {"forward": {}, "input_gradient": {}, "filter_gradient": {"all-reduce": 1}}),
    (Case("output_features", x={}, w={"O": MODEL}),
     {"forward": {}, "input_gradient": {"all-reduce": 1}, "filter_gradient": {}}),
    (Case("input_features", x={"C": MODEL}, w={"I": MODEL}),
     {"forward": {"all-reduce": 1}}),
    (Case("batch_and_output_features", x={"N": DATA}, w={"O": MODEL}),
     {"forward": {}, "input_gradient": {"all-reduce": 1}, "filter_gradient": {"all-reduce": 1}}),
    (Case("batch_and_input_features", x={"N": DATA, "C": MODEL}, w={"I": MODEL}),
     {"forward": {"all-reduce": 1}}),
    (Case("groups", x={"C": MODEL}, w={"O": MODEL}, groups=4),
     {"forward": {}, "input_gradient": {}, "filter_gradient": {}}),
    (Case("depthwise_batch", x={"N": DATA, "C": MODEL}, w={"O": MODEL}, groups=8),
     {"forward": {}, "input_gradient": {}, "filter_gradient": {"all-reduce": 1}}),
    (Case("spatial", x={"S": MODEL}),
     {"forward": {"collective-permute": 2}}),
    (Case("spatial_stride_2", x={"S": MODEL}, stride=2),
     {"forward": {"collective-permute": 1}}),
    (Case("batch_and_spatial", x={"N": DATA, "S": MODEL}),
     {"forward": {"collective-permute": 2}}),
    (Case("spatial_rhs_dilation", x={"S": DATA}, rhs_dilation=2), None),
    (Case("transposed_batch", x={"N": DATA}, lhs_dilation=2, padding=((2, 1), (2, 1))),
     {"forward": {}, "input_gradient": {}, "filter_gradient": {"all-reduce": 1}}),
    (Case("transposed_spatial", x={"S": DATA}, lhs_dilation=2, padding=((2, 1), (2, 1))),
     {"forward": {"collective-permute": 1}}),
    # The U-Net's upsampling (kernel 2, input dilation 2): blocks need no halo.
    (Case("transposed_k2_spatial", x={"S": MODEL}, kernel=2, lhs_dilation=2,
          padding=((1, 1), (1, 1))), {"forward": {}, "input_gradient": {}}),
    (Case("lhs_dilated_strided_spatial", x={"S": DATA}, stride=2, lhs_dilation=2,
          padding=((1, 1), (1, 1))), {"forward": {}, "input_gradient": {}}),
    (Case("spatial_3d", x={"S": MODEL}, nd=3, o=8), {"forward": {"collective-permute": 2}}),
    # Fallbacks (a dimension replicated), with no more collectives than lax:
    # 2 groups cannot split over 4 devices; VALID windows do not line up.
    (Case("groups_split", x={"C": MODEL}, w={"O": MODEL}, groups=2), None),
    (Case("spatial_valid", x={"S": MODEL}, padding="VALID"), None),
    (Case("batch_groups", x={"N": DATA}, o=16, batch_groups=2),
     {"forward": {}, "input_gradient": {}, "filter_gradient": {}}),
    # The batch over more devices than batch groups (sharding/batch_groups.py):
    # 2 groups over the 4-device axis (a group spans half of it), over both
    # axes (the groups on "data", the images on "model"), and 4 groups over
    # both axes (a group spans half of "model").
    (Case("batch_groups_split", x={"N": MODEL}, n=16, o=16, batch_groups=2),
     {"input_gradient": {}, "filter_gradient": {"all-gather": 1}}),
    (Case("batch_groups_2d_mesh", x={"N": BOTH}, n=16, o=16, batch_groups=2),
     {"forward": {}, "input_gradient": {}, "filter_gradient": {"all-gather": 1}}),
    (Case("batch_groups_4_2d_mesh", x={"N": BOTH}, n=16, o=16, batch_groups=4),
     {"input_gradient": {}}),
    (Case("batch_groups_spatial", x={"S": MODEL}, n=16, o=16, batch_groups=2),
     {"forward": {"collective-permute": 2}, "input_gradient": {"collective-permute": 2},
      "filter_gradient": {"collective-permute": 2, "all-reduce": 1}}),
    (Case("batch_groups_batch_spatial", x={"N": DATA, "S": MODEL}, n=16, o=16, batch_groups=2),
     {"forward": {"collective-permute": 2}, "input_gradient": {"collective-permute": 2},
      "filter_gradient": {"collective-permute": 2, "all-reduce": 1}}),
    (Case("batch_groups_input_features", x={"C": MODEL}, w={"I": MODEL}, n=16, o=16,
          batch_groups=2),
     {"forward": {"all-reduce": 1}, "input_gradient": {}, "filter_gradient": {}}),
    (Case("conv3d_batch", x={"N": DATA}, nd=3, size=4, o=8),
     {"forward": {}, "input_gradient": {}, "filter_gradient": {"all-reduce": 1}}),
    (Case("conv1d_batch_features", x={"N": DATA}, w={"O": MODEL}, nd=1, size=16), None),
]


@pytest.mark.parametrize("layout", ["cl", "cf"])
@pytest.mark.parametrize("case,expect", CASES, ids=[c.name for c, _ in CASES])
def test_conv_partitions_as_lax(case, expect, layout):
  ops = ("forward", "vjp") if expect is None else (
      "forward", "vjp", *[op for op in ("input_gradient", "filter_gradient") if op in expect])
  compare(case, layout, ops=ops, expect=expect)


def _gradients(f):
  """Both first-order gradients of a scalar of f (every op of the family)."""
  return jax.grad(lambda x, w: jnp.sum(jnp.sin(f(x, w))), (0, 1))


@pytest.mark.parametrize("layout", ["cl", "cf"])
@pytest.mark.parametrize("name", ["batch", "output_features"])
def test_second_order(name, layout):
  """The gradient of a function of the filter gradient: each op at the
  second order, partitioned as lax's."""
  case = dict((c.name, c) for c, _ in CASES)[name]
  x, w, dn = operands(case, layout)
  xd = jax.device_put(x, NamedSharding(MESH, _spec(dn[0], case.x)))
  wd = jax.device_put(w, NamedSharding(MESH, _spec(dn[1], case.w)))
  programs = []
  for conv in (lax.conv_general_dilated, j.conv_general_dilated):
    f = conv_fn(conv, case, dn)
    dw = lambda x, w, f=f: _gradients(f)(x, w)[1]
    programs.append(jax.grad(lambda x, w, dw=dw: jnp.sum(dw(x, w) ** 2), (0, 1)))
  _check_programs(programs, (xd, wd), (x, w), f"second order {name} {layout}")


def _check_programs(programs, args, plain_args, where, exact=None):
  """Ours (programs[1]) against lax's (programs[0]): collectives of each
  kind, output shardings, values against lax unsharded."""
  ref_c = jax.jit(programs[0]).lower(*args).compile()
  our_c = jax.jit(programs[1]).lower(*args).compile()
  ref_n, our_n = collectives(ref_c), collectives(our_c)
  where = f"{where}: ours {our_n}, lax {ref_n}"
  assert all(our_n[k] <= ref_n[k] for k in KINDS), where
  if exact is not None:
    assert our_n == {k: 0 for k in KINDS} | exact, where
  want = programs[0](*plain_args)
  got = our_c(*args)
  for r, o, v in zip(jax.tree.leaves(ref_c.output_shardings),
                     jax.tree.leaves(our_c.output_shardings), jax.tree.leaves(want)):
    assert _specs_equal(r, o, np.ndim(v)), f"{where}: output sharding {o.spec} vs {r.spec}"
  for g, v in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
    np.testing.assert_allclose(np.asarray(g), np.asarray(v), rtol=1e-9,
                               atol=1e-9 * float(np.abs(v).max() + 1), err_msg=where)
  return our_n


@pytest.mark.parametrize("layout", ["cl", "cf"])
def test_jvp_and_vmap(layout):
  """Forward mode, and per-example gradients (vmap of grad) of a
  batch-sharded convolution."""
  case = Case("batch", x={"N": DATA})
  x, w, dn = operands(case, layout)
  xd = jax.device_put(x, NamedSharding(MESH, _spec(dn[0], case.x)))
  wd = jax.device_put(w, NamedSharding(MESH, P()))
  fs = [conv_fn(conv, case, dn) for conv in (lax.conv_general_dilated, j.conv_general_dilated)]
  jvps = [lambda x, w, f=f: jax.jvp(f, (x, w), (jnp.cos(x), jnp.sin(w))) for f in fs]
  _check_programs(jvps, (xd, wd), (x, w), f"jvp {layout}", exact={})
  per_example = [lambda x, w, f=f: jax.vmap(
      lambda xi: jax.grad(lambda w: jnp.sum(f(xi[None], w) ** 2))(w))(x) for f in fs]
  _check_programs(per_example, (xd, wd), (x, w), f"per-example gradients {layout}", exact={})


@pytest.mark.parametrize("layout", ["cl", "cf"])
def test_gspmd(layout):
  """The GSPMD callbacks (infer_sharding_from_operands, partition,
  propagate_user_sharding), with Shardy off."""
  old = jax.config.jax_use_shardy_partitioner
  jax.config.update("jax_use_shardy_partitioner", False)
  try:
    for case, expect in CASES:
      if case.name in ("batch", "output_features", "input_features", "spatial"):
        compare(case, layout, ops=("forward", "vjp"), expect=None)
      if case.name == "groups":  # lax gathers both operands here; ours keeps the groups split
        compare(case, layout, ops=("forward", "vjp"), expect={"forward": {}, "vjp": {}},
                same_sharding=False)
  finally:
    jax.config.update("jax_use_shardy_partitioner", old)


@pytest.mark.parametrize("layout", ["cl", "cf"])
def test_explicit_axes(layout):
  """Explicit mesh axes: the results' sharding types are lax's, and so is the
  compiled program's communication."""
  mesh = _mesh(AxisType.Explicit)
  case = Case("batch", x={"N": DATA})
  x, w, dn = operands(case, layout)
  with jax.set_mesh(mesh):
    xd = jax.device_put(x, _spec(dn[0], case.x))
    wd = jax.device_put(w, P())
    fs = [conv_fn(conv, case, dn) for conv in (lax.conv_general_dilated, j.conv_general_dilated)]
    types = [jax.jit(f).trace(xd, wd).out_info for f in fs]
    assert types[0].sharding.spec == types[1].sharding.spec, types
    grads = [jax.grad(lambda x, w, f=f: jnp.sum(f(x, w) ** 2), (0, 1)) for f in fs]
    types = [jax.jit(g).trace(xd, wd).out_info for g in grads]
    assert [t.sharding.spec for t in types[0]] == [t.sharding.spec for t in types[1]], types
    _check_programs(grads, (xd, wd), (x, w), f"explicit axes {layout}", exact={"all-reduce": 1})

    # Model parallel too, which lax's types refuse without out_sharding: the
    # result keeps the filter's output-feature split; the input gradient and
    # the filter gradient each end in one all-reduce.
    case = Case("batch_and_output_features", x={"N": DATA}, w={"O": MODEL})
    x, w, dn = operands(case, layout)
    xd, wd = jax.device_put(x, _spec(dn[0], case.x)), jax.device_put(w, _spec(dn[1], case.w))
    f = conv_fn(j.conv_general_dilated, case, dn)
    y = jax.jit(f).trace(xd, wd).out_info
    assert _specs_equal(y.sharding, NamedSharding(mesh, _spec(dn[2], {"N": DATA, "C": MODEL})),
                        len(y.shape)), y
    g = jax.jit(jax.grad(lambda x, w: jnp.sum(f(x, w) ** 2), (0, 1)))
    compiled = g.lower(xd, wd).compile()
    assert collectives(compiled) == {k: 0 for k in KINDS} | {"all-reduce": 2}
    want = jax.grad(lambda x, w: jnp.sum(conv_fn(lax.conv_general_dilated, case, dn)(x, w) ** 2),
                    (0, 1))(x, w)
    for got, v in zip(compiled(xd, wd), want):
      np.testing.assert_allclose(np.asarray(got), np.asarray(v), rtol=1e-9, atol=1e-9)

    # unfold of channel-split images: its gradient comes back with the image's type.
    unfold = j.unfold_channels_last if layout == "cl" else j.unfold
    v = jax.device_put(x, _image_spec(layout, n=DATA, c=MODEL))
    gv = jax.jit(jax.grad(lambda v: jnp.sum(unfold(v, 3, padding=1) ** 2)))
    assert _specs_equal(gv.trace(v).out_info.sharding, v.sharding, v.ndim)
    np.testing.assert_allclose(np.asarray(gv(v)), 2 * np.asarray(
        jax.grad(lambda v: jnp.sum(unfold(v, 3, padding=1) ** 2) / 2)(x)), rtol=1e-12)


@pytest.mark.parametrize("layout", ["cl", "cf"])
@pytest.mark.parametrize("name", ["batch_groups", "batch_groups_split", "batch_groups_2d_mesh"])
def test_explicit_axes_batch_groups(name, layout):
  """Batch groups with Explicit mesh axes, where lax's own transpose raises
  (its regrouping reshape has no sharding type): the types of the result and
  of both gradients, and values against the unsharded float64 result."""
  mesh = _mesh(AxisType.Explicit)
  case = dict((c.name, c) for c, _ in CASES)[name]
  x, w, dn = operands(case, layout)
  axes = case.x["N"]
  images = {"batch_groups": (), "batch_groups_split": (), "batch_groups_2d_mesh": ("model",)}[name]
  features = {"batch_groups": ("data",), "batch_groups_split": (),
              "batch_groups_2d_mesh": ("data",)}[name]
  f = conv_fn(j.conv_general_dilated, case, dn)
  ref = conv_fn(lax.conv_general_dilated, case, dn)
  with jax.set_mesh(mesh):
    xd, wd = jax.device_put(x, _spec(dn[0], case.x)), jax.device_put(w, P())
    y = jax.jit(f).trace(xd, wd).out_info
    want_y = _spec(dn[2], {"N": images[0] if images else None,
                           "C": features[0] if features else None})
    assert _specs_equal(y.sharding, NamedSharding(mesh, want_y), len(y.shape)), (y, axes)
    grad = jax.jit(jax.grad(lambda x, w: jnp.sum(f(x, w) ** 2), (0, 1)))
    types = grad.trace(xd, wd).out_info
    assert [_specs_equal(t.sharding, a.sharding, a.ndim) for t, a in zip(types, (xd, wd))] == [
        True, True], types
    got = grad(xd, wd)
  want = jax.grad(lambda x, w: jnp.sum(ref(x, w) ** 2), (0, 1))(x, w)
  np.testing.assert_allclose(np.asarray(jax.jit(f)(xd, wd)), np.asarray(ref(x, w)), rtol=1e-9,
                             atol=1e-9)
  for g, v in zip(got, want):
    np.testing.assert_allclose(np.asarray(g), np.asarray(v), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("layout", ["cl", "cf"])
@pytest.mark.parametrize("batch_groups", [1, 2])
def test_shard_map_sums_a_replicated_filters_gradient(layout, batch_groups):
  """Inside shard_map the filter is replicated and the images split: the
  filter's gradient is summed over the shards, as lax's is (with batch
  groups, each shard's images grouped on their own, as lax groups them)."""
  case = Case("batch", x={"N": BOTH}, n=16, batch_groups=batch_groups)
  x, w, dn = operands(case, layout)
  grads = []
  for conv in (lax.conv_general_dilated, j.conv_general_dilated):
    f = conv_fn(conv, case, dn)
    loss = lambda w, x, f=f: jnp.sum(f(x, w) ** 2)
    grads.append(jax.shard_map(jax.grad(loss), mesh=MESH, in_specs=(P(), P(BOTH)),
                               out_specs=P()))
  want = jax.jit(grads[0])(w, x)
  if batch_groups == 1:
    want = jax.grad(lambda w: jnp.sum(conv_fn(lax.conv_general_dilated, case, dn)(x, w) ** 2))(w)
  for g in grads:
    np.testing.assert_allclose(np.asarray(jax.jit(g)(w, x)), want, rtol=1e-9, atol=1e-9)
  _check_programs(grads, (w, x), (w, x), f"shard_map {layout}", exact={"all-reduce": 1})


# --- unfold, fold and the patches --------------------------------------------------

def _columns_programs(name, layout):
  cl = layout == "cl"
  unfold = j.unfold_channels_last if cl else j.unfold
  fold = j.fold_channels_last if cl else j.fold
  if name == "unfold":
    return lambda x: unfold(x, 3, padding=1)
  if name == "unfold_1x1_strided":
    return lambda x: unfold(x, 1, stride=2)
  if name == "fold_of_unfold":
    return lambda x: fold(unfold(x, 3, padding=1, stride=2) * 2.0, (8, 8), 3, padding=1, stride=2)
  raise ValueError(name)


def _image_spec(layout, n=None, c=None):
  return P(n, None, None, c) if layout == "cl" else P(n, c)


# (program, the image's sharding, exact collectives of the forward and of its gradient)
COLUMN_CASES = [
    ("unfold", dict(n=BOTH), {}, {}),
    ("unfold", dict(c=MODEL), {}, {}),
    ("unfold", dict(n=DATA, c=MODEL), {}, {}),
    ("unfold_1x1_strided", dict(n=DATA, c=MODEL), {}, {}),
    ("fold_of_unfold", dict(n=DATA, c=MODEL), {}, {}),
]


@pytest.mark.parametrize("setting", ["own", "auto"])
@pytest.mark.parametrize("layout", ["cl", "cf"])
@pytest.mark.parametrize("name,shard,fwd,grad", COLUMN_CASES,
                         ids=[f"{c[0]}-{'-'.join(c[1])}" for c in COLUMN_CASES])
def test_columns_partition(name, shard, fwd, grad, layout, setting):
  """unfold / fold keep the batch and channel shardings with no collective,
  except channels-last columns of a K > 1 window, which cannot hold a
  channel block: their image's channels are gathered (one all-gather; the
  gradient's fold slices its channels locally). Under "auto" on the CPU each
  shard's fold is the lax route (columns/fold_selection.py)."""
  with j.force_algorithm(setting):
    _check_columns_partition(name, shard, fwd, grad, layout)


def _check_columns_partition(name, shard, fwd, grad, layout):
  f = _columns_programs(name, layout)
  rng = np.random.default_rng(0)
  x = rng.standard_normal((8, 8, 8, 8))
  xd = jax.device_put(x, NamedSharding(MESH, _image_spec(layout, **shard)))
  g = jax.grad(lambda x: jnp.sum(jnp.sin(f(x))))
  if layout == "cl" and "c" in shard and name != "unfold_1x1_strided":
    fwd, grad = {"all-gather": 1}, {"all-gather": 1}
  for prog, want in ((f, fwd), (g, grad)):
    compiled = jax.jit(prog).lower(xd).compile()
    counts = collectives(compiled)
    assert counts == {k: 0 for k in KINDS} | want, (name, shard, layout, counts)
    np.testing.assert_allclose(np.asarray(compiled(xd)), np.asarray(prog(x)), rtol=1e-12,
                               atol=1e-12)
  out = jax.jit(f).lower(xd).compile().output_shardings
  if not (layout == "cl" and "c" in shard and name == "unfold"):
    assert out.spec[0] == shard.get("n"), out


@pytest.mark.parametrize("layout", ["cl", "cf"])
def test_patches_partition_as_lax(layout):
  """conv_general_dilated_patches (features channel-major in every layout):
  batch and channels kept, with no more collectives than lax's."""
  dn = ("NHWC", "OIHW", "NHWC") if layout == "cl" else ("NCHW", "OIHW", "NCHW")
  x = np.random.default_rng(0).standard_normal((8, 8, 8, 8))
  xd = jax.device_put(x, NamedSharding(MESH, _image_spec(layout, n=DATA, c=MODEL)))
  programs = []
  for patches in (lax.conv_general_dilated_patches, j.conv_general_dilated_patches):
    f = lambda x, p=patches: p(x, (3, 3), (1, 1), "SAME", dimension_numbers=dn,
                               precision=lax.Precision.HIGHEST)
    programs.append(lambda x, f=f: (f(x), jax.grad(lambda v: jnp.sum(jnp.sin(f(v))))(x)))
  counts = _check_programs(programs, (xd,), (x,), f"patches {layout}")
  assert sum(counts.values()) == 0, counts


# --- compilation caches ---------------------------------------------------------------

_EVENTS: list = []
jax.monitoring.register_event_duration_secs_listener(lambda name, *a, **k: _EVENTS.append(name))
jax.monitoring.register_event_listener(lambda name, *a, **k: _EVENTS.append(name))
_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"


def _batch_gradient():
  case = Case("batch", x={"N": DATA})
  x, w, dn = operands(case, "cl")
  f = conv_fn(j.conv_general_dilated, case, dn)
  g = jax.grad(lambda x, w: jnp.sum(f(x, w) ** 2), (0, 1))
  return g, (jax.device_put(x, NamedSharding(MESH, P(DATA))), jax.device_put(w, NamedSharding(MESH, P())))


def test_recompiling_hits_the_in_process_caches():
  """A second jit of the same function compiles nothing: the partitioned
  lowering's callbacks and static arguments are stable."""
  g, args = _batch_gradient()
  jax.jit(g).lower(*args).compile()
  _EVENTS.clear()
  jax.jit(g).lower(*args).compile()
  assert _BACKEND_COMPILE not in _EVENTS, _EVENTS


_PERSISTENT = """
import sys, jax
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
jax.config.update("jax_remove_custom_partitioning_ptr_from_cache_key", sys.argv[2] == "1")
sys.path.insert(0, sys.argv[3])
import sharding_checks as S
hits = []
jax.monitoring.register_event_listener(lambda n, *a, **k: hits.append(n))
g, args = S._batch_gradient()
jax.jit(g).lower(*args).compile()
print("HITS", hits.count("/jax/compilation_cache/cache_hits"))
"""


def test_persistent_cache(tmp_path):
  """Across processes: custom_partitioning puts a per-lowering callback id
  into the program, so the persistent cache misses, unless
  jax_remove_custom_partitioning_ptr_from_cache_key is set; then it hits
  (each partitioned call also names itself and the package's sources, so
  that setting never confuses two different ops)."""
  import subprocess
  import sys
  here = str(__import__("pathlib").Path(__file__).resolve().parent)

  def hits(cache, strip):
    done = subprocess.run([sys.executable, "-c", _PERSISTENT, str(cache), strip, here],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-5000:]
    return int(done.stdout.split("HITS")[-1])

  assert [hits(tmp_path / "kept", "0") for _ in range(2)] == [0, 0]
  assert [hits(tmp_path / "stripped", "1") for _ in range(2)] == [0, 1]


def test_algorithm_selection_runs_on_the_shards_shapes(monkeypatch):
  """Each shard's lowering chooses its algorithm (and workspace plan) for
  the shard's shapes: here a quarter of the images and half the output
  features."""
  from jax_im2col.conv import lowering_cpu
  seen = []
  select = lowering_cpu.select

  def recording(problem, device):
    seen.append((problem.op, problem.n, problem.c, problem.o))
    return select(problem, device)
  monkeypatch.setattr(lowering_cpu, "select", recording)
  case = Case("batch_and_output_features", x={"N": DATA}, w={"O": MODEL}, n=8, c=8, o=16)
  x, w, dn = operands(case, "cl")
  xd = jax.device_put(x, NamedSharding(MESH, _spec(dn[0], case.x)))
  wd = jax.device_put(w, NamedSharding(MESH, _spec(dn[1], case.w)))
  f = conv_fn(j.conv_general_dilated, case, dn)
  jax.jit(jax.grad(lambda x, w: jnp.sum(f(x, w) ** 2), (0, 1))).lower(xd, wd).compile()
  assert seen and all((n, c, o) == (4, 8, 4) for _, n, c, o in seen), seen
  assert {op for op, *_ in seen} == {"forward", "input_gradient", "filter_gradient"}, seen
