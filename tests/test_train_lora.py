"""LoRA fine-tuning (issue 17 item 6): frozen base weights compute no weight gradients and
hold no gradients or optimizer state; rank-r adapters are charged as their own GEMMs."""

import jax
import jax.numpy as jnp
import pytest

import diffcost as dc
from diffcost import EXACT, Smoothing, SpecError
from diffcost.testing import (
    adapter_forward_s,
    adapter_params_per_layer,
    gemm_format,
    layer_forward,
    logits_gemm,
    stage_times,
    step_flop,
    tokens_per_chip,
    train_memory,
)

# The relaxed plan fields must equal the exact model at integer points; continuous maxima (the
# roofline's compute vs memory) blend within ``rel_width`` of a tie by design (smooth.smax), and
# whether a test plan sits near such a tie depends on the calibrated constants.  A narrow blend
# isolates the plan relaxation from that.
SHARP = Smoothing(relaxed=True, rel_width=1e-9)

# NeMo 24.07 LoRA row: Llama 2 7B on 8 H100, rank 32 on the fused QKV (NeMo's defaults)
PLAN = dict(tp=1, pp=1, dp=8, global_batch=32, seq_len=4096, precision="fp8", recompute="none")


@pytest.fixture(scope="module")
def h100_8():
    return dc.load_system("dgx-h100", chips=8)


@pytest.fixture(scope="module")
def llama7():
    return dc.load_model("llama-2-7b")


def test_adapter_parameters_closed_form(llama7):
    """``r (h + 3h)`` per layer for QKV adapters of a multi-head 4096-wide model; ``r (k + n)``
    summed over all four matrices for ``all``."""
    plan = dc.train_plan(**PLAN, lora_rank=32)
    assert float(adapter_params_per_layer(llama7, plan)) == 32 * (4096 + 3 * 4096)
    every = dc.train_plan(**PLAN, lora_rank=8, lora_targets="all")
    h, f = 4096, 11008
    expect = 8 * ((h + 3 * h) + (h + h) + (h + 2 * f) + (f + h))
    assert float(adapter_params_per_layer(llama7, every)) == expect


def test_frozen_weights_skip_weight_gradients(h100_8, llama7):
    full = dc.train_plan(**PLAN)
    lora = dc.train_plan(**PLAN, lora_rank=32)
    b_full = float(stage_times(h100_8, llama7, full, EXACT).backward_s)
    b_lora = float(stage_times(h100_8, llama7, lora, EXACT).backward_s)
    gemm = float(layer_forward(h100_8, llama7, full, EXACT).gemm_s)
    tokens = tokens_per_chip(full)
    fmt = gemm_format(h100_8, full)
    logits = float(logits_gemm(tokens, llama7, 1.0, fmt).time_s(h100_8, EXACT))
    adapter = float(adapter_forward_s(h100_8, llama7, lora, tokens, EXACT))
    assert adapter > 0.0
    expect = 32.0 * (gemm - 2.0 * adapter) + logits
    assert b_full - b_lora == pytest.approx(expect, rel=1e-9)


def test_frozen_weights_hold_no_gradients_or_optimizer_state(h100_8, llama7):
    lora = dc.train_plan(**PLAN, lora_rank=32, zero=0)
    mem = train_memory(llama7, lora, h100_8, EXACT)
    adapters = 32.0 * adapter_params_per_layer(llama7, lora)
    assert float(mem.gradients_bytes) == pytest.approx(float(adapters) * 2.0)
    assert float(mem.optimizer_bytes) == pytest.approx(float(adapters) * 12.0)
    full = train_memory(llama7, dc.train_plan(**PLAN, zero=0), h100_8, EXACT)
    assert float(mem.weights_bytes) > float(full.weights_bytes)  # + adapter weights


def test_lora_step_is_faster_and_reduces_only_adapter_gradients(h100_8, llama7):
    cost = dc.TrainCost(h100_8, llama7)
    full = cost(dc.train_plan(**PLAN))
    lora = cost(dc.train_plan(**PLAN, lora_rank=32))
    assert float(lora.tokens_per_s) > 1.2 * float(full.tokens_per_s)
    assert float(lora.dp_comm_time_s) < 0.01 * float(full.dp_comm_time_s)
    # in bf16 (no per-step fp8 weight casts, which frozen weights still need) the update
    # streams the adapters' state only
    bf16 = {**PLAN, "precision": "bf16"}
    full16, lora16 = cost(dc.train_plan(**bf16)), cost(dc.train_plan(**bf16, lora_rank=32))
    assert float(lora16.optimizer_time_s) < 0.01 * float(full16.optimizer_time_s)


def test_model_flop_counts_no_weight_gradients(llama7):
    full = dc.train_plan(**PLAN)
    lora = dc.train_plan(**PLAN, lora_rank=32)
    gb, s = 32.0, 4096.0
    fwd = float(llama7.forward_flop(gb, s))
    attn = float(llama7.layers * llama7.layer_attention_flop(gb, s))
    adapters = 2.0 * gb * s * 32.0 * float(adapter_params_per_layer(llama7, lora))
    assert float(step_flop(llama7, full)[0]) == pytest.approx(3.0 * fwd)
    assert float(step_flop(llama7, lora)[0]) == pytest.approx(
        3.0 * fwd - (fwd - attn) + 3.0 * adapters
    )


def test_relaxed_equals_exact_and_gradients_are_finite(h100_8, llama7):
    plan = dc.train_plan(**PLAN, lora_rank=32)
    exact = dc.TrainCost(h100_8, llama7)(plan)
    relaxed = dc.TrainCost(h100_8, llama7, SHARP)(plan)
    assert float(relaxed.step_time_s) == pytest.approx(float(exact.step_time_s), rel=1e-9)
    grads = jax.grad(lambda p: dc.TrainCost(h100_8, llama7, dc.RELAXED)(p).step_time_s)(plan)
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree_util.tree_leaves(grads))


def test_bad_lora_fields_are_reported():
    with pytest.raises(SpecError) as e:
        dc.train_plan(lora_rank=-1, lora_targets="qv")
    text = str(e.value)
    assert "lora_rank: must be a non-negative integer, got -1" in text
    assert "lora_targets: must be one of ('attention_qkv', 'attention', 'mlp', 'all')" in text
