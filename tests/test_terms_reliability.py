"""Jitter (expected maximum of N arrivals) and Young/Daly goodput: diffcost._terms.reliability."""

import math
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from diffcost import EXACT, RELAXED, SpecError, TrainCost, load_model, load_system, train_plan
from diffcost.testing import (
    checkpoint_interval_s,
    expected_max_normal,
    goodput_fraction,
    jitter_s,
    optimal_wasted_fraction,
    parameter_names,
    sync_wait_s,
    wasted_fraction,
)

SPECS = Path(__file__).resolve().parents[1] / "specs" / "systems"


def exact_expected_max(n: int) -> float:
    """E[max of n standard normals] by quadrature: int x n phi(x) Phi(x)^(n-1) dx."""
    x = np.linspace(-10.0, 10.0, 200_001)
    phi = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))
    return float(np.trapezoid(x * n * phi * cdf ** (n - 1), x))


def test_expected_max_is_zero_for_one_participant():
    assert float(expected_max_normal(1.0)) == 0.0
    assert float(sync_wait_s(1e-3, 1.0)) == 0.0


@pytest.mark.parametrize(("n", "rel_tol"), [(2, 0.05), (8, 0.01), (1024, 0.015)])
def test_expected_max_matches_quadrature(n, rel_tol):
    exact = exact_expected_max(n)
    got = float(expected_max_normal(float(n)))
    assert got == pytest.approx(exact, rel=rel_tol)
    # and grows like sqrt(2 ln n) (Gumbel limit), which overestimates at finite n
    assert got < math.sqrt(2.0 * math.log(n))


def test_expected_max_gradient_is_finite_and_positive():
    n = jnp.asarray([1.0, 1.0001, 2.0, 8.0, 1024.0, 32768.0])
    grads = jax.vmap(jax.grad(expected_max_normal))(n)
    assert bool(jnp.all(jnp.isfinite(grads))) and bool(jnp.all(grads > 0))


def test_young_interval_matches_closed_form_and_minimises_waste():
    delta, restart, lam = 60.0, 600.0, 1.0 / 11_160.0
    tau = float(checkpoint_interval_s(delta, lam))
    assert tau == pytest.approx(math.sqrt(2.0 * delta / lam), rel=1e-5)
    grid = np.linspace(0.2 * tau, 5.0 * tau, 4001)
    waste = np.asarray(wasted_fraction(grid, delta, restart, lam))
    assert float(grid[np.argmin(waste)]) == pytest.approx(tau, rel=2e-3)
    closed = float(optimal_wasted_fraction(delta, restart, lam))
    assert closed == pytest.approx(float(waste.min()), rel=1e-4)


def test_goodput_tends_to_one_without_failures_with_finite_gradients():
    for sm in (EXACT, RELAXED):
        fractions = [float(goodput_fraction(60.0, 600.0, lam, sm)) for lam in (1e-3, 1e-5, 1e-9)]
        assert fractions[0] < fractions[1] < fractions[2] < 1.0
        assert float(goodput_fraction(60.0, 600.0, 0.0, sm)) == 1.0
        grads = jax.grad(goodput_fraction, argnums=(0, 1, 2))(60.0, 600.0, 0.0, sm)
        assert all(bool(jnp.isfinite(g)) for g in grads)


def _train(system):
    model = load_model("llama-3-8b")
    plan = train_plan(tp=8, dp=8, global_batch=64, seq_len=2048)
    return TrainCost(system, model)(plan)


def _with_jitter(system, sigma_s=20e-6):
    """The shipped systems count no jitter (no measured value): set one for the physics."""
    return eqx.tree_at(lambda s: s.reliability.collective_jitter_s, system, jnp.asarray(sigma_s))


def test_zero_jitter_and_no_failures_leave_the_step_unchanged():
    system = _with_jitter(load_system("dgx-h100", chips=64))
    quiet = eqx.tree_at(
        lambda s: (s.reliability.collective_jitter_s, s.reliability.failures_per_chip_s),
        system,
        (jnp.asarray(0.0), jnp.asarray(0.0)),
    )
    noisy, calm = _train(system), _train(quiet)
    assert float(calm.jitter_time_s) == 0.0
    assert float(noisy.jitter_time_s) > 0.0
    assert float(calm.step_time_s) == float(noisy.step_time_s - noisy.jitter_time_s)
    assert float(calm.goodput_tokens_per_s) == float(calm.tokens_per_s)
    assert 0.0 < float(noisy.goodput_tokens_per_s) < float(noisy.tokens_per_s)
    assert float(noisy.checkpoint_interval_s) > 0.0 and float(calm.checkpoint_interval_s) == 0.0


def test_dataflow_system_has_no_jitter():
    assert float(load_system("groqrack").reliability.collective_jitter_s) == 0.0


def test_negative_jitter_is_refused_naming_file_and_key(tmp_path):
    text = (SPECS / "dgx-h100.toml").read_text()
    bad = tmp_path / "bad-h100.toml"
    bad.write_text(
        text.replace("collective_jitter_us = 0.0", "collective_jitter_us = -1.0").replace(
            'name = "dgx-h100"', 'name = "bad-h100"'
        )
    )
    with pytest.raises(SpecError) as err:
        load_system(bad)
    message = str(err.value)
    assert "bad-h100.toml" in message
    assert "reliability.collective_jitter_us" in message and "negative" in message


def test_reliability_fields_are_a_sensitivity_group_with_finite_gradients():
    system, model = _with_jitter(load_system("dgx-h100", chips=64)), load_model("llama-3-8b")
    names = parameter_names((system, model))
    assert ("system.reliability.collective_jitter_s", "reliability") in names
    assert ("system.reliability.failures_per_chip_s", "reliability") in names
    plan = train_plan(tp=8, dp=8, global_batch=64, seq_len=2048)
    grad = eqx.filter_grad(lambda s: jitter_s(s, model, plan))(system)
    d_sigma = float(grad.reliability.collective_jitter_s)
    # d jitter / d sigma = jitter / sigma (linear in sigma), > 0 with tp = 8 and 64 chips
    expected = float(jitter_s(system, model, plan)) / float(system.reliability.collective_jitter_s)
    assert d_sigma == pytest.approx(expected, rel=1e-5) and d_sigma > 0


def test_expected_max_is_finite_and_c1_below_one_participant():
    """A relaxed search's degrees go below 1; the Blom form is inf at n = a and NaN below, and
    0 * inf made the relaxed training objective NaN (slow search-vs-oracle tests)."""
    ns = jnp.asarray([0.0, 0.2, 0.375, 0.999, 1.0, 1.001])
    values = jax.vmap(expected_max_normal)(ns)
    grads = jax.vmap(jax.grad(expected_max_normal))(ns)
    assert bool(jnp.all(jnp.isfinite(values))) and bool(jnp.all(jnp.isfinite(grads)))
    assert float(values[4]) == 0.0 and float(values[3]) < 0.0
    assert float(grads[3]) == pytest.approx(float(grads[5]), rel=1e-2)  # C1 at n = 1
