"""Mixture of experts: distinct experts per batch, expert GEMMs, expert parallelism, memory."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffcost as dc
from diffcost import EXACT, Smoothing
from diffcost.testing import (
    EAGER_EXPERT_CALL_S,
    EXPERT_GEMMS_PER_FORWARD,
    ExpertSplit,
    GemmFormat,
    active_expert_fraction,
    all_to_all_s,
    eager_expert_dispatch_s,
    expert_gemms,
    expert_imbalance,
    layer_gemms,
    mixed_active_fraction,
)

FMT = GemmFormat(jnp.asarray(989e12), jnp.asarray(2.0))
TIGHT = Smoothing(relaxed=True, rel_width=1e-9)


@pytest.fixture(scope="module")
def mixtral():
    return dc.load_model("mixtral-8x7b")


@pytest.mark.parametrize("tokens", [1, 2, 3, 16])
def test_distinct_experts_match_the_exact_expectation(mixtral, tokens):
    """E(1 - (1 - k/E)^B) is the expected number of distinct experts: the exact count over
    every top-2 choice of B independent tokens (8 experts, enumerated for small B, sampled
    for B = 16)."""
    rng = np.random.default_rng(0)
    draws = 20000
    picks = np.argsort(rng.random((draws, tokens, 8)), axis=-1)[..., :2]
    used = np.zeros((draws, 8), bool)
    for j in range(2):
        np.put_along_axis(used, picks[..., j].reshape(draws, tokens), True, axis=1)
    distinct = used.sum(axis=1).mean()
    frac = float(active_expert_fraction(tokens, mixtral))
    assert 8 * frac == pytest.approx(distinct, rel=0.01)
    assert 8 * float(active_expert_fraction(1, mixtral)) == pytest.approx(2.0, rel=1e-6)


def test_expert_gemms_do_the_active_parameter_flop(mixtral):
    """At any token count the GEMMs of a layer on one of 2 TP ranks do 2 x active matrices per
    token over 2 (the rows per active expert times active experts = T k), whatever the split;
    the router is replicated, not split.  With expert parallelism the routed experts' GEMMs are
    the busiest rank's: the mean times the balls-into-bins imbalance."""
    for tokens in (1.0, 7.0, 4096.0):
        ops = (*layer_gemms(tokens, mixtral, 2.0, FMT), *expert_gemms(tokens, mixtral, 2.0, FMT))
        flop = sum(float(op.flop()) for op in ops)
        router = 2 * tokens * float(mixtral.router_params())
        whole = float(mixtral.layer_matmul_flop(tokens))
        assert flop == pytest.approx((whole - router) / 2.0 + router, rel=1e-9)
    mean = sum(float(op.flop()) for op in expert_gemms(4096.0, mixtral, 2.0, FMT)[-2:])
    busiest = expert_gemms(4096.0, mixtral, 2.0, FMT, ExpertSplit(ep=8.0))[-2:]
    factor = float(expert_imbalance(8 * 4096 * 2, 8.0))
    assert sum(float(op.flop()) for op in busiest) == pytest.approx(mean * factor, rel=1e-9)


def test_busiest_rank_load_matches_balls_into_bins():
    """The expected maximum of a multinomial load over ep ranks (Monte Carlo, 4,000 draws)
    against the Gaussian extreme-value formula; 1 at ep = 1 with a finite gradient."""
    rng = np.random.default_rng(0)
    for a, ep in ((4096, 8), (65536, 64), (512, 4)):
        loads = rng.multinomial(a, [1.0 / ep] * ep, size=4000).max(axis=1)
        measured = loads.mean() / (a / ep)
        assert float(expert_imbalance(a, float(ep))) == pytest.approx(measured, rel=0.03)
    assert float(expert_imbalance(1000.0, 1.0)) == 1.0
    assert np.isfinite(float(jax.grad(lambda e: expert_imbalance(1000.0, e))(jnp.asarray(1.0))))


def test_batch_one_decode_reads_two_experts_and_large_batches_read_all(mixtral):
    """Weight bytes of the routed experts: 2 of 8 at one token, all 8 at a thousand."""
    one = expert_gemms(1.0, mixtral, 1.0, FMT)[3]
    many = expert_gemms(1000.0, mixtral, 1.0, FMT)[3]
    per_expert = 2 * 4096 * 14336 * 2.0  # gate + up, bf16
    assert float(jnp.asarray(one.repeats)) * per_expert == pytest.approx(2 * per_expert, rel=1e-5)
    assert float(jnp.asarray(many.repeats)) == pytest.approx(8.0, rel=1e-9)


def test_averaged_iteration_reads_the_experts_of_its_two_kinds(mixtral):
    """Continuous batching at batch 1 with a 1024-token chunk every 256 steps reads
    (255 x 2 + 8) / 256 experts, not the 6.1 of 5 averaged tokens."""
    frac = float(mixed_active_fraction(1.0, 4.0, 1024.0, mixtral, EXACT))
    assert 8 * frac == pytest.approx((255 * 2 + 8) / 256, rel=1e-4)


def test_mixtral_decode_at_batch_one_costs_its_active_weights():
    """Batch-1 decode of Mixtral reads ~12.9B parameters, not 46.7B: its weight-read floor is
    that of a dense model of the active size within 3%, and far below its total size."""
    system = dc.load_system("dgx-h100", chips=2)
    plan = dc.serve_plan(tp=2, batch=1)
    moe = dc.ServeCost(system, dc.load_model("mixtral-8x7b"))(plan)
    dense = dc.ServeCost(system, dc.load_model("llama-2-13b"))(plan)
    ratio = float(moe.decode_weight_read_s) / float(dense.decode_weight_read_s)
    assert ratio == pytest.approx(12.88 / 13.02, rel=0.03)
    assert float(moe.memory.weights_bytes) == pytest.approx(46.70e9, rel=0.01)


def test_all_to_all_inside_a_node_is_faster_than_across():
    """8 ranks one node apart (stride 8 on 8-GPU nodes) pay InfiniBand; 8 adjacent ranks pay
    NVLink; one rank pays nothing."""
    system = dc.load_system("dgx-h100", chips=64)
    inside = float(all_to_all_s(1e8, 8.0, 1.0, system, EXACT))
    across = float(all_to_all_s(1e8, 8.0, 8.0, system, EXACT))
    assert 0 < inside < across / 4
    assert float(all_to_all_s(1e8, 1.0, 1.0, system, EXACT)) == 0.0


def _moe_plan(**kw):
    base = dict(tp=2, pp=1, dp=32, micro_batch=1, global_batch=256, seq_len=4096, zero=1)
    return dc.train_plan(**(base | kw))


def test_expert_parallelism_shards_expert_state_and_adds_all_to_all(mixtral):
    """ep = 8 holds 1/8 of the experts' weights per chip and shards their optimizer state over
    dp / ep = 4 copies (Megatron-Core expert data parallelism), and pays an all-to-all."""
    system = dc.load_system("dgx-h100", chips=64)
    cost = dc.TrainCost(system, mixtral)
    one, eight = cost(_moe_plan(ep=1)), cost(_moe_plan(ep=8))
    assert float(one.ep_comm_time_s) == 0.0 < float(eight.ep_comm_time_s)
    experts = float(mixtral.layers * mixtral.layer_expert_params()) / 2  # per TP rank
    saved = experts * (1 - 1 / 8) * 2.0  # bf16 weights
    weights_drop = float(one.memory.weights_bytes - eight.memory.weights_bytes)
    assert weights_drop == pytest.approx(saved, rel=1e-6)
    opt_one = experts * 12.0 / 32  # Adam fp32 state + master weights, sharded over dp
    opt_eight = experts / 8 * 12.0 / 4  # 1/8 of the experts, sharded over dp / ep
    drop = float(one.memory.optimizer_bytes - eight.memory.optimizer_bytes)
    assert drop == pytest.approx(opt_one - opt_eight, rel=1e-6)


def test_expert_parallel_rules_are_named(mixtral):
    """experts % ep, ep | shard group, expert width % tp; a dense model refuses ep > 1."""
    system = dc.load_system("dgx-h100", chips=64)
    plan = _moe_plan(ep=16, dp=32)
    problems = dc.train_problems(mixtral, plan, dc.TrainCost(system, mixtral)(plan), 64.0)
    assert any("experts (8) is not divisible by ep (16)" in p for p in problems)
    dense = dc.load_model("llama-3-8b")
    plan = _moe_plan(ep=2)
    problems = dc.train_problems(dense, plan, dc.TrainCost(system, dense)(plan), 64.0)
    assert any("model has no experts" in p for p in problems)
    relaxed = dc.TrainCost(system, mixtral, TIGHT)(_moe_plan(ep=16))
    assert float(relaxed.divisibility_violation) > 0


def test_relaxed_equals_exact_and_gradients_are_finite_for_moe(mixtral):
    """At an integer plan the relaxed MoE step equals the exact one; its gradient with respect
    to ep and the micro-batch is finite."""
    system = dc.load_system("dgx-h100", chips=64)
    plan = _moe_plan(ep=8, micro_batch=2)
    exact = dc.TrainCost(system, mixtral)(plan)
    relaxed = dc.TrainCost(system, mixtral, TIGHT)(plan)
    assert float(relaxed.step_time_s) == pytest.approx(float(exact.step_time_s), rel=1e-9)
    relaxed_cost = dc.TrainCost(system, mixtral, Smoothing(relaxed=True))

    def step(ep, mb):
        p = plan.__class__(**{**vars(plan), "ep": ep, "micro_batch": mb})
        return relaxed_cost(p).step_time_s

    grads = jax.grad(step, argnums=(0, 1))(jnp.asarray(6.5), jnp.asarray(1.5))
    assert all(np.isfinite(float(g)) for g in grads)


def test_deepseek_v3_serves_with_a_latent_cache_and_trains_with_expert_parallelism():
    """DeepSeek-V3 on 16 H100s (TP 16, fp8 weights): its KV cache per token is 61 x 576
    elements on every chip (not 61 x 2 x 128 heads x 192); training with EP 64 over 8 nodes
    pays an all-to-all and is finite."""
    model = dc.load_model("deepseek-v3")
    system = dc.load_system("dgx-h100", chips=16)
    out = dc.ServeCost(system, model)(dc.serve_plan(tp=16, batch=8, weight_format="fp8"))
    assert np.isfinite(float(out.tpot_s))
    from diffcost.testing import kv_bytes_per_token

    per_token = float(kv_bytes_per_token(model, 16.0, 1.0, 2.0, EXACT))
    assert per_token == pytest.approx(61 * 576 * 2.0)
    big = dc.load_system("dgx-h100", chips=2048)
    plan = dc.train_plan(
        tp=1, pp=16, dp=128, ep=64, micro_batch=1, global_batch=4096, seq_len=4096, precision="fp8"
    )
    train = dc.TrainCost(big, model)(plan)
    assert float(train.ep_comm_time_s) > 0 and np.isfinite(float(train.step_time_s))


def test_eager_expert_dispatch_is_a_call_cost_per_local_expert_gemm(mixtral):
    """``phi (1 - g) (E / ep) 2 c``: two GEMM calls per local expert at the measured per-call
    cost, nothing for a graphed expert layer or a dense model."""
    c = EAGER_EXPERT_CALL_S
    assert float(eager_expert_dispatch_s(4.0, 1.0, 0.0)) == pytest.approx(4 * 2 * c, rel=1e-6)
    assert float(eager_expert_dispatch_s(4.0, 0.5, 0.0)) == pytest.approx(4 * c, rel=1e-6)
    assert float(eager_expert_dispatch_s(4.0, 1.0, 1.0)) == 0.0
    dense = dc.load_model("llama-3-8b")
    assert float(eager_expert_dispatch_s(dense.experts, dense.moe_fraction(), 0.0)) == 0.0


def test_an_eager_expert_layer_adds_its_calls_to_every_layer_pass():
    """Qwen3-30B-A3B (128 experts, EP 16: 8 local): the eager step exceeds the graphed one by
    micro-batches x layers x 3 passes (forward, twice in backward) x 8 experts x 2 calls x c."""
    model = dc.load_model("qwen3-30b-a3b")
    system = dc.load_system("dgx-h100", chips=16)
    cost = dc.TrainCost(system, model)
    fields = dict(tp=1, dp=16, ep=16, expert_tp=1, micro_batch=1, global_batch=64, seq_len=4096)
    fields |= dict(precision="fp8", recompute="none", overlap_grad_reduce=False)
    eager = cost(dc.train_plan(**fields))
    graphed = cost(dc.train_plan(**fields, moe_graphed=True))
    extra = 4 * 48 * 3 * (128 / 16) * EXPERT_GEMMS_PER_FORWARD * EAGER_EXPERT_CALL_S
    diff = float(eager.step_time_s - graphed.step_time_s)
    assert diff == pytest.approx(extra, rel=1e-5)
