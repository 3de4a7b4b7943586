"""Cost of error bars (issue 11): one plan with intervals against one plan without.

Run: python benchmarks/bench_intervals.py [--calls 200]
Without: the jitted cost model on one plan.  With: the outputs and their Jacobian with respect
to the 7 log calibration constants (``diffcost._analysis.uncertainty.log_jacobian``, one
``jax.jacfwd``), from which the p10/p90 follow in numpy.  Target: at most 3x.
Float32 (JAX default), CPU unless a GPU is present.  Compile time is reported separately.
"""

import argparse

import equinox as eqx
from _timing import time_calls  # benchmarks/ is sys.path[0] when run as a script

import diffcost as dc
from diffcost._analysis.uncertainty import SERVE_OUTPUTS, TRAIN_OUTPUTS, log_jacobian


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    system = dc.load_system("dgx-h100", chips=64)
    model = dc.load_model("llama-2-70b")
    jobs = (
        ("train", dc.TrainCost(system, model), dc.train_plan(tp=8, pp=2, dp=4, micro_batch=1)),
        ("serve", dc.ServeCost(system, model), dc.serve_plan(tp=4, batch=64)),
    )
    plain = eqx.filter_jit(lambda cost, plan: cost(plan))
    for kind, cost, plan in jobs:
        names = tuple(n for n, _ in (TRAIN_OUTPUTS if kind == "train" else SERVE_OUTPUTS))
        c0, t0 = time_calls(plain, (cost, plan), args.calls)
        c1, t1 = time_calls(log_jacobian, (cost, plan, names), args.calls)
        print(
            f"{kind}: without {t0 * 1e3:.3f} ms/plan (compile {c0:.1f} s); with intervals "
            f"{t1 * 1e3:.3f} ms/plan (compile {c1:.1f} s): {t1 / t0:.2f}x per call, "
            f"{(c1 + t1) / (c0 + t0):.2f}x first call"
        )


if __name__ == "__main__":
    main()
