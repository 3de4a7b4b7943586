"""The analytic serving-under-load model (diffcost.under_load) against the SimPy simulation of
the same scheduler (tests/serving_sim.py): TTFT p50/p90/p99 and TPOT mean/p99, predicted /
simulated, at 0.3-0.9 of the analytic saturation rate (within 1% of the simulation's on every
case), for six workloads of Llama 3 8B on one H100: fixed prompt lengths and gamma lengths of
CV 0.5 and 1, token budgets of 512, 2,048 and 8,192.

Run: python benchmarks/load_vs_simulation.py [--requests 20000] [--loads 0.3 0.9] [--cases 0 2]

Measured (20,000 requests; issue 43): 16 of 150 cells off by more than 10% (45 before packing
and the spread's share of the service), median |error| 4%.  The p99 TTFT at 0.9 is the largest
miss: with 80,000 requests the simulation gives 527 ms (fixed lengths) and 526 ms (CV 0.5)
against 251 and 289 ms, while p50 and p90 stay within 11%: near saturation the running batch
drifts slowly (its relaxation time is a request's life, L_out T) and modulates the prompts'
service rate, long excursions that a queue with one service rate does not have.
"""

import argparse
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import diffcost as dc
from diffcost._serve.load import Workload, under_load

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from serving_sim import IterationTable, simulate  # noqa: E402

CASES = [
    (dict(batch=128, input_len=1024, output_len=128, prefill_chunk=2048), 0.0),
    (dict(batch=256, input_len=512, output_len=512, prefill_chunk=512), 0.0),
    (dict(batch=128, input_len=1024, output_len=128, prefill_chunk=2048), 0.5),
    (dict(batch=256, input_len=512, output_len=256, prefill_chunk=2048), 1.0),
    (dict(batch=256, input_len=512, output_len=256, prefill_chunk=8192), 1.0),
    (dict(batch=256, input_len=256, output_len=256, prefill_chunk=8192), 0.0),
]
LOADS = (0.3, 0.5, 0.7, 0.8, 0.9)  # fractions of the analytic saturation rate


def saturation_qps(f) -> float:
    """The rate at which the analytic utilisation reaches 1 (bisection in log space)."""
    lo, hi = 0.1, 400.0
    for _ in range(40):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if float(f(mid).utilisation) < 1 else (lo, mid)
    return lo


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--loads", type=float, nargs="*", default=LOADS)
    ap.add_argument("--cases", type=int, nargs="*", default=range(len(CASES)))
    args = ap.parse_args()
    system, model = dc.load_system("dgx-h100", chips=1), dc.load_model("llama-3-8b")
    for kw, cv in (CASES[i] for i in args.cases):
        plan = dc.serve_plan(**kw)
        table = IterationTable(system, model, plan)
        f = jax.jit(
            lambda q, plan=plan, cv=cv: under_load(
                system, model, plan, Workload(q, jnp.asarray(1.0), jnp.asarray(cv))
            )
        )
        top = saturation_qps(f)
        print(f"{kw} input_cv {cv}: analytic saturation {top:.2f} requests/s")
        print("util    qps | TTFT p50 | TTFT p90 | TTFT p99 | TPOT mean | TPOT p99 (pred/sim, err)")
        for u in args.loads:
            q = u * top
            out = f(q)
            ttft, tpot = simulate(table, plan, q, args.requests, seed=3, input_cv=cv)
            pairs = [
                (out.ttft_p50_s, np.percentile(ttft, 50)),
                (out.ttft_p90_s, np.percentile(ttft, 90)),
                (out.ttft_p99_s, np.percentile(ttft, 99)),
                (out.tpot_s, np.median(tpot)),
                (out.tpot_p99_s, np.percentile(tpot, 99)),
            ]
            cells = [
                f"{1e3 * float(a):6.1f}/{1e3 * s:6.1f} {100 * (float(a) / s - 1):+4.0f}%"
                for a, s in pairs
            ]
            print(f"{float(out.utilisation):4.2f} {q:6.2f} | " + " | ".join(cells))


if __name__ == "__main__":
    main()
