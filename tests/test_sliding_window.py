"""Sliding-window attention (Model.sliding_window / sliding_layers): tokens attended and cached,
the causal prefill mean, the KV cache and decode of long contexts, training's score-matrix
share, the model file's rules, relaxed == exact and finite gradients at the window's edge."""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffcost as dc
from diffcost import EXACT, Smoothing
from diffcost.testing import causal_skip

TIGHT = Smoothing(relaxed=True, rel_width=1e-9)
predict = eqx.filter_jit(lambda cost, plan: cost(plan))


def _windowed(model, window, sliding):
    return dataclasses.replace(
        model, sliding_window=jnp.asarray(float(window)), sliding_layers=jnp.asarray(float(sliding))
    )


@pytest.fixture(scope="module")
def llama():
    return dc.load_model("llama-3-8b")  # 32 layers, 8 KV heads of 128


def test_attended_tokens_average_the_window_over_the_layers(llama):
    for c in (100.0, 4096.0, 20000.0):
        assert float(llama.attended_tokens(c, EXACT)) == c
        assert float(_windowed(llama, 4096, 32).attended_tokens(c, EXACT)) == min(c, 4096.0)
        half = float(_windowed(llama, 4096, 16).attended_tokens(c, EXACT))
        assert half == pytest.approx(0.5 * c + 0.5 * min(c, 4096.0))


@pytest.mark.parametrize("s", [1000.0, 4096.0, 5000.0, 32768.0])
def test_prompt_mean_is_the_mean_of_the_windowed_causal_context(llama, s):
    """Mean over prompt positions x in [0, s] of min(x, W), by quadrature."""
    w = 4096.0
    x = np.linspace(0.0, s, 200001)
    expected = np.trapezoid(np.minimum(x, w), x) / s
    got = float(_windowed(llama, w, 32).prompt_attended_tokens(s, EXACT))
    assert got == pytest.approx(expected, rel=1e-6)
    assert float(llama.prompt_attended_tokens(s, EXACT)) == 0.5 * s


def test_long_context_kv_cache_and_decode_shrink_with_the_window(llama):
    system = dc.load_system("dgx-h100", chips=1)
    plan = dc.serve_plan(batch=16, input_len=30000, output_len=1000, kv_block=1, mode="static")
    full = predict(dc.ServeCost(system, llama), plan)
    local = predict(dc.ServeCost(system, _windowed(llama, 4096, 16)), plan)
    ratio = float(local.memory.kv_cache_bytes) / float(full.memory.kv_cache_bytes)
    assert ratio == pytest.approx(0.5 + 0.5 * 4096 / 31000, rel=1e-6)
    assert float(local.tpot_s) < float(full.tpot_s)
    assert float(local.decode_kv_read_s) < 0.6 * float(full.decode_kv_read_s)
    # a context the window covers is served exactly as without a window
    short = dc.serve_plan(batch=16, input_len=1000, output_len=500)
    a = predict(dc.ServeCost(system, llama), short)
    b = predict(dc.ServeCost(system, _windowed(llama, 4096, 16)), short)
    assert float(a.tpot_s) == float(b.tpot_s) and float(a.ttft_s) == float(b.ttft_s)


def test_training_computes_the_windowed_share_of_the_score_matrix(llama):
    local = _windowed(llama, 4096, 32)
    for s, share in ((2048.0, 0.5), (4096.0, 0.5), (8192.0, (4096 - 4096**2 / 16384) / 8192)):
        assert float(causal_skip(local, 1.0, s, EXACT)) == pytest.approx(share)
    assert float(causal_skip(local, 0.0, 8192.0, EXACT)) == 1.0  # unfused: the whole matrix
    system = dc.load_system("dgx-h100", chips=8)
    plan = dc.train_plan(tp=8, global_batch=8, seq_len=16384)
    full, windowed = dc.TrainCost(system, llama)(plan), dc.TrainCost(system, local)(plan)
    assert float(windowed.step_time_s) < float(full.step_time_s)


@pytest.mark.parametrize("context", [4095.0, 4096.0, 4097.0, 9000.0])
def test_relaxed_equals_exact_and_gradients_are_finite_at_the_edge(llama, context):
    local = _windowed(llama, 4096, 16)
    for fn in (local.attended_tokens, local.prompt_attended_tokens):
        assert float(fn(context, TIGHT)) == pytest.approx(float(fn(context, EXACT)), rel=1e-9)
        g = jax.grad(lambda c, fn=fn: fn(c, Smoothing(relaxed=True)))(jnp.asarray(context))
        assert np.isfinite(float(g))
    system = dc.load_system("dgx-h100", chips=1)
    plan = dc.serve_plan(batch=4, input_len=int(context), output_len=64)
    exact = predict(dc.ServeCost(system, local), plan)
    relaxed = dc.ServeCost(system, local, TIGHT)(plan)
    assert float(relaxed.tpot_s) == pytest.approx(float(exact.tpot_s), rel=1e-6)


def test_model_file_rules_for_the_window(tmp_path):
    base = (dc.specs_dir() / "models" / "llama-3-8b.toml").read_text()
    for extra, reason in (
        ("sliding_layers = 8\n", "given without a sliding window"),
        ("sliding_window = 4096\nsliding_layers = 40\n", "is more than the 32 layers"),
        # fuzz (offset 4 of 14): a window no layer uses was accepted as a dense model
        ("sliding_window = 4096\nsliding_layers = 0\n", "no layer would use the window"),
    ):
        path = tmp_path / "llama-3-8b.toml"
        path.write_text(base.replace("[source]", extra + "\n[source]", 1))
        with pytest.raises(dc.SpecError) as err:
            dc.load_model(str(path))
        assert any(p.key == "sliding_layers" and reason in p.reason for p in err.value.problems)
    path.write_text(base.replace("[source]", "sliding_window = 4096\n\n[source]", 1))
    assert float(dc.load_model(str(path)).sliding_layers) == 32  # default: every layer
