"""Gradient co-design against random search and CMA-ES at equal numbers of model evaluations.

Every method is scored the same way: each evaluated point gives ``(f, plan penalty, g)``
(:func:`diffcost._codesign.optimize.evaluate`); a point is feasible when every budget holds
(``g <= 1e-3``) and the plan penalty is under ``1e-2``; a method's result is the best feasible
objective ``exp(f)`` among the points it evaluated, and the evaluations it needed to come within
1% of the best any method found.  Conventions for the gradient: one gradient step counts as one
evaluation (forward + backward ~ one model call in wall time under ``jit``), or as three
(reverse mode costs up to ~3 forward passes: Griewank & Walther, *Evaluating Derivatives*,
2nd ed., 2008, §4.6); both are reported.

Baselines: random search uniform in the log box; CMA-ES (Hansen, *The CMA Evolution Strategy:
A Tutorial*, arXiv:1604.00772) from the ``cmaes`` package (Nomura & Shibata, arXiv:2402.01373),
on the penalised objective ``f + penalty + 10 sum relu(g) + 100 sum relu(g)^2``, started at the
gradient method's start with step size 0.5 in log units.
"""

import math
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from .optimize import Problem, evaluate, make_step, solve, start_vector

BASELINES = ("random search", "CMA-ES")
POPULATION = 10  # CMA-ES population and random-search batch (one compiled batch shape)


@dataclass(frozen=True)
class Run:
    """One method's run: per evaluation ``f``, plan penalty and ``max g``."""

    method: str
    seed: int
    f: np.ndarray
    penalty: np.ndarray
    g_max: np.ndarray

    def feasible(self) -> np.ndarray:
        return (self.g_max <= 1e-3) & (self.penalty <= 1e-2)

    def best(self) -> float:
        """Best feasible objective exp(f) (inf if none)."""
        ok = self.feasible()
        return float(np.exp(np.min(self.f[ok]))) if ok.any() else math.inf

    def evals_to(self, target: float, per_eval: int = 1) -> float:
        """Evaluations until a feasible point with ``exp(f) <= target`` (inf if never)."""
        hit = np.nonzero(self.feasible() & (np.exp(self.f) <= target))[0]
        return float((hit[0] + 1) * per_eval) if len(hit) else math.inf


def _batch_evaluator(problem: Problem):
    return jax.jit(jax.vmap(lambda x: evaluate(problem, x)))


def _run_of(method: str, seed: int, f, pen, g) -> Run:
    g = np.asarray(g)
    return Run(method, seed, np.asarray(f), np.asarray(pen), g.max(axis=-1))


def gradient_run(problem: Problem, evals: int, seed: int, per_eval: int = 1, step=None) -> Run:
    """Augmented-Lagrangian adam with ``evals // per_eval`` gradient steps, started at the
    reference chip perturbed by N(0, 0.3) in log units (seed 0: unperturbed)."""
    rng = np.random.default_rng(seed)
    x0 = start_vector(problem)
    lo, hi = problem.bounds()
    x0 = np.clip(x0 + (rng.normal(0.0, 0.3, x0.shape) if seed else 0.0), lo, hi)
    _, _, trace = solve(problem, max(evals // per_eval, 1), x0=x0, inner=5, step=step)
    trace = trace[: max(evals // per_eval, 1)]
    f, pen, g = trace[:, 0], trace[:, 1], trace[:, 2:]
    f, pen, g = (np.repeat(a, per_eval, axis=0) for a in (f, pen, g))  # evaluations, not steps
    return _run_of(f"gradient (1 grad = {per_eval} eval)", seed, f, pen, g)


def random_run(problem: Problem, evals: int, seed: int, batch=None) -> Run:
    """Uniform samples in the log box (design and plan parameters)."""
    batch = batch or _batch_evaluator(problem)
    rng = np.random.default_rng(seed)
    lo, hi = problem.bounds()
    rows = [batch(jnp.asarray(rng.uniform(lo, hi, (POPULATION, len(lo)))))]
    while len(rows) * POPULATION < evals:
        rows.append(batch(jnp.asarray(rng.uniform(lo, hi, (POPULATION, len(lo))))))
    f, pen, g = (np.concatenate([np.asarray(r[i]) for r in rows])[:evals] for i in range(3))
    return _run_of("random search", seed, f, pen, g)


def penalised(f, pen, g) -> np.ndarray:
    """The black-box methods' scalar: ``f + penalty + 10 sum relu(g) + 100 sum relu(g)^2``."""
    over = np.maximum(np.asarray(g), 0.0)
    return np.asarray(f) + np.asarray(pen) + 10.0 * over.sum(-1) + 100.0 * (over**2).sum(-1)


def cmaes_run(problem: Problem, evals: int, seed: int, batch=None) -> Run:
    """CMA-ES (``cmaes.CMA``) on :func:`penalised`, within the box."""
    from cmaes import CMA  # imported here: only the comparison needs it

    batch = batch or _batch_evaluator(problem)
    lo, hi = problem.bounds()
    x0 = start_vector(problem)
    opt = CMA(
        mean=x0, sigma=0.5, bounds=np.column_stack([lo, hi]), seed=seed, population_size=POPULATION
    )
    fs, pens, gs = [], [], []
    while len(fs) * POPULATION < evals:
        xs = np.stack([opt.ask() for _ in range(POPULATION)])
        f, pen, g = (np.asarray(a) for a in batch(jnp.asarray(xs)))
        opt.tell(list(zip(xs, penalised(f, pen, g), strict=True)))
        fs.append(f)
        pens.append(pen)
        gs.append(g)
    f, pen, g = (np.concatenate(a)[:evals] for a in (fs, pens, gs))
    return _run_of("CMA-ES", seed, f, pen, g)


def compare(problem: Problem, evals: int = 200, seeds: int = 3) -> list[Run]:
    """All methods, ``seeds`` seeds each, ``evals`` model evaluations each."""
    batch = _batch_evaluator(problem)
    step = make_step(lambda x: evaluate(problem, x), problem.bounds(), 0.05, 5, 10.0)
    runs = []
    for seed in range(seeds):
        runs.append(gradient_run(problem, evals, seed, 1, step))
        runs.append(gradient_run(problem, evals, seed, 3, step))
        runs.append(random_run(problem, evals, seed, batch))
        runs.append(cmaes_run(problem, evals, seed, batch))
    return runs


def table(runs: list[Run], unit: str) -> str:
    """Per method over seeds: median and lowest best feasible objective, feasible runs, median
    evaluations to come within 1% of the best any run found, and to match the median best of
    the better baseline (random search or CMA-ES)."""
    best = min(r.best() for r in runs)
    base = min(np.median([r.best() for r in runs if r.method == m]) for m in BASELINES)
    lines = [
        f"{'method':<28} {'best (median)':>14} {'unit':<11} {'best (min)':>10} {'feasible':>8} "
        f"{'evals to 1% of best':>19} {'evals to baseline':>17}",
    ]
    for method in dict.fromkeys(r.method for r in runs):
        mine = [r for r in runs if r.method == method]
        bests = np.asarray([r.best() for r in mine])
        reach = np.median([r.evals_to(1.01 * best) for r in mine])
        match = np.median([r.evals_to(base) for r in mine])
        lines.append(
            f"{method:<28} {np.median(bests):>14.5g} {unit:<11} {bests.min():>10.5g} "
            f"{np.isfinite(bests).sum():>6}/{len(mine):<1} {reach:>19} {match:>17}"
        )
    return "\n".join(lines)


__all__ = ["Run", "cmaes_run", "compare", "gradient_run", "penalised", "random_run", "table"]
