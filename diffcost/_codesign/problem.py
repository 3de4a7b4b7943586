"""The co-design problem: the log vector of a design and its plans, its objective and the
log budget constraints (module docstring of :mod:`.optimize`), and the projected adam step on
the augmented Lagrangian.  Below :mod:`.optimize` and :mod:`.parts`, which both build on it."""

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np

from .._core.smooth import RELAXED
from .design import ChipDesign, design_area_mm2, design_cost_usd
from .technology import Technology
from .workloads import Workload, relaxed_objective

#: Design leaves (the order of the log vector) and their box ``(low, high)`` in the leaves'
#: units (mm^2, MB, stacks, channels, GB/s, GHz); "none" is the low end for the optional parts.
LOG_BOX: dict[str, tuple[float, float]] = {
    "matrix_area_mm2": (1.0, 3000.0),
    "int_area_mm2": (0.01, 3000.0),
    "sram_mb": (1.0, 2000.0),
    "hbm_stacks": (0.01, 12.0),
    "lpddr_channels": (0.01, 32.0),
    "scale_up_gb_per_s": (1.0, 3000.0),
    "scale_out_gb_per_s": (1.0, 1000.0),
    "clock_ghz": (0.3, 3.0),
}
LEAVES = tuple(LOG_BOX)
BUDGETS = ("area_mm2", "power_w", "cost_usd")
_BOX = np.log(np.asarray([LOG_BOX[k] for k in LEAVES]))


def to_design(z: jax.Array) -> ChipDesign:
    """The design of a log vector (order :data:`LEAVES`), its stacks and channels bought by
    the smooth staircase (RELAXED ``counting``: :func:`.design.bought_counts`)."""
    return ChipDesign(**{k: jnp.exp(z[i]) for i, k in enumerate(LEAVES)}, counting=RELAXED)


def from_design(design: ChipDesign) -> np.ndarray:
    """The log vector of a design, projected into :data:`LOG_BOX`."""
    z = np.log(np.asarray([float(getattr(design, k)) for k in LEAVES]))
    return np.clip(z, _BOX[:, 0], _BOX[:, 1])


@dataclass(frozen=True)
class Problem:
    """A co-design problem: workloads with weights, technology, budgets; the flat vector
    ``x = [log design (8), plan parameters of each workload]``."""

    workloads: tuple[Workload, ...]
    weights: tuple[float, ...]
    tech: Technology = field(repr=False)
    budgets: tuple[float, float, float]

    def sizes(self) -> list[int]:
        return [len(LEAVES)] + [len(w.theta0) for w in self.workloads]

    def split(self, x: jax.Array) -> tuple[jax.Array, list[jax.Array]]:
        cuts = np.cumsum(self.sizes())
        parts = [x[a:b] for a, b in zip([0, *cuts[:-1]], cuts, strict=True)]
        return parts[0], parts[1:]

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Box of ``x``: the design's log box; plan parameters within their log2 bounds
        (softmax logits in [-3, 3])."""
        lo, hi = [_BOX[:, 0]], [_BOX[:, 1]]
        for w in self.workloads:
            m = len(w.theta0) - len(w.lo)
            lo.append(np.concatenate([w.lo, -3.0 * np.ones(m)]))
            hi.append(np.concatenate([w.hi, 3.0 * np.ones(m)]))
        return np.concatenate(lo), np.concatenate(hi)


def evaluate(problem: Problem, x: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(f, plan penalty, g)`` at ``x``: weighted log objective, weighted plan penalty, and
    the log constraint values ``log(c / budget)`` for area, power and cost."""
    z, thetas = problem.split(x)
    design, tech = to_design(z), problem.tech
    f, pen, powers = jnp.asarray(0.0), jnp.asarray(0.0), []
    for w, weight, th in zip(problem.workloads, problem.weights, thetas, strict=True):
        log_obj, p, power_w = relaxed_objective(w, design, tech, th)
        f, pen = f + weight * log_obj, pen + weight * p
        powers.append(power_w)
    return f, pen, log_budgets(problem, design, workload_power_w(jnp.stack(powers)))


def workload_power_w(powers_w: jax.Array) -> jax.Array:
    """The power a design must deliver for workloads of mean chip powers ``powers_w`` (W): the
    largest, smoothed by a log-sum-exp of temperature 1% (within 1% x ln(count) above the
    maximum: 1.1% for three workloads; exact for one).  Smooth so that the multiplier's
    gradient flows to every workload near the maximum."""
    t = 0.01
    logs = jnp.log(powers_w)
    return jnp.exp(t * jax.nn.logsumexp(logs / t))


def log_budgets(problem: Problem, design: ChipDesign, power_w: jax.Array) -> jax.Array:
    """The log constraint values ``log(c / budget)`` (dimensionless) of :func:`evaluate`: die
    area (mm^2), the workloads' power ``power_w`` (W, :func:`workload_power_w`) and
    manufacturing cost (USD, RELAXED die count)."""
    tech = problem.tech
    used = jnp.stack(
        [design_area_mm2(design, tech), power_w, design_cost_usd(design, tech, RELAXED)]
    )
    return jnp.log(used / jnp.asarray(problem.budgets))


def augmented_lagrangian(f, g, lam, rho) -> jax.Array:
    """PHR augmented Lagrangian of ``f`` with inequalities ``g <= 0`` (Nocedal & Wright
    eq. 17.65), dimensionless."""
    return f + jnp.sum(jnp.square(jax.nn.relu(lam + rho * g)) - jnp.square(lam)) / (2.0 * rho)


def projected_adam(opt, grad, state, x, bounds, update):
    """One adam step of ``x`` projected onto the box ``bounds = (lo, hi)`` (non-finite gradient
    entries taken as 0), or ``(x, state)`` unchanged where ``update`` is False (the scoring
    evaluation at the end of an outer iteration)."""
    import optax  # imported here: only co-design needs it

    grad = jnp.where(jnp.isfinite(grad), grad, 0.0)
    updates, new_state = opt.update(grad, state, x)
    new_x = jnp.clip(jnp.asarray(optax.apply_updates(x, updates)), *bounds)
    keep = lambda old, new: jnp.where(update, new, old)  # noqa: E731
    return jax.tree.map(keep, (x, state), (new_x, new_state))


__all__ = [
    "BUDGETS",
    "LEAVES",
    "LOG_BOX",
    "Problem",
    "augmented_lagrangian",
    "evaluate",
    "from_design",
    "log_budgets",
    "projected_adam",
    "to_design",
    "workload_power_w",
]
