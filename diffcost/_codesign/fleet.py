"""A fleet: K serving scenarios sharing one chip design, each with its own plan.

A scalable co-design problem (dimension ``8 + 6 K``) for comparing optimisers as the dimension
grows (:mod:`diffcost._codesign.compare`, ``benchmarks/codesign_compare.py fleetK``), and the
evaluator that traces the serving model once for all K scenarios (``jax.vmap`` over their
plan templates) instead of once per scenario.  It reuses the serve workload's own plan
template, structure and objective (:mod:`diffcost._codesign.workloads`), not copies.
"""

from dataclasses import replace
from functools import cache

import jax
import jax.numpy as jnp
import numpy as np

from .._core.smooth import RELAXED
from .._search.serve import relaxed_serve_penalty, relaxed_serve_plan
from .._serve.cost import ServeCost
from .design import design_system
from .optimize import (
    DEFAULT_BUDGETS,
    Problem,
    evaluate,
    log_budgets,
    to_design,
    workload_power_w,
)
from .technology import Technology
from .workloads import (
    PLAN_TAU,
    Workload,
    builtin_workload,
    chip_power_w,
    serve_objective,
    serve_structure,
    serve_template,
)

#: The fleet's scenarios cycle through these prompt lengths (tokens) and TPOT limits (s);
#: periods 5 and 4 make the first 20 scenarios distinct pairs.  Scenario 0 is the ``serve``
#: workload itself (2,048 in, 50 ms), so ``fleet_problem(1)`` is the ``serve`` problem.
FLEET_INPUT_LENS = (2048, 512, 8192, 1024, 4096)
FLEET_TPOT_SLOS_S = (0.05, 0.03, 0.10, 0.07)


@cache
def fleet_scenario(i: int) -> Workload:
    """Scenario ``i`` of the fleet: the built-in ``serve`` workload (Llama-3-70B on 8 chips,
    256 output tokens, TTFT <= 2 s) with prompt length ``FLEET_INPUT_LENS[i % 5]`` and TPOT
    limit ``FLEET_TPOT_SLOS_S[i % 4]``, the search space and the traced sizes ``[chips,
    ttft_slo_s, tpot_slo_s]`` changed together.  One object per ``i`` (so its EXACT program,
    :func:`~.workloads.exact_at`, is compiled once)."""
    base = builtin_workload("serve")
    n_in, tpot_s = FLEET_INPUT_LENS[i % 5], FLEET_TPOT_SLOS_S[i % 4]
    space = replace(base.space, input_len=n_in, tpot_slo_s=tpot_s)
    sizes = np.asarray([base.sizes[0], base.sizes[1], tpot_s])
    desc = f"Llama-3-70B on 8 chips, {n_in:,} in, TPOT <= {tpot_s * 1e3:.0f} ms, TTFT <= 2 s"
    name = f"serve{i}-{n_in}in-{tpot_s * 1e3:.0f}ms"
    return replace(base, name=name, space=space, sizes=sizes, description=desc)


def fleet_problem(k: int, tech: Technology) -> Problem:
    """``k`` serving scenarios (:func:`fleet_scenario` 0..k-1) sharing one chip design, each
    with its own plan (6 parameters): dimension ``8 + 6 k``.  Weights ``1/k``, so ``exp(f)``
    is the geometric mean of the scenarios' objectives (USD s/token) and the plan penalty
    their mean; budgets those of ``serve`` (:data:`~.optimize.DEFAULT_BUDGETS`)."""
    if k < 1:
        raise ValueError(f"fleet_problem: expected k >= 1 scenarios, got {k}")
    scenarios = tuple(fleet_scenario(i) for i in range(k))
    return Problem(scenarios, (1.0 / k,) * k, tech, DEFAULT_BUDGETS["serve"])


def is_fleet(problem: Problem) -> bool:
    """Whether ``problem``'s workloads are one serving setup (model, template system, search
    space but prompt length and SLOs) under different loads (:func:`fleet_problem`, ``k > 1``)."""
    w0 = problem.workloads[0]
    same = lambda w: replace(w.space, input_len=0, ttft_slo_s=0.0, tpot_slo_s=0.0)  # noqa: E731
    return len(problem.workloads) > 1 and all(
        w.kind == "serve" and w.name != "edge" and w.model is w0.model and w.like is w0.like
        and same(w) == same(w0) and np.array_equal(w.lo, w0.lo) and np.array_equal(w.hi, w0.hi)
        for w in problem.workloads
    )  # fmt: skip


def fleet_evaluate(problem: Problem, x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """:func:`~.optimize.evaluate` of a fleet (:func:`is_fleet`), the same numbers from one
    trace of the serving model: the scenarios' exact plan templates (prompt lengths) stacked
    and the relaxed plans, costs and penalties ``jax.vmap``-ed over them; the system of the
    design built once.  Compiles in about the time of one scenario whatever ``K`` (the
    unrolled loop of ``evaluate`` compiles one serving model per scenario)."""
    z, thetas = problem.split(x)
    design, tech, w0 = to_design(z), problem.tech, problem.workloads[0]
    system, structure = design_system(design, tech, w0.like), serve_structure(w0)
    stack = lambda *a: jnp.stack([jnp.asarray(v) for v in a])  # noqa: E731
    templates = jax.tree.map(stack, *[serve_template(w) for w in problem.workloads])
    lo, hi = jnp.asarray(w0.lo), jnp.asarray(w0.hi)

    def one(theta, template, sizes):
        plan = relaxed_serve_plan(theta, PLAN_TAU, template, structure, sizes[0])
        out = ServeCost(system, w0.model, RELAXED)(plan)
        log_obj = jnp.log(serve_objective(w0, out, design, tech, RELAXED))
        power = chip_power_w(w0, out, system, design, tech)
        return log_obj, relaxed_serve_penalty(out, theta, lo, hi, sizes), power

    sizes = jnp.asarray(np.stack([w.sizes for w in problem.workloads]))
    log_obj, pen, power = jax.vmap(one)(jnp.stack(thetas), templates, sizes)
    weights = jnp.asarray(problem.weights)
    g = log_budgets(problem, design, workload_power_w(power))
    return weights @ log_obj, weights @ pen, g


def evaluator(problem: Problem):
    """The function ``x -> (f, penalty, g)`` of ``problem``: :func:`fleet_evaluate` for a
    fleet, else :func:`~.optimize.evaluate`."""
    if is_fleet(problem):
        return lambda x: fleet_evaluate(problem, x)
    return lambda x: evaluate(problem, x)


__all__ = [
    "FLEET_INPUT_LENS",
    "FLEET_TPOT_SLOS_S",
    "evaluator",
    "fleet_evaluate",
    "fleet_problem",
    "fleet_scenario",
    "is_fleet",
]
