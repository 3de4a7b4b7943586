"""A fleet of serving scenarios sharing one chip (diffcost._codesign.fleet): structure, and the
vmapped evaluation against the loop over its scenarios."""

import jax.numpy as jnp
import numpy as np
import pytest

from diffcost import load_technology
from diffcost.testing import (
    DEFAULT_BUDGETS,
    evaluate,
    fleet_evaluate,
    fleet_problem,
    is_fleet,
    make_problem,
    start_of,
)


@pytest.mark.parametrize("k", [1, 3])
def test_fleet_problem_shares_one_design_with_a_plan_per_scenario(k):
    problem = fleet_problem(k, load_technology("n4"))
    assert sum(problem.sizes()) == 8 + 6 * k and len(problem.bounds()[0]) == 8 + 6 * k
    assert problem.weights == pytest.approx([1.0 / k] * k)
    assert problem.budgets == DEFAULT_BUDGETS["serve"]
    pairs = set()
    for w in problem.workloads:  # the traced sizes say what the search space says
        sp = w.space
        assert w.sizes.tolist() == [sp.chips, sp.ttft_slo_s, sp.tpot_slo_s]
        assert w.name != "edge" and str(sp.input_len) in w.name
        pairs.add((sp.input_len, sp.tpot_slo_s))
    assert len(pairs) == k and len({w.name for w in problem.workloads}) == k


def test_fleet_of_one_is_the_serve_problem():
    tech = load_technology("n4")
    one, serve = fleet_problem(1, tech), make_problem("serve", tech)
    assert not is_fleet(one) and not is_fleet(serve) and is_fleet(fleet_problem(2, tech))
    (mine,), (theirs,) = one.workloads, serve.workloads
    assert mine.space == theirs.space and mine.sizes.tolist() == theirs.sizes.tolist()
    assert one.weights == serve.weights and one.budgets == serve.budgets
    with pytest.raises(ValueError, match="k >= 1"):
        fleet_problem(0, tech)


@pytest.mark.slow  # 9 s on 2 cores (K compiled loops)
def test_the_vmapped_fleet_evaluates_as_the_loop_over_its_scenarios():
    problem = fleet_problem(2, load_technology("n4"))
    x = jnp.asarray(start_of(problem, 1))  # off the start: over area, a plan penalty
    looped, vmapped = evaluate(problem, x), fleet_evaluate(problem, x)
    assert np.isfinite(looped[0]) and looped[1] > 1e-3 and np.asarray(looped[2]).max() > 0
    for a, b in zip(vmapped, looped, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
