"""Plans a framework or a chip refuses are infeasible, not costed (issue 17, items 7 and 8)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import pytest

import diffcost as dc
from diffcost import TrainSearchSpace, search_train
from diffcost.testing import (
    Candidates,
    TrainProblem,
    all_gather_s,
    enumerate_space,
    fp8_units,
    framework_problems,
    padded_vocab,
    params_per_chip,
    pipeline_bubble,
    stage_times,
    valid,
    with_padded_vocab,
    zero3_gather_params,
)

FP8_PLAN = dict(tp=4, pp=1, dp=2, global_batch=16, seq_len=2048, precision="fp8")


def _rule_problems(system, model, **kwargs):
    """Problems other than memory (the rules under test), and the breakdown."""
    problems, out = _problems(system, model, **kwargs)
    return [p for p in problems if "memory" not in p], out


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


@pytest.mark.slow  # 10 s on 2 cores (an exact search)
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
    res = search_train(system, model, both, exhaustive=False, starts=4, steps=40)
    assert res.best is not None
    assert all(p["precision"] == "bf16" for p in res.rows())


def test_relaxed_loss_penalises_fp8_weight_on_a100():
    """The relaxed model carries the refusal as a weight the search's penalty pushes to 0."""
    model = dc.load_model("llama-2-7b")
    plan = dc.train_plan(**FP8_PLAN)
    half = dc.train_plan(**{**FP8_PLAN, "precision": "bf16"})
    mixed = jtu.tree_map(lambda a, b: (a + b) / 2, plan, half)
    out = dc.TrainCost(dc.load_system("dgx-a100", chips=8), model, dc.RELAXED)(mixed)
    np.testing.assert_allclose(float(out.unsupported_format), 0.5)


# --- Megatron-LM's divisibility rules ----------------------------------------------------------
def _gpt3_with(**shape):
    model = dc.load_model("gpt3-175b")
    names = list(shape)
    return eqx.tree_at(
        lambda m: [getattr(m, n) for n in names],
        model,
        [jnp.asarray(float(v)) for v in shape.values()],
    )


GPT3_PLAN = dict(tp=8, pp=8, dp=16, global_batch=1536, seq_len=2048)


def test_kv_heads_neither_multiple_nor_divisor_of_tp_is_refused(a100_1024):
    model = _gpt3_with(kv_heads=12)  # 96 query heads in 12 groups
    problems, out = _rule_problems(a100_1024, model, **GPT3_PLAN)  # 12 groups over tp 8
    assert any("kv_heads (12)" in p for p in problems), problems
    assert float(out.divisibility_violation) > 0.0
    for tp, dp in ((4, 32), (2, 64)):  # 12 % 4 == 0, 12 % 2 == 0
        problems, out = _rule_problems(a100_1024, model, **{**GPT3_PLAN, "tp": tp, "dp": dp})
        assert problems == [] and float(out.divisibility_violation) == 0.0
    # tp a multiple of the groups replicates them (Megatron allows it)
    problems, out = _rule_problems(a100_1024, _gpt3_with(kv_heads=4), **GPT3_PLAN)
    assert problems == [] and float(out.divisibility_violation) == 0.0


def test_interleaved_schedule_needs_micro_batches_a_multiple_of_pp(a100_1024, gpt3):
    # m = 1536 / (16 * 16) = 6 micro-batches over pp = 8 stages
    bad = {**GPT3_PLAN, "micro_batch": 16, "virtual_stages": 2}
    problems, out = _rule_problems(a100_1024, gpt3, **bad)
    assert any("interleaved schedule" in p for p in problems), problems
    assert float(out.divisibility_violation) > 0.0
    relaxed = dc.TrainCost(a100_1024, gpt3, dc.RELAXED)(dc.train_plan(**bad))
    assert float(relaxed.divisibility_violation) > 0.0
    for ok in ({**bad, "virtual_stages": 1}, {**bad, "micro_batch": 12}):  # v = 1; m = 8
        problems, out = _rule_problems(a100_1024, gpt3, **ok)
        assert problems == [] and float(out.divisibility_violation) == 0.0


def test_search_validity_agrees_with_train_problems():
    """``valid()`` keeps exactly the candidates with no framework problem."""
    model = _gpt3_with(kv_heads=12, layers=24)
    space = TrainSearchSpace(global_batch=48, seq_len=2048, chips=(64,), max_micro_batch=4)
    problem = TrainProblem(None, model, space)
    first = {c.name: [c.options[0]] for c in problem.choices}
    every = Candidates.product(problem.axes, problem.choices, first)
    ok = valid(every, model, space)
    assert 0 < ok.sum() < len(every)
    for i in range(len(every)):
        row = every.row(i)
        if row["tp"] * row["pp"] * row["cp"] > 64 or 64 % (row["tp"] * row["pp"] * row["cp"]):
            continue
        dp = 64 // int(row["tp"] * row["pp"] * row["cp"])
        if space.global_batch % (dp * row["micro_batch"]) or 24 % (
            row["pp"] * row["virtual_stages"]
        ):
            continue
        if row["pp"] == 1 and row["virtual_stages"] > 1:
            continue
        plan = dc.train_plan(
            tp=int(row["tp"]),
            pp=int(row["pp"]),
            cp=int(row["cp"]),
            dp=dp,
            micro_batch=int(row["micro_batch"]),
            virtual_stages=int(row["virtual_stages"]),
            global_batch=48,
            seq_len=2048,
        )
        assert bool(ok[i]) == (framework_problems(model, plan) == []), row


# --- vocabulary padding ------------------------------------------------------------------------
def test_vocabulary_is_padded_to_128_tp_as_megatron_does(a100_1024):
    """GPT-2's 50,257 tokens train as 51,200 at tp = 8 (Megatron-LM pads; the spec's 51,200 is
    that padded size), so both cost the same; model FLOP count the real vocabulary."""
    real = _gpt3_with(vocab=50257)
    padded = _gpt3_with(vocab=51200)
    assert float(padded_vocab(real, dc.train_plan(**GPT3_PLAN), dc.EXACT)) == 51200.0
    a = dc.TrainCost(a100_1024, real)(dc.train_plan(**GPT3_PLAN))
    b = dc.TrainCost(a100_1024, padded)(dc.train_plan(**GPT3_PLAN))
    assert float(a.step_time_s) == float(b.step_time_s)
    assert float(a.memory.total_bytes) == float(b.memory.total_bytes)
    assert float(a.model_flop) < float(b.model_flop)


def test_padded_vocab_relaxation_is_exact_at_integers_and_smooth_between():
    model = dc.load_model("llama-2-70b")  # 32,000 tokens: 32,000 at tp <= 2, 32,256 at 4
    plan = dc.train_plan(tp=4)

    def pad(t, sm):
        return padded_vocab(model, eqx.tree_at(lambda p: p.tp, plan, t), sm)

    for t, want in ((1.0, 32000), (2.0, 32000), (4.0, 32256), (8.0, 32768), (3.0, 32256)):
        assert (
            float(pad(jnp.asarray(t), dc.RELAXED)) == want == float(pad(jnp.asarray(t), dc.EXACT))
        )
    ts = jnp.linspace(2.0, 4.0, 41)
    values = jax.vmap(lambda t: pad(t, dc.RELAXED))(ts)
    grads = jax.vmap(jax.grad(lambda t: pad(t, dc.RELAXED)))(ts)
    assert bool(jnp.all(jnp.isfinite(grads))) and bool(jnp.all(jnp.diff(values) >= 0))


# --- pipeline bubble ---------------------------------------------------------------------------
def _bubble_in_micro_batches(system, model, **kwargs):
    plan = dc.train_plan(**kwargs)
    out = dc.TrainCost(system, model)(plan)
    per_micro = stage_times(system, with_padded_vocab(model, plan, dc.EXACT), plan, dc.EXACT)
    return float(out.pp_bubble_time_s / per_micro.per_micro_s())


@pytest.mark.parametrize(
    ("micro_batch", "v", "want"),
    [
        (24, 2, 8 + 3 / 2 - 4),  # m = 4 < p = 8: p + (m - 1)/v - m, more than a micro-batch
        (24, 4, 8 + 3 / 4 - 4),
        (12, 2, 7 / 2),  # m = 8 = p: the paper's (p - 1)/v
        (6, 2, 7 / 2),  # m = 16
        (24, 1, 7.0),  # v = 1: p - 1 for any m
        (96, 1, 7.0),  # m = 1
    ],
)
def test_interleaved_bubble_with_fewer_micro_batches_than_stages(
    a100_1024, gpt3, micro_batch, v, want
):
    kwargs = {**GPT3_PLAN, "micro_batch": micro_batch, "virtual_stages": v}
    assert _bubble_in_micro_batches(a100_1024, gpt3, **kwargs) == pytest.approx(want, rel=1e-12)


def test_bubble_relaxation_exact_at_integers_and_finite_gradient():
    plan = dc.train_plan(**{**GPT3_PLAN, "micro_batch": 24, "virtual_stages": 2})
    assert float(pipeline_bubble(plan, dc.RELAXED)) == float(pipeline_bubble(plan, dc.EXACT))
    g = jax.grad(
        lambda mb: pipeline_bubble(eqx.tree_at(lambda p: p.micro_batch, plan, mb), dc.RELAXED)
    )
    for mb in (20.0, 21.5, 24.0, 30.0):
        assert np.isfinite(float(g(jnp.asarray(mb))))


# --- ZeRO-2 reduces gradients every micro-batch ------------------------------------------------
@pytest.mark.parametrize("overlap", [False, True])
def test_zero2_reduce_scatters_gradients_every_micro_batch(a100_1024, gpt3, overlap):
    """DeepSpeed ZeRO-2 cannot accumulate into a gradient shard: ``m - 1`` more reduce-scatters
    per step than ZeRO-1, each hidden under one micro-batch's backward when overlapped."""
    kw = {**GPT3_PLAN, "micro_batch": 1, "overlap_grad_reduce": overlap, "recompute": "full"}
    z1 = dc.TrainCost(a100_1024, gpt3)(dc.train_plan(**kw, zero=1))
    z2 = dc.TrainCost(a100_1024, gpt3)(dc.train_plan(**kw, zero=2))
    plan = dc.train_plan(**kw, zero=2)
    m = float(plan.num_micro_batches())
    assert m == 96.0
    grad_bytes = params_per_chip(with_padded_vocab(gpt3, plan, dc.EXACT), plan, dc.EXACT) * 2.0
    t_rs = all_gather_s(grad_bytes, plan.dp, plan.tp, a100_1024, dc.EXACT)
    extra = float(z2.dp_comm_time_s - z1.dp_comm_time_s)
    if overlap:
        assert 0.0 < extra < (m - 1.0) * float(t_rs)
    else:
        assert extra == pytest.approx((m - 1.0) * float(t_rs), rel=1e-12)
    one = {**kw, "micro_batch": 16, "global_batch": 256}  # m = 1: one reduction either way
    a = dc.TrainCost(a100_1024, gpt3)(dc.train_plan(**one, zero=1))
    b = dc.TrainCost(a100_1024, gpt3)(dc.train_plan(**one, zero=2))
    assert float(a.dp_comm_time_s) == float(b.dp_comm_time_s)


# --- ZeRO-3 gather buffers ---------------------------------------------------------------------
def _zero3_extra_bytes(system, model, **kwargs):
    """ZeRO-3 weights + gradients beyond their shards: the gathered buffers."""
    plan = dc.train_plan(**kwargs, zero=3)
    mem = dc.TrainCost(system, model)(plan).memory
    params = params_per_chip(with_padded_vocab(model, plan, dc.EXACT), plan, dc.EXACT)
    shard = params / (plan.dp * plan.cp)
    return float(mem.weights_bytes - 2.0 * shard), float(mem.gradients_bytes - 2.0 * shard)


def test_zero3_holds_two_gathered_layers_and_one_gradient_layer(a100_1024, gpt3):
    """GPT-3 at tp = 8: a layer is (12 h^2 + 13 h - 4 h)/8 + 4 h parameters per rank; ZeRO-3
    keeps two gathered in bf16 (current + prefetched) and one unsharded bf16 gradient."""
    h = 12288.0
    layer = (12 * h**2 + 9 * h) / 8 + 4 * h
    weights, grads = _zero3_extra_bytes(a100_1024, gpt3, **GPT3_PLAN)
    assert weights == pytest.approx(2 * 2.0 * layer, rel=1e-9)
    assert grads == pytest.approx(2.0 * layer, rel=1e-9)
    assert float(zero3_gather_params(gpt3, dc.train_plan(**GPT3_PLAN), dc.EXACT)) == layer


def test_zero3_gather_unit_is_the_embedding_when_larger():
    """Llama 3 8B: the 128,256 x 4,096 embedding outweighs a 218M-parameter layer."""
    model = dc.load_model("llama-3-8b")
    weights, grads = _zero3_extra_bytes(dc.load_system("dgx-h100", chips=8), model, tp=2, dp=4)
    assert weights == pytest.approx(2 * 2.0 * 128256 * 4096 / 2, rel=1e-9)
    assert grads == pytest.approx(2.0 * 128256 * 4096 / 2, rel=1e-9)


def test_padded_vocab_has_unit_slope_in_the_vocabulary():
    """The real vocabulary's sensitivity survives the padding (a ceil alone has slope 0), and a
    vocabulary already on a multiple does not jump to the next one when perturbed."""
    plan = dc.train_plan(tp=2)
    for vocab in (128256.0, 32000.0, 50257.0):  # a multiple of 256, a multiple, not one
        model = _gpt3_with(vocab=vocab)

        def pad(v, model=model):
            return padded_vocab(eqx.tree_at(lambda m: m.vocab, model, v), plan, dc.EXACT)

        assert float(jax.grad(pad)(jnp.asarray(vocab))) == 1.0
        h = vocab * 1e-6
        fd = (pad(jnp.asarray(vocab + h)) - pad(jnp.asarray(vocab - h))) / (2 * h)
        assert float(fd) == pytest.approx(1.0, rel=1e-6)


def test_padded_vocab_is_finite_below_tp_one():
    """A relaxed search visits tp < 1: the padded vocabulary (and its gradient) stays finite
    there (a zero multiple gave NaN and broke the search's relaxed phase)."""
    from diffcost import RELAXED
    from diffcost.testing import padded_vocab

    model, plan = dc.load_model("llama-3-8b"), dc.train_plan(tp=1)

    def f(t):
        return padded_vocab(model, eqx.tree_at(lambda p: p.tp, plan, t), RELAXED)

    for t in (0.3, 0.9, 1.0, 1.5):
        value, grad = jax.value_and_grad(f)(jnp.asarray(t))
        assert np.isfinite(float(value)) and np.isfinite(float(grad))
