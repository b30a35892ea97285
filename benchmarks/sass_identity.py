"""Whether a change left the machine code of existing kernels alone: compiles
one CUDA source (default lib/columns/columns.cu) at a git revision and in the
working tree with the same nvcc command, disassembles both
(cuobjdump -sass, which needs nvdisasm: pip install nvidia-cuda-cuobjdump
nvidia-cuda-nvdisasm) and compares every kernel of the old build with the
kernel of the same mangled name in the new one: its instructions (address,
opcode and operands) and their encodings, line for line. Prints the count of
identical kernels, every kernel that differs or vanished, and the kernels the
new build added. Exit status 1 when an old kernel differs or vanished.

  python benchmarks/sass_identity.py --rev main                 # compile both (slow: minutes each)
  python benchmarks/sass_identity.py --old old.o --new new.o    # compare objects built elsewhere

The object files may be built with, e.g.,
  nvcc -c -std=c++17 --expt-relaxed-constexpr -arch=sm_90a -Ilib \\
       -isystem $(python -c "import jax.ffi; print(jax.ffi.include_dir())") lib/columns/columns.cu -o new.o
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile

from sass_loops import ROOT, demangle, wheel_tool


# nvcc names a file's anonymous namespace after the file and a hash of it
# (_GLOBAL__N__69271a98_10_columns_cu_..., or
# _GLOBAL__N__anonymous_19_direct_filter_1d_cu_27d2c8c2_3957...), which a move
# or any edit changes: kernels are keyed by architecture and demangled name
# (where the namespace reads "(anonymous namespace)"), and the mangled form is
# blanked inside instructions.
ANONYMOUS = re.compile(r"_GLOBAL__N__(?:anonymous_\d+_\w*?_[0-9a-f]{8}_\d+|[0-9a-f]+_)")


def sections(sass: str) -> dict:
  """{mangled kernel: [instruction lines and encoding lines]} of cuobjdump -sass,
  the anonymous namespace's hash blanked."""
  out, name, arch = {}, None, ""
  for line in sass.splitlines():
    m = re.match(r"\s*arch = (sm_\w+)", line)
    if m:
      arch = m.group(1)
    m = re.search(r"Function : (\S+)", line)
    if m:
      name = (arch, m.group(1))
      out[name] = []
      continue
    line = ANONYMOUS.sub("_GLOBAL__N__anonymous_", line)
    if name is not None and re.match(r"\s+/\*", line):
      out[name].append(line.strip())
  return out


def disassemble(obj: str) -> dict:
  env = dict(os.environ, PATH=os.environ.get("PATH", "") + os.pathsep + os.path.dirname(wheel_tool("nvdisasm")))
  sass = subprocess.run([wheel_tool("cuobjdump"), "-sass", obj], capture_output=True, text=True, check=True,
                        env=env).stdout
  found = sections(sass)
  names = demangle(sorted({mangled for _, mangled in found}))
  return {(arch, names.get(mangled, mangled)): lines for (arch, mangled), lines in found.items()}


def compile_at(tree: str, source: str, arch: str, out: str):
  import jax.ffi
  cmd = [wheel_tool("nvcc"), "-c", "-std=c++17", "--expt-relaxed-constexpr", f"-arch=sm_{arch}",
         "-I" + os.path.join(tree, "lib"), "-isystem", jax.ffi.include_dir(), os.path.join(tree, source), "-o", out]
  print(" ".join(cmd), file=sys.stderr)
  subprocess.run(cmd, check=True)


def main():
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--rev", help="git revision of the old build (compiled from `git archive`)")
  p.add_argument("--old", help="old object file or cubin")
  p.add_argument("--new", help="new object file or cubin (default: the working tree, compiled)")
  p.add_argument("--source", default="lib/columns/columns.cu")
  p.add_argument("--arch", default="90a")
  args = p.parse_args()
  if not args.old and not args.rev:
    p.error("--old or --rev")
  with tempfile.TemporaryDirectory() as tmp:
    old, new = args.old, args.new
    if old is None:
      tree = os.path.join(tmp, "old")
      os.makedirs(tree)
      archive = subprocess.run(["git", "-C", ROOT, "archive", args.rev, "lib"], capture_output=True, check=True).stdout
      subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
      old = os.path.join(tmp, "old.o")
      compile_at(tree, args.source, args.arch, old)
    if new is None:
      new = os.path.join(tmp, "new.o")
      compile_at(ROOT, args.source, args.arch, new)
    before, after = disassemble(old), disassemble(new)
  same = [k for k in before if after.get(k) == before[k]]
  differ = [k for k in before if k in after and after[k] != before[k]]
  gone = [k for k in before if k not in after]
  added = [k for k in after if k not in before]
  print(f"{len(before)} kernels before, {len(after)} after: {len(same)} identical, {len(differ)} differ, "
        f"{len(gone)} gone, {len(added)} added")
  for label, keys in (("differs", differ), ("gone", gone), ("added", added)):
    for k in keys:
      print(f"  {label}: {k[0]} {k[1][:200]}")
  return 1 if differ or gone else 0


if __name__ == "__main__":
  sys.exit(main())
