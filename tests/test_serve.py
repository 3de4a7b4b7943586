"""The serving cost model: closed forms, the seed physics checks, modes, energy and cost."""

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest

import diffcost as dc
from diffcost import EXACT
from diffcost.testing import (
    Work,
    consts,
    expected_tokens_per_step,
    gemm_s,
    matmul_time_s,
    pass_time,
    sustained,
)

predict = eqx.filter_jit(lambda cost, plan: cost(plan))


def run(system, model, **plan):
    return predict(dc.ServeCost(system, model), dc.serve_plan(**plan))


def f(x):
    return float(x)


@pytest.fixture(scope="module")
def h100():
    return dc.load_system("dgx-h100")


@pytest.fixture(scope="module")
def h200():
    return dc.load_system("hgx-h200")


@pytest.fixture(scope="module")
def llama7():
    return dc.load_model("llama-2-7b")


@pytest.fixture(scope="module")
def llama70():
    return dc.load_model("llama-2-70b")


BATCH1 = dict(batch=1, input_len=128, output_len=128, mode="static")


def _elasticity(system, model, plan, output="tpot_s"):
    """d log(output) / d log(bandwidth) and / d log(peak FLOP/s, every format together)."""
    loss = lambda s: jnp.log(getattr(dc.ServeCost(s, model)(plan), output))
    g = eqx.filter_jit(eqx.filter_grad(loss))(system)
    bw = g.chip.memory_bandwidth_bytes_per_s * system.chip.memory_bandwidth_bytes_per_s
    peak = jnp.sum(g.chip.peak_flop_per_s * system.chip.peak_flop_per_s)
    return f(bw), f(peak)


# --- golden closed forms -------------------------------------------------------------------------
@pytest.mark.parametrize("kv_format,element", [("bf16", 2.0), ("fp8", 1.0), ("int4", 0.5)])
def test_kv_cache_bytes_closed_form(h100, llama70, kv_format, element):
    """KV bytes = 2 * layers * kv_heads * head_dim * bytes * tokens (Pope et al. 2023), GQA."""
    out = run(
        h100, llama70, batch=3, input_len=1000, output_len=24, kv_format=kv_format, kv_block=1
    )
    tokens = 3 * (1000 + 24)
    assert f(out.memory.kv_cache_bytes) == pytest.approx(
        2 * 80 * 8 * 128 * element * tokens, rel=1e-12
    )
    assert f(out.memory.kv_block_waste_bytes) == 0.0


def test_kv_cache_paged_blocks_round_up(h100, llama70):
    out = run(h100, llama70, batch=2, input_len=100, output_len=30, kv_block=16)
    per_token = 2 * 80 * 8 * 128 * 2.0
    assert f(out.memory.kv_cache_bytes) == pytest.approx(2 * 144 * per_token)  # ceil(130/16)*16
    assert f(out.memory.kv_block_waste_bytes) == pytest.approx(2 * 14 * per_token)


def test_kv_heads_shard_over_tp_then_replicate(h100, llama70):
    kv = lambda tp: f(run(h100, llama70, tp=tp, batch=4, kv_block=1).memory.kv_cache_bytes)
    assert kv(2) == pytest.approx(kv(1) / 2)
    assert kv(8) == pytest.approx(kv(1) / 8)
    assert kv(16) == pytest.approx(kv(8))  # 8 KV heads: one per rank, replicated beyond tp = 8


def test_mha_mqa_gqa_kv_ratio(h100):
    """Only kv_heads changes the KV cache: MQA holds 1/heads of MHA's."""
    mha = dc.load_model("llama-2-7b")
    mqa = eqx.tree_at(lambda m: m.kv_heads, mha, jnp.asarray(1.0))
    kv = lambda m: f(run(h100, m, batch=2, kv_block=1).memory.kv_cache_bytes)
    assert kv(mqa) == pytest.approx(kv(mha) / 32)


def test_weights_by_format_and_sharding(h100, llama70):
    params = f(llama70.num_params())
    w = lambda **kw: f(run(h100, llama70, **kw).memory.weights_bytes)
    assert w(weight_format="bf16") == pytest.approx(2 * params, rel=1e-12)
    assert w(weight_format="int8") == pytest.approx(params, rel=1e-12)  # int8 halves
    assert w(weight_format="int4") == pytest.approx(0.5 * params, rel=1e-12)  # 0.5 byte, not 0
    assert w(weight_format="fp8", tp=8) < w(weight_format="fp8") / 7.5


def test_gemm_equals_matmul_time_when_operands_share_a_format(h100, llama70):
    plan = dc.serve_plan(weight_format="bf16")
    c = consts(h100, llama70, plan, EXACT)
    i = dc.FORMATS.index("bf16")
    peak = h100.chip.peak_flop_per_s[i]
    # the serving step's matrix work is sustained work: the large-GEMM fraction under the
    # board power limit (diffcost._terms.power.sustained)
    held = sustained(h100, peak, h100.chip.energy.flop_j[i], EXACT)
    for m, n, k in [(1, 8192, 8192), (512, 28672, 8192), (4096, 1024, 8192)]:
        assert f(gemm_s(m, n, k, c)) == pytest.approx(
            f(matmul_time_s(m, n, k, peak, 2.0, held, EXACT)), rel=1e-6
        )


def test_expected_tokens_per_step_closed_form():
    """(1 - a^(k+1)) / (1 - a), Leviathan et al. 2023."""
    assert f(expected_tokens_per_step(0.5, 3.0)) == pytest.approx(1.875)
    assert f(expected_tokens_per_step(0.8, 4.0)) == pytest.approx((1 - 0.8**5) / 0.2)
    assert f(expected_tokens_per_step(0.0, 4.0)) == 1.0
    assert f(expected_tokens_per_step(1.0, 4.0)) == 5.0
    assert f(expected_tokens_per_step(0.7, 0.0)) == pytest.approx(1.0)


def test_critical_batch_closed_form(h100, llama70):
    """Weight-read time = GEMM time: b + f_peak d_half = w * peak * f_peak / (2 * bw * f_bw)
    (the d_half idle rows of a skinny GEMM run at the full clock: diffcost._terms.gemm; peak the
    achievable fp8 peak, f_peak its sustained fraction)."""
    out = run(h100, llama70, tp=4, weight_format="fp8")
    i = dc.FORMATS.index("fp8")
    peak = 1978.9e12 * f(h100.efficiency.narrow_matmul_fraction)  # the achievable fp8 peak
    eff = sustained(h100, peak, h100.chip.energy.flop_j[i], EXACT).efficiency
    ridge = (
        1.0 * peak * f(eff.matmul_peak_fraction) / (2 * 3350e9 * f(eff.memory_bandwidth_fraction))
    )
    f_peak, d = f(eff.matmul_peak_fraction), f(eff.matmul_half_dim)
    assert f(out.critical_batch) == pytest.approx(ridge - f_peak * d, rel=1e-9)
    # the roofline: decode GEMM time is flat well below it and linear well above it
    gemm = lambda b: f(
        run(
            h100,
            llama70,
            tp=4,
            weight_format="fp8",
            batch=b,
            input_len=16,
            output_len=16,
            mode="static",
        ).decode_gemm_s
    )
    crit = f(out.critical_batch)
    assert gemm(int(crit / 8)) == pytest.approx(gemm(1), rel=0.05)
    # compute-bound: time ~ 2 m n k / eff(m) grows as m / f_peak + d_half (m = batch tokens)
    lo, hi = int(4 * crit), int(8 * crit)
    assert gemm(hi) / gemm(lo) == pytest.approx((hi + f_peak * d) / (lo + f_peak * d), rel=0.02)


def test_decode_step_breakdown_sums(h100, llama70):
    for plan in [
        dict(tp=4, batch=64),
        dict(tp=2, pp=2, batch=3, mode="static"),
        dict(tp=4, batch=8, draft_len=3, acceptance=0.6, draft_params_fraction=0.05),
    ]:
        out = run(h100, llama70, **plan)
        parts = (
            out.decode_draft_s
            + out.decode_gemm_s
            + out.decode_attention_s
            + out.decode_memory_s
            + out.decode_launch_s
            + out.decode_tp_comm_s
            + out.decode_pp_comm_s
            + out.decode_pipeline_wait_s
        )
        assert f(parts) == pytest.approx(f(out.decode_step_s), rel=1e-12)
        assert f(out.tpot_s) == pytest.approx(f(out.decode_step_s / out.tokens_per_step))
        assert f(out.request_latency_s) == pytest.approx(
            f(out.ttft_s + (plan.get("output_len", 256) - 1) * out.tpot_s)
        )


# --- seed checks ----------------------------------------------------------------------------------
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_batch1_decode_cannot_beat_the_weight_bandwidth_floor(h100, llama70, tp):
    """Per-kernel host launches (an engine without CUDA graphs, e.g. TensorRT-LLM 0.6); with
    graphs see tests/test_engine.py."""
    out = run(h100, llama70, tp=tp, cuda_graphs=False, **BATCH1)
    floor = f(out.memory.weights_bytes) / 3350e9  # weight bytes of one TP shard / HBM bandwidth
    assert f(out.tpot_s) >= floor
    if tp <= 4:
        assert f(out.tpot_s) < 2.5 * floor  # memory traffic is what it mostly pays for ...
    else:  # ... until all-reduce latencies and kernel launches take over
        assert f(out.decode_tp_comm_s + out.decode_launch_s) > f(out.decode_weight_read_s)


@pytest.mark.slow  # 9-40 s on 2 cores: kept out of the ~6-minute default run
def test_batch1_elasticities(llama70):
    """At batch 1, d log TPOT / d log HBM bandwidth ~ -1 and d log TPOT / d log peak ~ 0.

    The bandwidth elasticity is minus the memory-bound share of the step: near -1 when the
    weights dominate (70B on one MI300X), exactly -1 up to the tiny non-weight streams when the
    fixed per-kernel cost is removed."""
    system = dc.load_system(chip="mi300x", chips=1)
    plan = dc.serve_plan(**BATCH1)
    bw, peak = _elasticity(system, llama70, plan)
    # minus the share of the step that streams memory: all but launches and collectives
    out = dc.ServeCost(system, llama70)(plan)
    fixed = out.decode_launch_s + out.decode_tp_comm_s + out.decode_pp_comm_s
    assert bw == pytest.approx(-f((out.decode_step_s - fixed) / out.decode_step_s), abs=0.02)
    assert -1.0 <= bw < -0.8  # the weights dominate: ~ -1 less the calibrated launch cost
    assert abs(peak) < 0.01
    no_launch = eqx.tree_at(lambda s: s.efficiency.kernel_launch_s, system, jnp.asarray(0.0))
    bw, peak = _elasticity(no_launch, llama70, plan)
    assert bw == pytest.approx(-1.0, abs=0.01)
    assert peak == 0.0


@pytest.mark.slow  # 6 s on 2 cores
def test_long_prompt_prefill_is_compute_bound(h100, llama7):
    """An 8k-token prefill is GEMM time: more tensor units at the same energy per FLOP (every
    peak, the power limit and the running floor scaled together; the H100's large GEMMs run
    at the clock its 700 W allow, diffcost._terms.power) shorten it almost one for one."""
    plan = dc.serve_plan(batch=1, input_len=8192, output_len=1, mode="static")
    bw, peak = _elasticity(h100, llama7, plan, "ttft_s")
    loss = lambda s: jnp.log(dc.ServeCost(s, llama7)(plan).ttft_s)
    g = eqx.filter_jit(eqx.filter_grad(loss))(h100)
    power = g.chip.tdp_w * h100.chip.tdp_w + g.chip.energy.idle_w * h100.chip.energy.idle_w
    assert f(power) < -0.3  # the limit binds
    assert peak + f(power) < -0.85
    assert bw > -0.15
    short = dc.serve_plan(batch=1, input_len=16, output_len=1, mode="static")
    bw_short, peak_short = _elasticity(h100, llama7, short, "ttft_s")
    assert bw_short < -0.5 and peak_short > -0.1  # a short prompt reads weights like decode


@pytest.mark.parametrize("mode", ["static", "continuous"])
def test_pipeline_parallelism_gives_one_request_no_latency_improvement(h100, llama7, mode):
    plan = dict(batch=1, input_len=512, output_len=128, mode=mode)
    base = run(h100, llama7, **plan)
    for pp in (2, 4):
        out = run(h100, llama7, pp=pp, **plan)
        assert f(out.ttft_s) >= f(base.ttft_s)
        assert f(out.tpot_s) >= f(base.tpot_s)
        assert f(out.request_latency_s) >= f(base.request_latency_s)
        assert f(out.memory.weights_bytes) < f(base.memory.weights_bytes) / pp * 1.05  # capacity
    # ... it adds throughput once the batch fills the stages and compute dominates
    big = dict(batch=512, input_len=128, output_len=128, mode="static", weight_format="fp8")
    assert f(run(h100, llama7, pp=4, **big).output_tokens_per_s) > 2 * f(
        run(h100, llama7, **big).output_tokens_per_s
    )


def test_int8_weights_halve_memory_and_nearly_halve_memory_bound_decode(llama70):
    system = dc.load_system(chip="mi300x", chips=1)
    fp16 = run(system, llama70, weight_format="fp16", **BATCH1)
    # W8A16, and W8A8 whose 4 activation-quantization kernels per layer cost launches at batch 1
    for compute, most in (("bf16", 0.6), ("int8", 0.65)):
        int8 = run(system, llama70, weight_format="int8", compute_format=compute, **BATCH1)
        assert f(int8.memory.weights_bytes) == pytest.approx(0.5 * f(fp16.memory.weights_bytes))
        assert f(int8.decode_weight_read_s) == pytest.approx(0.5 * f(fp16.decode_weight_read_s))
        assert 0.5 < f(int8.tpot_s) / f(fp16.tpot_s) < most


def test_h200_beats_h100_at_batch1_by_nearly_the_bandwidth_ratio(h100, h200, llama70):
    ratio_bw = 4800 / 3350
    a = run(h100, llama70, tp=4, **BATCH1)
    b = run(h200, llama70, tp=4, **BATCH1)
    assert f(a.decode_weight_read_s) / f(b.decode_weight_read_s) == pytest.approx(ratio_bw)
    # the bandwidth-bound part speeds up by the full ratio; launches and all-reduces do not
    assert 0.8 * ratio_bw < f(a.tpot_s) / f(b.tpot_s) <= ratio_bw
    # equal FLOP/s: a compute-bound prefill is the same on both
    long = dict(tp=4, batch=8, input_len=4096, output_len=1, mode="static")
    assert f(run(h200, llama70, **long).ttft_s) == pytest.approx(
        f(run(h100, llama70, **long).ttft_s), rel=0.05
    )


def test_44_gb_of_sram_holds_about_20b_fp16_params_not_more():
    wse = dc.load_system("cerebras-cs3")
    plan = dict(BATCH1, weight_format="fp16", kv_format="fp16")
    fits = run(wse, dc.load_model("megatron-gpt-18.4b"), **plan)
    over = run(wse, dc.load_model("megatron-gpt-22b"), **plan)
    assert f(fits.fits()) == 1.0 and f(over.fits()) == 0.0
    assert f(fits.memory.reserved_bytes) == 0.0  # static SRAM plan: no allocator reserve
    assert f(over.min_chips_for_weights) > 1.0 > f(fits.min_chips_for_weights)
    # the fp16 parameter budget of one wafer: 44 GB / 2 bytes = 22e9, ~20B after KV/activations
    largest = 44e9 / 2.0
    assert 18e9 < largest - f(fits.memory.kv_cache_bytes + fits.memory.activations_bytes) / 2
    groq = run(dc.load_system("groqrack"), dc.load_model("llama-2-70b"), **plan)
    assert 580 < f(groq.min_chips_for_weights) < 620  # 230 MB chips: capacity forces ~600 LPUs


def test_decode_throughput_grows_with_batch_to_the_compute_roofline(h100, llama7):
    batches = [1, 4, 16, 64, 256, 1024, 4096]
    outs = [
        run(
            h100,
            llama7,
            batch=b,
            input_len=16,
            output_len=16,
            mode="static",
            weight_format="fp8",
            kv_format="fp8",
        )
        for b in batches
    ]
    thr = [b / f(o.decode_step_s) for b, o in zip(batches, outs, strict=True)]
    tpot = [f(o.tpot_s) for o in outs]
    assert all(np.diff(thr) > 0) and all(np.diff(tpot) > 0)
    # roofline: tokens/s <= peak * f_sustained / (GEMM FLOP per token); the rest of the step (KV,
    # elementwise, logits) keeps it below
    peak = 1978.9e12 * f(h100.efficiency.narrow_matmul_fraction)  # the achievable fp8 peak
    i = dc.FORMATS.index("fp8")
    held = sustained(h100, peak, h100.chip.energy.flop_j[i], EXACT)
    bound = peak * f(held.efficiency.matmul_peak_fraction) / (2 * f(llama7.num_params()))
    assert 0.55 * bound < thr[-1] < bound
    assert thr[1] / thr[0] > 3.5  # memory-bound: batching is nearly free
    assert thr[-1] / thr[-2] < 1.3  # compute-bound: 4x the batch, < 30% more throughput


# --- modes ---------------------------------------------------------------------------------------
def test_continuous_batching_trades_ttft_against_tpot(h100, llama70):
    plan = dict(tp=4, batch=64, input_len=2048, output_len=256)
    static = run(h100, llama70, mode="static", **plan)
    cont = run(h100, llama70, mode="continuous", **plan)
    assert f(cont.ttft_s) < 0.1 * f(static.ttft_s)  # no waiting for the whole batch's prefill
    assert f(cont.tpot_s) > f(static.tpot_s)  # decode iterations carry prompt chunks
    # a small chunk cannot admit prompts fast enough to keep 64 sequences running
    small = run(h100, llama70, mode="continuous", prefill_chunk=256, **plan)
    assert f(small.decode_batch) == pytest.approx(256 * 256 / 2048)
    assert f(small.ttft_s) > f(cont.ttft_s)


def test_speculative_decoding(h100, llama70):
    plan = dict(tp=4, batch=1, input_len=512, output_len=256)
    base = run(h100, llama70, **plan)
    spec = run(h100, llama70, draft_len=4, acceptance=0.8, draft_params_fraction=0.02, **plan)
    assert f(spec.tokens_per_step) == pytest.approx((1 - 0.8**5) / 0.2)
    assert f(spec.tpot_s) < 0.5 * f(base.tpot_s)  # memory-bound: verifying 5 tokens ~ 1
    assert f(spec.memory.weights_bytes) == pytest.approx(1.02 * f(base.memory.weights_bytes))
    poor = run(h100, llama70, draft_len=4, acceptance=0.0, draft_params_fraction=0.02, **plan)
    assert f(poor.tpot_s) > f(base.tpot_s)  # nothing accepted: pure overhead


def test_disaggregated_pools(llama70):
    system = dc.load_system("dgx-h100", chips=32)
    plan = dict(tp=4, batch=64, input_len=2048, output_len=256, disaggregated=True)
    out = run(system, llama70, prefill_chips=4, decode_chips=4, **plan)
    colo = run(
        system, llama70, mode="static", **{k: v for k, v in plan.items() if k != "disaggregated"}
    )
    assert f(out.chips) == 8
    assert f(out.tpot_s) == pytest.approx(f(colo.tpot_s))  # decode without prefill interference
    assert f(out.kv_transfer_s) > 0 and f(out.ttft_s) > f(out.kv_transfer_s)
    # prefill-bound here: more prefill chips raise throughput, more decode chips do not
    more_prefill = run(system, llama70, prefill_chips=8, decode_chips=4, **plan)
    more_decode = run(system, llama70, prefill_chips=4, decode_chips=8, **plan)
    assert f(more_prefill.output_tokens_per_s) > 1.3 * f(out.output_tokens_per_s)
    assert f(more_decode.output_tokens_per_s) == pytest.approx(f(out.output_tokens_per_s))
    # a prefill pool that fills a node sends the KV cache over the scale-out network
    far = run(system, llama70, prefill_chips=8, decode_chips=8, **plan)
    assert f(far.kv_transfer_s) > 5 * f(out.kv_transfer_s)


def test_replicas_energy_cost_and_accuracy(h100, llama70):
    one = run(h100, llama70, tp=4, batch=32)
    two = run(dc.load_system("dgx-h100", chips=16), llama70, tp=4, batch=32, replicas=2)
    assert f(two.output_tokens_per_s) == pytest.approx(2 * f(one.output_tokens_per_s))
    assert f(two.output_tokens_per_s_per_chip) == pytest.approx(f(one.output_tokens_per_s_per_chip))
    # activity energy: replicas do not change energy per token; the TDP bound holds
    assert f(two.energy_per_token_j) == pytest.approx(f(one.energy_per_token_j))
    bound_w = 4 * 700 + f(h100.overhead_w(4))  # the chips at their cap + the node besides them
    assert f(one.energy_per_token_j) < bound_w / f(one.output_tokens_per_s)
    assert f(one.cost_per_million_tokens_usd) == pytest.approx(
        4 * 6.88 / 3600 / f(one.output_tokens_per_s) * 1e6
    )
    assert f(one.accuracy_cost) == 0.0
    w4 = run(
        h100,
        llama70,
        tp=4,
        weight_format="int4",
        kv_format="fp8",
        accuracy_cost={"int4": 0.3, "fp8": 0.1, "bf16": 0.0},
    )
    assert f(w4.accuracy_cost) == pytest.approx(0.4)  # int4 weights + bf16 compute + fp8 KV


def test_max_batch_is_the_largest_batch_that_fits(h100, llama70):
    for mode in ("static", "continuous"):
        plan = dict(tp=4, pp=1, input_len=1024, output_len=1024, mode=mode, kv_block=1)
        mb = f(run(h100, llama70, batch=1, **plan).max_batch)
        assert mb > 10
        assert f(run(h100, llama70, batch=int(mb), **plan).fits()) == 1.0
        assert f(run(h100, llama70, batch=int(mb) + 1, **plan).fits()) == 0.0


@pytest.mark.slow  # 10-25 s on 2 cores: runs in `.ci/run`'s slow pass
def test_at_slo_is_the_best_batch_of_the_grid(h100, llama70):
    cost = dc.ServeCost(h100, llama70)
    plan = dc.serve_plan(tp=4, input_len=512, output_len=256)
    grid = jnp.asarray([1.0, 2, 4, 8, 16, 32, 64, 128, 256])
    res = eqx.filter_jit(lambda c, p: c.at_slo(p, 0.5, 0.03, grid))(cost, plan)
    best, best_thr = 0, -1.0
    for b in grid:
        out = predict(cost, eqx.tree_at(lambda p: p.batch, plan, b))
        ok = f(out.fits()) and f(out.ttft_s) <= 0.5 and f(out.tpot_s) <= 0.03
        if ok and f(out.output_tokens_per_s_per_chip) > best_thr:
            best, best_thr = f(b), f(out.output_tokens_per_s_per_chip)
    assert f(res.feasible) == 1.0 and f(res.batch) == best
    assert f(res.breakdown.output_tokens_per_s_per_chip) == pytest.approx(best_thr)
    none = cost.at_slo(plan, 1e-6, 1e-6, grid)
    assert f(none.feasible) == 0.0 and f(none.batch) == 0.0


# --- published measurements (sanity of the uncalibrated prior; validation tracks the errors) -----
@pytest.mark.parametrize(
    "system,model,plan,measured,what",
    [
        # TensorRT-LLM v0.6.1 L40S GPT-J 6B FP8, batch 64, 128 -> 2048: 1859 output tokens/s
        (
            "l40s-server",
            "gpt-j-6b",
            dict(batch=64, input_len=128, output_len=2048, weight_format="fp8", kv_format="fp8"),
            1859.0,
            "thr",
        ),
        # TensorRT-LLM v0.5 A100 Llama 70B TP 4 FP16, 2048-token prompt: TTFT 377 ms
        (
            "dgx-a100",
            "llama-2-70b",
            dict(tp=4, batch=1, input_len=2048, output_len=1, weight_format="fp16"),
            0.377,
            "ttft",
        ),
        # DeepSpeed-Inference BLOOM 176B fp16 TP 8 batch 1: 44.02 ms per token
        (
            "dgx-a100",
            "bloom-176b",
            dict(
                tp=8, batch=1, input_len=8, output_len=100, weight_format="fp16", kv_format="fp16"
            ),
            0.04402,
            "tpot",
        ),
    ],
)
def test_published_points_within_35_percent(system, model, plan, measured, what):
    out = run(
        dc.load_system(system, chips=plan.get("tp", 1)),
        dc.load_model(model),
        mode="static",
        kv_block=1,
        **plan,
    )
    pred = {
        "thr": out.output_tokens_per_s_per_chip,
        "ttft": out.ttft_s,
        "tpot": out.request_latency_s / plan["output_len"],
    }[what]
    assert f(pred) == pytest.approx(measured, rel=0.35)


# --- kernel choices of the serving engine --------------------------------------------------
LONG_DECODE = dict(batch=64, input_len=2048, output_len=512, mode="static", kv_block=1)


def test_gqa_unaware_decode_rereads_kv_per_query_head(h100, llama70):
    """K/V traffic of decode is ``1 + (g - 1) r`` times the cache: g = 64/8 query heads per KV
    head on TP 2 (32 query, 4 KV heads per chip), r = kv_reread_fraction; prefill unchanged."""
    r = f(h100.efficiency.kv_reread_fraction)
    aware = run(h100, llama70, tp=2, **LONG_DECODE)
    naive = run(h100, llama70, tp=2, gqa_decode_kernel=False, **LONG_DECODE)
    assert f(naive.decode_kv_read_s) == pytest.approx(
        (1 + 7 * r) * f(aware.decode_kv_read_s), rel=1e-9
    )
    assert f(naive.decode_step_s) > f(aware.decode_step_s)
    assert f(naive.ttft_s) == pytest.approx(f(aware.ttft_s), rel=1e-12)


def test_gqa_kernel_choice_is_moot_for_multi_head_attention(h100, llama7):
    aware = run(h100, llama7, **LONG_DECODE)
    naive = run(h100, llama7, gqa_decode_kernel=False, **LONG_DECODE)
    assert f(naive.decode_step_s) == pytest.approx(f(aware.decode_step_s), rel=1e-12)


def test_separate_dequantization_moves_five_bytes_per_int8_weight(h100, llama70):
    """W8A16 with a separate dequantization kernel: read int8 (1), write fp16 (2), GEMM reads
    fp16 (2) = 5 bytes per weight, plus one launch per weight matrix (4 per layer) when every
    kernel is launched from the host (DeepSpeed-Inference 2022: no CUDA graphs)."""
    plan = dict(weight_format="int8", compute_format="fp16", cuda_graphs=False, **BATCH1)
    fused = run(h100, llama70, **plan)
    separate = run(h100, llama70, fused_dequant=False, **plan)
    assert f(separate.decode_weight_read_s) == pytest.approx(
        5 * f(fused.decode_weight_read_s), rel=1e-9
    )
    extra_launches = f(separate.decode_launch_s) - f(fused.decode_launch_s)
    launch = f(h100.efficiency.kernel_launch_s)
    assert extra_launches == pytest.approx(4 * f(llama70.layers) * launch, rel=1e-9)
    assert f(separate.memory.weights_bytes) == f(fused.memory.weights_bytes)


@pytest.mark.parametrize("weight, compute", [("bf16", "bf16"), ("int8", "int8"), ("fp8", "fp8")])
def test_no_dequantization_when_weights_are_in_the_compute_format(h100, llama70, weight, compute):
    plan = dict(weight_format=weight, compute_format=compute, **BATCH1)
    fused = run(h100, llama70, **plan)
    separate = run(h100, llama70, fused_dequant=False, **plan)
    assert f(separate.decode_step_s) == pytest.approx(f(fused.decode_step_s), rel=1e-12)


def test_8bit_gemms_quantize_their_inputs(h100, llama7):
    """FP8 compute adds one quantization kernel per GEMM input (4 per layer) and its traffic
    (read 2 bytes, write 1 per element of the 4 inputs: 2h + (a e + f) / t per token)."""
    tokens = 4096
    plan = dict(batch=1, input_len=tokens, output_len=1, mode="static", kv_block=1)
    fp8 = dc.serve_plan(weight_format="fp8", **plan)
    narrow = consts(h100, llama7, fp8, EXACT)
    assert f(narrow.quantized_acts) == 1.0
    assert (
        f(consts(h100, llama7, dc.serve_plan(weight_format="int8", **plan), EXACT).quantized_acts)
        == 0.0
    )  # W8A16: 16-bit GEMM inputs
    # the prefill pass of FP8 has 3 * tokens * (2h + a e + f) more bytes than without the casts
    no_cast = eqx.tree_at(lambda c: c.quantized_acts, narrow, jnp.asarray(0.0))
    work = Work(1.0, 0.0, 1.0, 0.0, float(tokens), float(tokens), tokens / 2, 1.0)
    h, a, e, ffn = (f(x) for x in (llama7.hidden, llama7.heads, llama7.head_dim, llama7.ffn_hidden))
    bw = f(h100.chip.memory_bandwidth_bytes_per_s * h100.efficiency.memory_bandwidth_fraction)
    cast_s = 3.0 * tokens * (2 * h + a * e + ffn) / bw
    delta_mem = f(pass_time(narrow, work).memory_s) - f(pass_time(no_cast, work).memory_s)
    assert delta_mem == pytest.approx(f(llama7.layers) * cast_s, rel=1e-9)


def test_kernel_flags_must_be_booleans():
    with pytest.raises(dc.SpecError) as err:
        dc.serve_plan(gqa_decode_kernel="no", fused_dequant=1, source="s.toml")
    text = str(err.value)
    assert "s.toml: gqa_decode_kernel: must be true or false, got 'no'" in text
    assert "s.toml: fused_dequant: must be true or false, got 1" in text
