"""Benchmark sweeps: full-model evaluations per second for a 1,000,000-point sweep.

Run: python benchmarks/bench_sweep.py [--job train|serve] [--repeats 3] [--chunk N] [--block N]
[--no-intervals] [--cpu-devices N]

The sweep is a grid of 5 models x 5 systems x 5 TP x 5 PP x 5 micro-batches x 5 sequence
lengths x 2 recomputation x 4 ZeRO stages x 2 precisions x 4 CP degrees = 1,000,000 training
plans (or an equally large serving grid), evaluated with the exact model and every output of the
breakdown kept (XLA drops outputs nobody reads, so nothing is skipped), in float32 (JAX's
default), sharded over every device JAX sees.  Reported: compile time, evaluations per second
after compilation (best of ``--repeats``, the device work and the copy of every output to host
memory), the time to build the tidy pandas table, and the peak resident memory of the process
(``resource.getrusage``).  The headline outputs' p10/p90 interval columns are kept too; their
log-Jacobian over the calibrated constants takes most of each point's time (``--no-intervals``
leaves them out).  On a CPU each chunk runs in blocks of ``--block`` points
(``diffcost._analysis.sweep.CPU_BLOCK`` by default).  XLA runs one CPU device's program on one
core: ``--cpu-devices N`` makes JAX show N CPU devices (``jax_num_cpu_devices``), one per core,
and the sweep is sharded over them.
"""

import argparse
import resource
import sys
import time

import jax

from diffcost._analysis.sweep import Sweep, prepare, run_sweep

MODELS = ["llama-3-8b", "llama-2-13b", "llama-3-70b", "gpt3-175b", "llama-3-405b"]
SYSTEMS = ["dgx-h100", "dgx-a100", "hgx-h200", "tpu-v5p-pod", "mi300x-platform"]


def train_sweep() -> Sweep:
    return Sweep(
        "train",
        base=dict(chips=1024, global_batch=1024),
        grid=dict(
            model=MODELS,
            system=SYSTEMS,
            tp=[1, 2, 4, 8, 16],
            pp=[1, 2, 4, 8, 16],
            micro_batch=[1, 2, 4, 8, 16],
            seq_len=[1024, 2048, 4096, 8192, 16384],
            recompute=["selective", "full"],
            zero=[0, 1, 2, 3],
            precision=["bf16", "fp8"],
            cp=[1, 2, 4, 8],
        ),
        name="bench-train",
    )


def serve_sweep() -> Sweep:
    return Sweep(
        "serve",
        base=dict(chips=64),
        grid=dict(
            model=MODELS,
            system=SYSTEMS,
            tp=[1, 2, 4, 8, 16],
            pp=[1, 2, 4, 8, 16],
            batch=[1, 4, 16, 64, 256],
            input_len=[128, 512, 1024, 2048, 4096],
            mode=["static", "continuous"],
            weight_format=["bf16", "fp8", "int8", "int4"],
            kv_format=["bf16", "fp8"],
            output_len=[64, 128, 256, 512],
        ),
        name="bench-serve",
    )


def peak_rss_gb() -> float:
    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--job", choices=["train", "serve"], default="train")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--chunk", type=int, default=None)
    parser.add_argument("--block", type=int, default=None)
    parser.add_argument("--intervals", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--cpu-devices", type=int, default=1)
    args = parser.parse_args()
    jax.config.update("jax_num_cpu_devices", args.cpu_devices)  # before JAX's backend starts
    sweep = train_sweep() if args.job == "train" else serve_sweep()
    assert sweep.size() == 1_000_000, sweep.size()
    print(
        f"devices: {jax.devices()}; {sweep.size():,} points, "
        f"{len(prepare(sweep).structure.outputs)} outputs each"
        + (" and their intervals" if args.intervals else "")
    )
    best = None
    for i in range(max(1, args.repeats)):
        t0 = time.perf_counter()
        result = run_sweep(
            sweep, progress=False, chunk=args.chunk, block=args.block, intervals=args.intervals
        )
        total = time.perf_counter() - t0
        table_s = total - result.compile_s - result.run_s
        print(
            f"run {i + 1}: compile {result.compile_s:.2f} s, evaluate {result.run_s:.3f} s "
            f"= {result.points_per_s:,.0f} evaluations/s ({result.chunks} chunks of "
            f"{result.chunk:,} on {result.devices} device(s), {result.memory_bytes / 1e6:.0f} MB "
            f"per chunk), table {table_s:.2f} s"
        )
        if best is None or result.run_s < best.run_s:
            best = result
    assert best is not None  # at least one repeat
    feasible = int(best.table.feasible.sum())
    print(
        f"best: {best.points_per_s:,.0f} full-model evaluations/s after compilation; "
        f"{feasible:,} feasible points; peak RSS {peak_rss_gb():.2f} GB"
    )


if __name__ == "__main__":
    main()
