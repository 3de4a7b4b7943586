"""Benchmark the training cost model: single-plan latency under jit, plans/second under vmap.

Run: python benchmarks/bench_train.py [--plans 1000000] [--chunk 250000]
Float32 (JAX default), CPU unless a GPU is present.  Compile time is reported separately.
"""

import argparse

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from _timing import time_calls, time_vmapped  # benchmarks/ is sys.path[0] when run as a script

import diffcost as dc


def random_plans(n: int, seed: int = 0) -> dc.TrainPlan:
    """n exact integer plans (powers of two degrees, one-hot choices) stacked into one pytree."""
    rng = np.random.default_rng(seed)
    base = dc.train_plan()
    pick = lambda opts: jnp.asarray(rng.choice(opts, n).astype(np.float32))
    eye = lambda k, idx: jnp.asarray(np.eye(k, dtype=np.float32)[idx])
    stacked = jtu.tree_map(lambda x: jnp.broadcast_to(x, (n, *jnp.shape(x))), base)
    return eqx.tree_at(
        lambda p: (p.tp, p.pp, p.dp, p.micro_batch, p.global_batch, p.seq_len, p.recompute, p.zero),
        stacked,
        (
            pick([1, 2, 4, 8]),
            pick([1, 2, 4, 8]),
            pick([1, 2, 4, 8, 16]),
            pick([1, 2, 4]),
            pick([256, 512, 1024]),
            pick([2048, 4096, 8192]),
            eye(3, rng.integers(0, 3, n)),
            eye(4, rng.integers(0, 4, n)),
        ),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--plans", type=int, default=1_000_000)
    parser.add_argument("--chunk", type=int, default=250_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    system = dc.load_system("dgx-h100", chips=1024)
    model = dc.load_model("llama-3-70b")
    cost = dc.TrainCost(system, model)
    print(f"devices: {jax.devices()}")

    single = eqx.filter_jit(lambda c, p: c(p).step_time_s)
    plan = dc.train_plan(tp=8, pp=4, dp=32, global_batch=1024)
    compile_single, per_call = time_calls(single, (cost, plan), calls=2000)
    print(
        f"single plan: compile {compile_single:.2f} s, then {per_call * 1e6:.1f} us/call "
        f"(dispatch included)"
    )
    chunks = [random_plans(args.chunk, seed=i) for i in range(max(1, args.plans // args.chunk))]
    total = args.chunk * len(chunks)
    # XLA drops outputs nobody reads: time both the headline number and the whole breakdown.
    for label, fn in [
        ("step_time_s only", lambda c, q: c(q).step_time_s),
        ("full breakdown", lambda c, q: c(q)),
    ]:
        compile_batched, best = time_vmapped(cost, chunks, fn, args.repeats)
        print(
            f"vmap, {label}: compile {compile_batched:.2f} s (chunks of {args.chunk:,}); "
            f"{total:,} plans in {best:.3f} s = {total / best:,.0f} plans/s"
        )


if __name__ == "__main__":
    main()
