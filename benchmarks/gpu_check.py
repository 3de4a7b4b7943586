"""The GEMM and bandwidth terms against a real accelerator: time JAX bf16 matrix products and a
memory copy on the device this runs on, predict each with the exact model for the matching chip
spec, and write measured vs predicted (JSON).

Run (on a GPU machine): python benchmarks/gpu_check.py --chip h200 --out gpu_check.json
Each product is timed inside one program of 50 dependent products (median of 5 runs after 3
warm-up runs, ``block_until_ready``), so launch and synchronisation are not charged to it; the
copy (4 GiB read, 4 GiB written) as the median of 20 calls.
"""

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np

import diffcost as dc
from diffcost._core.smooth import EXACT
from diffcost._terms.gemm import GemmFormat, gemm_time_s, stream_time_s

SHAPES = [  # (m, n, k): decode GEMVs to prefill-sized products (Llama-3-70B widths, tp = 1)
    (1, 8192, 8192),
    (8, 8192, 8192),
    (32, 8192, 8192),
    (128, 8192, 8192),
    (512, 8192, 8192),
    (2048, 8192, 8192),
    (8192, 8192, 8192),
    (4096, 28672, 8192),
    (4096, 8192, 28672),
    (16384, 1024, 8192),
]


#: ``--sweep``: the skinny (decode) regime, m = 1 .. 1024 rows on four weight shapes
SWEEP = [
    (m, n, k)
    for n, k in ((8192, 8192), (28672, 8192), (8192, 28672), (1024, 8192))
    for m in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
]


def _median_s(fn, *args, calls: int = 20) -> float:
    for _ in range(3):
        jax.block_until_ready(fn(*args))
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chip", default="h200")
    parser.add_argument("--out", default="gpu_check.json")
    parser.add_argument("--sweep", action="store_true", help="the skinny-GEMM grid (SWEEP)")
    args = parser.parse_args()
    system = dc.load_system(chip=args.chip, chips=1)
    peak = float(system.chip.peak_flop_per_s[dc.FORMATS.index("bf16")])
    fmt = GemmFormat(peak, 2.0)
    reps = 50

    @jax.jit
    def mm(a, b):  # ``reps`` dependent products in one program: no per-call launch or sync
        def body(_, x):
            return x + 1e-6 * jnp.sum(x @ b, axis=1, keepdims=True, dtype=jnp.float32).astype(
                x.dtype
            )

        return jax.lax.fori_loop(0, reps, body, a)

    key = jax.random.PRNGKey(0)
    rows = []
    for m, n, k in SWEEP if args.sweep else SHAPES:
        a = jax.random.normal(key, (m, k), jnp.bfloat16)
        b = jax.random.normal(key, (k, n), jnp.bfloat16)
        measured = _median_s(mm, a, b, calls=5) / reps
        predicted = float(gemm_time_s(m, n, k, fmt, system, EXACT))
        rows.append(
            {
                "m": m,
                "n": n,
                "k": k,
                "measured_s": measured,
                "predicted_s": predicted,
                "ratio": predicted / measured,
                "measured_tflop_per_s": 2 * m * n * k / measured / 1e12,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    size = 4 * 2**30  # a 4 GiB copy: read and write
    x = jnp.ones((size // 2,), jnp.bfloat16)
    copy = jax.jit(lambda v: v * 2)
    measured = _median_s(copy, x)
    predicted = float(stream_time_s(2.0 * size, system))
    band = {"bytes": 2 * size, "measured_s": measured, "predicted_s": predicted}
    band |= {"measured_bytes_per_s": 2 * size / measured, "ratio": predicted / measured}
    print(json.dumps(band), flush=True)
    out = {"device": str(jax.devices()[0]), "chip": args.chip, "gemm": rows, "copy": band}
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    ratios = np.asarray([r["ratio"] for r in rows])
    print(
        f"GEMM predicted/measured: median {np.median(ratios):.2f}, range "
        f"{ratios.min():.2f}..{ratios.max():.2f}; copy {band['ratio']:.2f}"
    )


if __name__ == "__main__":
    main()
