"""TTFT of a closed loop of clients: the continuous serving mode against published concurrency
sweeps and against the discrete-event simulation of the same scheduler.

Run: python benchmarks/closed_loop_ttft.py [--simulate]

Published: NVIDIA NIM for LLMs 1.8.0, Llama-3.3-70B-Instruct fp8 TP2 on 2x H100 80G, AIPerf at
concurrency 5-200 (docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance, tables '200 / 200',
'1000 / 1000' and '5000 / 500' input / output tokens; the saturated rows, where TTFT jumps to
seconds as requests queue behind the server's capacity, are left out: 5000 / 500 at 100 clients
and more).  The model: :class:`diffcost.ServeCost` in continuous mode with ``batch`` = the
concurrency, engine ``nim-llm-1.8``, fp8 weights and KV cache, the default token budget
(``prefill_chunk`` 2,048).  ``--simulate`` adds the SimPy simulation of the same scheduler driven
by a closed loop whose clients all start at time 0 (``tests/serving_sim.py``: ``closed_loop``)
and by one whose clients start at random times over one measured request latency (random
phases), the two limits of how synchronised real clients are.
"""

import argparse
import os
import sys

import equinox as eqx
import numpy as np

import diffcost as dc

#: (input, output) -> {concurrency: (TTFT ms, ITL ms, output tokens/s)}, as published.
NIM_18_LLAMA33_70B_TP2 = {
    (200, 200): {
        5: (88.7, 18.83, 260.67),
        25: (138.98, 20.61, 1178.68),
        50: (156.28, 23.33, 2081.24),
        100: (176.8, 29.87, 3263.31),
        200: (253.36, 42.95, 4534.54),
    },
    (1000, 1000): {
        5: (145.62, 19.07, 260.48),
        25: (250.49, 22.45, 1102.23),
        50: (278.62, 25.87, 1912.93),
        100: (334.23, 34.21, 2895.49),
        200: (558.23, 50.66, 3901.74),
    },
    (5000, 500): {
        5: (546.7, 21.83, 218.48),
        25: (688.69, 38.75, 623.4),
        50: (834.51, 59.73, 814.37),
    },
}


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
    for (n_in, n_out), rows in NIM_18_LLAMA33_70B_TP2.items():
        for c, (ttft_ms, itl_ms, tokens_per_s) in rows.items():
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
