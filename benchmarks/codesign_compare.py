"""Gradient co-design vs random search vs CMA-ES at equal model evaluations.

Run: ``python benchmarks/codesign_compare.py [EVALS] [SEEDS] [WORKLOAD ...]`` (defaults 200,
5, edge serve train mix; EVALS may list budgets, e.g. ``200,2000``); writes
``benchmarks/results/codesign-compare.txt``.  Per workload it first measures the cost of a
gradient step in forward evaluations (:func:`~diffcost._codesign.compare.measure_cost`) and
charges the gradient that many evaluations (rounded up), with 1 and 3 as brackets.

Workloads ``fleet1``, ``fleet2``, ... ``fleetK``: K serving scenarios sharing one chip
(:func:`~diffcost._codesign.fleet.fleet_problem`, dimension 8 + 6 K).  When any is named the
results go to ``benchmarks/results/codesign-compare-dim.txt``, with a summary per dimension at
the end; the dimension study is
``python benchmarks/codesign_compare.py 200,2000 5 fleet1 fleet2 fleet4 fleet8 fleet16``.
"""

import math
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from diffcost._codesign.compare import (
    BASELINES,
    _batch_evaluator,
    _step,
    compare,
    conventions,
    measure_cost,
    measure_multistart,
    median_best,
    multistart_name,
    multistart_step,
    popsize,
    table,
)
from diffcost._codesign.fleet import fleet_problem
from diffcost._codesign.optimize import make_problem
from diffcost._codesign.technology import load_technology

WORKLOADS = ("edge", "serve", "train", "mix")
STARTS = 4  # multi-start gradient: starts advanced together by one vmapped step


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


def problem_of(name: str, tech):
    """The problem of a built-in workload, or of ``fleetK`` (K serving scenarios, one chip)."""
    if name.startswith("fleet"):
        return fleet_problem(int(name.removeprefix("fleet")), tech)
    return make_problem(name, tech)


def unit_of(name: str, problem) -> str:
    if name.startswith("fleet"):
        return "USD s/token"  # geometric mean over the scenarios (weights 1/K)
    units = [w.unit for w in problem.workloads]  # mix: exp(sum of weighted log objectives)
    return units[0] if len(units) == 1 else "product"


def describe(name: str, problem, dim: int, cost: dict[str, float], k: int) -> list[str]:
    units = [w.unit for w in problem.workloads]
    if name.startswith("fleet"):
        what = [f"objective: geometric mean of {len(units)} scenarios' {units[0]} (weights 1/K)"]
    else:
        what = [f"objective: product of {' x '.join(units)} (weights 1)"] if len(units) > 1 else []
    return [
        f"== {name}: {'; '.join(w.description for w in problem.workloads)} ==",
        *what,
        f"dimension {dim} (design 8 + plan {dim - 8}), CMA-ES population {popsize(dim)}",
        f"cost: gradient step {cost['grad_s'] * 1e3:.3f} ms, forward {cost['forward_s'] * 1e3:.3f} "
        f"ms/point (batch {popsize(dim)}): ratio {cost['ratio']:.2f} -> 1 grad = {k} evals "
        f"(unbatched forward {cost['forward1_s'] * 1e3:.3f} ms: ratio {cost['ratio1']:.2f})",
    ]


def summary_row(name: str, dim: int, ks: tuple[int, int], cost, evals: int, runs) -> dict:
    """Per method: median best and median evaluations to the better baseline's median best
    (both baselines infeasible: to the first feasible point); the gradient at 1, 3 and the
    measured ``k`` evaluations per step, the multi-start gradient at its measured ``kv``."""
    base = min(median_best(runs, m) for m in BASELINES)
    k, kv = ks
    row: dict[Any, Any] = {"name": name, "dim": dim, "k": k, "kv": kv, "evals": evals}
    row["grad_ms"], row["cma"] = cost["grad_s"] * 1e3, median_best(runs, "CMA-ES")
    methods: dict[Any, str] = {
        c: f"gradient (1 grad = {c} eval)" for c in conventions(cost["ratio"])
    }
    methods["multi"] = multistart_name(STARTS, kv)
    for key, method in methods.items():
        mine = [r for r in runs if r.method == method]
        row[key] = (median_best(runs, method), np.median([r.evals_to(base) for r in mine]))
    row["cma_to_base"] = np.median([r.evals_to(base) for r in runs if r.method == "CMA-ES"])
    return row


def cell(row: dict, key) -> str:
    """``median best / CMA-ES's (evals to baseline)``; n/a where either found nothing."""
    mine, cma = row[key][0], row["cma"]
    ratio = f"{mine / cma:.3g}" if math.isfinite(mine) and math.isfinite(cma) else "n/a"
    return f"{ratio} ({row[key][1]:g})"


def summary(rows: list[dict]) -> list[str]:
    """One line per workload and budget: the gradient's median best over CMA-ES's at 1, 3 and
    the measured k evaluations per step, and the multi-start's (< 1: the gradient wins), with
    the median evaluations to the better baseline's median best; the break-even cost of a step
    ``evals / (steps to baseline at 1 grad = 1 eval)``: charged less, the gradient wins."""
    out = [
        "summary: median best / CMA-ES median best (< 1: better than CMA-ES; n/a: one of them "
        "feasible in fewer than half the runs), in () median evals to the better baseline's median "
        "best (inf: never; both baselines infeasible: to the first feasible point); gradient "
        f"charged 1, 3 and the measured k evals per step; {STARTS}-start: {STARTS} x kv evals "
        "per vmapped step; break-even k = evals / (evals to baseline at 1 grad = 1): a step "
        "charged less reaches CMA-ES's median best within the budget",
        f"{'workload':<8} {'dim':>3} {'evals':>5} {'grad ms':>7} {'k':>3} {'1 grad = 1':>14} "
        f"{'1 grad = 3':>14} {'1 grad = k':>14} {'kv':>3} {f'{STARTS}-start':>14} "
        f"{'(CMA-ES)':>8} {'break-even k':>12}",
    ]
    for r in rows:
        cma_to_base = f"({r['cma_to_base']:g})"
        out.append(
            f"{r['name']:<8} {r['dim']:>3} {r['evals']:>5} {r['grad_ms']:>7.3f} {r['k']:>3} "
            f"{cell(r, 1):>14} {cell(r, 3):>14} {cell(r, r['k']):>14} {r['kv']:>3} "
            f"{cell(r, 'multi'):>14} {cma_to_base:>8} "
            f"{r['evals'] / r[1][1]:>12.3g}"
        )
    return out


def workload(name: str, budgets: list[int], seeds: int, tech, rows: list) -> list[str]:
    start = time.perf_counter()
    problem = problem_of(name, tech)
    dim = sum(problem.sizes())
    batch, step = _batch_evaluator(problem), _step(problem)
    cost = measure_cost(problem, batch, step)
    vstep = multistart_step(problem, step)
    cost["multi_s"], cost["multi_ratio"] = measure_multistart(
        problem, vstep, STARTS, cost["forward_s"]
    )
    k, kv = math.ceil(cost["ratio"]), math.ceil(cost["multi_ratio"])
    out = describe(name, problem, dim, cost, k)
    out.append(
        f"multi-start: {STARTS} starts in one vmapped step, {cost['multi_s'] * 1e3:.3f} ms per "
        f"start and step: ratio {cost['multi_ratio']:.2f} -> each start's step = {kv} evals "
        f"({STARTS * kv} per vmapped step)"
    )
    out.append(f"(compiled and timed in {time.perf_counter() - start:.0f} s)")
    for evals in budgets:
        runs = compare(problem, evals, seeds, cost["ratio"], batch, step, (STARTS, kv, vstep))
        rows.append(summary_row(name, dim, (k, kv), cost, evals, runs))
        out += [f"-- {evals} model evaluations --", table(runs, unit_of(name, problem))]
        out += closing(runs, k)
    return [*out, f"({time.perf_counter() - start:.0f} s wall with compilation, 2-core CPU)", ""]


def main() -> None:
    budgets = [int(e) for e in (sys.argv[1] if len(sys.argv) > 1 else "200").split(",")]
    seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    names = sys.argv[3:] or list(WORKLOADS)
    tech = load_technology("n4")
    start = time.perf_counter()
    out, rows = header(sys.argv[1] if len(sys.argv) > 1 else "200", seeds, names), []
    for name in names:
        lines = workload(name, budgets, seeds, tech, rows)
        print("\n".join(lines), flush=True)
        out += lines
    out += [*summary(rows), "", f"total {time.perf_counter() - start:.0f} s wall, 2-core CPU"]
    dim = any(n.startswith("fleet") for n in names)
    path = Path(__file__).parent / "results" / f"codesign-compare{'-dim' if dim else ''}.txt"
    path.write_text("\n".join(out) + "\n")
    print("\n".join(out[-len(rows) - 4 :]))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
