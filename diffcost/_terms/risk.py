"""The upper quantile of a log-normal prediction: its log sigma through the calibrated constants
(delta method, :mod:`diffcost._analysis.uncertainty`) and the p90 a risk-aware search ranks by.
"""

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp

from .._inputs import calibration as C
from .._inputs.posterior import Risk

#: Standard normal quantile of 0.9: the nominal 80% interval is ``exp(+-Z80 sigma)``.
Z80 = 1.2815515655446004


def scaled_efficiency(cost: Any, log_scale: jax.Array) -> Any:
    """A cost model whose calibrated constants are multiplied by ``exp(log_scale)``."""
    eff = cost.system.efficiency
    new = tuple(
        getattr(eff, n) * jnp.exp(log_scale[k]).astype(jnp.result_type(getattr(eff, n)))
        for k, n in enumerate(C.NAMES)
    )
    eff = eqx.tree_at(lambda e: tuple(getattr(e, n) for n in C.NAMES), eff, new)
    return eqx.tree_at(lambda c: c.system.efficiency, cost, eff)


def log_sigma(cost: Any, plan: Any, name: str, risk: Risk, layout_weight: Any) -> jax.Array:
    """Log standard deviation of output ``name`` of ``cost(plan)``
    (:mod:`diffcost._analysis.uncertainty`):
    ``sqrt(g Sigma g + (1 - w) d_family^2 + w d_layout^2)``, ``g = d log y / d log v`` by
    reverse mode (one scalar output), ``w`` the plan's layout weight."""

    def f(d):
        return jnp.log(getattr(scaled_efficiency(cost, d)(plan), name))

    zero = jnp.zeros(len(C.NAMES), dtype=cost.system.efficiency.matmul_peak_fraction.dtype)
    g = jax.grad(f)(zero)
    g = jnp.where(jnp.isfinite(g), g, 0.0)  # an infeasible plan's inf output: no gradient
    cov = risk.cov.astype(g.dtype)
    disc = (1.0 - layout_weight) * risk.family_var + layout_weight * risk.layout_var
    return jnp.sqrt(g @ cov @ g + disc)


def upper_quantile(y: Any, sigma: Any) -> jax.Array:
    """The p90 of a log-normal output of median ``y`` and log sigma ``sigma``:
    ``y exp(Z80 sigma)`` (units of ``y``)."""
    return jnp.asarray(y) * jnp.exp(Z80 * jnp.asarray(sigma))


__all__ = ["Z80", "log_sigma", "scaled_efficiency", "upper_quantile"]
