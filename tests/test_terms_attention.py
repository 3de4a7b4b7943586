"""Attention core terms (diffcost._terms.attention): GEMM form (training), fused kernels
(serving decode and prefill)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffcost as dc
from diffcost import EXACT, RELAXED
from diffcost.testing import (
    AttentionShape,
    GemmFormat,
    attention_gemms,
    causal_skip,
    decode_attention,
    fused_prefill_efficiency,
    gemm_attention_s,
    matmul_efficiency,
    matmul_time_s,
    prefill_attention,
)


def _num(x) -> float:
    """A GemmOp field (ArrayLike: possibly a Python number) as a float."""
    return float(jnp.asarray(x))


@pytest.fixture(scope="module")
def h100():
    return dc.load_system("dgx-h100")


def _bw(system):
    return float(
        system.chip.memory_bandwidth_bytes_per_s * system.efficiency.memory_bandwidth_fraction
    )


def _shape(heads=8.0, kv_heads=1.0, e=128.0, kv_bytes=2.0, act_bytes=2.0):
    """Standard attention: values of the key size, K and V cached, decode dims 2 e."""
    values = (heads, kv_heads, e, kv_bytes, act_bytes, e, 2.0 * kv_heads * e, 2.0 * e)
    return AttentionShape(*(jnp.asarray(x) for x in values))


def test_causal_skip():
    gpt, bert = dc.load_model("gpt3-175b"), dc.load_model("bert-large")
    s = 2048.0
    assert float(causal_skip(gpt, 1.0, s, EXACT)) == 0.5  # a fused causal kernel skips half
    assert float(causal_skip(gpt, 0.0, s, EXACT)) == 1.0
    assert float(causal_skip(bert, 1.0, s, EXACT)) == 1.0  # an encoder has no masked half


def test_gemm_attention_closed_form(h100):
    """skip * (QK^T + AV), each a batched 16-bit GEMM per head."""
    peak = h100.chip.peak_flop_per_s[dc.FORMATS.index("bf16")]
    ops = attention_gemms(2048.0, 4096.0, 128.0, 16.0, GemmFormat(peak, 2.0))
    assert [(_num(o.m), _num(o.n), _num(o.k), _num(o.repeats)) for o in ops] == [
        (2048, 4096, 128, 16),
        (2048, 128, 4096, 16),
    ]
    qk = matmul_time_s(2048.0, 4096.0, 128.0, peak, 2.0, h100, EXACT, 16.0)
    av = matmul_time_s(2048.0, 128.0, 4096.0, peak, 2.0, h100, EXACT, 16.0)
    got = gemm_attention_s(ops, jnp.asarray(0.5), h100, EXACT)
    assert float(got) == pytest.approx(0.5 * (float(qk) + float(av)), rel=1e-14)
    assert float(sum(o.flop() for o in ops)) == 4 * 2048 * 4096 * 128 * 16


def test_decode_reads_the_cache_once_per_kv_head_or_rereads_it(h100):
    """Memory-bound decode: seqs c 2 kv e b (1 + x) + Q and O, over bw_eff; ``x`` the engine
    kernel's re-reads (a GQA-unaware kernel: ``(g - 1) r``)."""
    shape = _shape(heads=8.0, kv_heads=1.0)
    r = float(h100.efficiency.kv_reread_fraction)
    peak = h100.chip.peak_flop_per_s[dc.FORMATS.index("bf16")]
    for unaware in [0.0, 1.0]:
        out = decode_attention(4.0, 1.0, 8192.0, shape, unaware * 7 * r, peak, h100, EXACT)
        kv = 4 * 8192 * 2 * 1 * 128 * 2 * (1 + unaware * 7 * r)
        assert float(out.kv_bytes) == pytest.approx(kv, rel=1e-12)
        assert float(out.flop) == 4 * 4 * 1 * 8192 * 8 * 128
        qo = 2 * 4 * 8 * 128 * 2
        assert float(out.time_s) == pytest.approx((kv + qo) / _bw(h100), rel=1e-12)


def test_prefill_reads_each_chunks_context_once(h100):
    shape = _shape(heads=8.0, kv_heads=2.0)
    peak = float(h100.chip.peak_flop_per_s[dc.FORMATS.index("bf16")])
    out = prefill_attention(4096.0, 1024.0, 1536.0, shape, peak, h100, EXACT)
    span = 1536 + 512
    assert float(out.kv_bytes) == pytest.approx(4 * span * 2 * 2 * 128 * 2, rel=1e-12)
    assert float(out.flop) == 4 * 4096 * 1536 * 8 * 128
    # a fused kernel: no GEMM penalty at k = head_dim; 4096 tokens x 8 heads / 128-row tiles
    e = h100.efficiency
    eff = float(
        e.matmul_peak_fraction
        * 128 / (128 + e.attention_softmax_dim)
        * 1536 / (1536 + e.attention_half_span)
        * 256 / (256 + e.attention_half_tiles)
    )  # fmt: skip
    got = float(fused_prefill_efficiency(256.0, 1536.0, 128.0, 4096.0, span, h100, EXACT))
    assert got == pytest.approx(eff, rel=1e-6)
    assert eff > float(matmul_efficiency(4 * 1024.0, span, 128.0, h100, EXACT))
    compute = float(out.flop) / (peak * eff)
    assert float(out.time_s) == pytest.approx(compute, rel=1e-6)  # long prompt: compute-bound


def test_no_work_costs_nothing(h100):
    shape = _shape()
    peak = h100.chip.peak_flop_per_s[dc.FORMATS.index("bf16")]
    assert float(decode_attention(0.0, 1.0, 100.0, shape, 1.0, peak, h100, EXACT).time_s) == 0.0


def test_jit_vmap_and_gradients(h100):
    shape = _shape()
    peak = h100.chip.peak_flop_per_s[dc.FORMATS.index("bf16")]
    f = lambda ctx: decode_attention(16.0, 2.0, ctx, shape, 1.0, peak, h100, RELAXED).time_s
    ctxs = jnp.asarray([128.0, 2048.0, 32768.0])
    eager = np.asarray([float(f(c)) for c in ctxs])
    np.testing.assert_allclose(np.asarray(jax.jit(jax.vmap(f))(ctxs)), eager, rtol=1e-14)
    g = lambda tok: prefill_attention(tok, 512.0, 1000.0, shape, peak, h100, RELAXED).time_s
    for fn, x in [(f, 2048.0), (g, 4096.0)]:
        grad = float(jax.grad(fn)(x))
        fd = (float(fn(x * (1 + 1e-6))) - float(fn(x * (1 - 1e-6)))) / (2e-6 * x)
        assert np.isfinite(grad) and grad == pytest.approx(fd, rel=1e-4)
