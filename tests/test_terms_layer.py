"""The layer's weight GEMMs (diffcost._terms.layer): one definition read by training, serving
and the roofline plot."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffcost as dc
from diffcost import EXACT, RELAXED
from diffcost.testing import (
    LAYER_GEMMS,
    GemmFormat,
    Work,
    consts,
    expert_split,
    gemm_format,
    gemm_time_s,
    layer_forward,
    layer_gemm_s,
    layer_gemms,
    layer_time,
    logits_gemm,
    plots,
    stacked_gemm_s,
    stage_times,
    tokens_per_chip,
)


def _num(x) -> float:
    """A GemmOp field (ArrayLike: possibly a Python number) as a float."""
    return float(jnp.asarray(x))


@pytest.fixture(scope="module")
def h100():
    return dc.load_system("dgx-h100", chips=8)


@pytest.fixture(scope="module")
def llama70():
    return dc.load_model("llama-2-70b")


def test_shapes_closed_form(llama70):
    """Llama-2-70B, TP 8: h 8192, 64 heads of 128, 8 KV heads, SwiGLU f 28672."""
    fmt = GemmFormat(1e15, 2.0)
    ops = layer_gemms(16.0, llama70, 8.0, fmt)
    shapes = [(_num(op.m), _num(op.n), _num(op.k)) for op in ops]
    assert shapes == [
        (16, (64 + 2 * 8) * 128 / 8, 8192),  # QKV
        (16, 8192, 64 * 128 / 8),  # attention out
        (16, 2 * 28672 / 8, 8192),  # MLP in: gate and up
        (16, 8192, 28672 / 8),  # MLP out
    ]
    assert len(LAYER_GEMMS) == len(ops)
    logits = logits_gemm(4.0, llama70, 8.0, fmt)
    assert (_num(logits.n), _num(logits.k)) == (32000 / 8, 8192)


def test_weights_of_the_shapes_are_the_models_matrices(llama70):
    """sum n k over the four GEMMs = layer_matrix_params / t: the FLOP the model counts."""
    for tp in [1.0, 2.0, 8.0]:
        ops = layer_gemms(1.0, llama70, tp, GemmFormat(1e15, 2.0))
        weights = sum(_num(op.n) * _num(op.k) for op in ops)
        assert weights == pytest.approx(float(llama70.layer_matrix_params()) / tp, rel=1e-12)
        flop = sum(float(op.flop()) for op in ops)
        assert flop == pytest.approx(2 * weights, rel=1e-12)


def test_layer_time_is_the_sum_of_its_gemms(h100, llama70):
    fmt = GemmFormat(1e15, 2.0, 1.0)
    for tokens in [1.0, 64.0, 4096.0]:
        total = float(layer_gemm_s(tokens, llama70, 8.0, fmt, h100, EXACT))
        parts = [
            float(gemm_time_s(op.m, op.n, op.k, fmt, h100, EXACT))
            for op in layer_gemms(tokens, llama70, 8.0, fmt)
        ]
        assert total == pytest.approx(sum(parts), rel=1e-14)


def test_jit_vmap_and_gradient(h100, llama70):
    fmt = GemmFormat(jnp.asarray(1e15), jnp.asarray(2.0), jnp.asarray(1.0))
    f = lambda tokens: layer_gemm_s(tokens, llama70, 8.0, fmt, h100, RELAXED)
    tokens = jnp.asarray([1.0, 100.0, 3000.0])
    eager = np.asarray([float(f(x)) for x in tokens])
    np.testing.assert_allclose(np.asarray(jax.jit(jax.vmap(f))(tokens)), eager, rtol=1e-14)
    for x in [50.0, 3000.0]:
        g = float(jax.grad(f)(x))
        fd = (float(f(x * (1 + 1e-6))) - float(f(x * (1 - 1e-6)))) / (2e-6 * x)
        assert np.isfinite(g) and g == pytest.approx(fd, rel=1e-4)


# --- the roofline plot reads the same terms ------------------------------------------------------
@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_train_roofline_times_are_the_models_terms(h100, llama70, precision):
    plan = dc.train_plan(tp=8, global_batch=2, seq_len=4096, precision=precision)
    ops = plots.roofline_ops(h100, llama70, plan).set_index("op")
    layer = layer_forward(h100, llama70, plan, EXACT)
    gemms = ops.loc[list(LAYER_GEMMS), "time_s"].sum()
    assert gemms == pytest.approx(float(layer.gemm_s), rel=1e-12)
    attention = ops.loc["attention", "time_s"]
    assert attention == pytest.approx(float(layer.attention_s), rel=1e-12)
    logits = logits_gemm(tokens_per_chip(plan), llama70, plan.tp, gemm_format(h100, plan))
    assert ops.loc["logits", "time_s"] == pytest.approx(float(logits.time_s(h100, EXACT)), 1e-14)
    # the stage forward is built from exactly these terms
    stage = stage_times(h100, llama70, plan, EXACT)
    assert float(stage.forward_s) > llama70.layers / plan.pp * (gemms + attention)


def _decode_work(plan):
    micro = float(min(plan.pp, plan.batch))
    return Work(micro, plan.batch, 1.0, 1000.0, 0.0, plan.input_len, 0.5 * plan.input_len, 0.0)


@pytest.mark.parametrize("fused", [True, False])
def test_serve_roofline_times_are_the_models_terms(h100, llama70, fused):
    plan = dc.serve_plan(tp=8, batch=16, input_len=1024, weight_format="int8", fused_dequant=fused)
    ops = plots.roofline_ops(h100, llama70, plan).set_index("op")
    layer = layer_time(consts(h100, llama70, plan, EXACT), _decode_work(plan))
    decode = ops.loc[[f"decode {n}" for n in LAYER_GEMMS], "time_s"].sum()
    assert decode == pytest.approx(float(layer.gemm_s), rel=1e-12)


def test_roofline_bytes_include_separate_dequantization(h100, llama70):
    """The issue's drift: the plot showed the same bytes for fused and separate dequantization
    while the model's time differed ~3x.  Separate: 2 bytes more per weight element (write
    the bf16 copy, read it back), the same FLOP, and the time the model charges."""
    kw = dict(tp=8, batch=16, input_len=1024, weight_format="int8")
    fused = plots.roofline_ops(h100, llama70, dc.serve_plan(**kw)).set_index("op")
    separate = plots.roofline_ops(h100, llama70, dc.serve_plan(**kw, fused_dequant=False))
    separate = separate.set_index("op")
    c = consts(h100, llama70, dc.serve_plan(**kw), EXACT)
    weight_gemms = layer_gemms(16.0, llama70, 8.0, c.gemm_format())
    for name, op in zip(LAYER_GEMMS, weight_gemms, strict=True):
        extra = separate.loc[f"decode {name}", "bytes"] - fused.loc[f"decode {name}", "bytes"]
        assert extra == pytest.approx(2.0 * 2.0 * _num(op.k) * _num(op.n), rel=1e-12)
        assert separate.loc[f"decode {name}", "flop"] == fused.loc[f"decode {name}", "flop"]
    # the separate kernel's time is the bytes shown over the achievable bandwidth (memory-bound)
    bw = float(h100.chip.memory_bandwidth_bytes_per_s * h100.efficiency.memory_bandwidth_fraction)
    mlp_in = separate.loc["decode MLP in"]
    assert mlp_in.time_s == pytest.approx(mlp_in.bytes / bw, rel=1e-12)
    assert mlp_in.time_s > 3.0 * fused.loc["decode MLP in", "time_s"]


@pytest.mark.parametrize("model_name", ["llama-2-70b", "mixtral-8x7b", "deepseek-v3"])
@pytest.mark.parametrize("sm", [EXACT, RELAXED], ids=["exact", "relaxed"])
def test_serving_stacked_gemms_are_the_layer_law(h100, model_name, sm):
    """The serving pass evaluates its weight GEMMs and the output layer's as one stacked
    roofline (issue 38): every GEMM's time, the layer's sum (in layer_gemm_s's order) and the
    logits GEMM are the op-by-op law's, bit for bit, over passes of decode and prompt tokens."""
    model = dc.load_model(model_name)
    plan = dc.serve_plan(tp=8, batch=16, input_len=1024, expert_parallel=float(model.experts) > 0)
    c = consts(h100, model, plan, sm)
    w = Work(
        jnp.asarray([1.0, 2.0, 4.0]),
        jnp.asarray([16.0, 0.0, 7.5]),
        jnp.asarray([1.0, 1.0, 3.0]),
        jnp.asarray([1500.0, 1000.0, 700.0]),
        jnp.asarray([0.0, 4096.0, 300.0]),
        jnp.asarray([1024.0, 1024.0, 512.0]),
        jnp.asarray([512.0, 512.0, 256.0]),
        jnp.asarray([0.0, 4.0, 0.6]),
    )
    layer = layer_time(c, w)
    fmt = c.gemm_format()
    split = expert_split(c, layer.tokens, layer.active_fraction)
    law = layer_gemm_s(layer.tokens, model, c.tp, fmt, h100, sm, split)
    np.testing.assert_array_equal(np.asarray(layer.gemm_s), np.asarray(law))
    logits = logits_gemm(layer.logits_rows, model, c.tp, fmt).time_s(h100, sm)
    np.testing.assert_array_equal(np.asarray(layer.logits_gemm_s), np.asarray(logits))
    ops = layer_gemms(layer.tokens, model, c.tp, fmt)
    stacked = stacked_gemm_s(ops, h100, sm)
    for i, op in enumerate(ops):
        np.testing.assert_array_equal(np.asarray(stacked[i]), np.asarray(op.time_s(h100, sm)))
    assert float(jnp.min(layer.gemm_s)) > 0.0


def test_stacked_gemms_need_one_format(h100, llama70):
    c = consts(h100, llama70, dc.serve_plan(tp=8), EXACT)
    ops = layer_gemms(16.0, llama70, 8.0, c.gemm_format())
    other = layer_gemms(16.0, llama70, 8.0, c.gemm_format())
    with pytest.raises(ValueError, match="share one GemmFormat"):
        stacked_gemm_s((ops[0], other[1]), h100, EXACT)
