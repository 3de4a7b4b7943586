"""TTFT of a closed loop of clients: the continuous serving mode against published concurrency
sweeps and against the discrete-event simulation of the same scheduler.

Run: python benchmarks/closed_loop_ttft.py [--simulate]

Published: NVIDIA NIM for LLMs 1.8.0, Llama-3.3-70B-Instruct fp8 TP2 on 2x H100 80G, AIPerf at
concurrency 5-200 (docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance, tables '200 / 200', '1000
/ 1000' and '5000 / 500' input / output tokens, the rows held verbatim by
``benchmarks/nim_concurrency_points.py``, which writes the load file; the saturated rows, where TTFT
jumps to seconds as requests queue behind the server's capacity, are left out by its rule: 5000 /
500 at 100 clients and more). The model: :class:`diffcost.ServeCost` in continuous mode with
``batch`` = the concurrency, engine ``nim-llm-1.8``, fp8 weights and KV cache, the default token
budget (``prefill_chunk`` 2,048). ``--simulate`` adds the SimPy simulation of the same scheduler
driven by a closed loop whose clients all start at time 0 (``tests/serving_sim.py``:
``closed_loop``) and by one whose clients start at random times over one measured request latency
(random phases), the two limits of how synchronised real clients are.
"""

import argparse
import os
import sys

import equinox as eqx
import numpy as np
from nim_concurrency_points import LLAMA_70B, rows  # benchmarks/ is sys.path[0]

import diffcost as dc

#: The workloads and client counts compared: every Llama 3.3 70B row of these tables at these
#: concurrencies that the generator of the NIM load file keeps (not past a capacity knee).
WORKLOADS = ((200, 200), (1000, 1000), (5000, 500))
CLIENTS = (5, 25, 50, 100, 200)


def nim_rows() -> list:
    """The compared rows of :mod:`nim_concurrency_points` (the published values, verbatim)."""
    return [
        r
        for r in rows()
        if r.deployment is LLAMA_70B
        and (r.input_len, r.output_len) in WORKLOADS
        and r.concurrency in CLIENTS
        and not r.knee_flag
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--simulate", action="store_true", help="also run the SimPy simulations")
    args = ap.parse_args()
    model = dc.load_model("llama-3-70b")
    system = dc.load_system("dgx-h100", chips=2)
    cost = eqx.filter_jit(lambda p: dc.ServeCost(system, model)(p))
    if args.simulate:
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
        from serving_sim import IterationTable, closed_loop
    print("in/out clients | TTFT ms: measured  model (err) | TPOT ms: measured  model (err)")
    ttft_err, tpot_err = [], []
    for row in nim_rows():
        n_in, n_out, c = row.input_len, row.output_len, row.concurrency
        ttft_ms, itl_ms, tokens_per_s = row.ttft_ms, row.itl_ms, row.tokens_per_s
        plan = dc.serve_plan(
            tp=2,
            batch=c,
            input_len=n_in,
            output_len=n_out,
            weight_format="fp8",
            kv_format="fp8",
            engine="nim-llm-1.8",
            kv_block=16,
        )
        out = cost(plan)
        ttft, tpot = float(out.ttft_s) * 1e3, float(out.tpot_s) * 1e3
        ttft_err.append(ttft / ttft_ms - 1.0)
        tpot_err.append(tpot / itl_ms - 1.0)
        line = (
            f"{n_in:5d}/{n_out:<5d} {c:4d} | {ttft_ms:8.1f} {ttft:8.1f} ({ttft_err[-1]:+5.0%})"
            f" | {itl_ms:6.2f} {tpot:6.2f} ({tpot_err[-1]:+4.0%})"
        )
        if args.simulate:
            table = IterationTable(system, model, plan, prompt_points=17)
            cohorts, _ = closed_loop(table, plan, 6 * c)
            latency_s = c * n_out / tokens_per_s  # a request's measured latency
            random_phase, _ = closed_loop(table, plan, 6 * c, spread_s=latency_s)
            line += (
                f" | simulated TTFT: cohorts {cohorts.mean() * 1e3:7.1f},"
                f" random phases {random_phase.mean() * 1e3:7.1f}"
            )
        print(line, flush=True)
    med = np.median
    print(
        f"TTFT median |error| {med(np.abs(ttft_err)):.1%} (median {med(ttft_err):+.1%});"
        f" TPOT median |error| {med(np.abs(tpot_err)):.1%}"
    )


if __name__ == "__main__":
    main()
