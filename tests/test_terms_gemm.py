"""GEMM terms (diffcost._terms.gemm): FLOP, bytes, roofline time, efficiency, streaming."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffcost as dc
from diffcost import EXACT, RELAXED
from diffcost.testing import (
    GemmFormat,
    gemm_bytes,
    gemm_flop,
    gemm_time_s,
    gpu_fill,
    matmul_efficiency,
    matmul_time_s,
    mma_fraction_scale,
    stream_time_s,
    sustained_efficiency,
    wave_fill,
)


@pytest.fixture(scope="module")
def h100():
    return dc.load_system("dgx-h100")


def _bw(system):
    return float(system.chip.memory_bandwidth_bytes_per_s) * float(
        system.efficiency.memory_bandwidth_fraction
    )


def test_flop_and_bytes_closed_forms():
    assert float(gemm_flop(3.0, 5.0, 7.0)) == 2 * 3 * 5 * 7
    assert float(gemm_flop(3.0, 5.0, 7.0, count=4.0)) == 4 * 2 * 3 * 5 * 7
    uniform = GemmFormat(1e15, 2.0)
    assert float(gemm_bytes(3.0, 5.0, 7.0, uniform)) == 2 * (3 * 7 + 7 * 5 + 3 * 5)
    assert float(gemm_bytes(3.0, 5.0, 7.0, uniform, 4.0)) == 4 * 2 * (3 * 7 + 7 * 5 + 3 * 5)
    # int8 weight (1 byte), 16-bit activations: the k x n operand is the weight
    split = GemmFormat(1e15, 2.0, 1.0)
    assert float(gemm_bytes(3.0, 5.0, 7.0, split)) == 7 * 5 * 1 + (3 * 7 + 3 * 5) * 2
    same = GemmFormat(1e15, 2.0, 2.0)
    assert float(gemm_bytes(3.0, 5.0, 7.0, same)) == float(gemm_bytes(3.0, 5.0, 7.0, uniform))


def test_efficiency_closed_form(h100):
    eff = h100.efficiency
    d, f_max = float(eff.matmul_half_dim), float(eff.matmul_peak_fraction)
    m, n, k = 64.0, 8192.0, 1024.0
    rows = 1.0 / (1.0 / f_max + (m + d) / m - 1.0)  # idle rows at the full clock
    expect = n / (n + d) * k / (k + d) * rows
    assert expect == pytest.approx(f_max * n / (n + d) * k / (k + d) * m / (m + f_max * d))
    assert float(matmul_efficiency(m, n, k, h100, EXACT)) == pytest.approx(expect, rel=1e-12)
    assert (
        0.0
        < float(matmul_efficiency(1.0, 1.0, 1.0, h100, EXACT))
        < float(matmul_efficiency(8192.0, 8192.0, 8192.0, h100, EXACT))
        < f_max
    )


def _with_peak_fraction(system, f_max):
    return eqx.tree_at(lambda s: s.efficiency.matmul_peak_fraction, system, jnp.asarray(f_max))


def test_sustained_efficiency_limits_and_monotonicity():
    """``1 / (1/f + 1/u - 1)``: ``f`` at a full fill, ``u`` without a sustained-load loss,
    ``-> u`` for a skinny GEMM, increasing in both (Choi et al., IPDPS 2013)."""
    fs = jnp.asarray([0.43, 0.45, 0.625, 0.8, 1.0])
    us = jnp.asarray([1e-3, 1.0 / 129.0, 0.1, 0.5, 0.9, 1.0])
    e = np.asarray(sustained_efficiency(us[None, :], fs[:, None]))
    np.testing.assert_allclose(e[:, -1], np.asarray(fs), rtol=1e-6)
    np.testing.assert_allclose(e[-1, :], np.asarray(us), rtol=1e-6)
    assert np.all(e <= np.minimum(np.asarray(fs)[:, None], np.asarray(us)[None, :]) * (1 + 1e-6))
    assert np.all(np.diff(e, axis=0) > 0) and np.all(np.diff(e, axis=1) > 0)
    assert np.all(e[:, 0] > 0.99 * 1e-3)  # a GEMV runs its few rows at the full clock


def test_skinny_gemm_loses_its_fill_not_the_sustained_fraction_too(h100):
    """A one-row GEMM's efficiency is its fill, whatever the large-GEMM fraction: a chip whose
    sustained fraction is 0.45 (MI300X, arXiv:2510.27583) loses about 1% at one row (1.1% at
    a half dimension of 108), where the product ``f * u`` lost 55%."""
    n = k = 8192.0
    d = float(h100.efficiency.matmul_half_dim)
    fill = 1.0 / (1.0 + d) * n / (n + d) * k / (k + d)
    assert fill == pytest.approx(float(gpu_fill(1.0, n, k, h100.efficiency)), rel=1e-6)
    for f_max in [0.45, 0.625, 0.8]:
        eff = float(matmul_efficiency(1.0, n, k, _with_peak_fraction(h100, f_max), EXACT))
        assert 0.985 * fill < eff <= fill


def test_small_batch_w8a16_decode_sits_at_the_weight_read_floor_at_a_low_peak_fraction(h100):
    """Item 4 of issue 17: batch-1..4 decode GEMMs are bound by the weight read (TensorRT-LLM
    weightOnlyBatchedGemv; Marlin, arXiv:2408.11743), also on a chip with a low sustained
    fraction; an int8 weight at the 16-bit peak halves the GEMM time."""
    peak = float(h100.chip.peak_flop_per_s[dc.FORMATS.index("bf16")])
    slow = _with_peak_fraction(h100, 0.45)
    n = k = 8192.0
    for m in [1.0, 2.0, 4.0]:
        for weight_bytes in [2.0, 1.0]:
            got = float(gemm_time_s(m, n, k, GemmFormat(peak, 2.0, weight_bytes), slow, EXACT))
            floor = (k * n * weight_bytes + m * (k + n) * 2.0) / _bw(slow)
            assert got == pytest.approx(floor, rel=1e-12)


def test_older_mma_instructions_slow_large_gemms_not_the_weight_read(h100):
    """A kernel on warp-level mma.sync reaches ``r`` of Hopper's tensor peak (FlashAttention-3,
    arXiv:2407.08608, sec. 1): its large GEMMs sustain ``r f`` (time / r), a one-row GEMM stays
    at its weight-read floor, and ``r = 1`` changes nothing, bit for bit."""
    eff = h100.efficiency
    r = 2.0 / 3.0
    assert float(mma_fraction_scale(1e9, eff, r)) == pytest.approx(r, rel=1e-6)
    assert float(mma_fraction_scale(1e-6, eff, r)) == pytest.approx(1.0, rel=1e-6)
    ms = jnp.asarray([1.0, 16.0, 256.0, 4096.0])
    scale = np.asarray(mma_fraction_scale(ms, eff, r))
    assert np.all(np.diff(scale) < 0) and np.all((scale > r) & (scale < 1.0))
    assert np.all(np.asarray(mma_fraction_scale(ms, eff, 1.0)) == 1.0)
    f, u = float(eff.matmul_peak_fraction), 256.0 / (256.0 + float(eff.matmul_half_dim))
    closed = sustained_efficiency(u, r * f) / sustained_efficiency(u, f)
    assert float(scale[2]) == pytest.approx(float(closed), rel=1e-6)
    peak = float(h100.chip.peak_flop_per_s[dc.FORMATS.index("bf16")])
    native, old = GemmFormat(peak, 2.0), GemmFormat(peak, 2.0, mma_fraction=r)
    big = 16384.0
    t_native = float(gemm_time_s(big, big, big, native, h100, EXACT))
    assert float(gemm_time_s(big, big, big, old, h100, EXACT)) == pytest.approx(
        t_native / float(mma_fraction_scale(big, eff, r)), rel=1e-6
    )
    n = k = 8192.0
    assert float(gemm_time_s(1.0, n, k, old, h100, EXACT)) == float(
        gemm_time_s(1.0, n, k, native, h100, EXACT)
    )
    same = GemmFormat(peak, 2.0, mma_fraction=1.0)
    assert float(gemm_time_s(big, big, big, same, h100, EXACT)) == t_native


def test_roofline_compute_and_memory_sides(h100):
    peak = float(h100.chip.peak_flop_per_s[dc.FORMATS.index("bf16")])
    fmt = GemmFormat(peak, 2.0)
    big = 16384.0
    eff = float(matmul_efficiency(big, big, big, h100, EXACT))
    compute = 2 * big**3 / (peak * eff)
    assert float(gemm_time_s(big, big, big, fmt, h100, EXACT)) == pytest.approx(compute, 1e-12)
    # one row: the weight read dominates
    n = k = 8192.0
    memory = (k * n + k + n) * 2.0 / _bw(h100)
    assert float(gemm_time_s(1.0, n, k, fmt, h100, EXACT)) == pytest.approx(memory, rel=1e-12)
    assert float(stream_time_s(1e9, h100)) == pytest.approx(1e9 / _bw(h100), rel=1e-12)


def test_weight_only_format_moves_fewer_bytes_at_the_same_peak(h100):
    """W8A16 at one row: half the weight bytes, the 16-bit peak: max(compute, bytes / bw)."""
    peak = float(h100.chip.peak_flop_per_s[dc.FORMATS.index("bf16")])
    n = k = 8192.0
    eff = float(matmul_efficiency(1.0, n, k, h100, EXACT))
    for weight_bytes in [2.0, 1.0, 0.5]:
        got = float(gemm_time_s(1.0, n, k, GemmFormat(peak, 2.0, weight_bytes), h100, EXACT))
        memory = (k * n * weight_bytes + (k + n) * 2.0) / _bw(h100)
        assert got == pytest.approx(max(2 * n * k / (peak * eff), memory), rel=1e-12)


def test_matmul_time_is_gemm_time_with_one_element_size(h100):
    for m, n, k, count in [(1, 8192, 8192, 1), (512, 28672, 8192, 1), (4096, 4096, 128, 64)]:
        got = matmul_time_s(m, n, k, 1e15, 2.0, h100, EXACT, count)
        want = gemm_time_s(m, n, k, GemmFormat(1e15, 2.0), h100, EXACT, count)
        assert float(got) == float(want)


def test_jit_equals_eager_and_vmap_equals_loop(h100):
    fmt = GemmFormat(jnp.asarray(1e15), jnp.asarray(2.0), jnp.asarray(1.0))
    ms = jnp.asarray([1.0, 16.0, 256.0, 4096.0])
    f = lambda m, fmt: gemm_time_s(m, 8192.0, 8192.0, fmt, h100, EXACT)
    eager = np.asarray([float(f(m, fmt)) for m in ms])
    np.testing.assert_allclose(np.asarray(jax.jit(f)(ms[2], fmt)), eager[2], rtol=1e-14)
    np.testing.assert_allclose(np.asarray(jax.vmap(f, in_axes=(0, None))(ms, fmt)), eager, 1e-14)


def test_gradients_match_finite_differences(h100):
    """d time / d m (relaxed) and d time / d bandwidth, in float64."""
    fmt = GemmFormat(1e15, 2.0, 1.0)
    t = lambda m: gemm_time_s(m, 8192.0, 8192.0, fmt, h100, RELAXED)
    for m in [8.0, 300.0, 5000.0]:
        g = float(jax.grad(t)(m))
        fd = (float(t(m * (1 + 1e-6))) - float(t(m * (1 - 1e-6)))) / (2e-6 * m)
        assert np.isfinite(g) and g == pytest.approx(fd, rel=1e-4, abs=1e-18)
    bf16 = GemmFormat(1e15, 2.0)  # one row of a 16-bit weight: memory-bound
    loss = lambda s: gemm_time_s(1.0, 8192.0, 8192.0, bf16, s, RELAXED)
    g = eqx.filter_grad(loss)(h100)
    bw = h100.chip.memory_bandwidth_bytes_per_s
    elasticity = float(g.chip.memory_bandwidth_bytes_per_s * bw / loss(h100))
    assert elasticity == pytest.approx(-1.0, abs=1e-6)  # memory-bound: time ~ 1 / bandwidth


def test_more_bandwidth_is_never_slower(h100):
    fmt = GemmFormat(1e15, 2.0, 1.0)
    faster = eqx.tree_at(
        lambda s: s.chip.memory_bandwidth_bytes_per_s,
        h100,
        h100.chip.memory_bandwidth_bytes_per_s * 2,
    )
    for m in [1.0, 64.0, 1024.0, 16384.0]:
        slow = float(gemm_time_s(m, 8192.0, 8192.0, fmt, h100, EXACT))
        fast = float(gemm_time_s(m, 8192.0, 8192.0, fmt, faster, EXACT))
        assert fast <= slow


def test_wave_fill_closed_forms():
    """``T / (P ceil(T / P))`` with ``T = ceil(m / tm) ceil(n / tn)`` tiles over ``P``
    multiprocessors; 1 for a chip that states none."""
    assert float(wave_fill(256.0, 256.0, 64.0, 128.0, 148.0, EXACT)) == pytest.approx(8 / 148)
    full = 32 * 32 / (148 * 7)  # 1024 tiles in 7 waves
    assert float(wave_fill(2048.0, 4096.0, 64.0, 128.0, 148.0, EXACT)) == pytest.approx(full)
    # a partial tile is one more block (its padding is the fill's, not the wave's)
    assert float(wave_fill(65.0, 128.0, 64.0, 128.0, 132.0, EXACT)) == pytest.approx(2 / 132)
    assert float(wave_fill(300.0, 256.0, 64.0, 128.0, 0.0, EXACT)) == 1.0
    assert float(wave_fill(64.0 * 148, 128.0, 64.0, 128.0, 148.0, EXACT)) == pytest.approx(1.0)


@pytest.mark.parametrize("m, n", [(256.0, 256.0), (1000.0, 3000.0), (4096.0, 4096.0), (1.0, 7.0)])
def test_wave_fill_relaxed_equals_exact_at_integer_shapes_with_finite_gradients(m, n):
    exact = wave_fill(m, n, 64.0, 128.0, 132.0, EXACT)
    relaxed = wave_fill(m, n, 64.0, 128.0, 132.0, RELAXED)
    assert float(relaxed) == pytest.approx(float(exact), rel=1e-6)
    grads = jax.grad(lambda a, b: wave_fill(a, b, 64.0, 128.0, 132.0, RELAXED), (0, 1))(m, n)
    assert all(np.isfinite(float(g)) for g in grads)


def test_data_parallel_tile_charges_the_last_wave(h100):
    """A compute-bound GEMM of a data-parallel kernel takes its balanced time over the wave
    fill; no tile (the steps' GEMMs) leaves the term as it was."""
    peak = float(h100.chip.peak_flop_per_s[2])
    balanced = gemm_time_s(1024.0, 1024.0, 8192.0, GemmFormat(peak, 2.0), h100, EXACT)
    tiled = GemmFormat(peak, 2.0, tile=(64.0, 64.0))
    waves = gemm_time_s(1024.0, 1024.0, 8192.0, tiled, h100, EXACT)
    fill = float(wave_fill(1024.0, 1024.0, 64.0, 64.0, h100.chip.multiprocessors, EXACT))
    assert float(h100.chip.multiprocessors) == 132
    assert fill == pytest.approx(256 / 264)
    assert float(waves) == pytest.approx(float(balanced) / fill, rel=1e-6)
