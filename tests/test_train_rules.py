"""Plans a framework or a chip refuses are infeasible, not costed (issue 17, items 7 and 8)."""

import jax.tree_util as jtu
import numpy as np
import pytest

import diffcost as dc
from diffcost._search.train import TrainProblem, TrainSearchSpace, enumerate_space, search_train
from diffcost._train.rules import fp8_units

FP8_PLAN = dict(tp=4, pp=1, dp=2, global_batch=16, seq_len=2048, precision="fp8")


def _problems(system, model, **kwargs):
    plan = dc.train_plan(**kwargs)
    out = dc.TrainCost(system, model)(plan)
    return dc.train_problems(model, plan, out, float(system.num_chips)), out


# --- fp8 needs fp8 units -----------------------------------------------------------------------
def test_fp8_units_only_on_chips_with_an_fp8_peak():
    assert float(fp8_units(dc.load_chip("a100-sxm-80gb"))) == 0.0
    assert float(fp8_units(dc.load_chip("tpu-v4"))) == 0.0
    assert float(fp8_units(dc.load_chip("h100-sxm"))) == 1.0
    assert float(fp8_units(dc.load_chip("mi300x"))) == 1.0


def test_fp8_training_on_a100_is_a_problem_not_a_cost():
    model = dc.load_model("llama-2-7b")
    problems, out = _problems(dc.load_system("dgx-a100", chips=8), model, **FP8_PLAN)
    assert float(out.unsupported_format) == 1.0
    assert any("FP8 matrix units" in p for p in problems), problems
    problems, out = _problems(dc.load_system("dgx-h100", chips=8), model, **FP8_PLAN)
    assert float(out.unsupported_format) == 0.0 and problems == []
    bf16 = {**FP8_PLAN, "precision": "bf16"}
    problems, _ = _problems(dc.load_system("dgx-a100", chips=8), model, **bf16)
    assert problems == []


def test_exact_search_counts_fp8_on_a100_infeasible():
    system = dc.load_system("dgx-a100", chips=8)
    model = dc.load_model("llama-2-7b")
    both = TrainSearchSpace(global_batch=64, seq_len=4096, chips=(8,), precision=("bf16", "fp8"))
    problem = TrainProblem(system, model, both)
    cand = enumerate_space(model, both)
    ev = problem.evaluate(cand)
    fp8 = cand.columns["precision"] == "fp8"
    assert fp8.any() and not ev.feasible[fp8].any() and ev.feasible[~fp8].any()
    only = TrainSearchSpace(global_batch=64, seq_len=4096, chips=(8,), precision=("fp8",))
    res = search_train(system, model, only, exhaustive=True)
    assert res.best is None
    assert "FP8" in res.suggestions[0]


@pytest.mark.slow  # a relaxed search: about 13 s on 2 cores
def test_relaxed_search_never_picks_fp8_on_a100():
    system = dc.load_system("dgx-a100", chips=8)
    model = dc.load_model("llama-2-7b")
    both = TrainSearchSpace(global_batch=64, seq_len=4096, chips=(8,), precision=("bf16", "fp8"))
    res = search_train(system, model, both, starts=4, steps=40)
    assert res.best is not None and res.best["precision"] == "bf16"
    assert all(p["precision"] == "bf16" for p, _ in res.alternatives)


def test_relaxed_loss_penalises_fp8_weight_on_a100():
    """The relaxed model carries the refusal as a weight the search's penalty pushes to 0."""
    model = dc.load_model("llama-2-7b")
    plan = dc.train_plan(**FP8_PLAN)
    half = dc.train_plan(**{**FP8_PLAN, "precision": "bf16"})
    mixed = jtu.tree_map(lambda a, b: (a + b) / 2, plan, half)
    out = dc.TrainCost(dc.load_system("dgx-a100", chips=8), model, dc.RELAXED)(mixed)
    np.testing.assert_allclose(float(out.unsupported_format), 0.5)
