"""The whole-model benchmark (benchmarks/models.py) on the CPU.

Every model of the zoo at its tiny preset takes one train step's loss and
gradients with XLA's float64 convolution and with ours, which must agree to
float64 rounding (XLA's own convolution is the oracle). The per-layer
recording must find each full-size model's distinct convolutions (for
ResNet-50, MobileNetV2 and ConvNeXt-T those of shared/models-h200.md), the
command line must write its reports, and the data-parallel benchmark
(benchmarks/multi_gpu.py) must compile ours' sharded train steps with XLA's
collectives.
"""

import json
import os
import pathlib
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))

import models  # noqa: E402  (benchmarks/models.py, by path)
from model_bench import agreement, per_layer  # noqa: E402
from model_bench.problem import IMPLS, init_variables  # noqa: E402
from model_bench.join import join  # noqa: E402
from model_bench.steps import loss_and_grad  # noqa: E402
from model_zoo import MODELS  # noqa: E402
from model_zoo.layers import LaxConv  # noqa: E402


def _ours_gradient_jaxpr(spec) -> str:
  """The jaxpr of ours' tiny model's loss and gradient, traced abstractly."""
  p = spec.presets["tiny"]
  x = jax.ShapeDtypeStruct((p.batch, *p.input_shape), jnp.float32)
  module = spec.build("tiny", IMPLS["ours"], None)
  variables = jax.eval_shape(lambda k, x: module.init(k, x, train=False),
                             jax.random.key(0, impl="rbg"), x)
  labels = jax.ShapeDtypeStruct((p.batch, *p.input_shape[:-1]) if spec.dense_labels else (p.batch,),
                                jnp.int32)
  state = {k: v for k, v in variables.items() if k != "params"}
  return str(jax.make_jaxpr(loss_and_grad(module))(variables["params"], state, x, labels))


@pytest.mark.parametrize("name", list(MODELS))
def test_float64_train_step_matches_xla(name):
  spec = MODELS[name]
  assert "im2col_conv_forward" in _ours_gradient_jaxpr(spec)  # ours is wired in
  result = agreement.float64_agreement(spec, "tiny", init_variables(spec, "tiny"))
  assert result["loss_rel"] < 1e-10, result
  assert result["grad_rel"] < 1e-8, result
  assert result["grad_worst_leaf_rel"] < 1e-8, result


# (distinct convolutions, uses) of one forward at the full preset.
FULL_CONVS = {"resnet50": (23, 53), "mobilenetv2": (30, 52), "convnext_t": (8, 22),
              "unet3d": (15, 18), "wavenet": (13, 93)}


@pytest.mark.parametrize("name", list(MODELS))
def test_per_layer_recording_finds_every_convolution(name):
  uses = per_layer.record_convs(MODELS[name], "full", "f32")
  assert (len(uses), sum(uses.values())) == FULL_CONVS[name]
  calls = list(uses)
  if name == "convnext_t":  # shared/models-h200.md's second row: the 7x7 depthwise
    assert (calls[1].lhs_shape, calls[1].rhs_shape, calls[1].feature_group_count,
            uses[calls[1]]) == ((32, 56, 56, 96), (7, 7, 1, 96), 96, 3)
  if name == "unet3d":  # the three transposed convolutions as lhs-dilated ones
    transposed = [c for c in calls if c.lhs_dilation == (2, 2, 2)]
    assert [c.lhs_shape[1] for c in transposed] == [8, 16, 32]
    assert all(c.padding == ((1, 1),) * 3 and c.rhs_shape[:3] == (2, 2, 2) for c in transposed)
  if name == "wavenet":  # causal: padded by the dilation on the left only
    dilated = [c for c in calls if c.rhs_shape[0] == 2 and c.rhs_shape[1] == 128]
    assert [(c.rhs_dilation, c.padding) for c in dilated] == [((2**i,), ((2**i, 0),))
                                                              for i in range(10)]


def test_per_layer_timing_and_explain_share(monkeypatch):
  """One convolution timed alone; with an `explain` (faked: the forward ours,
  the gradients XLA's) the share of ours' time in own kernels is the
  forward's share."""
  call = next(iter(per_layer.record_convs(MODELS["wavenet"], "tiny", "f32")))

  class Choice:
    def __init__(self, algorithm):
      self.algorithm, self.reason = algorithm, "test"

  def explain(lhs, rhs, window_strides, padding, **kwargs):
    assert (lhs.shape, rhs.shape, kwargs["rhs_dilation"]) == (call.lhs_shape, call.rhs_shape,
                                                          call.rhs_dilation)
    return {"forward": Choice("im2col"), "input_gradient": Choice("xla"),
            "filter_gradient": Choice("xla")}

  monkeypatch.setattr(per_layer.jax_im2col, "explain", explain, raising=False)
  row = {"uses": 2, "explain": per_layer.explain(call)}
  row["times"] = per_layer.time_conv(call, steps=1, repeats=1, split_gradients=True)
  t = row["times"]
  assert set(t) == {"fwd", "bwd", "dgrad", "wgrad"}
  assert all(t[op][f"{impl}_ms"] > 0 for op in t for impl in IMPLS)
  ours = {op: t[op]["ours_ms"] for op in ("fwd", "dgrad", "wgrad")}
  assert per_layer.own_kernel_share([row]) == pytest.approx(ours["fwd"] / sum(ours.values()))
  assert per_layer.own_kernel_share([{**row, "explain": None}]) is None


def test_fallback_conv_matches_flax_conv():
  """LaxConv (for a flax without nn.Conv's conv_general_dilated field) has
  nn.Conv's parameters and outputs, strided, grouped, dilated and lhs-dilated."""
  kwargs = dict(features=6, kernel_size=(3, 2), strides=(2, 1), padding=((1, 2), (0, 1)),
                input_dilation=(1, 2), kernel_dilation=(2, 1), feature_group_count=2)
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.standard_normal((2, 9, 7, 4)), jnp.float32)
  key = jax.random.key(1)
  shapes = jax.eval_shape(nn.Conv(**kwargs).init, key, x)
  fallback = LaxConv(**kwargs)
  assert jax.eval_shape(fallback.init, key, x) == shapes
  variables = jax.tree.map(lambda s: jnp.asarray(rng.standard_normal(s.shape), s.dtype), shapes)
  np.testing.assert_allclose(fallback.apply(variables, x), nn.Conv(**kwargs).apply(variables, x),
                             rtol=1e-5, atol=1e-5)


def test_command_line_writes_reports(tmp_path):
  results = models.main(["--preset", "tiny", "--models", "wavenet", "--dtypes", "f32",
                         "--modes", "train,infer", "--f64-check", "off", "--out", str(tmp_path)])
  written = json.loads((tmp_path / "models.json").read_text())
  assert written == json.loads(json.dumps(results))
  (record,) = written["models"]
  assert record["errors"] == {}
  run = record["runs"]["f32"]
  for mode in ("train", "infer"):
    assert run[mode]["timing"]["xla_ms"] > 0 and run[mode]["timing"]["ours_ms"] > 0
  assert run["train"]["gradients"]["agrees"]
  # float32 on the CPU: DEFAULT is full precision, so both sit on the HIGHEST-precision gradients.
  assert run["train"]["gradients"]["ours_vs_highest"] < 1e-4
  assert run["train"]["gradients"]["xla_vs_highest"] < 1e-4
  assert run["train"]["loss"]["rel"][0] < 1e-5
  assert run["train"]["memory"]["ours"]["peak"] > 0
  assert written["environment"]["platform"] == "cpu"
  md = (tmp_path / "models.md").read_text()
  assert "| WaveNet (gated, causal dilated 1-D) | 2, 16x1 | f32 |" in md
  assert "### Errors" not in md


def test_join_keeps_the_latest_run_of_each_model_and_dtype():
  def part(date, commit, runs):
    env = {"date": date, "git_commit": commit, "git_dirty": False}
    return {"environment": env, "config": {"steps": 10, "repeats": 5},
            "models": [{"model": name, "runs": {d: {"tag": commit} for d in dtypes}, "errors": {}}
                       for name, dtypes in runs.items()]}

  early = part("2026-01-01T00:00:00", "aaa", {"resnet50": ["f32", "bf16"], "wavenet": ["f32"]})
  late = part("2026-01-02T00:00:00", "bbb", {"resnet50": ["f32"]})
  joined = join([late, early], order=["wavenet", "resnet50"])
  assert [m["model"] for m in joined["models"]] == ["wavenet", "resnet50"]
  runs = joined["models"][1]["runs"]
  assert list(runs) == ["f32", "bf16"]
  assert runs["f32"]["tag"] == "bbb" and runs["bf16"]["tag"] == "aaa"
  assert [s["commit"] for s in joined["sources"]] == ["aaa", "bbb"]
  assert joined["environment"]["git_commit"] == "bbb"


def test_data_parallel_step_has_the_collectives_of_xla(tmp_path):
  # benchmarks/multi_gpu.py on 2 forced host devices (its own process: the
  # device count is fixed at start): ResNet-50 and the U-Net's data-parallel
  # train steps, the batch sharded, hold the same collectives with our
  # convolution as with XLA's, none of them a gather, and take the same first
  # loss.
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2").strip()
  script = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "multi_gpu.py"
  run = subprocess.run([sys.executable, str(script), "--preset", "tiny", "--devices", "1,2",
                        "--steps", "1", "--repeats", "1", "--out", str(tmp_path)],
                       env=env, capture_output=True, text=True, timeout=600)
  assert run.returncode == 0, run.stderr[-3000:]
  rows = json.loads((tmp_path / "multi_gpu.json").read_text())["rows"]
  by = {(r["model"], r["devices"], r["impl"]): r for r in rows}
  assert len(by) == 8 and not any("error" in r for r in rows), rows
  for model in ("resnet50", "unet3d"):
    xla, ours = by[(model, 2, "xla")], by[(model, 2, "ours")]
    assert ours["collectives"] == xla["collectives"], (model, ours["collectives"], xla["collectives"])
    assert ours["collectives"]["all-reduce"] > 0 and ours["collectives"]["all-gather"] == 0
    assert by[(model, 1, "ours")]["collectives"] == {k: 0 for k in ours["collectives"]}
    assert abs(ours["first_loss"] - xla["first_loss"]) <= 1e-5 * abs(xla["first_loss"])
    assert ours["scaling_efficiency"] > 0 and "added_ms" in ours
  assert "| ms over 1 device | spread | ours / xla |" in (tmp_path / "multi_gpu.md").read_text()


def test_routing_candidate_sends_its_class_to_xla_while_traced():
  """benchmarks/routing_ab.py: a candidate rule moves the ops it names, and
  only those, to XLA's convolution (as explain() reports for a CUDA GPU)."""
  import routing_ab  # noqa: E402  (benchmarks/routing_ab.py, by path)
  import jax_im2col
  from jax_im2col.conv import routing

  def plan(x, w, strides):
    got = jax_im2col.explain(jax.ShapeDtypeStruct(x, jnp.bfloat16), jax.ShapeDtypeStruct(w, jnp.bfloat16),
                             strides, "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"),
                             feature_group_count=w[-1], platform="cuda")
    return tuple(got[op].algorithm for op in routing_ab.ALL_OPS)

  rules = routing.xla_is_faster
  routing.xla_is_faster = routing_ab.with_candidate(routing_ab.CANDIDATES["depthwise_56"], rules)
  try:
    with jax_im2col.force_algorithm("auto"):
      assert plan((64, 56, 56, 144), (3, 3, 1, 144), (1, 1)) == ("xla",) * 3
      assert "xla" not in plan((64, 56, 56, 144), (3, 3, 1, 144), (2, 2))
      assert "xla" not in plan((64, 112, 112, 32), (3, 3, 1, 32), (1, 1))
  finally:
    routing.xla_is_faster = rules
  routing.xla_is_faster = routing_ab.with_candidate(routing_ab.CANDIDATES["depthwise_112"], rules)
  try:
    with jax_im2col.force_algorithm("auto"):
      assert plan((64, 112, 112, 32), (3, 3, 1, 32), (1, 1)) == ("xla",) * 3
      assert "xla" not in plan((64, 112, 112, 96), (3, 3, 1, 96), (2, 2))
  finally:
    routing.xla_is_faster = rules
  with jax_im2col.force_algorithm("auto"):
    assert "xla" not in plan((64, 56, 56, 144), (3, 3, 1, 144), (1, 1))
    assert "xla" not in plan((32, 56, 56, 96), (7, 7, 1, 96), (1, 1))
  routing.xla_is_faster = routing_ab.with_candidate(routing_ab.CANDIDATES["large_filter_all"], rules)
  try:
    with jax_im2col.force_algorithm("auto"):
      assert plan((32, 56, 56, 96), (7, 7, 1, 96), (1, 1)) == ("depthwise", "depthwise", "xla")
      assert plan((32, 7, 7, 768), (7, 7, 1, 768), (1, 1)) == ("depthwise", "depthwise", "xla")
      assert "xla" not in plan((32, 56, 56, 96), (7, 7, 1, 96), (2, 2))
  finally:
    routing.xla_is_faster = rules
  routing.xla_is_faster = routing_ab.with_candidate(routing_ab.CANDIDATES["large_filter_56"], rules)
  try:
    with jax_im2col.force_algorithm("auto"):
      assert plan((32, 56, 56, 96), (7, 7, 1, 96), (1, 1)) == ("depthwise", "depthwise", "xla")
      assert plan((32, 7, 7, 768), (7, 7, 1, 768), (1, 1)) == ("depthwise",) * 3
  finally:
    routing.xla_is_faster = rules
  routing.xla_is_faster = routing_ab.with_candidate(routing_ab.CANDIDATES["stem_forward"], rules)
  try:
    with jax_im2col.force_algorithm("auto"):
      stem = jax_im2col.explain(jax.ShapeDtypeStruct((64, 224, 224, 3), jnp.bfloat16),
                                jax.ShapeDtypeStruct((3, 3, 3, 32), jnp.bfloat16), (2, 2), "SAME",
                                dimension_numbers=("NHWC", "HWIO", "NHWC"), platform="cuda")
      assert stem["forward"].algorithm == "xla"
      assert "xla" not in plan((64, 112, 112, 32), (3, 3, 1, 32), (1, 1))
  finally:
    routing.xla_is_faster = rules


def test_routing_candidates_of_the_3d_rules():
  """routing_ab.py's own_ candidates undo exactly the rules they name (the
  U-Net's half-precision 64³ ops of 32-channel runs, its float32 decoder
  filter gradients), and the candidates to XLA move exactly their ops."""
  import routing_ab  # noqa: E402  (benchmarks/routing_ab.py, by path)
  import jax_im2col
  from jax_im2col.conv import routing

  def plan(x, w, dtype, groups=1):
    nd = len(x) - 2
    dn = ("NDHWC", "DHWIO", "NDHWC") if nd == 3 else ("NHWC", "HWIO", "NHWC")
    got = jax_im2col.explain(jax.ShapeDtypeStruct(x, dtype), jax.ShapeDtypeStruct(w, dtype),
                             (1,) * nd, "SAME", dimension_numbers=dn, feature_group_count=groups,
                             platform="cuda")
    return tuple(got[op].algorithm == "xla" for op in routing_ab.ALL_OPS)

  layers = {  # (x, w, dtype, groups): the ops on XLA's convolution under the rules
      "narrow": ((2, 64, 64, 64, 32), (3, 3, 3, 32, 32), jnp.bfloat16, 1),
      "narrow_dx": ((2, 64, 64, 64, 64), (3, 3, 3, 64, 32), jnp.bfloat16, 1),
      "decoder": ((2, 32, 32, 32, 128), (3, 3, 3, 128, 64), jnp.float32, 1),
      "head": ((2, 64, 64, 64, 32), (1, 1, 1, 32, 2), jnp.bfloat16, 1),
      "dw7": ((64, 7, 7, 960), (3, 3, 1, 960), jnp.bfloat16, 960),
  }
  rules = routing.xla_is_faster
  expected = {"narrow": (True, True, False), "narrow_dx": (False, True, False),
              "decoder": (False, False, True), "head": (False,) * 3, "dw7": (False,) * 3}
  moved = {"own_3d_narrow_half": {"narrow": (False,) * 3, "narrow_dx": (False,) * 3},
           "own_3d_decoder_filter": {"decoder": (False,) * 3},
           "3d_head": {"head": (True, False, False)},
           "filter_3x3_7": {"dw7": (False, False, True)}}
  with jax_im2col.force_algorithm("auto"):
    assert {k: plan(*v) for k, v in layers.items()} == expected
    for name, changes in moved.items():
      routing.xla_is_faster = routing_ab.with_candidate(
          routing_ab.CANDIDATES.get(name) or routing_ab.OWN_CANDIDATES[name], rules,
          own=name in routing_ab.OWN_CANDIDATES)
      try:
        assert {k: plan(*v) for k, v in layers.items()} == {**expected, **changes}, name
      finally:
        routing.xla_is_faster = rules


def test_layer_routing_filters_and_forced_algorithms(tmp_path, monkeypatch):
  """benchmarks/routing.py: --classes and --ops keep those layers and ops,
  --algorithms times each named algorithm where it applies (on the CPU
  "columns_dot"; "gemm" runs on CUDA GPUs only: None), and the device-span
  timer takes the median span per repeat in ms."""
  import routing as layer_routing  # noqa: E402  (benchmarks/routing.py, by path)
  from model_bench import timing
  import device_span  # noqa: E402
  assert layer_routing.main(["--out", str(tmp_path), "--models", "convnext_t", "--dtypes", "f32",
                             "--preset", "tiny", "--steps", "1", "--repeats", "1", "--clock", "host",
                             "--classes", "2x2", "--ops", "dgrad",
                             "--algorithms", "gemm,columns_dot"]) == 0
  rows = json.loads((tmp_path / "routing.json").read_text())["rows"]
  assert rows and {r["op"] for r in rows} == {"dgrad"}
  assert all("2x2" in r["class"] for r in rows)
  assert all(r["forced_ms"]["gemm"] is None and r["forced_ms"]["columns_dot"] > 0 for r in rows)
  spans = iter([[3e-6, 1e-6, 2e-6], [5e-6, 4e-6, 6e-6]])
  monkeypatch.setattr(device_span, "run_spans", lambda run, n: next(spans))
  got = timing.interleaved_spans({"a": lambda n: None, "b": lambda n: None}, 3, 1)
  assert got == {"a": [pytest.approx(2e-3)], "b": [pytest.approx(5e-3)]}
  monkeypatch.setattr(device_span, "run_spans", lambda run, n: None)
  with pytest.raises(RuntimeError, match="different numbers of kernels"):
    timing.interleaved_spans({"a": lambda n: None}, 3, 1)


def test_step_kernels_classes_and_report(tmp_path, capsys):
  """benchmarks/step_kernels.py: kernels are classed by their names (XLA's
  convert fusions are not convolutions), and --report prints a saved run's
  classes as the sums of its kernels."""
  import step_kernels  # noqa: E402  (benchmarks/step_kernels.py, by path)
  from model_bench import kernels  # noqa: E402
  classes = {
      "void im2col::cuda::dw_forward_kernel<true, 1, __nv_bfloat16, __nv_bfloat16>(...)": "own",
      "conv2d_c1_k1_nhwc_specialized": "xla conv",
      "sm90_xmma_wgrad_indexed_implicit_gemm_bf16bf16": "xla conv",
      "void convolve_common_engine_float_NHWC<__nv_bfloat16>": "xla conv",
      "loop_convert_multiply_fusion_17": "xla fusion",
      "input_add_reduce_fusion_22": "xla fusion",
      "nvjet_sm90_tss_192x96_64x5_1x2_h_bz_NTT": "gemm",
      "ncclDevKernel_AllReduce_Sum_f32_RING_LL": "collective",
      "Memcpy DtoD (Device -> Device)": "copy",
  }
  for name, label in classes.items():
    assert kernels.kernel_class(name) == label, name
  by_name = {name: float(i + 1) for i, name in enumerate(classes)}
  saved = {"model": "convnext_t", "dtype": "bf16", "steps": 1,
           "results": {"xla": {"busy_us": sum(by_name.values()), "span_us": 50.0, "by_name": by_name}}}
  path = tmp_path / "step_kernels_convnext_t_bf16.json"
  path.write_text(json.dumps(saved))
  out = step_kernels.main(["--report", str(path)])
  assert out["results"]["xla"]["by_class"]["xla conv"] == 2.0 + 3.0 + 4.0
  assert out["results"]["xla"]["by_class"]["xla fusion"] == 5.0 + 6.0
  printed = capsys.readouterr().out
  assert "xla conv" in printed and "45.0" in printed and "50.0" in printed
  assert kernels.own_share({"own": 3.0, "xla conv": 1.0, "gemm": 5.0}) == 0.75
  assert kernels.own_share({"gemm": 5.0}) is None
  from model_bench import report
  k = {impl: {"busy_us": 9.0, "span_us": 10.0, "by_class": {"own": own, "xla conv": 4.0 - own, "gemm": 5.0}}
       for impl, own in (("xla", 0.0), ("ours", 3.0))}
  table = report._kernels_table([{"model": "convnext_t", "runs": {"bf16": {"train": {"kernels": k}}}}])
  assert "| convnext_t | bf16 | ours | 3 | 1 | 5 | 0 | 0 | 0 | 9 | 10 | 75% |" in table
  assert report._kernels_table([{"model": "convnext_t", "runs": {"bf16": {"train": {}}}}]) == []


def test_train_run_records_device_time_by_class(monkeypatch):
  """Where CUPTI sees the GPU, a train run records each implementation's
  device time per step by class of kernel (device_span faked here)."""
  import device_span  # noqa: E402  (benchmarks/device_span.py, by path)
  from model_bench import run as model_run
  from model_bench.problem import make_problem
  monkeypatch.setattr(device_span, "available", lambda: True)
  fake = [("void im2col::cuda::dw_forward_kernel<>()", 0.0, 3.0), ("loop_add_fusion", 3.0, 4.0)]
  monkeypatch.setattr(device_span, "kernel_spans", lambda run: (run(), fake)[1])
  spec = MODELS["convnext_t"]
  problem = make_problem(spec, "tiny", "f32", init_variables(spec, "tiny"))
  out = model_run.run_train(problem, steps=1, repeats=1, log=lambda line: None)
  steps = model_run.KERNEL_STEPS
  assert out["kernels"]["ours"]["by_class"] == {"own": 3.0 / steps, "xla fusion": 1.0 / steps}
  assert out["kernels"]["xla"]["span_us"] == 4.0 / steps
