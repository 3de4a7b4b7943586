"""Gradient vs random search vs CMA-ES bookkeeping (diffcost._codesign.compare) on toy problems."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cmaes import CMA

from diffcost.testing import (
    Run,
    charged,
    cma_search,
    conventions,
    make_step,
    median_best,
    multistart_search,
    penalised,
    popsize,
    random_search,
    table,
)


@pytest.mark.parametrize("dim", [14, 19, 31])
def test_popsize_is_the_cmaes_default(dim):
    assert popsize(dim) == CMA(mean=np.zeros(dim), sigma=0.5).population_size


def test_conventions_round_the_measured_ratio_up_and_keep_the_brackets():
    assert conventions(5.2) == (1, 3, 6)
    assert conventions(2.7) == (1, 3)
    assert conventions(0.4) == (1, 3)


def test_a_gradient_step_counts_after_its_cost():
    trace = np.asarray([[3.0, 0.0, -1.0], [2.0, 0.0, -1.0], [1.0, 0.0, -1.0]])
    f, pen, g = charged(trace, 3, 8)
    assert f.shape == pen.shape == (8,) and g.shape == (8, 1)
    run = Run("g", 0, f, pen, g.max(-1))
    assert run.feasible().tolist() == [False, False, True, False, False, True, False, False]
    assert run.evals_to(math.exp(2.0)) == 6.0  # second step, after 2 x 3 evaluations
    assert run.best() == pytest.approx(math.exp(2.0))  # the third step is past 8 evaluations


def test_feasibility_needs_budgets_and_plan():
    f = np.log(np.asarray([1.0, 2.0, 3.0, 4.0]))
    run = Run("m", 0, f, np.asarray([0.5, 0.0, 0.0, 0.0]), np.asarray([0.0, 0.1, 0.0, -1.0]))
    assert run.feasible().tolist() == [False, False, True, True]
    assert run.best() == pytest.approx(3.0)
    assert run.evals_to(3.5) == 3.0 and run.evals_to(2.5) == math.inf
    assert run.evals_to(run.best()) == 3.0  # its own best, through exp and log


def test_a_run_reaches_its_own_float32_best():
    f = np.asarray([0.3, 2.7182817, 1.1], dtype=np.float32)
    run = Run("m", 0, f, np.zeros(3), -np.ones(3))
    assert run.evals_to(run.best()) == 1.0


def test_penalised_charges_only_violations():
    g = np.asarray([[-1.0, 0.0], [0.1, 0.2]])
    out = penalised(np.asarray([1.0, 1.0]), np.asarray([0.0, 0.5]), g)
    np.testing.assert_allclose(out, [1.0, 1.0 + 0.5 + 10 * 0.3 + 100 * 0.05])


def _toy(x):
    """Shifted sphere under one budget ``x0 + x1 <= 0``: optimum 0.5 at x = (-0.5, -0.5, 0...)."""
    return jnp.sum(jnp.square(x)) + 0.0, jnp.asarray(0.0), jnp.stack([x[0] + x[1] + 1.0])


def test_cmaes_beats_random_search_on_a_constrained_sphere():
    batch = jax.jit(jax.vmap(_toy))
    dim = 6
    lo, hi = -3.0 * np.ones(dim), 3.0 * np.ones(dim)
    best = {}
    for name, out in (
        ("random search", random_search(batch, lo, hi, 300, 0, popsize(dim))),
        ("CMA-ES", cma_search(batch, np.ones(dim), lo, hi, 300, 0)),
    ):
        f, pen, g = out
        assert f.shape == (300,) and g.shape == (300, 1)
        best[name] = Run(name, 0, np.log(f + 1e-12), pen, g.max(-1)).best()
    assert 0.5 <= best["CMA-ES"] < 0.6 < best["random search"]


def test_multistart_charges_each_start_in_the_order_of_the_steps():
    run, opt = make_step(_toy, (-3.0 * np.ones(4), 3.0 * np.ones(4)), 0.05, 5, 10.0)
    vstep = (jax.jit(jax.vmap(run)), opt)
    xs = np.asarray([[1.0, 1.0, 0.5, 0.0], [2.0, -1.0, 0.0, 1.0], [-0.5, -0.5, 0.0, 0.0]])
    f, pen, g = multistart_search(vstep, xs, 61, 2, constraints=1)  # 61 // (3 x 2) = 10 steps
    assert f.shape == pen.shape == (60,) and g.shape == (60, 1)
    assert np.isinf(f[0::2]).all() and np.isfinite(f[1::2]).all()  # 2 evaluations per point
    first = np.asarray([_toy(jnp.asarray(x))[0] for x in xs])  # step 1: the starts themselves
    np.testing.assert_allclose(f[[1, 3, 5]], first, rtol=1e-6)
    assert f[55] < f[7] < first[0]  # start 0's 10th and 2nd steps: downhill
    assert abs(f[59] - 0.5) < 0.15  # start 2 began at the optimum (-0.5, -0.5, 0, 0): stays near


def test_table_ratios_are_medians_over_baseline_medians():
    def run(method, seed, best):
        return Run(method, seed, np.log(np.asarray([2 * best, best])), np.zeros(2), -np.ones(2))

    runs = [run("gradient (1 grad = 2 eval)", s, b) for s, b in enumerate([1.0, 2.0, 9.0])]
    runs += [run("CMA-ES", s, b) for s, b in enumerate([4.0, 5.0, 6.0])]
    runs += [run("random search", s, b) for s, b in enumerate([8.0, 8.0, 1.0])]
    assert median_best(runs, "CMA-ES") == pytest.approx(5.0)
    row = next(line for line in table(runs, "s").splitlines() if line.startswith("gradient"))
    assert row.split()[-3:-1] == ["0.4", "0.25"]  # 2 / 5 and 2 / 8
