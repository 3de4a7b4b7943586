"""Built-in co-design workloads (diffcost._codesign.workloads): the whole plans around a
relaxed plan, and the exact verification that chooses among them."""

import dataclasses

import jax.numpy as jnp
import numpy as np

from diffcost._codesign.design import chip_as_design
from diffcost._codesign.technology import load_technology
from diffcost._codesign.workloads import (
    builtin_workload,
    exact_objective,
    plan_neighbours,
    rounded_plan,
)


def test_plan_neighbours_floor_and_ceil_each_degree_inside_the_bounds():
    w = builtin_workload("serve")  # log2 tp, pp, batch in [0, 3] x [0, 3] x [0, 10]
    theta = np.asarray([2.5, 0.0, 10.0, 0.3, -0.2, 0.1])
    out = plan_neighbours(w, theta)
    assert np.array_equal(out[0], rounded_plan(w, theta))
    degrees = {tuple(th[:3]) for th in out}
    assert degrees == {(2.0, 0.0, 10.0), (3.0, 0.0, 10.0)}  # pp, batch whole / at the bound
    assert len(out) == 2
    assert all(np.array_equal(th[3:], theta[3:]) for th in out)  # logits untouched


def test_exact_objective_takes_the_feasible_neighbour_when_rounding_does_not_fit():
    """Llama-3-70B bf16 on a one-stack (24 GB) chip: tp 4 (35 GB of weights per chip) cannot
    fit, tp 8 can; a relaxed tp of 2^2.5 rounds to 4 (round half to even) and the verification
    must answer with tp 8, feasible."""
    tech = load_technology("n4")
    design = dataclasses.replace(chip_as_design("h100-sxm", tech), hbm_stacks=jnp.asarray(1.0))
    w = builtin_workload("serve")
    theta = np.asarray([2.5, 0.0, 3.0, 0.0, 0.0, 0.0])
    assert rounded_plan(w, theta)[0] == 2.0
    out = exact_objective(w, design, tech, theta)
    assert out["feasible"] and out["plan"]["tp"] == 8.0
