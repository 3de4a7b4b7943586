"""Common-subexpression elimination before differentiation (diffcost._core.dedupe)."""

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
import pytest

from diffcost.testing import cse_jaxpr, deduplicated


def _repeats(x):
    """The same sub-expression three times, as the cost models' helpers are called."""
    a = jnp.sin(x) * 2.0 + jnp.exp(-x)
    b = jnp.sin(x) * 2.0 + jnp.exp(-x)
    c = jnp.sin(x) * 2.0 + jnp.exp(-x)
    return a * b + c, {"sum": a + b}


def test_repeated_equations_are_merged_and_values_kept():
    closed = jax.make_jaxpr(_repeats)(0.3)
    small = cse_jaxpr(closed)
    assert len(small.jaxpr.eqns) < len(closed.jaxpr.eqns) / 2
    out = jax.core.eval_jaxpr(small.jaxpr, small.consts, 0.3)
    ref = jax.tree.leaves(_repeats(0.3))
    assert [float(v) for v in out] == [float(v) for v in ref]


@pytest.mark.parametrize("x", [-2.0, 0.0, 0.7, 5.0])
def test_values_and_gradients_equal_the_plain_function(x):
    f = lambda x: _repeats(x)[0]  # noqa: E731
    assert float(deduplicated(f)(x)) == float(f(x))
    assert float(jax.grad(deduplicated(f))(x)) == pytest.approx(float(jax.grad(f)(x)), rel=1e-6)
    jitted = jax.jit(jax.grad(deduplicated(f)))
    assert float(jitted(x)) == pytest.approx(float(jax.grad(f)(x)), rel=1e-6)


def test_pytree_outputs_keep_their_structure():
    out = deduplicated(_repeats)(jnp.asarray(0.5))
    ref = _repeats(jnp.asarray(0.5))
    assert jax.tree.structure(out) == jax.tree.structure(ref)


def test_signed_zero_literals_are_not_merged():
    """``x * 0.0`` and ``x * -0.0`` differ in sign (1 / them: +inf and -inf)."""
    f = lambda x: jnp.stack([1.0 / (x * 0.0), 1.0 / (x * -0.0)])  # noqa: E731
    assert np.array_equal(np.asarray(deduplicated(f)(2.0)), [np.inf, -np.inf])


def test_equations_with_effects_are_never_merged():
    seen = []

    def f(x):
        jax.debug.callback(lambda v: seen.append(float(v)), x)
        jax.debug.callback(lambda v: seen.append(float(v)), x)
        return x * 2.0

    jax.block_until_ready(deduplicated(f)(jnp.asarray(1.5)))
    jax.effects_barrier()
    assert seen == [1.5, 1.5]


def test_missing_jaxpr_internals_fall_back_to_the_plain_function(monkeypatch):
    def broken(*args, **kwargs):
        raise AttributeError("no jaxpr internals here")

    monkeypatch.setattr(jax, "make_jaxpr", broken)
    assert float(deduplicated(lambda x: _repeats(x)[0])(0.3)) == float(_repeats(0.3)[0])


def test_the_co_design_model_shrinks_with_the_same_values():
    """The relaxed training model on a chip design (the co-design's largest program): the
    duplicates were most of it (12,006 -> 4,006 equations measured); since each evaluation
    traces its shared terms once (diffcost._core.shared) they are fewer (5,243 -> 3,113)."""
    from diffcost import load_technology
    from diffcost.testing import optimize as o

    problem = o.make_problem("train", load_technology("n4"))
    x = jnp.asarray(o.start_vector(problem))
    f = lambda x: o.evaluate(problem, x)  # noqa: E731
    closed = jax.make_jaxpr(f)(x)
    small = cse_jaxpr(closed)
    assert len(small.jaxpr.eqns) < 0.75 * len(closed.jaxpr.eqns)
    out = jax.core.eval_jaxpr(small.jaxpr, small.consts, x)
    ref = jax.core.eval_jaxpr(closed.jaxpr, closed.consts, x)
    for a, b in zip(out, ref, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
