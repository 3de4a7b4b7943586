"""Smooth primitives: the one place where max, min, clip, ceil and divisibility are relaxed.

Every non-smooth step of the cost models goes through this module.  Each primitive takes a
:class:`Smoothing` (static configuration): ``EXACT`` gives the hard function, ``RELAXED`` a C1
relaxation whose gradients are finite everywhere and whose hard limit is the exact function.

Two kinds of relaxation, chosen so that the relaxed model *equals* the exact one where it matters:

* integer-structured steps (clips and minima of parallel degrees and micro-batch counts,
  indicators such as ``pp == 1``, ``ceil``) use a transition confined to the open interval
  between two integers, so the relaxed value is exactly the hard value at every integer point;
* maxima of continuous quantities (overlapped compute and communication times) use a C1 blend of
  width ``rel_width * (|a| + |b|)``; it is exact whenever the two differ by more than that width
  and converges to the hard maximum as ``rel_width -> 0``.

The blend is the quartic ``q(u) = 1.5 u^2 - 0.5 u^4`` for ``|u| < 1`` and ``|u|`` outside: it
matches ``|u|`` in value and slope at ``|u| = 1``, so ``w * q(z / w)`` is a C1 absolute value
that is exact for ``|z| >= w``.
"""

from dataclasses import dataclass

import jax.numpy as jnp
from jax import lax
from jaxtyping import Array, ArrayLike, Float

_TINY = 1e-30
#: Floor of a blend width.  The gradient of ``z / width`` divides by ``width**2``, which must
#: not underflow in float32 (smallest normal 1.2e-38) when both arguments are exactly zero
#: (e.g. the prefill attention of a decode-only pass).  Physical widths are >= ~1e-9.
_WIDTH_FLOOR = 1e-18


@dataclass(frozen=True)
class Smoothing:
    """Static relaxation setting (hashable, so it can be a static field of a Module).

    Attributes:
        relaxed: False for the exact (hard) model, True for the smooth relaxation.
        rel_width: relative width of the blend used for maxima of continuous quantities.
    """

    relaxed: bool = False
    rel_width: float = 0.05


EXACT = Smoothing(relaxed=False)
RELAXED = Smoothing(relaxed=True)


def _quartic_abs(z: Array, width: ArrayLike) -> Array:
    """C1 absolute value: ``|z|`` for ``|z| >= width``, ``width * (1.5 u^2 - 0.5 u^4)`` inside."""
    u = z / width
    # The quartic is evaluated on u clipped to [-1, 1]: outside, where it is not selected, an
    # unclipped u**4 can overflow (a tiny width in float32) and its zero cotangent times inf
    # would put NaN into the gradient of the selected branch.
    uc = _clip(u, -1.0, 1.0)
    inside = width * (1.5 * uc**2 - 0.5 * uc**4)
    return _select(jnp.abs(u) >= 1.0, jnp.abs(z), inside)


def _clip(x: Array, lo: float, hi: float) -> Array:
    """``clip(x, lo, hi)`` as two primitives (``jnp.clip`` adds a nested program per call)."""
    return jnp.minimum(jnp.maximum(x, lo), hi)


def _select(cond: Array, a: ArrayLike, b: ArrayLike) -> Array:
    """``where(cond, a, b)`` as one ``select`` (``jnp.where`` adds a nested program per call);
    the operands broadcast to a common shape and dtype first."""
    a, b = jnp.asarray(a), jnp.asarray(b)
    dtype = jnp.result_type(a, b)
    cond, a, b = jnp.broadcast_arrays(cond, a.astype(dtype), b.astype(dtype))
    return lax.select(cond, a, b)


def smax(a: ArrayLike, b: ArrayLike, sm: Smoothing, *, integer: bool = False) -> Array:
    """``max(a, b)``.

    ``integer=True``: for integer-valued arguments (degrees, counts); the relaxation is exact
    whenever ``a - b`` is an integer.  Otherwise the blend width is
    ``sm.rel_width * (|a| + |b|)``, exact whenever ``|a - b|`` exceeds it.
    """
    a, b = jnp.asarray(a), jnp.asarray(b)
    if not sm.relaxed:
        return jnp.maximum(a, b)
    width = 1.0 if integer else sm.rel_width * (jnp.abs(a) + jnp.abs(b)) + _WIDTH_FLOOR
    return 0.5 * (a + b + _quartic_abs(a - b, width))


def smin(a: ArrayLike, b: ArrayLike, sm: Smoothing, *, integer: bool = False) -> Array:
    """``min(a, b)``; see :func:`smax` for the relaxation."""
    a, b = jnp.asarray(a), jnp.asarray(b)
    if not sm.relaxed:
        return jnp.minimum(a, b)
    width = 1.0 if integer else sm.rel_width * (jnp.abs(a) + jnp.abs(b)) + _WIDTH_FLOOR
    return 0.5 * (a + b - _quartic_abs(a - b, width))


def relu(z: ArrayLike, sm: Smoothing, *, scale: ArrayLike | None = None) -> Array:
    """``max(z, 0)``.  ``scale`` sets the blend width (``sm.rel_width * scale``) for continuous z.

    Without ``scale`` the argument is treated as integer-valued (width 1).
    """
    z = jnp.asarray(z)
    if not sm.relaxed:
        return jnp.maximum(z, 0.0)
    width = 1.0 if scale is None else sm.rel_width * jnp.abs(jnp.asarray(scale)) + _WIDTH_FLOOR
    return 0.5 * (z + _quartic_abs(z, width))


def clip01(x: ArrayLike, sm: Smoothing) -> Array:
    """``clip(x, 0, 1)``; relaxed by the smoothstep ``3x^2 - 2x^3`` on (0, 1): exact at integers."""
    x = jnp.asarray(x)
    u = _clip(x, 0.0, 1.0)
    if not sm.relaxed:
        return u
    return u * u * (3.0 - 2.0 * u)


def step(x: ArrayLike, sm: Smoothing) -> Array:
    """Heaviside ``1 if x >= 0 else 0``; relaxed on (-1, 0), so exact at every integer."""
    x = jnp.asarray(x)
    if not sm.relaxed:
        return (x >= 0.0).astype(jnp.result_type(x, float))
    return clip01(x + 1.0, sm)


def is_one(x: ArrayLike, sm: Smoothing) -> Array:
    """``1 if x <= 1 else 0`` for a degree ``x >= 1``; relaxed on (1, 2), exact at integers."""
    return step(1.0 - jnp.asarray(x), sm)


def ceil(x: ArrayLike, sm: Smoothing) -> Array:
    """``ceil(x)``; relaxed as ``x`` itself (exact at integers, continuous, unbiased by 1/2)."""
    x = jnp.asarray(x)
    if not sm.relaxed:
        return jnp.ceil(x)
    return x


def divisibility_violation(x: ArrayLike, sm: Smoothing) -> Float[Array, "..."]:
    """How far ``x`` is from an integer: 0 iff x is an integer (e.g. ``heads / tp``).

    Exact: ``(x - round(x))^2``; relaxed: ``sin(pi x)^2 / pi^2``, smooth and zero at integers.
    """
    x = jnp.asarray(x)
    if not sm.relaxed:
        # lax.round to nearest even is jnp.round's rule, as one primitive
        return (x - lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN)) ** 2
    return (jnp.sin(jnp.pi * x) / jnp.pi) ** 2


def mix(weights: Float[Array, " k"], values: Float[Array, "... k"]) -> Array:
    """Categorical choice relaxed to a mixture: exact when ``weights`` is one-hot."""
    return jnp.sum(jnp.asarray(weights) * jnp.asarray(values), axis=-1)


def safe_div(a: ArrayLike, b: ArrayLike) -> Array:
    """``a / b`` with ``b`` kept away from zero (finite gradients for degenerate inputs)."""
    return jnp.asarray(a) / jnp.maximum(jnp.asarray(b), _TINY)
