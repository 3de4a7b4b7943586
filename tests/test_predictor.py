"""The compiled single-plan predictor returns exactly what the cost model returns."""

import equinox as eqx
import numpy as np
import pytest

import diffcost as dc
from diffcost import Predictor


def test_predictor_outputs_equal_the_cost_model():
    system, model = dc.load_system("dgx-h100", chips=64), dc.load_model("llama-3-8b")
    cost = dc.TrainCost(system, model)
    example = dc.train_plan(tp=2, pp=2, dp=16, global_batch=256)
    fast = Predictor(cost, example)
    other = dc.train_plan(tp=4, pp=1, dp=16, global_batch=512, recompute="full", zero=1)
    got = fast(other)
    want = eqx.filter_jit(cost)(other)
    assert got["step_time_s"] == pytest.approx(float(want.step_time_s), rel=1e-6)
    assert got["memory.total_bytes"] == pytest.approx(float(want.memory.total_bytes), rel=1e-6)
    assert len(fast.names) == len(fast.packed(fast.pack(other))) == len(set(fast.names))


def test_predictor_serves_and_refuses_a_plan_of_another_shape():
    system, model = dc.load_system("dgx-h100", chips=8), dc.load_model("llama-3-8b")
    cost = dc.ServeCost(system, model)
    fast = Predictor(cost, dc.serve_plan(tp=1, batch=8))
    plan = dc.serve_plan(tp=2, batch=32, weight_format="fp8")
    assert fast(plan)["tpot_s"] == pytest.approx(float(eqx.filter_jit(cost)(plan).tpot_s), rel=1e-6)
    with pytest.raises(ValueError, match="packs to"):
        fast.pack({"x": np.zeros(3)})
