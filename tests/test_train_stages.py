"""Uneven pipeline partitions (issue 17 item 6): layers per stage, Megatron-LM's rules, the
slowest stage's time and the heaviest stage's memory."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffcost as dc
from diffcost import EXACT, Smoothing, TrainSearchSpace
from diffcost.testing import (
    balanced_split,
    balanced_split_ok,
    enumerate_space,
    layer_forward,
    pipeline_split_problems,
    pipeline_split_violation,
    stage_layers,
    stage_memory,
    stage_times,
    train_memory,
)

# The relaxed plan fields must equal the exact model at integer points; continuous maxima (the
# roofline's compute vs memory) blend within ``rel_width`` of a tie by design (smooth.smax), and
# whether a test plan sits near such a tie depends on the calibrated constants.  A narrow blend
# isolates the plan relaxation from that.
SHARP = Smoothing(relaxed=True, rel_width=1e-9)

# llama-2-70b has 80 layers; 16 stages, 64 chips.
PLAN = dict(tp=4, pp=16, dp=1, micro_batch=1, global_batch=32, seq_len=4096, recompute="none")


def _with_layers(model, n):
    return eqx.tree_at(lambda m: m.layers, model, jnp.asarray(float(n)))


@pytest.mark.parametrize(
    "layers, pp, first, last, expect",
    [
        (126, 16, 7, 7, (7, 8, 7)),  # Llama 3 405B
        (70, 12, 5, 5, (5, 6, 5)),
        (80, 16, 0, 0, (5, 5, 5)),  # even split
        (80, 16, 20, 0, (20, 4, 4)),  # only the first given: the rest over 15 stages
    ],
)
def test_stage_layers_follow_megatron(llama70, layers, pp, first, last, expect):
    model = _with_layers(llama70, layers)
    plan = dc.train_plan(**{**PLAN, "pp": pp}, first_stage_layers=first, last_stage_layers=last)
    st = stage_layers(model, plan, EXACT)
    assert (float(st.first), float(st.middle), float(st.last)) == expect
    assert float(pipeline_split_violation(model, plan, EXACT)) == 0.0
    assert pipeline_split_problems(model, plan) == []


def test_uneven_rules_refuse_what_megatron_refuses(llama70):
    model = _with_layers(llama70, 126)
    cases = {
        # 126 - 7 - 6 = 113 layers do not divide over 14 stages
        "do not divide over the 14 remaining": dict(first_stage_layers=7, last_stage_layers=6),
        # even split of 126 over 16: the existing rule
        "not divisible by pp*virtual_stages": dict(),
        # interleaving: 7 layers on the first stage are not divisible by 2 chunks
        "first stage's 7 layers are not divisible": dict(
            first_stage_layers=7, last_stage_layers=7, virtual_stages=2
        ),
    }
    for message, extra in cases.items():
        plan = dc.train_plan(**PLAN, **extra)
        assert float(pipeline_split_violation(model, plan, EXACT)) > 0.0
        assert any(message in p for p in pipeline_split_problems(model, plan)), message
    no_pp = dc.train_plan(**{**PLAN, "pp": 1, "dp": 16}, first_stage_layers=7)
    assert float(pipeline_split_violation(model, no_pp, EXACT)) > 0.0
    assert "pipeline parallelism" in pipeline_split_problems(model, no_pp)[0]


def test_step_time_is_set_by_the_slowest_stage(h100_64, llama70):
    even = dc.train_plan(**PLAN)
    t_layer = float(layer_forward(h100_64, llama70, even, EXACT).total_s())
    f_even = float(stage_times(h100_64, llama70, even, EXACT).forward_s)
    # last stage 8 layers (+ output): 3 layers more than the even split's 5
    heavy_last = dc.train_plan(**PLAN, first_stage_layers=2, last_stage_layers=8)
    f_last = float(stage_times(h100_64, llama70, heavy_last, EXACT).forward_s)
    assert f_last - f_even == pytest.approx(3.0 * t_layer, rel=1e-9)
    # first stage 20 layers, no output layer: it is the slowest
    heavy_first = dc.train_plan(**PLAN, first_stage_layers=20)
    f_first = float(stage_times(h100_64, llama70, heavy_first, EXACT).forward_s)
    assert f_first == pytest.approx(20.0 * t_layer, rel=1e-9)
    # and the whole step grows with it
    cost = dc.TrainCost(h100_64, llama70)
    assert float(cost(heavy_first).step_time_s) > float(cost(even).step_time_s)


def test_memory_of_the_heaviest_stage(h100_64, llama70):
    # first stage 2 layers x 16 in flight, second 5 x 15: the second is heavier
    plan = dc.train_plan(**PLAN, first_stage_layers=2, last_stage_layers=8)
    first = stage_memory(llama70, plan, h100_64, EXACT, 0)
    second = stage_memory(llama70, plan, h100_64, EXACT, 1)
    got = train_memory(llama70, plan, h100_64, EXACT)
    assert float(second.total_bytes) > float(first.total_bytes)
    assert float(got.total_bytes) == float(second.total_bytes)
    # the even split charges the first stage, as before
    even = dc.train_plan(**PLAN)
    assert float(train_memory(llama70, even, h100_64, EXACT).total_bytes) == float(
        stage_memory(llama70, even, h100_64, EXACT, 0).total_bytes
    )


def test_relaxed_equals_exact_at_an_uneven_plan_and_gradients_are_finite(h100_64, llama70):
    plan = dc.train_plan(**PLAN, first_stage_layers=2, last_stage_layers=8)
    exact = dc.TrainCost(h100_64, llama70)(plan)
    relaxed = dc.TrainCost(h100_64, llama70, SHARP)(plan)
    assert float(relaxed.step_time_s) == pytest.approx(float(exact.step_time_s), rel=1e-9)
    assert float(relaxed.memory.total_bytes) == pytest.approx(
        float(exact.memory.total_bytes), rel=1e-9
    )
    assert float(relaxed.divisibility_violation) == pytest.approx(0.0, abs=1e-12)
    grads = jax.grad(lambda p: dc.TrainCost(h100_64, llama70, dc.RELAXED)(p).step_time_s)(plan)
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree_util.tree_leaves(grads))


def test_search_keeps_an_uneven_split_fixed_and_valid(llama70):
    model = _with_layers(llama70, 126)
    space = TrainSearchSpace(
        global_batch=32,
        seq_len=4096,
        chips=(64,),
        max_virtual_stages=1,
        first_stage_layers=7,
        last_stage_layers=7,
    )
    cand = enumerate_space(model, space)
    pps = set(np.asarray(cand.columns["pp"]).tolist())
    assert 16.0 in pps  # 126 over 16 stages only exists uneven
    for pp in pps:  # every kept pp builds: (126 - 14) / (pp - 2) layers per middle stage
        assert pp > 2 and 112 % (pp - 2) == 0


@pytest.mark.parametrize(
    "layers, pp, split",
    [
        (70, 12, (5, 5)),  # BLOOM 176B on 12 stages, as it was trained (5 + 10 x 6 + 5)
        (126, 16, (7, 7)),  # Llama 3 405B (7 + 14 x 8 + 7)
        (70, 6, (11, 11)),  # 11 + 4 x 12 + 11
        (71, 2, (36, 35)),  # two stages: the last takes the smaller half
        (80, 8, (0, 0)),  # pp divides the layers: the even split
    ],
)
def test_balanced_split(layers, pp, split):
    first, last = balanced_split(layers, pp)
    assert (float(first), float(last)) == split
    middle = -(-layers // pp)
    if split != (0, 0):
        assert first + last + middle * (pp - 2) == layers and bool(balanced_split_ok(layers, pp))
        model_plan = dc.train_plan(
            **{**PLAN, "pp": pp}, first_stage_layers=int(first), last_stage_layers=int(last)
        )
        assert (
            pipeline_split_problems(_with_layers(dc.load_model("llama-2-70b"), layers), model_plan)
            == []
        )
    assert not bool(balanced_split_ok(80, 8))  # even: not an uneven split
    assert not bool(balanced_split_ok(70, 32))  # 3 per middle stage leave nothing for the ends
    assert not bool(balanced_split_ok(70, 12, v=2))  # 5 layers do not split into 2 chunks


def test_search_places_the_balanced_split_where_pp_does_not_divide_the_layers():
    """Issue 42: BLOOM 176B on 384 A100 had "no valid degree combination" (no pp in 2..16
    divides its 70 layers but 2, 5, 7, 10, 14); the search now also tries every other pp with
    the balanced split, and its best plan's launch fields carry it."""
    space = TrainSearchSpace(
        global_batch=2048,
        seq_len=2048,
        chips=(384,),
        recompute=("selective",),
        zero=(1,),
        sequence_parallel=(True,),
        max_micro_batch=1,
        max_virtual_stages=1,
    )
    system = dc.load_system("dgx-a100", chips=384)
    result = dc.search_train(system, dc.load_model("bloom-176b"), space, exhaustive=True)
    assert result.best is not None
    rows = [result.row(result.best)] + [result.row(p) for p, _ in result.alternatives]
    assert {r["pp"] for r in rows} - {1, 2, 5, 7, 10, 14}  # a pp that does not divide 70
    for r in rows:
        if 70 % r["pp"]:
            first, last = r["first_stage_layers"], r["last_stage_layers"]
            assert first + last + (-(-70 // r["pp"])) * (r["pp"] - 2) == 70 and 1 <= last <= first
        else:
            assert (r["first_stage_layers"], r["last_stage_layers"]) == (0, 0)
