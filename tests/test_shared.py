"""diffcost._core.shared: a memo scoped to one evaluation, never across traces."""

import chex
import jax
import jax.numpy as jnp

import diffcost as dc
from diffcost import EXACT, RELAXED
from diffcost.testing import evaluation, once

calls: list[object] = []


@once
def _double(x, sm=EXACT):
    calls.append(x)
    return 2.0 * jnp.asarray(x)


def test_within_an_evaluation_a_repeat_is_not_recomputed():
    calls.clear()
    x = jnp.asarray(1.5)
    with evaluation():
        a, b = _double(x), _double(x)
        _double(x, RELAXED)  # another plain value: another entry
    assert a is b and len(calls) == 2


def test_outside_an_evaluation_every_call_computes():
    calls.clear()
    x = jnp.asarray(1.5)
    _double(x)
    _double(x)
    assert len(calls) == 2


def test_plain_values_are_keyed_by_value_and_arrays_by_identity():
    calls.clear()
    with evaluation():
        _double(3.0)
        _double(3.0)
        _double(jnp.asarray(3.0))
        _double(jnp.asarray(3.0))
    assert len(calls) == 3


def test_nested_trace_computes_afresh_and_nothing_leaks():
    """A value first computed inside a loop body (an inner trace) is not served outside it,
    and one computed outside is not served inside (no escaped tracer)."""

    def f(x):
        with evaluation():
            inside = jax.lax.fori_loop(0, 2, lambda i, c: c + _double(x), 0.0)
            return inside + _double(x)

    assert float(jax.jit(f)(1.0)) == 6.0


def test_each_evaluation_starts_empty_and_restores_the_outer_one():
    calls.clear()
    x = jnp.asarray(1.0)
    with evaluation():
        _double(x)
        with evaluation():
            _double(x)
        _double(x)
    assert len(calls) == 2


def test_the_cost_models_trace_each_shared_term_once():
    """Without the memo the training step repeats its shared terms (8,170 equations measured
    before it, 2,290 of them distinct)."""
    cost = dc.TrainCost(dc.load_system("dgx-h100", chips=64), dc.load_model("llama-2-70b"))
    plan = dc.train_plan(tp=8, pp=2, dp=4, micro_batch=1)
    with_memo = len(jax.make_jaxpr(cost)(plan).jaxpr.eqns)
    without = len(jax.make_jaxpr(lambda p: cost._evaluate(p))(plan).jaxpr.eqns)
    assert with_memo < 0.6 * without
    chex.assert_trees_all_close(
        jax.jit(lambda p: cost(p))(plan), jax.jit(lambda p: cost._evaluate(p))(plan), rtol=1e-6
    )
