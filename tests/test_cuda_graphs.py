"""The convolution's CUDA handlers inside XLA's command buffers (CUDA graphs):
a jitted train step compiled with command buffers forced on for custom calls
records every one of its convolution calls into a graph (XLA's dump of the
thunk sequence says so), and replays with fresh inputs match the same step
compiled without command buffers, bit for bit."""

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_im2col as j
from conftest import GPU_DEVICES

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not GPU_DEVICES, reason="no CUDA device visible to JAX")]

GRAPHS = {"xla_gpu_enable_command_buffer": "FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL",
          "xla_gpu_graph_min_graph_size": 1}
NO_GRAPHS = {"xla_gpu_enable_command_buffer": ""}
NHWC = ("NHWC", "HWIO", "NHWC")


def _layers(key):
  """A small network's filters: a strided stem, a depthwise and a grouped
  convolution, a dense 3x3 and a 1x1 (direct, implicit and GEMM paths)."""
  shapes = [(3, 3, 3, 32), (3, 3, 1, 32), (3, 3, 8, 32), (3, 3, 32, 64), (1, 1, 64, 16)]
  keys = jax.random.split(key, len(shapes))
  return [0.2 * jax.random.normal(k, s, jnp.float32) for k, s in zip(keys, shapes)]


def _forward(params, x):
  stem, dw, grouped, dense, pointwise = params
  conv = lambda x, w, s=1, g=1: j.conv_general_dilated(
      x, w, (s, s), "SAME", dimension_numbers=NHWC, feature_group_count=g)
  h = jax.nn.relu(conv(x, stem, 2))
  h = jax.nn.relu(conv(h, dw, g=32))
  h = jax.nn.relu(conv(h, grouped, g=4))
  h = jax.nn.relu(conv(h, dense))
  return conv(h, pointwise)


def _step(params, x, target):
  loss, grads = jax.value_and_grad(lambda p: jnp.mean((_forward(p, x) - target) ** 2))(params)
  return loss, [p - 0.1 * g for p, g in zip(params, grads)]


def _inputs(seed):
  kx, kt = jax.random.split(jax.random.key(seed))
  return (jax.random.normal(kx, (8, 32, 32, 3), jnp.float32),
          jax.random.normal(kt, (8, 16, 16, 16), jnp.float32))


def _custom_call_thunks(dump_dir: pathlib.Path) -> dict:
  """kCustomCall thunks inside and outside command buffers, read from XLA's
  dump of the thunk sequence: each thunk is a line "<index>: <kind> ...",
  indented under the top-level kCommandBuffer thunk that holds it."""
  files = sorted(dump_dir.glob("*thunk_sequence_after_thunk_passes*.txt")) or sorted(
      dump_dir.glob("*thunk_sequence.txt"))
  assert len(files) == 1, [f.name for f in dump_dir.iterdir()]
  counts = {"inside": 0, "outside": 0}
  in_buffer = False
  for line in files[0].read_text().splitlines():
    thunk = line.lstrip()
    index, sep, rest = thunk.partition(": ")
    if not sep or not index.isdigit():
      continue
    if len(thunk) == len(line):
      in_buffer = rest.startswith("kCommandBuffer")
    if rest.startswith("kCustomCall"):
      counts["inside" if in_buffer else "outside"] += 1
  return counts


def test_train_step_replays_from_command_buffers(tmp_path):
  params = _layers(jax.random.key(0))
  x, target = _inputs(1)
  lowered = jax.jit(_step).lower(params, x, target)
  convs = lowered.as_text().count("custom_call @jax_im2col_conv_")
  assert convs == 14  # five forwards and filter gradients, four input gradients (not x's)
  graphs = lowered.compile(compiler_options={**GRAPHS, "xla_dump_to": str(tmp_path)})
  plain = jax.jit(_step).lower(params, x, target).compile(compiler_options=NO_GRAPHS)
  thunks = _custom_call_thunks(tmp_path)
  assert thunks["outside"] == 0 and thunks["inside"] >= convs, thunks
  for seed in range(2, 6):  # fresh inputs: the recorded graphs are replayed or updated
    x, target = _inputs(seed)
    got, want = graphs(params, x, target), plain(params, x, target)
    for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want)):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    params = want[1]
