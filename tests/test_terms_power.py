"""The board power limit (diffcost._terms.power): a sustained compute-bound kernel slows down by
the DVFS law, a memory-bound one and a short burst do not, and gradients stay finite."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffcost as dc
from diffcost import EXACT, RELAXED
from diffcost.testing import (
    DVFS_ENERGY_EXPONENT,
    GemmFormat,
    burst,
    clock_slowdown,
    format_index,
    gemm_time_s,
    sustained,
    sustained_energy,
    with_constants,
)


@pytest.fixture(scope="module")
def h100():
    # a top-clock fraction of 0.9, as XLA's and DeepGEMM's large GEMMs reach (specs/kernels)
    return with_constants(dc.load_system(chip="h100-sxm"), {"matmul_peak_fraction": 0.9})


def _available_w(system) -> float:
    return float(system.chip.tdp_w - system.chip.energy.idle_w)


def test_slowdown_is_one_below_the_limit_and_the_dvfs_law_above(h100):
    avail = _available_w(h100)
    # half the available power for 1 s: no throttling
    assert float(clock_slowdown(0.5 * avail, 1.0, h100, EXACT)) == 1.0
    # twice the available power: the clock falls to 2^(-1/(1+g))
    got = float(clock_slowdown(2.0 * avail, 1.0, h100, EXACT))
    assert got == pytest.approx(2.0 ** (1.0 / (1.0 + DVFS_ENERGY_EXPONENT)), rel=1e-6)
    # a burst (no power limit) never throttles; nor does an empty kernel
    assert float(clock_slowdown(2.0 * avail, 1.0, burst(h100), EXACT)) == 1.0
    assert float(clock_slowdown(0.0, 0.0, h100, EXACT)) == 1.0


def _formats(system, dtype="bf16"):
    i = format_index(dtype)
    peak = system.chip.peak_flop_per_s[i]
    b = 2.0 if dtype == "bf16" else 1.0
    return GemmFormat(peak, b), GemmFormat(peak, b, flop_j=system.chip.energy.flop_j[i])


def test_large_gemm_is_power_capped_and_a_skinny_one_is_not(h100):
    plain, capped = _formats(h100)
    big = (8192.0, 8192.0, 8192.0)
    t_burst = float(gemm_time_s(*big, plain, h100, EXACT))
    t_sustained = float(gemm_time_s(*big, capped, h100, EXACT))
    # the H100's measured energies put an 8192^3 bf16 product above 700 W at the top clock
    assert t_sustained > 1.15 * t_burst
    # the sustained fraction: one second of P f FLOP at the format's energy, over the limit
    f = float(h100.efficiency.matmul_peak_fraction)
    i = format_index("bf16")
    peak, flop_j = h100.chip.peak_flop_per_s[i], h100.chip.energy.flop_j[i]
    demand = float(peak) * f * float(flop_j) / _available_w(h100)
    r = demand ** (-1 / (1 + DVFS_ENERGY_EXPONENT))
    held = sustained(h100, peak, flop_j, EXACT)
    assert float(held.efficiency.matmul_peak_fraction) == pytest.approx(f * r, rel=1e-6)
    assert float(gemm_time_s(*big, plain, held, EXACT)) == pytest.approx(t_sustained, rel=1e-6)
    # the same product timed alone in a short loop (burst): the top clock
    assert float(gemm_time_s(*big, capped, burst(h100), EXACT)) == pytest.approx(t_burst)
    # batch-4 decode GEMM: memory-bound, not slowed
    skinny = (4.0, 8192.0, 28672.0)
    assert float(gemm_time_s(*skinny, capped, h100, EXACT)) == pytest.approx(
        float(gemm_time_s(*skinny, plain, h100, EXACT)), rel=1e-9
    )


def test_sustained_h100_bf16_rate_matches_the_power_check():
    """benchmarks/results/power-check-h100-sxm.txt: 8192^3 bf16 for 8 s at 700 W ran at 628.8
    TFLOP/s.  With the calibration's constants the model's sustained rate of that product is
    within 15% of it (its top-clock efficiency comes from XLA's and DeepGEMM's kernels, not
    JAX's)."""
    h100 = dc.load_system(chip="h100-sxm")
    _, capped = _formats(h100)
    t = float(gemm_time_s(8192.0, 8192.0, 8192.0, capped, h100, EXACT))
    rate = 2 * 8192.0**3 / t
    assert rate == pytest.approx(628.8e12, rel=0.15)


def test_a_chip_without_energy_figures_never_throttles(tmp_path):
    a100 = dc.load_system(chip="a100-sxm-80gb")
    plain, capped = _formats(a100)
    big = (8192.0, 8192.0, 8192.0)
    # top-down energies: the board reaches its limit only at the datasheet peak
    assert float(gemm_time_s(*big, capped, a100, EXACT)) == pytest.approx(
        float(gemm_time_s(*big, plain, a100, EXACT)), rel=1e-9
    )


def test_gradients_finite_across_the_limit(h100):
    _, capped = _formats(h100)

    def t(m):
        return gemm_time_s(m, 8192.0, 8192.0, capped, h100, RELAXED)

    for m in (1.0, 64.0, 512.0, 8192.0):
        g = float(jax.grad(t)(jnp.asarray(m)))
        fd = (float(t(m * (1 + 1e-4))) - float(t(m * (1 - 1e-4)))) / (2e-4 * m)
        assert np.isfinite(g) and g == pytest.approx(fd, rel=2e-2)


def test_a_throttled_gemm_draws_the_limit_at_its_sustained_energy(h100):
    """Activity energy at the sustained clock (sustained_energy): a large bf16 GEMM at the
    sustained fraction ``f r`` and ``e r^g`` J/FLOP draws exactly ``TDP - P_idle`` of dynamic
    power when the limit binds (the DVFS law solved for r); a chip whose energies are top-down
    (the TPU v5p: its limit binds at its datasheet peak) keeps its figures."""
    bf16 = format_index("bf16")
    for sm in (EXACT, RELAXED):
        peak = h100.chip.peak_flop_per_s[bf16]
        held = float(
            sustained(h100, peak, h100.chip.energy.flop_j[bf16], sm).efficiency.matmul_peak_fraction
        )
        assert held < 0.9  # the H100's measured J/FLOP: the limit binds
        e = float(sustained_energy(h100, sm).flop_j[bf16])
        assert e < float(h100.chip.energy.flop_j[bf16])
        if sm is EXACT:
            assert float(peak) * held * e == pytest.approx(_available_w(h100), rel=1e-5)
    tpu = dc.load_system(chip="tpu-v5p")
    np.testing.assert_array_equal(
        np.asarray(sustained_energy(tpu, EXACT).flop_j), np.asarray(tpu.chip.energy.flop_j)
    )
