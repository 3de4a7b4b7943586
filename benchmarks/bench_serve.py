"""Benchmark the serving cost model: single-plan latency under jit, plans/second under vmap.

Run: python benchmarks/bench_serve.py [--plans 1000000] [--chunk 250000]
Float32 (JAX default), CPU unless a GPU is present.  Compile time is reported separately.
Plans mix every serving feature: TP/PP degrees, batch, lengths, weight/compute/KV formats,
static/continuous modes, speculative decoding and disaggregated pools.
"""

import argparse

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from _timing import time_calls, time_vmapped  # benchmarks/ is sys.path[0] when run as a script

import diffcost as dc


def random_plans(n: int, seed: int = 0) -> dc.ServePlan:
    """n exact plans (integer degrees, one-hot choices) stacked into one pytree."""
    rng = np.random.default_rng(seed)
    base = dc.serve_plan()
    pick = lambda opts: rng.choice(np.asarray(opts, dtype=np.float32), n)
    eye = lambda names, choices: np.eye(len(names), dtype=np.float32)[
        [names.index(c) for c in rng.choice(choices, n)]
    ]
    tp, pp = pick([1, 2, 4, 8]), pick([1, 2, 4])
    disagg = pick([0, 0, 0, 1])
    draft = pick([0, 0, 2, 4])
    fields = dict(
        tp=tp,
        pp=pp,
        batch=rng.integers(1, 513, n).astype(np.float32),
        input_len=pick([128, 512, 2048, 8192]),
        output_len=pick([128, 512, 2048]),
        weight_format=eye(dc.FORMATS, ["bf16", "fp8", "int8", "int4"]),
        kv_format=eye(dc.FORMATS, ["bf16", "fp8"]),
        mode=eye(("static", "continuous"), ["static", "continuous"]),
        prefill_chunk=pick([512, 2048, 8192]),
        draft_len=draft,
        draft_params_fraction=np.where(draft > 0, 0.05, 0.0).astype(np.float32),
        disaggregated=disagg,
        prefill_chips=tp * pp * pick([1, 2]),
        decode_chips=tp * pp * pick([1, 2, 4]),
        kv_block=pick([1, 16, 32]),
    )
    # compute format = weight format, 16-bit for weight-only integer formats
    w = fields["weight_format"]
    ints = w[:, dc.FORMATS.index("int8")] + w[:, dc.FORMATS.index("int4")]
    bf16 = np.eye(len(dc.FORMATS), dtype=np.float32)[dc.FORMATS.index("bf16")]
    fields["compute_format"] = np.where(ints[:, None] > 0, bf16, w)
    stacked = jtu.tree_map(lambda x: jnp.broadcast_to(x, (n, *jnp.shape(x))), base)
    names = list(fields)
    return eqx.tree_at(
        lambda p: [getattr(p, k) for k in names], stacked, [jnp.asarray(fields[k]) for k in names]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--plans", type=int, default=1_000_000)
    parser.add_argument("--chunk", type=int, default=250_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    system = dc.load_system("dgx-h100", chips=64)
    model = dc.load_model("llama-3-70b")
    cost = dc.ServeCost(system, model)
    print(f"devices: {jax.devices()}")
    rows = []

    single = eqx.filter_jit(lambda c, p: c(p).tpot_s)
    plan = dc.serve_plan(tp=4, batch=64, input_len=2048, output_len=256)
    compile_s, per_call = time_calls(single, (cost, plan), calls=2000)
    rows.append(
        ("single plan, jit (tpot_s)", compile_s, f"{per_call * 1e6:.1f} us/call", 1 / per_call)
    )

    chunks = [random_plans(args.chunk, seed=i) for i in range(max(1, args.plans // args.chunk))]
    total = args.chunk * len(chunks)
    # XLA drops outputs nobody reads: time both the headline number and the whole breakdown.
    for label, fn in [
        ("vmap, tpot_s only", lambda c, q: c(q).tpot_s),
        ("vmap, full breakdown", lambda c, q: c(q)),
    ]:
        compile_s, best = time_vmapped(cost, chunks, fn, args.repeats)
        rows.append((label, compile_s, f"{total:,} plans in {best:.3f} s", total / best))

    # the headline serving number: best batch at an SLO, one vmap over 320 batches per plan
    at_slo = eqx.filter_jit(lambda c, p: c.at_slo(p, 1.0, 0.05).batch)
    compile_s, per_slo = time_calls(at_slo, (cost, plan), calls=200)
    rows.append(
        ("at_slo (320-batch grid)", compile_s, f"{per_slo * 1e3:.2f} ms/call", 320 / per_slo)
    )

    print(f"{'benchmark':<28} {'compile s':>9}  {'time':<32} {'plans/s':>12}")
    for label, comp, timing, rate in rows:
        print(f"{label:<28} {comp:>9.2f}  {timing:<32} {rate:>12,.0f}")


if __name__ == "__main__":
    main()
