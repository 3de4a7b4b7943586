"""Training memory: model state (ZeRO) and Korthikanti et al. Table 2 activations."""

import jax.numpy as jnp
import pytest

import diffcost as dc
from diffcost.testing import (
    layer_activation_bytes_by_recompute,
    micro_batches_in_flight,
    params_per_chip,
)


def _system(chips=1):
    return dc.load_system(chip="h100-sxm", chips=chips)


def test_70b_model_state_is_840_gb():
    """70B params, bf16 weights and grads, fp32 Adam moments: 140 + 140 + 560 = 840 GB."""
    model = dc.load_model("llama-2-70b")
    n = float(model.num_params())
    scale = 70e9 / n  # the seed check is stated for exactly 70B parameters
    plan = dc.train_plan(optimizer="adam_no_master", zero=0, global_batch=1)
    out = dc.TrainCost(_system(), model)(plan)
    mem = out.memory
    assert float(mem.weights_bytes) * scale == pytest.approx(140e9, rel=1e-9)
    assert float(mem.gradients_bytes) * scale == pytest.approx(140e9, rel=1e-9)
    assert float(mem.optimizer_bytes) * scale == pytest.approx(560e9, rel=1e-9)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_stages_shard_over_dp(stage):
    model = dc.load_model("llama-2-7b")
    plan = dc.train_plan(dp=8, zero=stage, global_batch=8)
    mem = dc.TrainCost(_system(8), model)(plan).memory
    n = float(model.num_params())
    w, g, o = 2 * n, 2 * n, 12 * n
    # ZeRO-3 also holds two gathered layers of weights and one unsharded layer of gradients
    # (current + prefetched unit, PyTorch FSDP); a layer outweighs the embedding here.
    unit = float(model.layer_params())
    assert unit > float(model.vocab * model.hidden)
    expect = {
        0: (w, g, o),
        1: (w, g, o / 8),
        2: (w, g / 8, o / 8),
        3: (w / 8 + 2 * 2 * unit, g / 8 + 2 * unit, o / 8),
    }[stage]
    got = (float(mem.weights_bytes), float(mem.gradients_bytes), float(mem.optimizer_bytes))
    assert got == pytest.approx(expect, rel=1e-9)


def _plan(t, sp, flash=False, b=1, s=2048):
    return dc.train_plan(
        tp=t, micro_batch=b, seq_len=s, sequence_parallel=sp, flash_attention=flash, global_batch=b
    )


@pytest.mark.parametrize("t", [1, 2, 8])
@pytest.mark.parametrize("model_name", ["gpt3-175b", "megatron-gpt-22b"])
def test_korthikanti_table2(t, model_name):
    """Per-layer activation bytes equal Korthikanti et al. (2022) Table 2, every row."""
    m = dc.load_model(model_name)
    s, b = 2048.0, 1.0
    h, a = float(m.hidden), float(m.heads)
    sbh = s * b * h
    none_tp, sel_tp, full_tp = (
        float(x) for x in layer_activation_bytes_by_recompute(m, _plan(t, False))
    )
    none_sp, sel_sp, _ = (float(x) for x in layer_activation_bytes_by_recompute(m, _plan(t, True)))
    assert none_tp == pytest.approx(sbh * (10 + 24 / t + 5 * a * s / (h * t)), rel=1e-12)
    assert none_sp == pytest.approx(sbh / t * (34 + 5 * a * s / h), rel=1e-12)
    assert sel_tp == pytest.approx(sbh * (10 + 24 / t), rel=1e-12)
    assert sel_sp == pytest.approx(34 * sbh / t, rel=1e-12)
    assert full_tp == pytest.approx(2 * sbh, rel=1e-12)
    if t == 1:
        assert none_tp == pytest.approx(sbh * (34 + 5 * a * s / h), rel=1e-12)


def test_flash_attention_removes_the_score_matrix():
    m = dc.load_model("gpt3-175b")
    none_unfused = float(layer_activation_bytes_by_recompute(m, _plan(8, True))[0])
    none_flash = float(layer_activation_bytes_by_recompute(m, _plan(8, True, flash=True))[0])
    s, a, t = 2048.0, 96.0, 8
    assert none_unfused - none_flash == pytest.approx(5 * a * s * s / t - 4 * a * s / t, rel=1e-12)


def test_first_stage_holds_p_micro_batches_times_l_over_p_layers():
    """1F1B: the first stage stores L layers' worth (p micro-batches x L/p layers); interleaving
    multiplies by 1 + (p-1)/(p v) (Korthikanti §4.2.3)."""
    sm = dc.EXACT
    plan = dc.train_plan(pp=8, global_batch=64, micro_batch=1)
    assert float(micro_batches_in_flight(plan, sm)) == 8
    plan_v = dc.train_plan(pp=8, virtual_stages=3, global_batch=64)
    assert float(micro_batches_in_flight(plan_v, sm)) == pytest.approx(8 * (1 + 7 / 24))
    few = dc.train_plan(pp=8, global_batch=4)
    assert float(micro_batches_in_flight(few, sm)) == 4  # never more than the step has


def test_weights_per_chip_shrink_with_tp_and_pp():
    m = dc.load_model("llama-2-70b")
    sm = dc.EXACT
    base = float(params_per_chip(m, dc.train_plan(), sm))
    assert base == pytest.approx(float(m.num_params()), rel=1e-12)
    for tp, pp in [(2, 1), (8, 1), (1, 4), (8, 8)]:
        per = float(params_per_chip(m, dc.train_plan(tp=tp, pp=pp), sm))
        assert per < base
        assert per >= float(m.num_params()) / (tp * pp) * 0.99


def test_activation_memory_is_finite_for_relaxed_plans():
    m = dc.load_model("llama-2-70b")
    plan = dc.train_plan(tp=4, pp=2, global_batch=16)
    relaxed = plan.__class__(**{**plan.__dict__, "tp": jnp.asarray(3.3), "pp": jnp.asarray(1.7)})
    out = dc.TrainCost(_system(8), m, dc.RELAXED)(relaxed)
    assert jnp.isfinite(out.memory.total_bytes)


def test_zero_shards_over_data_and_context_parallel_ranks():
    """CP ranks hold the same weights, so the distributed optimizer shards over dp x cp."""
    model = dc.load_model("llama-3-8b")
    plan = dc.train_plan(dp=2, cp=2, zero=1, global_batch=8, seq_len=8192)
    mem = dc.TrainCost(_system(4), model)(plan).memory
    n = float(model.num_params())
    assert float(mem.optimizer_bytes) == pytest.approx(12 * n / 4, rel=1e-9)
    assert float(mem.gradients_bytes) == pytest.approx(2 * n, rel=1e-9)


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_fp8_keeps_row_and_column_wise_fp8_copies_of_the_gemm_weights(stage):
    """Transformer Engine caches each GEMM weight's fp8 cast (row-wise for the forward GEMM,
    column-wise for the data gradient) across the micro-batches of a step: 2 bytes per matrix
    weight of the stage; the embedding stays 16-bit.  Under ZeRO-3 the cache is sharded like the
    weights, plus the two gathered layers."""
    model = dc.load_model("llama-2-7b")
    t, p, d = 2, 2, 4
    kw = dict(tp=t, pp=p, dp=d, zero=stage, global_batch=16, recompute="full")
    mem = {
        prec: dc.TrainCost(_system(t * p * d), model)(dc.train_plan(precision=prec, **kw)).memory
        for prec in ("bf16", "fp8")
    }
    layer = float(model.layer_matrix_params()) / t
    stage_matrices = float(model.layers) / p * layer
    held = stage_matrices if stage < 3 else stage_matrices / d + 2 * layer
    extra = float(mem["fp8"].weights_bytes) - float(mem["bf16"].weights_bytes)
    assert extra == pytest.approx(2.0 * held, rel=1e-9)
    # grads and optimizer state are the same in both precisions
    assert float(mem["fp8"].optimizer_bytes) == float(mem["bf16"].optimizer_bytes)
    assert float(mem["fp8"].gradients_bytes) == float(mem["bf16"].gradients_bytes)
