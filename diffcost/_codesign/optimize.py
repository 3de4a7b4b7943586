"""Co-design by gradient: adam on the log design and the relaxed plans under budgets.

Problem (all in logs, so every term is dimensionless):
``minimise f(x) = sum_w weight_w (log objective_w + plan penalty_w)`` subject to
``g_i(x) = log(c_i(design) / budget_i) <= 0`` for die area (mm^2), power (W) and
manufacturing cost (USD).  Power is the workloads' own: each workload's mean chip power at its
plan (:func:`~diffcost._codesign.workloads.chip_power_w`, activity energy per chip-second), the
largest over the workloads (a smooth maximum in :func:`evaluate`; :func:`solve` of a mix holds
each workload's power to the budget as its own inequality instead, :mod:`.parts`), not every
unit at full rate at once (:func:`~diffcost._codesign.design.design_power_w`, which no
workload reaches: measured on an H100, its dense products hit the 700 W limit at 64% of the
peak, and its full-activity power is ~1.4 kW).  Inequalities by the augmented Lagrangian of
Powell-Hestenes-Rockafellar (Nocedal & Wright, *Numerical Optimization*, 2nd ed., §17.4,
eq. 17.65):
``L = f + sum_i (relu(lambda_i + rho g_i)^2 - lambda_i^2) / (2 rho)``, adam on ``L`` for
``k`` steps, then ``lambda_i <- relu(lambda_i + rho g_i)``; optionally (``solve(adapt=True)``)
``rho`` raised tenfold when the violation did not halve (:func:`next_penalty`: ALGENCAN's rule,
Birgin & Martinez 2014, Algorithm 4.1: with a fixed ``rho`` the multiplier of a strongly binding
budget climbs by only ``rho g`` per update), and the best point seen within the budgets
returned instead of adam's last iterate (``keep_best=True``, :func:`incumbent`).  The buildable
chip is brought within every budget afterwards (:func:`within_budgets`).  At the optimum
``lambda_i = -d f* / d log budget_i``: the fraction of objective gained per fraction of budget
added (the marginal value of the budget; 0 when it does not bind).

The design leaves live in a log box (:data:`LOG_BOX`) onto which each step projects.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._core.dedupe import deduplicated
from .._core.quick_compile import quick_jit
from .design import (
    ChipDesign,
    buildable,
    chip_as_design,
    design_area_mm2,
    design_cost_usd,
    design_power_w,
)
from .parts import make_parts_step
from .problem import (
    BUDGETS,
    LEAVES,
    LOG_BOX,
    Problem,
    augmented_lagrangian,
    evaluate,
    from_design,
    log_budgets,
    projected_adam,
    to_design,
    workload_power_w,
)
from .technology import Technology, reference_technology
from .workloads import (
    builtin_workload,
    exact_at,
    exact_objective,
    relaxed_value,
)

REFERENCE_CHIPS = ("h100-sxm", "h200", "b200", "mi300x", "groq-lpu", "jetson-agx-orin")
#: Default budgets per workload: an H100-class package for the data centre, a Jetson-class
#: module at the edge (area mm^2, power W, cost USD).
DEFAULT_BUDGETS: dict[str, tuple[float, float, float]] = {
    "train": (814.0, 700.0, 5000.0),
    "serve": (814.0, 700.0, 5000.0),
    "latency": (814.0, 700.0, 5000.0),
    "mix": (814.0, 700.0, 5000.0),
    "edge": (200.0, 30.0, 1500.0),
}


def make_step(
    evaluate_fn, bounds, learning_rate: float, inner: int, rho: float, quick: bool = True
):
    """``evaluate_fn(x) -> (f, penalty, g)`` (e.g. :func:`evaluate`), ``bounds = (lo, hi)``
    of ``x``.  One jitted outer iteration: ``inner`` adam steps on the augmented Lagrangian at fixed
    multipliers and penalty parameter, one more evaluation at the final point (the same loop
    body with its update masked, so the model is compiled once: a separate final call compiled
    a second copy and cost 40% more compile time), then the multiplier update with that point's
    ``g``.  Returns ``run(x, state, lam, rho=rho) -> (x, state, lam, trace)`` with ``trace =
    (f, penalty, g, x)`` of every evaluation (``inner + 1`` per call; the penalty parameter is
    traced, so changing it recompiles nothing), and the optimizer.  ``quick``: compiled with
    LLVM at -O0 (:func:`~diffcost._core.quick_compile.quick_jit`: less compile time, a slower
    run), else with XLA's defaults (timing comparisons against other compiled programs)."""
    import optax  # imported here: only co-design needs it

    opt = optax.adam(learning_rate)
    lo, hi = (jnp.asarray(b) for b in bounds)
    # differentiate the deduplicated model: half the compile time (:mod:`..._core.dedupe`)
    evaluate_small = deduplicated(evaluate_fn)

    def loss(x, lam, penalty):
        f, pen, g = evaluate_small(x)
        return augmented_lagrangian(f + pen, g, lam, penalty), (f, pen, g, x)

    def body(carry, last):
        x, state, lam, penalty = carry
        (_, aux), grad = jax.value_and_grad(loss, has_aux=True)(x, lam, penalty)
        x, state = projected_adam(opt, grad, state, x, (lo, hi), ~last)
        return (x, state, lam, penalty), aux

    def compiled(x, state, lam, penalty):
        last = jnp.arange(inner + 1) == inner
        (x, state, lam, _), trace = jax.lax.scan(body, (x, state, lam, penalty), last)
        return x, state, jax.nn.relu(lam + penalty * trace[2][-1]), trace

    compiled = quick_jit(compiled) if quick else jax.jit(compiled)

    def run(x, state, lam, penalty: float = rho):
        return compiled(x, state, lam, jnp.asarray(penalty, jnp.result_type(float)))

    return run, opt


@dataclass
class CodesignResult:
    """What :func:`.multistart.codesign` found (see the module docstring for the multipliers'
    meaning)."""

    problem: Problem = field(repr=False)
    x: np.ndarray = field(repr=False)
    design: ChipDesign
    objectives: dict[str, float]  # relaxed, per workload, in its unit
    exact: dict[str, dict[str, Any]]  # buildable design and rounded plan, EXACT model
    used: dict[str, float]
    budgets: dict[str, float]
    binding: tuple[str, ...]
    multipliers: dict[str, float]
    evaluations: int
    history: np.ndarray = field(repr=False)  # (evaluations, 2 + 3): f, penalty, g
    nearest: list[tuple[str, float]] = field(default_factory=list)
    built: ChipDesign | None = None  # whole HBM stacks and LPDDR channels (:func:`buildable`)
    built_used: dict[str, float] = field(default_factory=dict)  # its budgets, EXACT die count
    starts: list[dict[str, Any]] = field(default_factory=list)  # every start's exact verdict


def make_problem(
    workload: str,
    tech: Technology,
    budgets: tuple[float, float, float] | None = None,
    weights: dict[str, float] | None = None,
) -> Problem:
    """The problem of a built-in workload or of ``mix`` (all three, equal weights unless
    ``weights`` says otherwise)."""
    names = ("train", "serve", "edge") if workload == "mix" else (workload,)
    ws = tuple(float((weights or {}).get(n, 1.0)) for n in names)
    return Problem(
        tuple(builtin_workload(n) for n in names), ws, tech, budgets or DEFAULT_BUDGETS[workload]
    )


def start_vector(problem: Problem) -> np.ndarray:
    """The starting point: the reference chip of the workloads' class (Jetson AGX Orin at the
    edge, H100 SXM elsewhere) and each workload's initial plan."""
    edge = all(w.name == "edge" for w in problem.workloads)
    ref = "jetson-agx-orin" if edge else "h100-sxm"
    z = from_design(chip_as_design(ref, problem.tech))
    return np.concatenate([z, *[w.theta0 for w in problem.workloads]])


#: Penalty-parameter rule of ALGENCAN (Birgin & Martinez, *Practical Augmented Lagrangian
#: Methods for Constrained Optimization*, SIAM 2014, Algorithm 4.1 step 4, their defaults
#: ``tau = 0.5``, ``gamma = 10``; Nocedal & Wright §17.4, Framework 17.3, increase the penalty
#: when the violation does not fall enough between multiplier updates): ``rho <- gamma rho``
#: unless ``||V_k|| <= tau ||V_{k-1}||``, ``V = max(g, -lambda / rho)``.
PENALTY_DECREASE = 0.5
PENALTY_GROWTH = 10.0
#: Largest penalty parameter: adam's second-moment estimate remembers the penalty's gradients
#: (``rho g grad g``) for ~1 / (1 - beta2) = 1000 steps, so a huge ``rho`` freezes the objective's
#: steps; B&M's safeguard ``rho_max`` (theirs 1e20 for Newton-type inner solvers).
PENALTY_MAX = 1e4
#: A point is within the budgets when every ``g = log(used / budget) <= TOLERANCE`` (0.1%): the
#: feasibility tolerance of the penalty rule and of the returned point (:func:`incumbent`).
TOLERANCE = 1e-3
#: :func:`solve`'s defaults: adam's step (in log units), adam steps per multiplier update, and
#: the penalty parameter.
LEARNING_RATE = 0.05
INNER = 25
RHO = 10.0


def violation(g: np.ndarray, lam: np.ndarray, rho: float) -> float:
    """Birgin & Martinez's ``||V||_inf``, ``V = max(g, -lambda / rho)`` (dimensionless): 0 when
    the point is within the budgets and a budget with a positive multiplier binds (feasibility
    and complementarity), ``lambda``: the multipliers the point was found with."""
    return float(np.max(np.maximum(np.asarray(g), -np.asarray(lam) / rho)))


def next_penalty(rho: float, v: float, v_before: float) -> float:
    """The penalty parameter after an outer iteration of violation ``v`` (:func:`violation`;
    ``v_before``: the previous one, ``inf`` at the first): multiplied by
    :data:`PENALTY_GROWTH` (up to :data:`PENALTY_MAX`) unless within :data:`TOLERANCE` or
    reduced by :data:`PENALTY_DECREASE`."""
    if v <= TOLERANCE or v <= PENALTY_DECREASE * v_before:
        return rho
    return min(rho * PENALTY_GROWTH, PENALTY_MAX)


def incumbent(trace: np.ndarray) -> int:
    """Row of the best point of a trace (rows ``f, penalty, g...``): the lowest ``f + penalty``
    among the points within the budgets (every ``g <= TOLERANCE``), else the least violation.
    Adam is not a descent method and the multipliers move between inner loops, so the last
    iterate need not be the best point seen; keeping the best feasible one is the incumbent of
    filter and pattern-search methods (Fletcher & Leyffer, Math. Program. 91, 2002)."""
    merit = trace[:, 0] + trace[:, 1]
    excess = np.max(trace[:, 2:], axis=1)
    ok = (excess <= TOLERANCE) & np.isfinite(merit)
    if ok.any():
        return int(np.argmin(np.where(ok, merit, np.inf)))
    return int(np.nanargmin(excess))


def solve(
    problem: Any, steps: int = 300, learning_rate: float = LEARNING_RATE, inner: int = INNER,
    rho: float = RHO, x0: np.ndarray | None = None, step: Any = None, adapt: bool = False,
    keep_best: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """``problem``: a :class:`Problem`, or ``(evaluate_fn, bounds)`` with ``x0`` given.
    Run the augmented-Lagrangian adam for ``steps`` adam steps (rounded up to a multiple of
    ``inner``; each ``inner`` steps add one evaluation for the multiplier update), the penalty
    parameter fixed at ``rho`` (``adapt=True``: raised by :func:`next_penalty`); returns the last
    point (``keep_best=True``: the best point seen, :func:`incumbent`), the last multipliers and
    the trace (one row per gradient evaluation: ``f, penalty, g...``).  Both options are off
    by default: measured on the built-in workloads at 200 steps they did not help (adaptive
    ``rho``: train's exact step time 7.15 -> 10.5 s, adam's second moments swamped by the
    penalty's gradients; best point: serve's relaxed objective better, its exact one worse,
    8.91 -> 11.2, the relaxed-to-exact gap is largest away from the end of the run), while on a
    budget with a large multiplier a fixed ``rho`` stalls and the rule meets it
    (tests/test_codesign_optimize.py)."""
    if isinstance(problem, Problem):
        fn, bounds = (lambda x: evaluate(problem, x)), problem.bounds()
        x = jnp.asarray(start_vector(problem) if x0 is None else x0)
    else:  # (evaluate_fn, bounds): any problem in the same form (tests, toy problems)
        (fn, bounds), x = problem, jnp.asarray(x0)
    # ``step``: a :func:`make_step` result to reuse (one compilation for many runs)
    run, opt = step or default_step(problem, fn, bounds, learning_rate, inner, rho)
    state = opt.init(x)
    # shapes only, no evaluation (a Problem's are known: tracing the mix's took seconds)
    budgets = len(BUDGETS) if isinstance(problem, Problem) else None
    lam = jnp.zeros(budgets or jax.eval_shape(fn, x)[2].shape or (1,))
    traces, points, v_before = [], [], math.inf
    for _ in range(max(1, math.ceil(steps / inner))):
        lam_before = np.asarray(lam)
        x, state, lam, (f, pen, g, xs) = run(x, state, lam, rho)
        traces.append(np.column_stack([np.asarray(f), np.asarray(pen), np.asarray(g)]))
        points.append(np.asarray(xs))
        v = violation(np.asarray(g)[-1], lam_before, rho)
        rho, v_before = (next_penalty(rho, v, v_before) if adapt else rho), v
    trace = np.concatenate(traces)
    at = incumbent(trace) if keep_best else -1
    return np.concatenate(points)[at], np.asarray(lam), trace


def default_step(problem: Any, fn, bounds, learning_rate: float, inner: int, rho: float):
    """:func:`make_step` of ``fn``; for a :class:`Problem` of several workloads (a mix) the same
    step with each workload's model compiled concurrently (:func:`.parts.make_parts_step`: the
    cold ``diffcost codesign --workload mix`` 87 -> 53 s on 2 cores)."""
    if isinstance(problem, Problem) and len(problem.workloads) > 1:
        return make_parts_step(problem, learning_rate, inner, rho)
    return make_step(fn, bounds, learning_rate, inner, rho)


def nearest_chips(design: ChipDesign, names: tuple[str, ...] = REFERENCE_CHIPS):
    """Existing chips by log-space distance to ``design``: RMS over the leaves of
    ``|ln(design / chip)|`` (each chip as designed in its own technology), nearest first."""
    z = from_design(design)
    out = []
    for name in names:
        ref = from_design(chip_as_design(name, reference_technology(name)))
        out.append((name, float(np.sqrt(np.mean(np.square(z - ref))))))
    return sorted(out, key=lambda t: t[1])


def _budgets_of(
    design: ChipDesign, tech: Technology, exact: dict[str, dict[str, Any]] | None = None
) -> dict[str, float]:
    """Area, power and cost of a design (EXACT die count).  Power: the largest EXACT chip power
    of the workloads in ``exact`` (:func:`~diffcost._codesign.workloads.exact_objective`
    results), else the full-activity power (:func:`design_power_w`)."""
    power = (
        max(e["power_w"] for e in exact.values()) if exact else float(design_power_w(design, tech))
    )
    return {
        "area_mm2": float(design_area_mm2(design, tech)),
        "power_w": power,
        "cost_usd": float(design_cost_usd(design, tech)),
    }


def within_power(
    design: ChipDesign,
    tech: Technology,
    budget_w: float,
    power_of: Callable[[ChipDesign], float] | None = None,
    rel_tol: float = 1e-6,
) -> ChipDesign:
    """``design`` with its clock lowered until ``power_of(design)`` (W; default the full-activity
    power, :func:`design_power_w`) is within ``budget_w``, to ``rel_tol`` below it; unchanged if
    already within.  Power rises monotonically and smoothly with the clock (``V^2 f`` dynamic
    power, the running floor's ``f V^2``, the memory path's ``V^2``), so the clock is found by
    regula falsi with the Illinois modification (Dowell & Jarratt, BIT 11, 1971: superlinear,
    a handful of evaluations where bisection needs ~20; each may run the workloads' EXACT
    models), keeping the within-budget end of the bracket.  The operating point is set after
    the design, as chips are binned and power-capped after tape-out.  Not below the design
    box's lowest clock (the result may then stay over budget, and is ranked so)."""
    power = power_of or (lambda d: float(design_power_w(d, tech)))
    f_hi, p_hi = float(design.clock_ghz), power(design)
    if p_hi <= budget_w:
        return design
    at = lambda ghz: eqx.tree_at(lambda d: d.clock_ghz, design, jnp.asarray(ghz))  # noqa: E731
    f_lo = LOG_BOX["clock_ghz"][0]
    p_lo = power(at(f_lo))
    if p_lo > budget_w:
        return at(f_lo)
    r_lo, r_hi, side = p_lo - budget_w, p_hi - budget_w, 0  # residuals (Illinois-scaled)
    for _ in range(60):
        if p_lo >= budget_w * (1.0 - rel_tol) or f_hi - f_lo <= 1e-12 * f_hi:
            break
        f = f_lo - r_lo * (f_hi - f_lo) / (r_hi - r_lo)  # root of the chord
        p = power(at(f))
        if p <= budget_w:
            f_lo, p_lo, r_lo = f, p, p - budget_w
            r_hi = 0.5 * r_hi if side == -1 else r_hi  # the same end kept twice: halve the other
            side = -1
        else:
            f_hi, r_hi = f, p - budget_w
            r_lo = 0.5 * r_lo if side == 1 else r_lo
            side = 1
    return at(f_lo)


def within_area_and_cost(
    design: ChipDesign, tech: Technology, area_mm2: float, cost_usd: float
) -> ChipDesign:
    """``design`` with its matrix array shrunk until its die area (mm^2) and manufacturing cost
    (USD, EXACT die count) are within ``area_mm2`` and ``cost_usd``, by bisection on the matrix
    area (both grow with it: :func:`~diffcost._codesign.design.design_area_mm2` is linear in it,
    the die cost grows with the die); unchanged if already within.  The memory system, SRAM and
    links are kept (they carry the workloads' capacity and bandwidth needs, and whole stacks
    come only in whole steps), so the compute array, sized in fine steps, gives way.  Not below
    the design box's smallest array (the result may then stay over budget, and is ranked so)."""

    def fits(d: ChipDesign) -> bool:
        return (
            float(design_area_mm2(d, tech)) <= area_mm2
            and float(design_cost_usd(d, tech)) <= cost_usd
        )

    if fits(design):
        return design
    at = lambda mm2: eqx.tree_at(lambda d: d.matrix_area_mm2, design, jnp.asarray(mm2))  # noqa: E731
    lo, hi = LOG_BOX["matrix_area_mm2"][0], float(design.matrix_area_mm2)
    if not fits(at(lo)):
        return at(lo)
    for _ in range(40):  # 2^-40 of the array's area
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if fits(at(mid)) else (lo, mid)
    return at(lo)


def within_budgets(design: ChipDesign, tech: Technology, budgets) -> ChipDesign:
    """``design`` brought within the area and cost budgets by its matrix array
    (:func:`within_area_and_cost`), then within the power budget by its clock
    (:func:`within_power` of the full-activity power; the smaller array draws less power, the
    clock changes neither area nor cost).  ``budgets``: area (mm^2), power (W), cost (USD)."""
    area_mm2, power_w, cost_usd = budgets
    return within_power(within_area_and_cost(design, tech, area_mm2, cost_usd), tech, power_w)


def budget_excess(used: dict[str, float], budgets: dict[str, float]) -> dict[str, float]:
    """Fraction by which each exceeded budget is exceeded (``used / budget - 1 > 0``); empty
    when all are met."""
    return {b: used[b] / c - 1.0 for b, c in budgets.items() if used[b] > c}


def _exact_all(problem: Problem, design: ChipDesign, thetas: list) -> dict[str, dict[str, Any]]:
    """Every workload's EXACT result on ``design`` (best whole plan around its relaxed one)."""
    return {
        w.name: exact_objective(w, design, problem.tech, np.asarray(th))
        for w, th in zip(problem.workloads, thetas, strict=True)
    }


def _exact_power_w(problem: Problem, exact: dict[str, dict[str, Any]]):
    """``design -> the largest EXACT chip power (W) of the workloads at the whole plans of
    ``exact``: the power to bring within the budget by the clock."""

    def power(design: ChipDesign) -> float:
        return max(
            exact_at(w, design, problem.tech, np.asarray(exact[w.name]["theta"]))["power_w"]
            for w in problem.workloads
        )

    return power


#: Rounds of (lower the clock to the power budget at the chosen plans, choose the plans again
#: there): a lower clock can make a chosen plan miss its latency limit (a serving batch chosen
#: at the full clock), and the plans chosen again draw less, so one more round is rare.
POWER_ROUNDS = 3


def best_buildable(problem: Problem, design: ChipDesign, thetas: list) -> tuple:
    """The buildable neighbour of ``design`` (:func:`~diffcost._codesign.design.buildable`)
    brought within the area and cost budgets by its array, then within the power budget by its
    clock at the workloads' EXACT whole plans (:func:`within_power`, then the plans chosen
    again at the lowered clock: :data:`POWER_ROUNDS`), that the EXACT model
    ranks best: within the budgets and feasible for every workload first, then the lowest
    weighted sum of log objectives (the relaxed objective's form); ``(design, exact results
    per workload, its budgets)``."""
    ranked = []
    area_mm2, power_w, cost_usd = problem.budgets
    for whole in buildable(design):
        cand = within_area_and_cost(whole, problem.tech, area_mm2, cost_usd)
        exact = _exact_all(problem, cand, thetas)
        for _ in range(POWER_ROUNDS):  # the clock lowered at the plans chosen, then re-chosen
            if max(e["power_w"] for e in exact.values()) <= power_w:
                break
            cand = within_power(cand, problem.tech, power_w, _exact_power_w(problem, exact), 1e-4)
            exact = _exact_all(problem, cand, thetas)
        used = _budgets_of(cand, problem.tech, exact)
        ranked.append((exact_rank(problem, exact, used), cand, exact, used))
    ranked.sort(key=lambda r: r[0])
    return ranked[0][1:]


def exact_rank(
    problem: Problem, exact: dict[str, dict[str, Any]], used: dict[str, float]
) -> tuple[bool, float, float]:
    """Sort key of a buildable design from its EXACT results per workload and budgets ``used``
    (lower is better): not (within every budget and feasible for every workload), the summed
    fraction by which budgets are exceeded, the weighted sum of log EXACT objectives (the
    relaxed objective's form)."""
    over = sum(budget_excess(used, dict(zip(BUDGETS, problem.budgets, strict=True))).values())
    ok = over == 0.0 and all(e["feasible"] for e in exact.values())
    score = sum(
        wt * math.log(max(exact[w.name]["objective"], 1e-300))
        for w, wt in zip(problem.workloads, problem.weights, strict=True)
    )
    return (not ok, over, score)


def summarise(
    problem: Problem, x: np.ndarray, lam: np.ndarray, trace: np.ndarray, g: Any = None,
    verified: tuple | None = None,
) -> "CodesignResult":  # fmt: skip
    """The :class:`CodesignResult` of a solution: ``x`` with its log constraint values ``g``
    (default the trace's last row's, the evaluation at adam's last iterate: no new trace of
    the workload models) and its :func:`best_buildable` result ``verified`` (computed if None)."""
    z, thetas = problem.split(jnp.asarray(x))
    design, tech = to_design(z), problem.tech
    g = np.asarray(trace[-1, 2:] if g is None else g)
    used = {
        b: float(v) * c
        for b, v, c in zip(BUDGETS, np.exp(np.asarray(g)), problem.budgets, strict=True)
    }
    objectives = {
        w.name: relaxed_value(w, design, tech, th)
        for w, th in zip(problem.workloads, thetas, strict=True)
    }
    built, exact, built_used = verified or best_buildable(problem, design, thetas)
    binding = tuple(
        b for b, gi, li in zip(BUDGETS, np.asarray(g), lam, strict=True) if gi > -0.01 or li > 0
    )
    return CodesignResult(
        problem, x, design, objectives, exact, used,
        dict(zip(BUDGETS, problem.budgets, strict=True)), binding,
        {b: float(v) for b, v in zip(BUDGETS, lam, strict=True)}, len(trace), trace,
        nearest_chips(design), built, built_used,
    )  # fmt: skip


__all__ = [
    "BUDGETS",
    "LEAVES",
    "LOG_BOX",
    "CodesignResult",
    "Problem",
    "augmented_lagrangian",
    "budget_excess",
    "evaluate",
    "exact_rank",
    "log_budgets",
    "make_problem",
    "nearest_chips",
    "solve",
    "within_area_and_cost",
    "within_budgets",
    "within_power",
    "workload_power_w",
]
_ = eqx  # equinox pytrees flow through jit unchanged
