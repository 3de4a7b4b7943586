"""Two memory levels (diffcost._terms.memory_levels): the placement law against a brute-force
placement, exactness for one-level chips, finite gradients, and its effect on serving."""

import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffcost as dc
from diffcost import EXACT, RELAXED
from diffcost.testing import (
    BandwidthProportional,
    NearFirst,
    NearMemory,
    near_share,
    placed_bandwidth_bytes_per_s,
    placed_chip,
    placement_share,
)


def _with_near(chip, near_bytes, near_bytes_per_s, near_j=1e-12):
    near = NearMemory(jnp.asarray(near_bytes), jnp.asarray(near_bytes_per_s), jnp.asarray(near_j))
    return eqx.tree_at(lambda c: c.near_memory, chip, near)


def _brute_force_bandwidth(s, b_near, b_far, w, n=200_001):
    """Best placement by enumeration: x bytes near (0..min(S, W)), time max(x/Bn, (W-x)/Bf)."""
    x = np.linspace(0.0, min(s, w), n)
    t = np.maximum(x / b_near, (w - x) / b_far)
    return w / t.min()


@pytest.mark.parametrize("w", [1e8, 4e8, 1e9, 5e9, 2e10])
def test_placement_law_equals_the_best_placement(w):
    """A 500 MB, 500 TB/s SRAM beside a 1 TB/s HBM: the law's bandwidth is the best any split
    of the working set achieves (to the enumeration's resolution)."""
    s, b_near, b_far = 5e8, 5e14, 1e12
    chip = _with_near(dc.load_chip("h100-sxm"), s, b_near)
    chip = eqx.tree_at(lambda c: c.memory_bandwidth_bytes_per_s, chip, jnp.asarray(b_far))
    law = float(placed_bandwidth_bytes_per_s(chip, w, EXACT))
    assert law == pytest.approx(_brute_force_bandwidth(s, b_near, b_far, w), rel=2e-3)


def test_small_sram_adds_its_share_of_the_bytes_not_its_bandwidth():
    """520 MB of 500 TB/s SRAM beside 1 TB/s HBM, 20 GB working set: ~1.027 TB/s (S/W more),
    not the 14 TB/s that adding (S/C) x B_sram gave."""
    chip = _with_near(dc.load_chip("h100-sxm"), 5.2e8, 5e14)
    chip = eqx.tree_at(lambda c: c.memory_bandwidth_bytes_per_s, chip, jnp.asarray(1e12))
    bw = float(placed_bandwidth_bytes_per_s(chip, 2e10, EXACT))
    assert bw == pytest.approx(1e12 / (1.0 - 5.2e8 / 2e10), rel=1e-5)
    assert bw < 1.05e12


@pytest.mark.parametrize("sm", [EXACT, RELAXED])
def test_one_level_chip_is_unchanged(sm):
    """A catalogue chip (no near level) keeps its datasheet bandwidth and energy exactly."""
    chip = dc.load_chip("h100-sxm")
    placed = placed_chip(chip, 5e10, sm)
    assert float(placed.memory_bandwidth_bytes_per_s) == float(chip.memory_bandwidth_bytes_per_s)
    assert float(placed.energy.memory_j_per_byte) == float(chip.energy.memory_j_per_byte)
    assert float(near_share(chip, 5e10, sm)) == 0.0


def test_placing_twice_changes_nothing_and_energy_is_the_mean():
    chip = _with_near(dc.load_chip("h100-sxm"), 5e9, 5e13, near_j=0.2e-12)
    once = placed_chip(chip, 2e10, EXACT)
    twice = placed_chip(once, 2e10, EXACT)
    assert float(twice.memory_bandwidth_bytes_per_s) == float(once.memory_bandwidth_bytes_per_s)
    f = float(near_share(chip, 2e10, EXACT))
    assert f == pytest.approx(0.25)  # S / W = 5 / 20 < B_n / (B_n + B_f)
    e_far = float(chip.energy.memory_j_per_byte)
    expected = f * 0.2e-12 + (1.0 - f) * e_far
    assert float(once.energy.memory_j_per_byte) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("args", [(0.0, 0.0, 1e12, 1e10), (5e8, 5e14, 1e12, 5e8 * 501.0)])
def test_gradients_finite_at_no_near_level_and_at_the_kink(args):
    """Finite gradients with no near level (S = B_n = 0) and where the two branches of the min
    meet (S / W = B_n / (B_n + B_f))."""
    for sm in (EXACT, RELAXED):
        share = functools.partial(placement_share, sm=sm)
        grads = jax.grad(share, argnums=(0, 1, 2, 3))(*map(jnp.asarray, args))
        assert all(np.isfinite(float(g)) for g in grads)


def test_relaxed_gradient_matches_finite_differences():
    """d log(bandwidth) / d log(SRAM bytes) of the relaxed law against central differences."""
    base = _with_near(dc.load_chip("h100-sxm"), 1e9, 5e14)

    def log_bw(log_s):
        chip = eqx.tree_at(lambda c: c.near_memory.capacity_bytes, base, jnp.exp(log_s))
        return jnp.log(placed_bandwidth_bytes_per_s(chip, 2e10, RELAXED))

    x = jnp.log(1e9)
    g = float(jax.grad(log_bw)(x))
    h = 1e-2
    fd = (float(log_bw(x + h)) - float(log_bw(x - h))) / (2 * h)
    assert g == pytest.approx(fd, rel=1e-2)


def test_serving_gains_from_sram_only_when_the_model_fits():
    """Llama-3-8B bf16 (16 GB) batch-1 decode: 20 GB of SRAM at 100 TB/s beside the H100's HBM
    cuts the weight-read time ~30-fold (the whole set streams at 103 TB/s); 1 GB of it cuts it
    by only ~1 GB / 16 GB."""
    system, model = dc.load_system("dgx-h100", chips=1), dc.load_model("llama-3-8b")
    plan = dc.serve_plan(tp=1, batch=1, input_len=128, output_len=128, weight_format="bf16")

    def decode(near_bytes):
        chip = _with_near(system.chip, near_bytes, 1e14)
        out = dc.ServeCost(eqx.tree_at(lambda s: s.chip, system, chip), model)(plan)
        return float(out.decode_weight_read_s), float(out.tpot_s)

    (read0, tpot0), (read_fit, tpot_fit), (read_small, _) = map(decode, (0.0, 2e10, 1e9))
    assert read_fit < read0 / 25.0 and tpot_fit < tpot0
    assert read_small / read0 == pytest.approx(1.0 - 1e9 / 16.4e9, abs=0.02)


def _placed_with(law, w, sm=EXACT):
    chip = _with_near(dc.load_chip("h100-sxm"), 5e8, 5e14)
    chip = eqx.tree_at(
        lambda c: c.near_memory, chip, dataclasses.replace(chip.near_memory, placement=law)
    )
    return float(placed_bandwidth_bytes_per_s(chip, w, sm))


@pytest.mark.parametrize("w", [1e8, 4e8, 1e9, 5e9, 2e10])
def test_near_first_is_never_faster_than_bandwidth_aware(w):
    """Filling the SRAM first (Agarwal et al. ASPLOS 2015, LOCAL) streams at ``W / max(f W /
    B_n, (1 - f) W / B_f)`` with ``f = min(S / W, 1)``; the default is the best placement."""
    s, b_near, b_far = 5e8, 5e14, float(dc.load_chip("h100-sxm").memory_bandwidth_bytes_per_s)
    f = min(s / w, 1.0)
    want = 1.0 / max(f / b_near, (1.0 - f) / b_far)
    assert _placed_with(NearFirst(), w) == pytest.approx(want, rel=1e-6)
    assert _placed_with(NearFirst(), w) <= _placed_with(None, w) * (1 + 1e-6)
    assert _placed_with(BandwidthProportional(), w) == _placed_with(None, w)
