"""A jitted 2048x2048 matrix product with tanh, called ten times (the
framework-report check of the JAX runtime's own kernels, such as its
autotuning timers, beside the user's).

    python3 matmul.py [--calls N]
"""
import argparse
import time

import jax
import jax.numpy as jnp


@jax.jit
def layer(a, b):
    return jnp.tanh(a @ b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=10)
    args = ap.parse_args()
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    a = jax.random.normal(k1, (2048, 2048), jnp.float32)
    b = jax.random.normal(k2, (2048, 2048), jnp.float32) / 45.0
    c = layer(a, b).block_until_ready()
    t0 = time.time()
    for _ in range(args.calls):
        c = layer(c, b)
    c.block_until_ready()
    dt = time.time() - t0
    ok = int(bool(jnp.all(jnp.isfinite(c))))
    print(f"RESULT name=jax_matmul calls={args.calls} loop_s={dt:.3f} ok={ok}", flush=True)


if __name__ == "__main__":
    main()
