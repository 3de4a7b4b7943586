"""Smooth primitives: exact at their hard limit and at integers, C1, finite gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from diffcost.testing import smooth as sm_

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
        lambda x: sm_.ceil_div(x, 1.3, RELAXED),
        lambda x: sm_.excess(x - 1.0, RELAXED, scale=20.0),
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


@pytest.mark.parametrize("b", [1.0, 2.0, 3.0, 16.0, 32.0])
def test_ceil_div_exact_at_every_integer_count(b):
    """``ceil(n / b)`` at every integer n (n / b itself mostly not an integer): exact relaxed."""
    n = jnp.arange(0.0, 130.0)
    hard = np.ceil(np.arange(0.0, 130.0) / b)
    np.testing.assert_array_equal(sm_.ceil_div(n, b, RELAXED), hard)
    np.testing.assert_array_equal(sm_.ceil_div(n, b, EXACT), hard)
    # the ramp lies between the attainable values: monotone and C1 inside (k b, k b + 1)
    x = jnp.linspace(0.0, 100.0, 20001)
    v = np.asarray(sm_.ceil_div(x, b, RELAXED))
    assert np.all(np.diff(v) >= 0) and np.all(v >= np.floor(np.asarray(x) / b))


def test_paged_kv_relaxed_ceil_is_exact():
    """Issue 39: 16 tokens in blocks of 32 relaxed to 0.5 blocks (KV cache -47%)."""
    assert float(sm_.ceil_div(16.0, 32.0, RELAXED)) == 1.0
    assert float(sm_.ceil_div(33.0, 32.0, RELAXED)) == 2.0


def test_excess_is_one_sided_and_exact_outside_its_ramp():
    z = jnp.linspace(-3.0, 3.0, 601)
    v = np.asarray(sm_.excess(z, RELAXED, scale=10.0))  # width 0.5
    zn = np.asarray(z)
    assert np.all(v >= 0) and np.all(v <= np.maximum(zn, 0) + 1e-15)
    np.testing.assert_array_equal(v[zn <= 0], 0.0)
    np.testing.assert_array_equal(v[zn >= 0.5], zn[zn >= 0.5])
    np.testing.assert_array_equal(sm_.excess(z, EXACT, scale=10.0), np.maximum(zn, 0))


@pytest.mark.parametrize("fn", [sm_.smin, sm_.smax])
def test_blends_have_no_cancellation_far_outside_the_band_in_float32(fn):
    """Issue 39: ``0.5 (1 + 3.3e7 - |1 - 3.3e7|)`` is 0 in float32; the relaxed min of 1 and
    3.3e7 (the continuous batch of a 4-token prompt, 63,968 output tokens) was 0 and TPOT NaN."""
    one, big = jnp.float32(1.0), jnp.float32(32_768_000.0)
    hard = np.minimum if fn is sm_.smin else np.maximum
    for integer in (False, True):
        assert float(fn(one, big, RELAXED, integer=integer)) == float(hard(1.0, 32_768_000.0))
    assert float(sm_.relu(one - big, RELAXED, scale=big)) == 0.0


def test_divisibility_violation_is_exactly_zero_at_large_integers_in_float32():
    x = jnp.asarray([2.0**20, 3.0 * 2**18, 1e6 + 1.0], dtype=jnp.float32)
    np.testing.assert_array_equal(sm_.divisibility_violation(x, RELAXED), 0.0)
