"""Gradient co-design against random search and CMA-ES at equal numbers of model evaluations.

Every method is scored the same way (:meth:`Run.feasible`, one definition for all): each
evaluated point gives ``(f, plan penalty, g)`` (:func:`diffcost._codesign.optimize.evaluate`);
a point is feasible when every budget holds (``max g <= 1e-3``) and the plan penalty is under
``1e-2``; a method's result is the best feasible objective ``exp(f)`` among the points it
evaluated.  (The training workload folds its plan penalty into ``f``: there ``exp(f)`` is the
step time times ``exp(penalty) >= 1``, so an infeasible plan is scored worse, not excluded.)

Cost convention.  A gradient step is not one model evaluation: :func:`measure_cost` times, after
compilation, one compiled batched forward per point (at the CMA-ES batch size) and one step of
:func:`~diffcost._codesign.optimize.make_step`'s scan (value and gradient); their ratio, rounded
up, is the primary convention ``1 grad = k evals``.  Brackets: 1 and 3 (reverse mode costs at
most ~3 forward passes in operations, Griewank & Walther, *Evaluating Derivatives*, 2nd ed.,
2008, §4.6; wall time on a CPU may differ either way).

Baselines: random search uniform in the log box; CMA-ES (Hansen, *The CMA Evolution Strategy:
A Tutorial*, arXiv:1604.00772) from the ``cmaes`` package (Nomura & Shibata, arXiv:2402.01373)
with its default population ``4 + floor(3 ln n)`` (tutorial eq. 48) for the dimension ``n``,
on the penalised objective ``f + penalty + 10 sum relu(g) + 100 sum relu(g)^2``, step size 0.5
in log units, started where the gradient method starts for the same seed.

Dimension. A fleet (:func:`diffcost._codesign.fleet.fleet_problem`) scales the problem: ``K``
serving scenarios (prompt lengths 512-8,192 tokens, TPOT limits 30-100 ms) share one chip, each
with its own plan, ``n = 8 + 6K``; :func:`~diffcost._codesign.fleet.fleet_evaluate` traces the
serving model once for all of them (``jax.vmap``), so the compile time does not grow with ``K``
(forward, step and 4-start step compiled and timed in 52-96 s for K = 1-16 on the shared 2-core
CPU; the unrolled loop of ``evaluate`` had not compiled its K = 8 batched forward after 5
minutes). CMA-ES adapts its covariance at rates ``c1 = 2 / ((n + 1.3)^2 + mu_eff)`` and ``c_mu =
2 (mu_eff - 2 + 1 / mu_eff) / ((n + 2)^2 + mu_eff)`` (tutorial eqs. 57-58, as the ``cmaes``
package sets them): its time scale ``1 / (c1 + c_mu)`` is 46 generations (510 evaluations) at n
= 14, 163 (2,280) at n = 32, 414 (6,600) at n = 56 and 1,305 (22,000) at n = 104; Hansen's
reference implementation expects 100 n to 300 n^2 evaluations on hard problems (github.com/CMA-
ES/c-cmaes, ``doc.txt``). One gradient step gives all ``n`` partial derivatives (one reverse
pass) whatever ``n``.

Multi-start: :func:`multistart_run` advances ``starts`` starts by one ``jax.vmap``-ed step
(:func:`multistart_step`), each start's step charged its measured share of that step
(:func:`measure_multistart`), so a vmapped step of P starts costs P times that.

Findings (``benchmarks/results/codesign-compare.txt`` and ``codesign-compare-dim.txt``, 2-core
CPU, 5 seeds, medians; re-measured 2026-11-27 on the workloads' own power budget): one gradient
step costs 19-37 points of the batched forward (measured; about +-25% between runs). On the
built-in workloads (n = 14-32) CMA-ES beats the gradient at that cost (1.2-1.64x at 200
evaluations, the gradient infeasible in most train runs; 1.06-1.41x at 2000); charged 1
evaluation a step the gradient wins at 200 on four of five (mix 0.52x, serve 0.70, train 0.88,
edge 0.96; latency 1.04) and ties at 2000 (0.99-1.13x). With the dimension (fleets of K = 1, 2,
4, 8, 16: n = 14, 20, 32, 56, 104) at 2000 evaluations and the measured cost the gradient's
median best is 1.17x CMA-ES's at n = 14, 1.16x at 20, 1.03x at 32, 0.68x at 56 and 0.48x at 104;
charged 1 evaluation a step it is 1.01, 0.99, 0.91, 0.64 and 0.44x. So the gradient wins
clearly (about 2x) only at n ~ 100, where CMA-ES's covariance (time scale ~22,000 evaluations)
cannot be learnt within 2000; at 200 evaluations and n >= 56 CMA-ES finds no feasible design in
most runs while the gradient (charged 1 or 3) does in every run. Four starts in one vmapped
step cost 7-14 points per start and step and do no better than one.
"""

import math
import time
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .fleet import evaluator
from .optimize import BUDGETS, Problem, make_step, solve, start_vector

BASELINES = ("random search", "CMA-ES")
INNER = 5  # adam steps per multiplier update (the gradient method's compiled scan length)


@dataclass(frozen=True)
class Run:
    """One method's run: per evaluation ``f``, plan penalty and ``max g``."""

    method: str
    seed: int
    f: np.ndarray
    penalty: np.ndarray
    g_max: np.ndarray
    wall_s: float = 0.0  # the run's wall time, model and method (compiled evaluators)

    def feasible(self) -> np.ndarray:
        return (self.g_max <= 1e-3) & (self.penalty <= 1e-2)

    def best(self) -> float:
        """Best feasible objective exp(f) (inf if none)."""
        ok = self.feasible()
        with np.errstate(over="ignore"):  # exp of a huge f is inf, as it should be
            return float(np.exp(np.min(self.f[ok]).astype(float))) if ok.any() else math.inf

    def evals_to(self, target: float) -> float:
        """Evaluations until a feasible point with ``exp(f) <= target`` (inf if never; a
        relative 1e-9 of slack, so a run reaches its own best through ``exp`` and ``log``)."""
        hit = np.nonzero(self.feasible() & (self.f <= np.log(target) + 1e-9))[0]
        return float(hit[0] + 1) if len(hit) else math.inf


def popsize(dim: int) -> int:
    """CMA-ES default population for dimension ``dim``: ``4 + floor(3 ln dim)`` (Hansen,
    arXiv:1604.00772, eq. 48; the ``cmaes`` package's default)."""
    return 4 + math.floor(3.0 * math.log(dim))


def _batch_evaluator(problem: Problem):
    return jax.jit(jax.vmap(evaluator(problem)))


def _step(problem: Problem, learning_rate: float = 0.05):
    """The gradient method's compiled step (:func:`solve`'s defaults but ``INNER`` steps)."""
    # XLA's default compile, as the batched forward it is timed against (:func:`measure_cost`)
    return make_step(evaluator(problem), problem.bounds(), learning_rate, INNER, 10.0, quick=False)


def _run_of(method: str, seed: int, f, pen, g, start: float = math.nan) -> Run:
    """The :class:`Run` of per-evaluation arrays; ``start``: its ``time.perf_counter()``."""
    g = np.asarray(g)
    wall_s = time.perf_counter() - start
    return Run(method, seed, np.asarray(f), np.asarray(pen), g.max(axis=-1), wall_s)


def start_of(problem: Problem, seed: int) -> np.ndarray:
    """Start of seed ``seed``: the reference chip and initial plans (:func:`start_vector`)
    perturbed by N(0, 0.3) in log units (seed 0: unperturbed), inside the box."""
    rng = np.random.default_rng(seed)
    x0 = start_vector(problem)
    lo, hi = problem.bounds()
    return np.clip(x0 + (rng.normal(0.0, 0.3, x0.shape) if seed else 0.0), lo, hi)


def _best_time_s(fn, args, reps: int) -> float:
    """Lowest wall time (s) of ``fn(*args)`` over ``reps`` calls (the machine is shared)."""
    out = []
    for _ in range(reps):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        out.append(time.perf_counter() - start)
    return min(out)


def measure_cost(problem: Problem, batch=None, step=None, reps: int = 100) -> dict[str, float]:
    """Wall time (s) after compilation of one point of the batched forward at the CMA-ES batch
    size (``forward_s``), of one unbatched forward (``forward1_s``, for comparison) and of one
    gradient step of the compiled scan (``grad_s``; the scan's closing forward, the multiplier
    update, is charged to its steps); ``ratio = grad_s / forward_s``, ``ratio1 = grad_s /
    forward1_s``."""
    batch = batch or _batch_evaluator(problem)
    run, opt = step or _step(problem)
    single = jax.jit(evaluator(problem))
    lo, hi = problem.bounds()
    n = popsize(len(lo))
    xs = jnp.asarray(np.random.default_rng(0).uniform(lo, hi, (n, len(lo))))
    x = jnp.asarray(start_vector(problem))
    args = (x, opt.init(x), jnp.zeros(len(BUDGETS)))  # one multiplier per budget
    for fn, a in ((batch, (xs,)), (single, (x,)), (run, args)):
        _best_time_s(fn, a, 1)  # compile
    forward_s = _best_time_s(batch, (xs,), reps) / n
    forward1_s = _best_time_s(single, (x,), reps)
    grad_s = _best_time_s(run, args, reps) / INNER
    return {
        "forward_s": forward_s,
        "forward1_s": forward1_s,
        "grad_s": grad_s,
        "ratio": grad_s / forward_s,
        "ratio1": grad_s / forward1_s,
    }


def charged(trace: np.ndarray, per_eval: int, evals: int):
    """``(f, penalty, g)`` per evaluation of a gradient trace (rows ``f, penalty, g...``, one
    per step) when a step costs ``per_eval`` evaluations: step ``i``'s point is evaluation
    ``(i + 1) per_eval``; the evaluations before it are its cost (no point: inf, infeasible)."""
    rows = np.full((len(trace), per_eval, trace.shape[1]), np.inf)
    rows[:, -1] = trace
    rows = rows.reshape(-1, trace.shape[1])[:evals]
    return rows[:, 0], rows[:, 1], rows[:, 2:]


def gradient_run(problem: Problem, evals: int, seed: int, per_eval: int = 1, step=None) -> Run:
    """Augmented-Lagrangian adam with ``evals // per_eval`` gradient steps from
    :func:`start_of`, each charged ``per_eval`` evaluations (:func:`charged`)."""
    start, steps = time.perf_counter(), max(evals // per_eval, 1)
    fn = (evaluator(problem), problem.bounds())  # solve's (evaluate_fn, bounds) form
    _, _, trace = solve(fn, steps, x0=start_of(problem, seed), inner=INNER, step=step)
    f, pen, g = charged(trace[:steps], per_eval, evals)
    return _run_of(f"gradient (1 grad = {per_eval} eval)", seed, f, pen, g, start)


def multistart_step(problem: Problem, step=None):
    """The compiled step (:func:`_step`) ``jax.vmap``-ed over a population of starts: one call
    advances every start by ``INNER`` steps and its multiplier update."""
    run, opt = step or _step(problem)
    return jax.jit(jax.vmap(run)), opt


def multistart_starts(problem: Problem, seed: int, starts: int) -> np.ndarray:
    """``starts`` starts for seed ``seed``: the single gradient run's (:func:`start_of`) and
    ``starts - 1`` more perturbed ones (seeds ``1000 + starts seed + j``), shape (starts, n)."""
    extra = [start_of(problem, 1000 + starts * seed + j) for j in range(1, starts)]
    return np.stack([start_of(problem, seed), *extra])


def measure_multistart(problem: Problem, vstep, starts: int, forward_s: float, reps: int = 50):
    """Wall time (s) after compilation of one step of one start in the vmapped step
    (:func:`multistart_step` over ``starts`` starts) and its ratio to ``forward_s``, one
    point of the batched forward (:func:`measure_cost`): ``(grad_s, ratio)``."""
    run, opt = vstep
    xs = jnp.asarray(multistart_starts(problem, 0, starts))
    args = (xs, jax.vmap(opt.init)(xs), jnp.zeros((starts, len(BUDGETS))))
    _best_time_s(run, args, 1)  # compile
    grad_s = _best_time_s(run, args, reps) / (INNER * starts)
    return grad_s, grad_s / forward_s


def multistart_search(vstep, xs, evals: int, per_eval: int, constraints: int = len(BUDGETS)):
    """``(f, penalty, g)`` per evaluation of the vmapped step ``vstep`` (:func:`multistart_step`)
    from the starts ``xs`` (starts, n): ``evals // (starts per_eval)`` steps, each step's points
    charged ``per_eval`` evaluations each, in the order of the steps (:func:`charged`);
    ``constraints``: the length of ``g``."""
    run, opt = vstep
    xs = jnp.asarray(xs)
    n_starts, traces = len(xs), []
    state, lam = jax.vmap(opt.init)(xs), jnp.zeros((n_starts, constraints))
    steps = max(evals // (n_starts * per_eval), 1)
    for _ in range(math.ceil(steps / INNER)):
        xs, state, lam, (f, pen, g, _) = run(xs, state, lam)
        traces.append(np.concatenate([np.asarray(f)[..., None], np.asarray(pen)[..., None], g], -1))
    trace = np.concatenate(traces, axis=1)[:, :steps]  # (starts, steps, 2 + constraints)
    return charged(trace.transpose(1, 0, 2).reshape(-1, trace.shape[-1]), per_eval, evals)


def multistart_run(
    problem: Problem, evals: int, seed: int, starts: int, per_eval: int, vstep=None
) -> Run:
    """The gradient method from ``starts`` starts at once (:func:`multistart_starts`,
    :func:`multistart_search`), each point charged ``per_eval`` evaluations."""
    start = time.perf_counter()
    xs = multistart_starts(problem, seed, starts)
    out = multistart_search(vstep or multistart_step(problem), xs, evals, per_eval)
    return _run_of(multistart_name(starts, per_eval), seed, *out, start=start)


def multistart_name(starts: int, per_eval: int) -> str:
    return f"{starts}-start grad (1 = {per_eval} eval)"


def random_search(batch, lo, hi, evals: int, seed: int, size: int):
    """``(f, penalty, g)`` of ``evals`` points uniform in the box ``[lo, hi]``, ``size`` per
    call of ``batch``."""
    rng = np.random.default_rng(seed)
    rows = []
    while len(rows) * size < evals:
        rows.append(batch(jnp.asarray(rng.uniform(lo, hi, (size, len(lo))))))
    return tuple(np.concatenate([np.asarray(r[i]) for r in rows])[:evals] for i in range(3))


def random_run(problem: Problem, evals: int, seed: int, batch=None) -> Run:
    """Uniform samples in the log box (design and plan parameters), CMA-ES's batch size."""
    lo, hi = problem.bounds()
    start = time.perf_counter()
    out = random_search(batch or _batch_evaluator(problem), lo, hi, evals, seed, popsize(len(lo)))
    return _run_of("random search", seed, *out, start=start)


def penalised(f, pen, g) -> np.ndarray:
    """The black-box methods' scalar: ``f + penalty + 10 sum relu(g) + 100 sum relu(g)^2``."""
    over = np.maximum(np.asarray(g), 0.0)
    return np.asarray(f) + np.asarray(pen) + 10.0 * over.sum(-1) + 100.0 * (over**2).sum(-1)


def cma_search(batch, x0, lo, hi, evals: int, seed: int):
    """``(f, penalty, g)`` of ``evals`` points of CMA-ES (``cmaes.CMA``, default population,
    sigma 0.5) on :func:`penalised` from ``x0`` within the box; one ``batch`` call per
    generation."""
    from cmaes import CMA  # imported here: only the comparison needs it

    opt = CMA(mean=np.asarray(x0), sigma=0.5, bounds=np.column_stack([lo, hi]), seed=seed)
    fs, pens, gs = [], [], []
    while len(fs) * opt.population_size < evals:
        xs = np.stack([opt.ask() for _ in range(opt.population_size)])
        f, pen, g = (np.asarray(a) for a in batch(jnp.asarray(xs)))
        opt.tell(list(zip(xs, penalised(f, pen, g), strict=True)))
        fs.append(f)
        pens.append(pen)
        gs.append(g)
    return tuple(np.concatenate(a)[:evals] for a in (fs, pens, gs))


def cmaes_run(problem: Problem, evals: int, seed: int, batch=None) -> Run:
    """CMA-ES from :func:`start_of` (the gradient method's start for the seed)."""
    lo, hi = problem.bounds()
    batch, start = batch or _batch_evaluator(problem), time.perf_counter()
    out = cma_search(batch, start_of(problem, seed), lo, hi, evals, seed)
    return _run_of("CMA-ES", seed, *out, start=start)


def conventions(ratio: float) -> tuple[int, ...]:
    """Evaluations charged per gradient step: the measured ratio rounded up, and 1 and 3."""
    return tuple(sorted({1, 3, max(1, math.ceil(ratio))}))


def compare(
    problem: Problem, evals: int = 200, seeds: int = 3, ratio: float = 3.0, batch=None, step=None,
    multistart: tuple[int, int, Any] | None = None,
) -> list[Run]:  # fmt: skip
    """All methods, ``seeds`` seeds each, ``evals`` model evaluations each; the gradient under
    every convention of :func:`conventions` (``ratio``: measured grad/forward cost).  ``batch``
    and ``step``: compiled evaluators to reuse (e.g. those :func:`measure_cost` timed);
    ``multistart = (starts, per_eval, vstep)`` adds :func:`multistart_run`."""
    batch = batch or _batch_evaluator(problem)
    step = step or _step(problem)
    runs = []
    for seed in range(seeds):
        runs += [gradient_run(problem, evals, seed, k, step) for k in conventions(ratio)]
        if multistart:
            runs.append(multistart_run(problem, evals, seed, *multistart))
        runs.append(random_run(problem, evals, seed, batch))
        runs.append(cmaes_run(problem, evals, seed, batch))
    return runs


def median_best(runs: list[Run], method: str) -> float:
    """Median over seeds of the best feasible objective of ``method`` (inf if most failed)."""
    return float(np.median([r.best() for r in runs if r.method == method]))


def _ratio(mine: float, base: float) -> str:
    return f"{mine / base:.3g}" if np.isfinite(base) and np.isfinite(mine) else "n/a"


def table(runs: list[Run], unit: str) -> str:
    """Per method over seeds: median and lowest best feasible objective, feasible runs, median
    evaluations to come within 1% of the best any run found and to match the median best of
    the better baseline, the ratio of its median best to each baseline's (lower: better), and
    the median wall time of a run (model and method, after compilation)."""
    best = min(r.best() for r in runs)
    base = min(median_best(runs, m) for m in BASELINES)
    cma, rnd = median_best(runs, "CMA-ES"), median_best(runs, "random search")
    lines = [
        f"{'method':<28} {'best (median)':>13} {'unit':<11} {'best (min)':>10} {'feasible':>8} "
        f"{'evals to 1% of best':>19} {'evals to baseline':>17} {'/CMA-ES':>7} {'/random':>7} "
        f"{'wall ms/run':>11}",
    ]
    for method in dict.fromkeys(r.method for r in runs):
        mine = [r for r in runs if r.method == method]
        bests = np.asarray([r.best() for r in mine])
        reach = np.median([r.evals_to(1.01 * best) for r in mine])
        match = np.median([r.evals_to(base) for r in mine])
        med = float(np.median(bests))
        lines.append(
            f"{method:<28} {med:>13.5g} {unit:<11} {bests.min():>10.5g} "
            f"{np.isfinite(bests).sum():>6}/{len(mine):<1} {reach:>19} {match:>17} "
            f"{_ratio(med, cma):>7} {_ratio(med, rnd):>7} "
            f"{np.median([r.wall_s for r in mine]) * 1e3:>11.1f}"
        )
    return "\n".join(lines)


__all__ = [
    "Run",
    "charged",
    "cma_search",
    "cmaes_run",
    "compare",
    "conventions",
    "gradient_run",
    "measure_cost",
    "measure_multistart",
    "median_best",
    "multistart_name",
    "multistart_run",
    "multistart_search",
    "multistart_starts",
    "multistart_step",
    "penalised",
    "popsize",
    "random_run",
    "random_search",
    "start_of",
    "table",
]
