"""The traced programs stay within their equation budgets (diffcost._analysis.program_size)."""

import jax
import jax.numpy as jnp
import pytest

from diffcost.testing import PROGRAM_BUDGETS as BUDGETS
from diffcost.testing import SLACK, TARGETS, count_equations, program_sizes


@pytest.fixture(scope="module")
def sizes() -> dict[str, int]:
    return program_sizes()


@pytest.mark.parametrize("name", sorted(BUDGETS))
def test_program_within_its_budget(sizes, name):
    assert sizes[name] <= (1.0 + SLACK) * BUDGETS[name], (
        f"{name}: {sizes[name]} jaxpr equations, budget {BUDGETS[name]} (+{SLACK:.0%}); "
        "a change that grows the program says so and raises the budget"
    )


def test_every_target_has_a_budget():
    assert set(TARGETS) <= set(BUDGETS)


def test_count_includes_nested_bodies():
    def f(x):
        inner = jax.jit(lambda y: jnp.sin(y) * 2.0)
        return jax.lax.fori_loop(0, 3, lambda i, c: c + inner(c), x)

    closed = jax.make_jaxpr(f)(1.0)
    assert count_equations(closed) > len(closed.jaxpr.eqns)
    flat = jax.make_jaxpr(lambda x: x * 2.0 + 1.0)(1.0)
    assert count_equations(flat) == 2
