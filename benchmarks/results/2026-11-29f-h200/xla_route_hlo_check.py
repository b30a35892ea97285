import re, time, collections, jax, jax.numpy as jnp
from jax import lax
import jax_im2col as j
x = jnp.ones((32, 14, 14, 256), jnp.bfloat16); w = jnp.ones((3, 3, 256, 256), jnp.bfloat16)
g = jnp.ones((32, 14, 14, 256), jnp.bfloat16)
dn = ("NHWC", "HWIO", "NHWC")
def bwd(conv):
  return jax.jit(lambda x, w, g: jax.vjp(lambda a, b: conv(a, b, (1, 1), "SAME", dimension_numbers=dn), x, w)[1](g))
for name, conv in (("lax", lax.conv_general_dilated), ("auto", j.conv_general_dilated)):
  c = bwd(conv).lower(x, w, g).compile()
  t = c.as_text()
  entry = t[t.index("ENTRY"):]
  ops = collections.Counter(m for m in re.findall(r"= \S+ (\w[\w-]*)\(", entry))
  print(name, dict(ops))
  for l in entry.splitlines():
    if "custom-call" in l or "fusion(" in l or "copy(" in l or "transpose(" in l:
      print("   ", re.sub(r", metadata=.*", "", l.strip())[:230])
  f = bwd(conv); jax.block_until_ready(f(x, w, g))
  for _ in range(3):
    t0 = time.perf_counter(); r = [f(x, w, g) for _ in range(200)]; jax.block_until_ready(r)
    print("  ", name, "%.1f us/call (wall, loop of 200)" % ((time.perf_counter() - t0) / 200 * 1e6))
