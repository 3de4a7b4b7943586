"""Gradient co-design vs random search vs CMA-ES at equal model evaluations.

Run: ``python benchmarks/codesign_compare.py [EVALS] [SEEDS]`` (defaults 200, 3); writes
``benchmarks/results/codesign-compare.txt``.  The training workload is left out: compiling
the gradient of the 1,024-chip training model takes ~10 minutes on a 2-core CPU.
"""

import sys
import time
from pathlib import Path

import numpy as np

from diffcost._codesign.compare import compare, table
from diffcost._codesign.optimize import make_problem
from diffcost._codesign.technology import load_technology

WORKLOADS = ("edge", "serve")


def main() -> None:
    evals = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    tech = load_technology("n4")
    out = [
        f"codesign: gradient vs random search vs CMA-ES, {evals} model evaluations, {seeds} seeds",
        "command: python benchmarks/codesign_compare.py " + f"{evals} {seeds}",
        "best feasible = lowest objective among evaluated points meeting every budget "
        "(area, power, cost) and the plan's constraints; medians over seeds; evals to 1% of best: "
        "evaluations until within 1% of the best any run found; evals to baseline: until "
        "as good as the better baseline's median best (inf: never)",
        "",
    ]
    for name in WORKLOADS:
        problem = make_problem(name, tech)
        start = time.perf_counter()
        runs = compare(problem, evals, seeds)
        unit = problem.workloads[0].unit
        out += [f"== {name}: {problem.workloads[0].description} ==", table(runs, unit)]
        for per in (1, 3):
            grad = np.median([r.best() for r in runs if r.method.endswith(f"= {per} eval)")])
            for other in ("random search", "CMA-ES"):
                base = np.median([r.best() for r in runs if r.method == other])
                ratio = (
                    f"{base / grad:.3g}x lower"
                    if np.isfinite(base)
                    else f"{other} found no feasible design in most runs"
                )
                out.append(f"gradient (1 grad = {per} evals) vs {other}: median best: {ratio}")
        out += [f"({time.perf_counter() - start:.0f} s wall, 2-core CPU)", ""]
        print("\n".join(out[-12:]), flush=True)
    path = Path(__file__).parent / "results" / "codesign-compare.txt"
    path.write_text("\n".join(out) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
