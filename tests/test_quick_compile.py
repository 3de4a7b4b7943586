"""Quick compilation: the same values as ``jax.jit``, usable inside other transformations, and
the defaults where XLA does not know an option."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from diffcost.testing import quick_compile as qc


def _f(x):
    return jnp.sum(jnp.sin(x) * jnp.exp(-x)) + jnp.prod(1.0 + x)


def test_quick_jit_equals_jit_and_composes():
    x = jnp.linspace(0.1, 1.0, 5)
    fast = qc.quick_jit(_f)
    np.testing.assert_allclose(fast(x), jax.jit(_f)(x), rtol=1e-6)
    # inside vmap, jit and grad (compile options are taken by the outermost program only)
    xs = jnp.stack([x, 2.0 * x])
    np.testing.assert_allclose(jax.jit(jax.vmap(fast))(xs), jax.vmap(_f)(xs), rtol=1e-6)
    np.testing.assert_allclose(jax.grad(fast)(x), jax.grad(_f)(x), rtol=1e-6)


def test_compile_quickly_equals_the_default_compile():
    x = jnp.linspace(0.1, 1.0, 5)
    lowered = jax.jit(jax.grad(_f)).lower(x)
    np.testing.assert_allclose(qc.compile_quickly(lowered)(x), lowered.compile()(x), rtol=1e-6)


def test_an_unknown_option_falls_back_to_the_defaults(monkeypatch):
    # an option this XLA does not know (renamed in another release) must not break the program
    monkeypatch.setattr(qc, "QUICK_COMPILE", {"xla_no_such_option_for_diffcost": 1})
    x = jnp.linspace(0.1, 1.0, 5)
    assert float(qc.quick_jit(_f)(x)) == pytest.approx(float(_f(x)), rel=1e-6)
    lowered = jax.jit(_f).lower(x)
    assert float(qc.compile_quickly(lowered)(x)) == pytest.approx(float(_f(x)), rel=1e-6)


def test_another_compile_error_is_raised(monkeypatch):
    # only an unknown option falls back: a bad value of a known one is the caller's error
    monkeypatch.setattr(qc, "QUICK_COMPILE", {"xla_backend_optimization_level": "fast"})
    with pytest.raises(jax.errors.JaxRuntimeError, match="not a valid"):
        qc.compile_quickly(jax.jit(_f).lower(jnp.ones(3)))


def test_other_back_ends_compile_with_the_defaults(monkeypatch):
    # measured on an H200: the options slowed a large GPU compile (module docstring)
    assert qc._options() == qc.QUICK_COMPILE  # this suite runs on the CPU
    monkeypatch.setattr(qc.jax, "default_backend", lambda: "gpu")
    assert qc._options() is None
    x = jnp.linspace(0.1, 1.0, 5)
    assert float(qc.quick_jit(_f)(x)) == pytest.approx(float(_f(x)), rel=1e-6)
