"""Built-in co-design workloads (diffcost._codesign.workloads): the whole plans around a
relaxed plan, and the exact verification that chooses among them."""

import dataclasses

import jax.numpy as jnp
import numpy as np

from diffcost import load_technology
from diffcost.testing import (
    builtin_workload,
    chip_as_design,
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


def test_latency_workload_is_one_stream_whose_tpot_is_above_the_weight_stream_floor():
    """``latency``: Llama-3-70B bf16 on 8 chips, batch 1, objective the TPOT (s).  On the H100
    as a design at tp 8 the TPOT lies above the floor of streaming each chip's weight shard
    at full bandwidth (141 GB / 8 / 3.35 TB/s = 5.3 ms) and within 4x of it; the batch is fixed
    at one stream (no batch choice), and a smaller tp is slower."""
    tech = load_technology("n4")
    h100 = chip_as_design("h100-sxm", tech)
    w = builtin_workload("latency")
    assert w.unit == "s/token" and w.hi[2] == 0.0
    tp8 = exact_objective(w, h100, tech, np.asarray([3.0, 0.0, 0.0, 0.0, 0.0, 0.0]))
    floor_s = 2.0 * float(w.model.num_params()) / 8 / 3.35e12
    assert tp8["feasible"] and tp8["plan"]["batch"] == 1.0
    assert floor_s < tp8["objective"] < 4.0 * floor_s
    tp2 = exact_objective(w, h100, tech, np.asarray([1.0, 0.0, 0.0, 0.0, 0.0, 0.0]))
    assert tp2["objective"] > tp8["objective"]


def test_largest_batches_finds_the_largest_feasible_whole_batch():
    """Serving at tp 8 on the H100 as a design: the batch chosen is feasible, any batch 7%
    larger (twice the search's resolution) is not, and it beats the start (batch 32)."""
    from diffcost.testing import BATCH_RESOLUTION, exact_at, largest_batches

    tech = load_technology("n4")
    h100 = chip_as_design("h100-sxm", tech)
    w = builtin_workload("serve")
    start = exact_at(w, h100, tech, np.asarray([3.0, 0.0, 5.0, 0.0, 0.0, 0.0]))
    assert start["feasible"]
    (best,) = largest_batches(w, h100, tech, [start])
    b = best["plan"]["batch"]
    assert best["feasible"] and b > 32 and b == round(b)
    bigger = b * (1.0 + 2.0 * BATCH_RESOLUTION) + 1.0
    if bigger <= 2.0 ** w.hi[2]:
        th = np.asarray([3.0, 0.0, np.log2(bigger), 0.0, 0.0, 0.0])
        assert not exact_at(w, h100, tech, th)["feasible"]
    assert best["objective"] < start["objective"]


def test_exact_plans_are_evaluated_by_one_compiled_program(monkeypatch):
    """The EXACT verification evaluates many plans on many designs (whole stack counts, the
    clock lowered to the power budget): one trace per workload, not one per plan (eager, the
    train optimum's verification took 25 s)."""
    import equinox as eqx

    from diffcost.testing import workloads as wl

    traces = []
    numbers = wl._exact_numbers
    monkeypatch.setattr(wl, "_exact_numbers", lambda *a: traces.append(1) or numbers(*a))
    monkeypatch.setattr(wl, "_EXACT_PROGRAMS", {})
    tech = load_technology("n4")
    w = builtin_workload("edge")
    design = chip_as_design("jetson-agx-orin", tech)
    half = float(design.lpddr_channels) / 2.0
    slower = eqx.tree_at(lambda d: d.lpddr_channels, design, half)  # a Python float leaf
    th = np.zeros(6)
    results = [wl.exact_at(w, d, tech, th) for d in (design, slower, design)]
    assert len(traces) == 1
    assert results[0] == results[2]
    assert results[1]["objective"] > results[0]["objective"]  # half the memory channels
