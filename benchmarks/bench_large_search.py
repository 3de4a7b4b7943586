"""Search methods on large training spaces, at equal numbers of exact evaluations.

Run: python benchmarks/bench_large_search.py [--seeds 3] [--no-exhaustive] [--out FILE.json]
Needs ``cma`` (``pip install cma``) for the CMA-ES baseline.

For each space (mixture-of-experts and dense models at up to 16,384 H100s, every axis open:
tensor, pipeline, context, expert parallel, micro-batch, interleaving, chip count, recomputation,
ZeRO, precision, sequence parallelism) and each seed:
- ``relaxed``: :func:`diffcost._search.core.search` with the gradient phase (its default);
  its count of exact evaluations ``B`` is every method's budget;
- ``no-gradient``: the same pipeline with the learning rate 0 (random starts rounded, then the
  same exact refinement): what the gradient phase adds;
- ``random``: ``B`` valid plans drawn uniformly from the space, evaluated exactly;
- ``cma-es``: CMA-ES (the ``cma`` library) over one continuous coordinate per axis and choice
  (scaled to [0, 1], rounded to the nearest allowed value, repaired as the search repairs),
  restarted with a doubled population when it stops (IPOP), until ``B`` exact evaluations;
  invalid or infeasible plans score a penalty graded by how far they break the rules;
- ``exhaustive``: the on-device enumeration's optimum (the oracle), where it finishes.
Reported: each method's gap to the oracle (or to the best found by any method), its exact
evaluations and wall time (after compilation; compile times reported once).
"""

import argparse
import json
import math
import time

import numpy as np

import diffcost as dc
from diffcost._search.core import Candidates, scan_space, search, space_size
from diffcost._search.train import TrainProblem, TrainSearchSpace


def _space(name: str, model: str, lo: int, gb: int, max_cp: int, max_mb: int) -> tuple:
    """A space on 2**lo .. 16,384 H100s, 8k-token sequences, every axis open."""
    options = dict(
        global_batch=gb,
        seq_len=8192,
        chips=tuple(2**k for k in range(lo, 15)),
        max_cp=max_cp,
        max_micro_batch=max_mb,
        max_virtual_stages=16,
        precision=("bf16", "fp8"),
    )
    return (name, model, "dgx-h100", 16384, options)


SPACES = [  # name, model, system, largest chip count, space options
    _space("deepseek-v3-64..16384xh100", "deepseek-v3", 6, 8192, 32, 256),
    _space("qwen3-235b-1024..16384xh100", "qwen3-235b-a22b", 10, 8192, 16, 64),
    _space("llama-3-405b-1024..16384xh100", "llama-3-405b", 10, 4096, 16, 64),
]


def _exact(problem: TrainProblem, cand: Candidates) -> np.ndarray:
    """Exact objective of valid rows (inf where infeasible)."""
    if len(cand) == 0:
        return np.zeros(0)
    ev = problem.evaluate(cand)
    return np.where(ev.feasible, ev.objective, np.inf)


def random_search(problem: TrainProblem, budget: int, rng: np.random.Generator) -> float:
    """Best of ``budget`` distinct valid plans drawn uniformly (rejection from the product)."""
    total, found = space_size(problem), np.zeros(0, dtype=np.int64)
    while len(found) < budget:
        flat = rng.integers(0, total, size=20 * budget)
        ok = problem.valid(Candidates.at(problem.axes, problem.choices, flat))
        found = np.unique(np.concatenate([found, flat[ok]]))
    pick = rng.permutation(found)[:budget]
    return float(np.min(_exact(problem, Candidates.at(problem.axes, problem.choices, pick))))


def cma_search(problem: TrainProblem, budget: int, seed: int) -> float:
    """CMA-ES over scaled coordinates, rounded and repaired, restarted with a doubled
    population whenever it stops (IPOP, Auger & Hansen 2005) until ``budget`` exact
    evaluations of valid plans are spent."""
    import cma

    pools = [a.values for a in problem.axes] + [c.options for c in problem.choices]
    names = [a.name for a in problem.axes] + [c.name for c in problem.choices]
    used, best, restart = 0, math.inf, 0
    while used < budget:
        opts = {"bounds": [0, 1], "seed": 1000 * seed + restart + 1, "verbose": -9}
        opts["popsize"] = (4 + int(3 * math.log(len(pools)))) * 2**restart
        es = cma.CMAEvolutionStrategy([0.5] * len(pools), 0.3, opts)
        while used < budget and not es.stop():
            xs = es.ask()
            cols = {}
            for j, (name, pool) in enumerate(zip(names, pools, strict=True)):
                idx = [min(len(pool) - 1, int(round(x[j] * (len(pool) - 1)))) for x in xs]
                cols[name] = np.asarray(pool)[idx]
            cand = problem.repair(Candidates(cols))
            ok = problem.valid(cand)
            obj = np.full(len(xs), np.inf)
            obj[ok] = _exact(problem, cand.take(np.nonzero(ok)[0]))
            used += int(ok.sum())
            best = min(best, float(np.min(obj)))
            pen = 50.0 + _violation(problem, cand)  # above every feasible log objective
            fit = [math.log(v) if math.isfinite(v) else p for v, p in zip(obj, pen, strict=True)]
            es.tell(xs, fit)
        restart += 1
    return best


def rerun_cma(path: str, seeds: int) -> None:
    """Replace the CMA-ES results of a saved run (same budgets), e.g. after changing it."""
    with open(path) as f:
        rows = json.load(f)
    specs = {spec[0]: spec for spec in SPACES}
    for row in rows:
        name, model, system, chips, options = specs[row["space"]]
        problem = TrainProblem(
            dc.load_system(system, chips=chips), dc.load_model(model), TrainSearchSpace(**options)
        )
        for run in row["runs"][:seeds]:
            t0 = time.perf_counter()
            run["cma-es"] = [cma_search(problem, run["budget"], run["seed"])]
            run["cma-es"].append(time.perf_counter() - t0)
            print(json.dumps({"space": row["space"], **run}), flush=True)
    summary(rows)
    with open(path, "w") as f:
        json.dump(rows, f, indent=1, default=float)


def _violation(problem: TrainProblem, cand: Candidates) -> np.ndarray:
    """How far each row is from the rules that repair cannot fix (log2 units): more
    model-parallel ranks than chips, more sequences per step than the global batch, a
    fractional data-parallel degree; 1 more for an invalid row, so CMA-ES has a slope."""
    col = cand.columns
    ranks = col["tp"] * col["pp"] * col["cp"]
    dp = col["chips"] / ranks
    over = np.maximum(0.0, np.log2(ranks / col["chips"]))
    over += np.maximum(
        0.0, np.log2(np.maximum(dp, 1) * col["micro_batch"] / problem.space.global_batch)
    )
    return over + 1.0 - problem.valid(cand)


def run_space(spec: tuple, seeds: int, exhaustive: bool) -> dict:
    name, model, system, chips, options = spec
    space = TrainSearchSpace(**options)
    problem = TrainProblem(dc.load_system(system, chips=chips), dc.load_model(model), space)
    row: dict = {"space": name, "plans": space_size(problem), "runs": []}
    t0 = time.perf_counter()
    search(problem, exhaustive=False)  # compile the relaxed search once
    row["relaxed_compile_s"] = time.perf_counter() - t0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        t0 = time.perf_counter()
        rel = search(problem, exhaustive=False, seed=seed)
        t_rel = time.perf_counter() - t0
        budget = rel.evaluated
        t0 = time.perf_counter()
        flat = search(problem, exhaustive=False, seed=seed, learning_rate=0.0)
        t_flat = time.perf_counter() - t0
        t0 = time.perf_counter()
        rnd = random_search(problem, budget, rng)
        t_rnd = time.perf_counter() - t0
        t0 = time.perf_counter()
        cm = cma_search(problem, budget, seed)
        t_cma = time.perf_counter() - t0
        run = {
            "seed": seed,
            "budget": budget,
            "relaxed": [rel.best_objective, t_rel],
            "no-gradient": [flat.best_objective, t_flat, flat.evaluated],
            "random": [rnd, t_rnd],
            "cma-es": [cm, t_cma],
        }
        row["runs"].append(run)
        print(json.dumps({"space": name, **run}), flush=True)
    if exhaustive:
        t0 = time.perf_counter()
        exh = scan_space(problem, "device")
        row["exhaustive_s"] = time.perf_counter() - t0
        row["optimum"] = exh.best_objective if exh is not None else None
        row["optimum_plan"] = exh.rows()[0] if exh is not None and exh.best is not None else None
    return row


def summary(rows: list[dict]) -> None:
    methods = ("relaxed", "no-gradient", "random", "cma-es")
    print(f"\n{'space':32s} {'plans':>14s} " + " ".join(f"{m:>12s}" for m in methods))
    for row in rows:
        ref = row.get("optimum") or min(r[m][0] for r in row["runs"] for m in methods)
        gaps = {m: np.median([r[m][0] / ref - 1 for r in row["runs"]]) for m in methods}
        print(
            f"{row['space']:32s} {row['plans']:>14,d} "
            + " ".join(f"{gaps[m]:>+12.2%}" for m in methods)
        )
        row["median_gap"] = gaps
    print("(median gap to the exhaustive optimum over seeds, at the relaxed search's budget)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--no-exhaustive", action="store_true")
    parser.add_argument("--only", default=None, help="run only spaces whose name contains this")
    parser.add_argument("--out", default=None)
    parser.add_argument("--rerun-cma", default=None, help="a saved --out file: redo CMA-ES only")
    args = parser.parse_args()
    if args.rerun_cma:
        rerun_cma(args.rerun_cma, args.seeds)
        return
    rows = [
        run_space(spec, args.seeds, not args.no_exhaustive)
        for spec in SPACES
        if args.only is None or args.only in spec[0]
    ]
    summary(rows)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(rows, f, indent=1, default=float)


if __name__ == "__main__":
    main()
