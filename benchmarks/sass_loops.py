"""A kernel's machine code read without a GPU: compiles one CUDA source of
lib/cuda to a cubin (nvcc -cubin, ptxas -v for registers and spills),
disassembles it (cuobjdump -sass, which needs nvdisasm: the PyPI wheels
nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm carry both) and prints, for each
kernel whose demangled name holds the pattern, its registers, its spills and
every loop (a backward branch): instructions, and of them shared-memory and
global loads and stores. Step 60 (BENCHMARKS.md) came from this: registers
that capped the staged fold at 5 blocks a multiprocessor, and the gather's
instructions per element.

  pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
  python benchmarks/sass_loops.py lib/cuda/columns.cu "fold_planes_kernel<2, 1, 4, __nv_bfloat16"
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def wheel_tool(name):
  """A CUDA tool on PATH, else from an nvidia-cuda-* wheel."""
  found = shutil.which(name)
  if found:
    return found
  pattern = os.path.join(sysconfig.get_paths()["purelib"], "nvidia", "*", "bin", name)
  hits = sorted(glob.glob(pattern))
  if not hits:
    sys.exit(f"{name} not found: pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm")
  return hits[-1]


def include_flags():
  import jax.ffi
  flags = ["-I" + os.path.join(ROOT, "lib"), "-isystem", jax.ffi.include_dir()]
  for inc in glob.glob(os.path.join(sysconfig.get_paths()["purelib"], "nvidia", "*", "include")):
    flags += ["-isystem", inc]  # cuBLAS headers from the nvidia-cublas wheel
  return flags


def demangle(names):
  out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout
  return dict(zip(names, out.splitlines()))


def ptxas_usage(log):
  """{mangled kernel: (registers, spill stores, spill loads)} from ptxas -v."""
  usage, kernel, spills = {}, None, (0, 0)
  for line in log.splitlines():
    m = re.search(r"Compiling entry function '(\S+)'", line)
    if m:
      kernel, spills = m.group(1), (0, 0)
    m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
    if m:
      spills = (int(m.group(1)), int(m.group(2)))
    m = re.search(r"Used (\d+) registers", line)
    if m and kernel:
      usage[kernel] = (int(m.group(1)), *spills)
  return usage


def functions(sass):
  """{mangled kernel: [(address, instruction)]} from cuobjdump -sass."""
  funcs, name = {}, None
  for line in sass.splitlines():
    m = re.search(r"Function : (\S+)", line)
    if m:
      name = m.group(1)
      funcs[name] = []
      continue
    m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*/\*", line)
    if m and name:
      funcs[name].append((int(m.group(1), 16), m.group(2).rstrip(" ;")))
  return funcs


def loops(code):
  """(start, end, body) of every backward branch's range."""
  for address, ins in code:
    m = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", ins)
    if m and int(m.group(1), 16) <= address:
      start = int(m.group(1), 16)
      yield start, address, [i for a, i in code if start <= a <= address]


def main():
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("source", help="a .cu file (e.g. lib/cuda/columns.cu)")
  p.add_argument("pattern", help="substring of the demangled kernel names to show")
  p.add_argument("--arch", default="90a")
  p.add_argument("--all-loops", action="store_true", help="also loops without memory instructions")
  p.add_argument("--dump", metavar="FILE", help="write the shown kernels' SASS to FILE")
  args = p.parse_args()
  dump = open(args.dump, "w") if args.dump else None
  os.environ["PATH"] += os.pathsep + os.path.dirname(wheel_tool("nvdisasm"))
  with tempfile.TemporaryDirectory() as tmp:
    cubin = os.path.join(tmp, "k.cubin")
    cmd = [wheel_tool("nvcc"), "-O3", "-std=c++17", f"--generate-code=arch=compute_{args.arch},code=sm_{args.arch}",
           "--expt-relaxed-constexpr", "-Xptxas", "-v", *include_flags(), "-cubin", args.source, "-o", cubin]
    built = subprocess.run(cmd, capture_output=True, text=True)
    if built.returncode != 0:
      sys.exit(built.stderr[-3000:])
    sass = subprocess.run([wheel_tool("cuobjdump"), "-sass", cubin], capture_output=True, text=True, check=True).stdout
  usage, funcs = ptxas_usage(built.stderr), functions(sass)
  names = demangle(list(funcs))
  for mangled, code in funcs.items():
    name = names[mangled]
    if args.pattern not in name:
      continue
    regs, spill_st, spill_ld = usage.get(mangled, (-1, 0, 0))
    print(f"{name[:160]}\n  {len(code)} instructions, {regs} registers, spills {spill_st} / {spill_ld} bytes")
    if dump:
      dump.write(f"// {name}\n" + "\n".join(f"{a:#06x}  {i}" for a, i in code) + "\n")
    for start, end, body in loops(code):
      count = {op: sum(op in i for i in body) for op in ("LDS", "STS", "LDG", "STG", "BAR")}
      if args.all_loops or any(count.values()):
        mem = ", ".join(f"{op} {n}" for op, n in count.items() if n)
        print(f"  loop {start:#06x}-{end:#06x}: {len(body)} instructions ({mem})")


if __name__ == "__main__":
  main()
