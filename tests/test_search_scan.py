"""Exhaustive search on device (:func:`diffcost._search.core.scan_space`): the same answer as
the host enumeration (every valid plan evaluated with the exact model on the host table)."""

from typing import Any

import equinox as eqx
import numpy as np
import pytest

import diffcost as dc
from diffcost import TrainSearchSpace
from diffcost.testing import (
    Axis,
    Candidates,
    Choice,
    TrainProblem,
    device_columns,
    enumerate_all,
    scan_space,
)
from diffcost.testing import search_result as _result


def test_flat_indices_decode_to_the_product_rows():
    axes = [Axis("a", (1.0, 2.0, 4.0)), Axis("b", (1.0, 3.0))]
    choices = [Choice("c", ("x", "y")), Choice("d", (False, True))]
    every = Candidates.product(axes, choices)
    some = np.asarray([0, 5, 7, 23])
    assert Candidates.at(axes, choices, some).row(2) == every.row(7)
    cols, index = device_columns(axes, choices, some)
    for j, i in enumerate(some):
        row = every.row(int(i))
        assert float(cols["a"][j]) == row["a"] and float(cols["b"][j]) == row["b"]
        assert ("x", "y")[int(index["c"][j])] == row["c"] and int(cols["c"][j]) == int(
            index["c"][j]
        )
        assert float(cols["d"][j]) == float(row["d"])


_SLOW = pytest.mark.slow  # 5-7 s each (one compilation per space): after the fast tests
CASES = [
    # model, system, chips, space options: dense, MoE (ep axis), uneven split, two chip counts
    ("llama-2-13b", "dgx-h100", 64, dict(global_batch=256, seq_len=4096, max_cp=4)),
    pytest.param("mixtral-8x7b", "dgx-h100", 64, dict(global_batch=512, seq_len=4096), marks=_SLOW),
    pytest.param(
        "llama-3-8b",
        "dgx-a100",
        16,
        dict(global_batch=64, seq_len=8192, first_stage_layers=4),
        marks=_SLOW,
    ),
    pytest.param(  # the p90 objective: the step time's upper quantile from the posterior
        "llama-2-13b",
        "dgx-h100",
        32,
        dict(global_batch=128, seq_len=4096, objective="p90", chip="h100-sxm"),
        marks=_SLOW,
    ),
    pytest.param(
        "gpt3-175b",
        "dgx-a100",
        1024,
        dict(global_batch=1536, seq_len=2048, chips=(512, 1024)),
        marks=_SLOW,
    ),
]


@pytest.mark.parametrize("name,system,chips,options", CASES)
def test_device_enumeration_equals_the_host_enumeration(name, system, chips, options):
    model = dc.load_model(name)
    kw = {"chips": (chips,), "precision": ("bf16", "fp8")} | options
    problem = TrainProblem(dc.load_system(system, chips=chips), model, TrainSearchSpace(**kw))
    host = _result(problem, enumerate_all(problem), "host")
    device = scan_space(problem, "device")
    assert device is not None and host.best is not None
    assert device.evaluated == host.evaluated and device.feasible_count == host.feasible_count
    assert device.rows()[0] == host.rows()[0]
    assert bool(eqx.tree_equal(device.best, host.best))
    # the p90 objective goes through the constants' log covariance, a quadratic form whose
    # terms cancel (negative shares), evaluated in float32 by two differently shaped vmapped
    # programs: equal plans, objectives equal to float32 cancellation (5e-4 seen)
    rel = 2e-3 if options.get("objective") == "p90" else 1e-6
    assert device.best_objective == pytest.approx(host.best_objective, rel=rel)
    assert device.rows() == host.rows()
    assert device.binding == host.binding


@pytest.mark.slow  # 10 s on 2 cores (one more compiled scan)
def test_device_enumeration_reports_an_infeasible_space():
    model = dc.load_model("gpt3-175b")
    space = TrainSearchSpace(global_batch=64, seq_len=2048, chips=(8,), zero=(0,))
    problem = TrainProblem(dc.load_system("dgx-a100", chips=8), model, space)
    result = scan_space(problem, "device")
    assert result is not None and result.best is None
    assert result.binding == "no valid plan is feasible" and result.evaluated > 0


def test_an_mfu_ceiling_keeps_both_enumerations_under_it():
    """Issue 42: with ``max_mfu`` the device and host enumerations return the same best plan,
    at or under the ceiling, while the unbounded best is above it (Llama 2 7B on one DGX A100,
    no recomputation: about 70% MFU unbounded; the ceiling is MPT-7B's published 64.1%)."""
    model = dc.load_model("llama-2-7b")
    base: dict[str, Any] = dict(
        global_batch=64, seq_len=4096, chips=(8,), recompute=("none",), zero=(1,)
    )
    system = dc.load_system("dgx-a100", chips=8)
    free = scan_space(TrainProblem(system, model, TrainSearchSpace(**base)), "device")
    assert free is not None and free.best is not None
    ceiling = 0.641
    assert float(free.breakdowns[0].mfu) > ceiling
    problem = TrainProblem(system, model, TrainSearchSpace(**base, max_mfu=(("bf16", ceiling),)))
    host = _result(problem, enumerate_all(problem), "host")
    device = scan_space(problem, "device")
    assert device is not None and host.best is not None
    assert device.rows()[0] == host.rows()[0]
    assert device.feasible_count == host.feasible_count < free.feasible_count
    assert float(device.breakdowns[0].mfu) <= ceiling
    assert device.best_objective > free.best_objective
