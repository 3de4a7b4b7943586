"""Several starts of the co-design, the best chosen on the EXACT model.

Adam on the relaxed problem is a local method: it finds the optimum near its start, and its
normalised steps amplify small differences (measured: two compilations of the same 200-step
train run, identical but for float32 rounding, ended 2.5% apart on the exact step time; serve's
14%).  Multi-start (Rinnooy Kan & Timmer, *Math. Program.* 39, 1987, "Stochastic global
optimization methods part I"; Martí, Resende & Ribeiro, *EJOR* 226, 2013) runs the same local
method from several points and keeps the best end point: the answer becomes the best of ``n``
draws instead of one draw.

The starts: the reference chip of :func:`.optimize.start_vector` first, then its design
perturbed in log space by a normal of standard deviation :data:`START_SPREAD` per leaf (a factor
``e^0.5 = 1.65`` either way; clipped to the design box), every plan at its initial point.  The
compiled step is shared by every start (one compilation).

Choosing the best start by the RELAXED objective would mislead: the relaxed-to-exact gap varies
between points (measured on serve: the run's best relaxed point was worse on the exact model
than its last iterate, 11.2 against 8.91; ``solve``'s docstring).  So each start's buildable
chip is found and verified on the EXACT model (:func:`.optimize.best_buildable`) and the starts
are ranked as that function ranks a design's neighbours (:func:`.optimize.exact_rank`): within
every budget and feasible for every workload first, then the lowest weighted sum of log EXACT
objectives.  Measured on 2 cores: the first start pays the compilations (the step, 19-38 s;
the exact programs, 0.6-3.5 s); each further start costs 0.04-0.4 s of adam and 0.03-0.6 s of
verification, about 1.5 s in all for the mix.
"""

from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np

from .optimize import (
    INNER,
    LEARNING_RATE,
    LEAVES,
    RHO,
    CodesignResult,
    Problem,
    best_buildable,
    default_step,
    evaluate,
    exact_rank,
    incumbent,
    make_problem,
    solve,
    start_vector,
    summarise,
    to_design,
)
from .technology import Technology, load_technology

#: Standard deviation of the log-space perturbation of the design leaves of every start after
#: the first (dimensionless, natural log): a factor ``e^0.5 = 1.65`` either way, the scale of
#: the differences between one chip generation and the next (H100 -> B200: 2.3x the bf16 peak,
#: 2.4x the HBM bandwidth; ``specs/chips/h100-sxm.toml``, ``b200.toml``).
START_SPREAD = 0.5


def start_points(problem: Problem, count: int, seed: int = 0) -> list[np.ndarray]:
    """``count`` starting vectors: :func:`.optimize.start_vector`, then ``count - 1`` with its
    design leaves perturbed by ``N(0, START_SPREAD)`` in log space (clipped to the box; numpy's
    generator seeded with ``seed``), the plans unchanged."""
    x0 = start_vector(problem)
    lo, hi = problem.bounds()
    n = len(LEAVES)
    rng = np.random.default_rng(seed)
    out = [x0]
    for _ in range(count - 1):
        x = x0.copy()
        x[:n] = np.clip(x0[:n] + rng.normal(0.0, START_SPREAD, n), lo[:n], hi[:n])
        out.append(x)
    return out


@dataclass(frozen=True)
class Start:
    """One start's end: adam's point ``x``, multipliers ``lam``, trace, the constraint values
    ``g`` of ``x``'s row (None: the last row), its buildable chip ``(design, exact results,
    budgets used)`` and that chip's :func:`.optimize.exact_rank`."""

    x: np.ndarray
    lam: np.ndarray
    trace: np.ndarray
    g: np.ndarray | None
    built: tuple
    rank: tuple[bool, float, float]


def run_starts(problem: Problem, steps: int, starts: int = 1, seed: int = 0, **options: Any):
    """Every start's :class:`Start` (:func:`start_points`; ``options`` go to
    :func:`.optimize.solve`), the step compiled once for all; the best is ``min(..., key=lambda
    s: s.rank)``."""
    step = options.pop("step", None) or default_step(
        problem,
        lambda x: evaluate(problem, x),
        problem.bounds(),
        options.get("learning_rate", LEARNING_RATE),
        options.get("inner", INNER),
        options.get("rho", RHO),
    )
    out = []
    for x0 in start_points(problem, starts, seed):
        x, lam, trace = solve(problem, steps, x0=x0, step=step, **options)
        g = trace[incumbent(trace), 2:] if options.get("keep_best") else None
        z, thetas = problem.split(jnp.asarray(x))
        built = best_buildable(problem, to_design(z), thetas)
        out.append(Start(x, lam, trace, g, built, exact_rank(problem, built[1], built[2])))
    return out


def codesign(
    workload: str = "train",
    tech: Technology | None = None,
    budgets: tuple[float, float, float] | None = None,
    steps: int = 300,
    starts: int | None = None,
    seed: int = 0,
    **options: Any,
) -> CodesignResult:
    """Gradient co-design of a chip for a built-in workload (``train``, ``serve``,
    ``latency``, ``edge`` or ``mix``) under area (mm^2), power (W) and cost (USD) budgets;
    ``starts`` runs from that many starting points (default :func:`default_starts`; seeded by
    ``seed``) and keeps the one whose buildable chip the EXACT model ranks best
    (this module); ``options`` go to :func:`.optimize.solve`."""
    problem = make_problem(workload, tech or load_technology("n4"), budgets)
    count = default_starts(workload) if starts is None else max(int(starts), 1)
    runs = run_starts(problem, steps, count, seed, **options)
    best = min(runs, key=lambda r: r.rank)
    result = summarise(problem, best.x, best.lam, best.trace, best.g, best.built)
    result.starts = [_start_summary(problem, r) | {"kept": r is best} for r in runs]
    return result


def default_starts(workload: str) -> int:
    """Starting points of :func:`codesign` by default: 8, each costing ~0.1-0.5 s after the
    first (a compiled adam run and an exact verification; measured on 2 cores, the best of 8
    was better on the exact model than the first start alone by 0% (edge, latency: every start
    ends within 0.4%), 1.9% (serve: the starts spread over 8.87-11.8) and 4.8% (train));
    4 for the mix, whose starts cost ~1.5 s each, so that ``diffcost codesign --workload mix``
    stays under a minute cold (64 s with 8)."""
    return 4 if workload == "mix" else 8


def _start_summary(problem: Problem, start: Any) -> dict[str, Any]:
    """One start's exact verdict for :attr:`CodesignResult.starts`: within budgets and feasible,
    the weighted sum of log EXACT objectives (:func:`.optimize.exact_rank`), each workload's
    objective."""
    not_ok, _, score = start.rank
    exact = start.built[1]
    objectives = {w.name: float(exact[w.name]["objective"]) for w in problem.workloads}
    return {"ok": not not_ok, "log_score": float(score), "objective_exact": objectives}


__all__ = ["START_SPREAD", "Start", "codesign", "default_starts", "run_starts", "start_points"]
