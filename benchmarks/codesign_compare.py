"""Gradient co-design vs random search vs CMA-ES at equal model evaluations.

Run: ``python benchmarks/codesign_compare.py [EVALS] [SEEDS] [WORKLOAD ...]`` (defaults 200,
5, edge serve train mix; EVALS may list budgets, e.g. ``200,2000``); writes
``benchmarks/results/codesign-compare.txt``.  Per workload it first measures the cost of a
gradient step in forward evaluations (:func:`~diffcost._codesign.compare.measure_cost`) and
charges the gradient that many evaluations (rounded up), with 1 and 3 as brackets.
"""

import math
import sys
import time
from pathlib import Path

from diffcost._codesign.compare import (
    BASELINES,
    _batch_evaluator,
    _step,
    compare,
    measure_cost,
    median_best,
    popsize,
    table,
)
from diffcost._codesign.optimize import make_problem
from diffcost._codesign.technology import load_technology

WORKLOADS = ("edge", "serve", "train", "mix")


def header(evals: str, seeds: int, names: list[str]) -> list[str]:
    return [
        f"codesign: gradient vs random search vs CMA-ES, {evals} model evaluations, {seeds} seeds",
        "command: python benchmarks/codesign_compare.py "
        + " ".join([str(evals), str(seeds), *names]),
        "best feasible = lowest objective among evaluated points meeting every budget (area, "
        "power, cost) and the plan's constraints (one definition for all methods); medians over "
        "seeds; evals to 1% of best: evaluations until within 1% of the best any run found; evals "
        "to baseline: until as good as the better baseline's median best (inf: never); /CMA-ES, "
        "/random: median best over the baseline's median best (< 1: better than the baseline)",
        "1 grad = k eval: a gradient step charged k model evaluations; k measured = wall time of "
        "one compiled gradient step / one point of the compiled batched forward at the CMA-ES "
        "population, rounded up (1 and 3: brackets)",
        "",
    ]


def closing(runs, k: int) -> list[str]:
    grad = median_best(runs, f"gradient (1 grad = {k} eval)")
    out = []
    for other in BASELINES:
        base = median_best(runs, other)
        if not math.isfinite(base):
            verdict = f"{other} found no feasible design in most runs"
        elif not math.isfinite(grad):
            verdict = "the gradient found no feasible design in most runs"
        else:
            verdict = f"median best {grad / base:.3g}x the baseline's"
        out.append(f"gradient (1 grad = {k} evals, measured) vs {other}: {verdict}")
    return out


def workload(name: str, budgets: list[int], seeds: int, tech) -> list[str]:
    start = time.perf_counter()
    problem = make_problem(name, tech)
    dim = sum(problem.sizes())
    batch, step = _batch_evaluator(problem), _step(problem)
    cost = measure_cost(problem, batch, step)
    k = math.ceil(cost["ratio"])
    desc = "; ".join(w.description for w in problem.workloads)
    units = [w.unit for w in problem.workloads]  # mix: exp(sum of weighted log objectives)
    unit = units[0] if len(units) == 1 else "product"
    out = [
        f"== {name}: {desc} ==",
        *([f"objective: product of {' x '.join(units)} (weights 1)"] if len(units) > 1 else []),
        f"dimension {dim} (design 8 + plan {dim - 8}), CMA-ES population {popsize(dim)}",
        f"cost: gradient step {cost['grad_s'] * 1e3:.3f} ms, forward {cost['forward_s'] * 1e3:.3f} "
        f"ms/point (batch {popsize(dim)}): ratio {cost['ratio']:.2f} -> 1 grad = {k} evals "
        f"(unbatched forward {cost['forward1_s'] * 1e3:.3f} ms: ratio {cost['ratio1']:.2f})",
    ]
    for evals in budgets:
        runs = compare(problem, evals, seeds, cost["ratio"], batch, step)
        out += [f"-- {evals} model evaluations --", table(runs, unit), *closing(runs, k)]
    return [*out, f"({time.perf_counter() - start:.0f} s wall with compilation, 2-core CPU)", ""]


def main() -> None:
    budgets = [int(e) for e in (sys.argv[1] if len(sys.argv) > 1 else "200").split(",")]
    seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    names = sys.argv[3:] or list(WORKLOADS)
    tech = load_technology("n4")
    start = time.perf_counter()
    out = header(sys.argv[1] if len(sys.argv) > 1 else "200", seeds, names)
    for name in names:
        lines = workload(name, budgets, seeds, tech)
        print("\n".join(lines), flush=True)
        out += lines
    out.append(f"total {time.perf_counter() - start:.0f} s wall, 2-core CPU")
    path = Path(__file__).parent / "results" / "codesign-compare.txt"
    path.write_text("\n".join(out) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
