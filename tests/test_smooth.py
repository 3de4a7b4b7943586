"""Smooth primitives: exact at their hard limit and at integers, C1, finite gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from diffcost._core import smooth as sm_

EXACT, RELAXED = sm_.EXACT, sm_.RELAXED
INTS = jnp.arange(-5.0, 6.0)


@pytest.mark.parametrize(
    "fn,hard",
    [
        (lambda x, s: sm_.clip01(x, s), lambda x: np.clip(x, 0, 1)),
        (lambda x, s: sm_.step(x, s), lambda x: (x >= 0).astype(float)),
        (lambda x, s: sm_.is_one(x, s), lambda x: (x <= 1).astype(float)),
        (lambda x, s: sm_.relu(x, s), lambda x: np.maximum(x, 0)),
        (lambda x, s: sm_.smax(x, 2.0, s, integer=True), lambda x: np.maximum(x, 2.0)),
        (lambda x, s: sm_.smin(x, 2.0, s, integer=True), lambda x: np.minimum(x, 2.0)),
        (lambda x, s: sm_.ceil(x, s), np.ceil),
    ],
)
def test_integer_structured_relaxations_are_exact_at_integers(fn, hard):
    np.testing.assert_allclose(fn(INTS, RELAXED), hard(np.asarray(INTS)), atol=1e-15)
    np.testing.assert_allclose(fn(INTS, EXACT), hard(np.asarray(INTS)), atol=0)


def test_continuous_max_exact_outside_its_blend_and_converges():
    a = jnp.linspace(0.1, 10.0, 101)
    b = 3.0
    exact = np.maximum(a, b)
    relaxed = sm_.smax(a, b, RELAXED)
    width = RELAXED.rel_width * (a + b)
    far = np.abs(a - b) >= width
    np.testing.assert_allclose(relaxed[far], exact[far], rtol=1e-14)
    # q(u) = 1.5u^2 - 0.5u^4 <= |u| (so ties of integers stay exact); the gap peaks at
    # u = (sqrt(3) - 1)/2 where |u| - q(u) = 0.174, i.e. the max is low by at most 0.087 w.
    assert np.all(relaxed <= exact + 1e-12)
    assert np.all(exact - relaxed <= 0.0872 * width + 1e-12)
    sharp = sm_.smax(a, b, sm_.Smoothing(True, rel_width=1e-8))
    np.testing.assert_allclose(sharp, exact, rtol=1e-8)
    # symmetric in its arguments
    np.testing.assert_allclose(sm_.smax(b, a, RELAXED), relaxed, rtol=1e-14)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: sm_.smax(x, 1.5, RELAXED),
        lambda x: sm_.smin(x, 1.5, RELAXED, integer=True),
        lambda x: sm_.relu(x - 1.0, RELAXED, scale=2.0),
        lambda x: sm_.clip01(x - 0.5, RELAXED),
        lambda x: sm_.divisibility_violation(x, RELAXED),
    ],
)
def test_gradients_are_finite_continuous_and_match_fd(fn):
    xs = jnp.linspace(0.01, 3.0, 300)
    g = jax.vmap(jax.grad(fn))(xs)
    assert bool(jnp.all(jnp.isfinite(g)))
    eps = 1e-7
    fd = (jax.vmap(fn)(xs + eps) - jax.vmap(fn)(xs - eps)) / (2 * eps)
    np.testing.assert_allclose(g, fd, atol=1e-5)
    # C1: no jumps in the derivative between neighbouring points
    assert float(jnp.max(jnp.abs(jnp.diff(g)))) < 0.2


def test_grad_finite_at_degenerate_points():
    for fn in [
        lambda x: sm_.smax(x, 0.0, RELAXED),
        lambda x: sm_.smin(x, x, RELAXED),
        lambda x: sm_.relu(x, RELAXED, scale=x),
    ]:
        assert bool(jnp.isfinite(jax.grad(fn)(0.0)))


def test_divisibility_violation_zero_iff_integer():
    assert float(sm_.divisibility_violation(8.0, EXACT)) == 0.0
    assert float(sm_.divisibility_violation(8.0, RELAXED)) < 1e-28
    assert float(sm_.divisibility_violation(8.5, EXACT)) == 0.25
    assert float(sm_.divisibility_violation(8.5, RELAXED)) > 0.09


def test_mix_is_exact_for_one_hot():
    values = jnp.asarray([1.0, 10.0, 100.0])
    assert float(sm_.mix(jnp.asarray([0.0, 1.0, 0.0]), values)) == 10.0


def test_relaxed_blend_gradient_finite_at_zero_in_float32():
    """smax/smin/relu of two exact zeros (e.g. the prefill attention of a decode-only pass):
    the blend width's floor must survive squaring in float32, or the gradient is 0/0."""
    zero = jnp.zeros((), jnp.float32)
    for fn in (
        lambda a, b: sm_.smax(a, b, sm_.RELAXED),
        lambda a, b: sm_.smin(a, b, sm_.RELAXED),
        lambda a, b: sm_.relu(a - b, sm_.RELAXED, scale=a + b),
    ):
        ga, gb = jax.grad(fn, argnums=(0, 1))(zero, zero)
        assert ga.dtype == jnp.float32
        assert bool(jnp.isfinite(ga)) and bool(jnp.isfinite(gb))


def test_relaxed_blend_gradient_finite_far_outside_the_band_in_float32():
    """Far outside a tiny band the unselected quartic would overflow (u**4 = inf); its zero
    cotangent times inf must not reach the gradient."""
    a = jnp.asarray(1e-12, jnp.float32)
    b = jnp.zeros((), jnp.float32)
    g = jax.grad(lambda x: sm_.smax(x, b, sm_.Smoothing(relaxed=True, rel_width=1e-30)))(a)
    assert bool(jnp.isfinite(g))
