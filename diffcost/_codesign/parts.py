"""The co-design step of a workload mix: one program per workload, compiled concurrently.

XLA compiles a program mostly on one thread (measured: the test suite runs at ~1.1 cores of
user time per wall second on 2 cores), so a mix's step traced as one program (:func:`.optimize.
make_step` of :func:`.optimize.evaluate`) compiles its workloads' models one after the other:
the cold ``diffcost codesign --workload mix`` took 87 s, the sum of train, serve and edge.

Here each workload ``w`` is its own program, the value and gradient with respect to ``(z,
theta_w)`` (the design's log vector and the workload's plan) of its share of the augmented
Lagrangian, and the programs are compiled in threads (tracing holds Python's GIL, XLA's compile
does not).  For the shares to be independent, the power budget is one inequality per workload,
``g_w = log(p_w / budget) <= 0`` (``p_w``: its chip power, W), with its own multiplier: the same
feasible set as ``max_w p_w <= budget`` without the smooth maximum (:func:`.optimize.
workload_power_w`), whose gradient couples every workload's power to every other's.  Workload
``w``'s share is ``weight_w (log objective_w + penalty_w) + phr(lambda_w, g_w)``, ``phr`` the
Powell-Hestenes-Rockafellar term of :func:`.optimize.augmented_lagrangian` (Nocedal & Wright,
*Numerical Optimization*, 2nd ed., eq. 17.65); the area and cost terms, which depend on the
design only, are added by a small jitted step that also applies adam and the projection onto
the box, as :func:`.optimize.make_step`.  The power multiplier reported is ``sum_w lambda_w``:
the budget enters every ``g_w``, so ``-d f* / d log budget`` is their sum.

Measured cold on 2 cores (``DIFFCOST_CACHE_DIR= diffcost codesign --workload mix``): 87 -> 53 s.
The three programs lower in 4.1, 3.0 and 2.7 s and compile in 22.6, 21.0 and 16.8 s one after
the other (train, serve, edge; :mod:`..._core.quick_compile`), all done 42 s after the first
lowering began when compiled in threads.  While the workloads' powers are well apart the trace
is the one program's (``tests/test_codesign_parts.py``); where they are close the two differ by
the smooth maximum's 1% temperature.

A Jacobian of ``(objective, power)`` per workload (``jax.jacrev``, two reverse passes) would keep
the smooth maximum, but measured cold it compiled in 34, 46 and 47 s (train, serve, edge) where
the gradient of one scalar takes 26, 22 and 27 s, so three of them in threads on 2 cores were no
faster than the one program.
"""

from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from .._core.dedupe import deduplicated
from .._core.quick_compile import compile_quickly
from .problem import Problem, augmented_lagrangian, log_budgets, projected_adam, to_design
from .workloads import Workload, relaxed_objective


class PartsState(NamedTuple):
    """The optimizer state of :func:`make_parts_step`: adam's, and the multipliers of the
    per-workload power budgets (dimensionless, one per workload)."""

    adam: Any
    power_multipliers: jax.Array


def part_program(problem: Problem, w: Workload, weight: float):
    """Jitted ``(z, theta, lambda_w, rho) -> ((share, (log objective, penalty, g_w)),
    (d share / dz, d share / dtheta))``: workload ``w``'s share of the augmented Lagrangian
    (module docstring) on the design of log vector ``z``; ``g_w = log(chip power / power
    budget)``; everything dimensionless."""
    budget_w = problem.budgets[1]

    def share(z: jax.Array, theta: jax.Array, lam: jax.Array, rho: jax.Array):
        log_obj, penalty, power_w = relaxed_objective(w, to_design(z), problem.tech, theta)
        g = jnp.log(power_w / budget_w)
        total = augmented_lagrangian(weight * (log_obj + penalty), g[None], lam[None], rho)
        return total, (log_obj, penalty, g)

    # differentiate the deduplicated model: half the compile time (:mod:`..._core.dedupe`)
    return jax.jit(jax.value_and_grad(deduplicated(share), argnums=(0, 1), has_aux=True))


def compile_parts(problem: Problem, x: jax.Array) -> list[Any]:
    """Every workload's :func:`part_program` compiled for the shapes of ``x``: traced and
    lowered one after the other (Python), each compiled by XLA in its own thread as soon as it
    is lowered (the next one's tracing overlaps the compiles already running)."""
    z, thetas = problem.split(x)
    s = jnp.zeros((), x.dtype)
    with ThreadPoolExecutor(len(thetas)) as pool:
        futures = [
            pool.submit(compile_quickly, part_program(problem, w, wt).lower(z, th, s, s))
            for w, wt, th in zip(problem.workloads, problem.weights, thetas, strict=True)
        ]
        return [f.result() for f in futures]


def make_parts_step(problem: Problem, learning_rate: float, inner: int, rho: float):
    """:func:`.optimize.make_step` for a mix: the same ``run(x, state, lam, rho) -> (x, state,
    lam, trace)`` and trace rows ``(f, penalty, g, x)`` (``g``: area, the largest of the
    workloads' power ``g_w``, cost), its workloads compiled concurrently on the first call
    (module docstring).  ``state`` is a :class:`PartsState` (``opt.init``); ``lam``'s power entry
    is returned as the sum of the per-workload multipliers and not read."""
    import optax  # imported here: only co-design needs it

    adam = optax.adam(learning_rate)
    lo, hi = (jnp.asarray(b) for b in problem.bounds())
    weights = jnp.asarray(problem.weights)
    area_cost = jnp.asarray([0, 2])

    def design_terms(z, lam, penalty):
        g = log_budgets(problem, to_design(z), jnp.asarray(1.0))[area_cost]
        return augmented_lagrangian(0.0, g, lam[area_cost], penalty), g

    @jax.jit
    def combine(x, state, lam, penalty, outs, update):
        z, _ = problem.split(x)
        gz, g = jax.grad(design_terms, has_aux=True)(z, lam, penalty)
        log_obj, pen, g_w = (jnp.stack([aux[k] for (_, aux), _ in outs]) for k in range(3))
        gz = gz + sum(dz for _, (dz, _) in outs)
        grad = jnp.concatenate([gz, *(dtheta for _, (_, dtheta) in outs)])
        new_x, new_adam = projected_adam(adam, grad, state.adam, x, (lo, hi), update)
        row = (weights @ log_obj, weights @ pen, jnp.stack([g[0], jnp.max(g_w), g[1]]), x)
        return new_x, state._replace(adam=new_adam), row, g_w

    compiled: list[Any] = []

    def run(x, state: Any, lam, penalty: float = rho):
        if not compiled:
            compiled.extend(compile_parts(problem, x))
        rate = jnp.asarray(penalty, jnp.result_type(float))
        rows, g_w = [], None
        for i in range(inner + 1):  # the last evaluation only scores the final point
            z, thetas = problem.split(x)
            outs = [
                c(z, th, state.power_multipliers[k], rate)
                for k, (c, th) in enumerate(zip(compiled, thetas, strict=True))
            ]
            x, state, row, g_w = combine(x, state, lam, rate, outs, jnp.asarray(i < inner))
            rows.append(row)
        assert g_w is not None  # the loop ran at least once (inner >= 0)
        trace = jax.tree.map(lambda *r: jnp.stack(r), *rows)
        mult = jax.nn.relu(state.power_multipliers + rate * g_w)
        lam = jax.nn.relu(lam + rate * trace[2][-1]).at[1].set(jnp.sum(mult))
        return x, state._replace(power_multipliers=mult), lam, trace

    def init(params: Any) -> Any:  # a PartsState
        dtype = jnp.asarray(params).dtype
        return PartsState(adam.init(params), jnp.zeros(len(problem.workloads), dtype))

    return run, optax.GradientTransformation(init, adam.update)


__all__ = ["PartsState", "compile_parts", "make_parts_step", "part_program"]
