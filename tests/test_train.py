"""The training cost model: FLOP conventions, transforms, gradients, relaxation, physics."""

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import diffcost as dc

GPT_PLAN = dict(
    tp=8, pp=16, dp=8, micro_batch=1, global_batch=1536, seq_len=2048, flash_attention=False
)


def _set(plan, **fields):
    """Replace plan fields by floats (relaxed values)."""
    names = list(fields)
    return eqx.tree_at(
        lambda p: [getattr(p, n) for n in names],
        plan,
        [jnp.asarray(float(v)) for v in fields.values()],
    )


def test_megatron_flop_formula_with_full_recompute(a100_1024, gpt3):
    """Hardware FLOP with full recomputation = 96 B s l h^2 (1 + s/(6h) + V/(16 l h))
    (Narayanan et al. SC'21 eq. 3), exactly."""
    out = dc.TrainCost(a100_1024, gpt3)(dc.train_plan(**GPT_PLAN, recompute="full"))
    B, s, n_l, h, V = 1536, 2048, 96, 12288, 51200
    eq3 = 96 * B * s * n_l * h**2 * (1 + s / (6 * h) + V / (16 * n_l * h))
    assert float(out.hardware_flop) == pytest.approx(eq3, rel=1e-12)


def test_step_is_three_forwards_and_full_recompute_adds_one(a100_1024, gpt3):
    fwd = float(gpt3.forward_flop(1536, 2048))
    logits = float(gpt3.logits_flop(1536 * 2048))
    none = dc.TrainCost(a100_1024, gpt3)(dc.train_plan(**GPT_PLAN, recompute="none"))
    full = dc.TrainCost(a100_1024, gpt3)(dc.train_plan(**GPT_PLAN, recompute="full"))
    assert float(none.model_flop) == pytest.approx(3 * fwd, rel=1e-12)
    assert float(none.hardware_flop) == pytest.approx(3 * fwd, rel=1e-12)
    # the output layer is not recomputed (it is not inside a checkpointed block)
    assert float(full.hardware_flop) == pytest.approx(4 * fwd - logits, rel=1e-12)
    assert float(full.hfu) / float(full.mfu) == pytest.approx((4 * fwd - logits) / (3 * fwd))
    assert float(full.step_time_s) > float(none.step_time_s)


def test_selective_recompute_hardware_flop(a100_1024, gpt3):
    """Selective recomputation re-runs only QK^T and AV: 4 B s^2 h per layer."""
    out = dc.TrainCost(a100_1024, gpt3)(dc.train_plan(**GPT_PLAN, recompute="selective"))
    extra = 96 * 4 * 1536 * 2048**2 * 12288
    assert float(out.hardware_flop - out.model_flop) == pytest.approx(extra, rel=1e-12)


def test_megatron_readme_gpt3_prediction_is_plausible(a100_1024, gpt3):
    """Megatron-LM README: ~32 s per step, 138 TFLOP/s per A100 (HFU-like). The prior
    (uncalibrated) model must land within 30%; validation tracks the real error."""
    out = dc.TrainCost(a100_1024, gpt3)(dc.train_plan(**GPT_PLAN, recompute="full"))
    assert 0.7 * 32 < float(out.step_time_s) < 1.3 * 32
    assert float(out.memory.total_bytes) < 80e9


def test_breakdown_sums_to_step_time(h100_64):
    model = dc.load_model("llama-3-70b")
    plan = dc.train_plan(tp=4, pp=4, cp=2, dp=2, virtual_stages=5, global_batch=128, seq_len=8192)
    out = dc.TrainCost(h100_64, model)(plan)
    parts = (
        out.compute_time_s
        + out.recompute_time_s
        + out.tp_comm_time_s
        + out.cp_comm_time_s
        + out.ep_comm_time_s
        + out.pp_bubble_time_s
        + out.pp_p2p_time_s
        + out.dp_comm_time_s
        + out.optimizer_time_s
        + out.jitter_time_s  # waits for the last rank (diffcost._train.cost.jitter_s)
    )
    assert float(parts) == pytest.approx(float(out.step_time_s), rel=1e-12)
    assert float(out.tokens_per_s) == pytest.approx(128 * 8192 / float(out.step_time_s))


# --- transforms --------------------------------------------------------------------------------
def test_jit_equals_eager_and_traces_once(h100_64, llama70):
    traces = []

    @eqx.filter_jit
    def predict(cost, plan):
        traces.append(1)
        return cost(plan)

    cost = dc.TrainCost(h100_64, llama70)
    plans = [
        dc.train_plan(tp=t, pp=p, dp=64 // (t * p), global_batch=256)
        for t, p in [(8, 1), (4, 2), (2, 4), (8, 8)]
    ]
    for plan in plans:
        jitted = predict(cost, plan)
        eager = cost(plan)
        assert jtu.tree_all(jtu.tree_map(lambda a, b: np.allclose(a, b, rtol=1e-12), jitted, eager))
    assert len(traces) == 1


def _stack(trees):
    return jtu.tree_map(lambda *xs: jnp.stack(xs), *trees)


@pytest.mark.slow  # 7 s on 2 cores (a loop of plans against their vmap)
def test_vmap_over_plans_equals_loop(h100_64, llama70):
    cost = dc.TrainCost(h100_64, llama70)
    plans = [
        dc.train_plan(tp=t, pp=p, dp=64 // (t * p), global_batch=256, recompute=r, zero=z)
        for t, p, r, z in [(8, 1, "full", 0), (4, 2, "none", 1), (2, 4, "selective", 3)]
    ]
    batched = jax.vmap(cost)(_stack(plans))
    for i, plan in enumerate(plans):
        assert float(batched.step_time_s[i]) == pytest.approx(
            float(cost(plan).step_time_s), rel=1e-12
        )


@pytest.mark.slow  # ~13 s: vmap compile over stacked chips and models (default run budget)
def test_vmap_over_chips_and_models():
    systems = [dc.load_system(chip=c, chips=8) for c in ["a100-sxm-80gb", "h100-sxm", "mi300x"]]
    models = [dc.load_model(m) for m in ["llama-2-7b", "llama-3-8b", "gpt-j-6b"]]
    plan = dc.train_plan(tp=8, global_batch=8)
    fn = lambda s, m: dc.TrainCost(s, m)(plan).step_time_s
    grid = jax.vmap(lambda s: jax.vmap(lambda m: fn(s, m))(_stack(models)))(_stack(systems))
    assert grid.shape == (3, 3)
    for i, s in enumerate(systems):
        for j, m in enumerate(models):
            assert float(grid[i, j]) == pytest.approx(float(fn(s, m)), rel=1e-12)


# --- gradients ---------------------------------------------------------------------------------
def _fd(f, x, eps=1e-6):
    return (f(x * (1 + eps)) - f(x * (1 - eps))) / (2 * eps * x)


#: two degrees in the fast run, the other four in the slow pass (5-12 s each on 2 cores)
FIELDS = ["pp", "micro_batch"]
FIELDS += [pytest.param(f, marks=pytest.mark.slow) for f in ("tp", "dp", "global_batch", "seq_len")]


@pytest.mark.parametrize("field", FIELDS)
def test_plan_gradients_match_finite_differences(h100_64, llama70, field):
    cost = dc.TrainCost(h100_64, llama70, dc.RELAXED)
    plan = _set(
        dc.train_plan(tp=4, pp=4, dp=4, global_batch=512, seq_len=4096),
        tp=3.7,
        pp=4.3,
        dp=4.1,
        micro_batch=1.3,
        global_batch=500.0,
        seq_len=4000.0,
    )
    f = lambda x: float(cost(_set(plan, **{field: x})).step_time_s)
    g = jax.grad(lambda p: cost(p).step_time_s)(plan)
    x0 = float(getattr(plan, field))
    assert float(getattr(g, field)) == pytest.approx(_fd(f, x0), rel=1e-4, abs=1e-9)


@pytest.mark.slow  # 9-40 s on 2 cores: kept out of the ~6-minute default run
def test_system_gradients_match_finite_differences(h100_64, llama70):
    plan = dc.train_plan(tp=8, pp=2, dp=4, global_batch=256, seq_len=4096)
    loss = lambda s: dc.TrainCost(s, llama70)(plan).step_time_s
    grads = eqx.filter_grad(loss)(h100_64)
    for path in [
        lambda s: s.chip.memory_bandwidth_bytes_per_s,
        lambda s: s.scale_up_bandwidth_bytes_per_s,
        lambda s: s.scale_out_bandwidth_bytes_per_s,
        lambda s: s.scale_up_latency_s,
        lambda s: s.efficiency.matmul_peak_fraction,
    ]:
        x0 = float(path(h100_64))
        f = lambda x, path=path: float(loss(eqx.tree_at(path, h100_64, jnp.asarray(x))))
        assert float(path(grads)) == pytest.approx(_fd(f, x0), rel=1e-4, abs=1e-12)
    peak_fd = []
    for i in range(len(dc.FORMATS)):
        bump = lambda x, i=i: float(
            loss(
                eqx.tree_at(
                    lambda s: s.chip.peak_flop_per_s,
                    h100_64,
                    h100_64.chip.peak_flop_per_s.at[i].set(x),
                )
            )
        )
        peak_fd.append(_fd(bump, float(h100_64.chip.peak_flop_per_s[i])))
    np.testing.assert_allclose(grads.chip.peak_flop_per_s, peak_fd, rtol=1e-4, atol=1e-30)


@pytest.mark.slow  # every chip x every model: about 30 s on 2 cores
def test_gradients_finite_on_whole_catalogue():
    """d step_time / d (plan, system, model) is finite for every built-in chip and model."""
    models = _stack([dc.load_model(n) for n in dc.builtin_names("model")])
    plan = _set(
        dc.train_plan(tp=8, pp=2, dp=4, global_batch=64, seq_len=2048),
        tp=5.5,
        pp=2.5,
        dp=3.2,
        micro_batch=1.5,
    )

    @eqx.filter_jit
    def grads(system):
        def one(model):
            f = lambda s, m, p: dc.TrainCost(s, m, dc.RELAXED)(p).step_time_s
            return eqx.filter_grad(f)(system, model, plan), jax.grad(f, argnums=2)(
                system, model, plan
            )

        return jax.vmap(one)(models)

    for chip in dc.builtin_names("chip"):
        g_sys, g_plan = grads(dc.load_system(chip=chip, chips=64))
        for leaf in jtu.tree_leaves((g_sys, g_plan)):
            assert bool(jnp.all(jnp.isfinite(leaf))), chip


# --- relaxation --------------------------------------------------------------------------------
INTEGER_PLANS = [
    dict(tp=8, pp=1, dp=8, global_batch=512, recompute="full", zero=0),
    dict(tp=4, pp=2, dp=8, global_batch=256, recompute="selective", zero=1, virtual_stages=2),
    dict(tp=2, pp=8, dp=4, global_batch=128, recompute="none", zero=3, micro_batch=2),
    dict(tp=8, pp=8, dp=1, global_batch=64, recompute="full", zero=2, virtual_stages=5),
    dict(tp=1, pp=1, dp=64, global_batch=64, zero=3),
    dict(tp=4, pp=4, cp=2, dp=2, global_batch=32, seq_len=8192),
]


@pytest.mark.parametrize("kwargs", INTEGER_PLANS)
def test_relaxed_equals_exact_at_integer_plans(h100_64, llama70, kwargs):
    """Integer-structured relaxations are exact at integers; the continuous blends converge."""
    plan = dc.train_plan(**kwargs)
    exact = dc.TrainCost(h100_64, llama70)(plan)
    sharp = dc.TrainCost(h100_64, llama70, dc.Smoothing(relaxed=True, rel_width=1e-9))(plan)
    jtu.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-18), exact, sharp)
    relaxed = dc.TrainCost(h100_64, llama70, dc.RELAXED)(plan)
    # the default blend is exact unless two overlapped terms are within 5% of each other
    assert float(relaxed.step_time_s) == pytest.approx(float(exact.step_time_s), rel=0.02)
    for field in ["model_flop", "hardware_flop", "micro_batches", "chips"]:
        assert float(getattr(relaxed, field)) == float(getattr(exact, field))
    jtu.tree_map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-12), relaxed.memory, exact.memory
    )


def test_categorical_mixture_interpolates_one_hot_limits(h100_64, llama70):
    plan = dc.train_plan(tp=8, pp=1, dp=8, global_batch=512)
    cost = dc.TrainCost(h100_64, llama70)
    ends = [
        float(
            cost(eqx.tree_at(lambda p: p.recompute, plan, jnp.eye(3)[i])).memory.activations_bytes
        )
        for i in range(3)
    ]
    mixed = eqx.tree_at(lambda p: p.recompute, plan, jnp.asarray([0.2, 0.3, 0.5]))
    assert float(cost(mixed).memory.activations_bytes) == pytest.approx(
        0.2 * ends[0] + 0.3 * ends[1] + 0.5 * ends[2], rel=1e-12
    )


# --- physics properties ------------------------------------------------------------------------
plans = st.sampled_from(INTEGER_PLANS)
factors = st.floats(1.01, 4.0)


@settings(max_examples=25, deadline=None)
@given(kwargs=plans, factor=factors)
def test_more_bandwidth_is_never_slower(h100_64, llama70, kwargs, factor):
    plan = dc.train_plan(**kwargs)
    base = float(_step_time(h100_64, llama70, plan))
    for path in [
        lambda s: s.chip.memory_bandwidth_bytes_per_s,
        lambda s: s.scale_up_bandwidth_bytes_per_s,
        lambda s: s.scale_out_bandwidth_bytes_per_s,
        lambda s: s.chip.peak_flop_per_s,
    ]:
        faster = eqx.tree_at(path, h100_64, path(h100_64) * factor)
        assert float(_step_time(faster, llama70, plan)) <= base * (1 + 1e-12)


@eqx.filter_jit
def _step_time(system, model, plan):
    """Exact step time, compiled once for the property tests (their plans share shapes)."""
    return dc.TrainCost(system, model)(plan).step_time_s


@settings(max_examples=25, deadline=None)
@given(tp_log=st.integers(0, 3), pp_log=st.integers(0, 3), zero=st.integers(0, 3))
def test_more_chips_never_more_weight_memory(tp_log, pp_log, zero):
    model = dc.load_model("llama-2-70b")
    system = dc.load_system(chip="h100-sxm", chips=64)
    tp, pp = 2**tp_log, 2**pp_log

    def weights(tp, pp, dp):
        plan = dc.train_plan(tp=tp, pp=pp, dp=dp, global_batch=64, zero=zero)
        return float(_weights_bytes(system, model, plan))

    assert weights(tp * 2, pp, 1) <= weights(tp, pp, 1)
    assert weights(tp, pp * 2, 1) <= weights(tp, pp, 1)
    assert weights(tp, pp, 2) <= weights(tp, pp, 1)


@eqx.filter_jit
def _weights_bytes(system, model, plan):
    return dc.TrainCost(system, model)(plan).memory.weights_bytes


@pytest.mark.slow  # 7 s on 2 cores (20 hypothesis examples)
@settings(max_examples=20, deadline=None)
@given(kwargs=plans, grad_bytes=st.sampled_from([2.0, 4.0]))
def test_more_bytes_never_less_memory(h100_64, llama70, kwargs, grad_bytes):
    cost = dc.TrainCost(h100_64, llama70)
    small = cost(dc.train_plan(**kwargs, optimizer="sgd_no_master"))
    big = cost(dc.train_plan(**kwargs, optimizer="adam", grad_bytes_per_param=grad_bytes))
    assert float(big.memory.total_bytes) >= float(small.memory.total_bytes)
    fp32 = cost(dc.train_plan(**{**kwargs, "precision": "fp32"}))
    bf16 = cost(dc.train_plan(**{**kwargs, "precision": "bf16"}))
    assert float(fp32.memory.weights_bytes) > float(bf16.memory.weights_bytes)


@pytest.mark.slow  # 9-40 s on 2 cores: kept out of the ~6-minute default run
def test_tp_group_spilling_past_the_node_is_slow():
    """A TP group of 16 on 8-chip domains pays scale-out bandwidth on every layer's all-reduce:
    slower than the same group inside one 16-chip domain, and sensitive to the NIC bandwidth only
    when it spills (hierarchical all-reduce: intra-node reduce-scatter, 8 NICs in parallel)."""
    model = dc.load_model("llama-2-70b")
    plan = dc.train_plan(tp=16, pp=1, global_batch=32)
    node8 = dc.load_system("dgx-h100", chips=16)
    node16 = eqx.tree_at(lambda s: s.scale_up_domain_chips, node8, jnp.asarray(16.0))
    spill = dc.TrainCost(node8, model)(plan)
    inside = dc.TrainCost(node16, model)(plan)
    assert float(spill.tp_comm_time_s) > 1.2 * float(inside.tp_comm_time_s)

    def nic_grad(system, plan):
        f = lambda s: dc.TrainCost(s, model)(plan).tp_comm_time_s
        return float(eqx.filter_grad(f)(system).scale_out_bandwidth_bytes_per_s)

    assert nic_grad(node8, plan) < 0.0
    assert nic_grad(node8, dc.train_plan(tp=8, dp=2, global_batch=32)) == 0.0


def test_backward_of_fused_attention_and_memory_bound_kernels():
    """Issue 42: a flash attention backward runs five products against the forward's two
    (FlashAttention-2, Algorithm 2) at 0.85 of the forward's rate (cuDNN on H200), the
    memory-bound kernels' backward streams its own tensors (norms and residual forks 12 h,
    SwiGLU 5 f per token) and the cross entropy's backward is its own 14 bytes per logit: the
    stage backward is twice the forward plus those differences; the hardware FLOP add the
    recomputed scores."""
    from diffcost import testing as C
    from diffcost.testing import evaluation, stream_time_s, with_padded_vocab

    system, model = dc.load_system("dgx-a100", chips=8), dc.load_model("llama-2-7b")
    fields = dict(tp=1, pp=1, dp=8, micro_batch=2, global_batch=64, seq_len=4096)
    flash = dc.train_plan(**fields, recompute="none", flash_attention=True)
    built = with_padded_vocab(model, flash, dc.EXACT)
    with evaluation():
        layer = C.layer_forward(system, built, flash, dc.EXACT)
        stage = C.stage_times(system, built, flash, dc.EXACT)
    tokens, h, f = 2 * 4096, 4096.0, 11008.0
    memory_bwd = float(stream_time_s(2 * tokens * (12 * h + 5 * f), system))
    assert float(layer.memory_s) == pytest.approx(
        float(stream_time_s(2 * tokens * (10 * h + 3 * f), system)), rel=1e-5
    )
    attention = (2.5 / 0.85 - 2) * float(layer.attention_s)
    per_layer = attention + memory_bwd - 2 * float(layer.memory_s)
    logits = tokens * float(built.vocab)
    xent = float(stream_time_s((14 - 2 * 38) * logits, system))
    got = float(stage.backward_s) - 2 * float(stage.forward_s)
    assert got == pytest.approx(32 * per_layer + xent, rel=1e-4)
    model_flop, hardware_flop = C.step_flop(model, flash)
    attn = 32 * float(model.layer_attention_flop(64, 4096))
    assert float(hardware_flop - model_flop) == pytest.approx(0.5 * attn, rel=1e-5)
    unfused = dc.train_plan(**fields, recompute="none", flash_attention=False)
    assert float(C.step_flop(model, unfused)[1]) == pytest.approx(float(model_flop), rel=1e-6)
