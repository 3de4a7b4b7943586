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
that is exact for ``|z| >= w``; there the blends select the hard function itself, so they are
the hard value to the last bit (no cancellation in ``(a + b + |a - b|) / 2``).
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


def _quartic_abs(z: Array, width: ArrayLike) -> tuple[Array, ArrayLike]:
    """C1 absolute value inside the blend: ``(outside, width * (1.5 u^2 - 0.5 u^4))`` with
    ``u = z / width`` and ``outside = |u| >= 1``, where the blend is ``|z|`` itself.

    Callers select the hard function outside rather than writing ``max(a, b)`` as
    ``(a + b + |a - b|) / 2`` there: that sum cancels catastrophically when ``|a| >> |b|``
    (float32 ``0.5 * (1 + 3.3e7 - (3.3e7 - 1))`` is 0: a relaxed ``min(1, 3.3e7)`` of 0 and
    a NaN TPOT downstream), while the hard function is exact."""
    u = z / width
    # The quartic is evaluated on u clipped to [-1, 1]: outside, where it is not selected, an
    # unclipped u**4 can overflow (a tiny width in float32) and its zero cotangent times inf
    # would put NaN into the gradient of the selected branch.
    uc = _clip(u, -1.0, 1.0)
    return jnp.abs(u) >= 1.0, width * (1.5 * uc**2 - 0.5 * uc**4)


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
    outside, inside = _quartic_abs(a - b, width)
    return _select(outside, jnp.maximum(a, b), 0.5 * (a + b + inside))


def smin(a: ArrayLike, b: ArrayLike, sm: Smoothing, *, integer: bool = False) -> Array:
    """``min(a, b)``; see :func:`smax` for the relaxation."""
    a, b = jnp.asarray(a), jnp.asarray(b)
    if not sm.relaxed:
        return jnp.minimum(a, b)
    width = 1.0 if integer else sm.rel_width * (jnp.abs(a) + jnp.abs(b)) + _WIDTH_FLOOR
    outside, inside = _quartic_abs(a - b, width)
    return _select(outside, jnp.minimum(a, b), 0.5 * (a + b - inside))


def relu(z: ArrayLike, sm: Smoothing, *, scale: ArrayLike | None = None) -> Array:
    """``max(z, 0)``.  ``scale`` sets the blend width (``sm.rel_width * scale``) for continuous z.

    Without ``scale`` the argument is treated as integer-valued (width 1).
    """
    z = jnp.asarray(z)
    if not sm.relaxed:
        return jnp.maximum(z, 0.0)
    width = 1.0 if scale is None else sm.rel_width * jnp.abs(jnp.asarray(scale)) + _WIDTH_FLOOR
    outside, inside = _quartic_abs(z, width)
    return _select(outside, jnp.maximum(z, 0.0), 0.5 * (z + inside))


def excess(z: ArrayLike, sm: Smoothing, *, scale: ArrayLike) -> Array:
    """``max(z, 0)`` relaxed from one side: the part of ``z`` above 0 (e.g. the seconds a round
    waits beyond its busy stages), in the unit of ``z``.

    Relaxed: ``w (2 u^2 - u^3)`` for ``u = z / w`` in ``(0, 1)``, with ``w = sm.rel_width *
    |scale|``: value and slope match 0 at ``u = 0`` and ``z`` at ``u = 1`` (C1), so the value
    is exactly 0 for every ``z <= 0`` and exactly ``z`` for ``z >= w``, and never outside
    ``[0, z]`` in between (``u - (2 u^2 - u^3) = u (1 - u)^2``).  Unlike :func:`relu` it is
    never negative and exact on the whole non-positive side; the hard limit (``w -> 0``) is
    ``max(z, 0)``.
    """
    z = jnp.asarray(z)
    hard = jnp.maximum(z, 0.0)
    if not sm.relaxed:
        return hard
    width = sm.rel_width * jnp.abs(jnp.asarray(scale)) + _WIDTH_FLOOR
    u = _clip(z / width, 0.0, 1.0)
    return _select(z >= width, hard, width * u * u * (2.0 - u))


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
    """``ceil(x)``; relaxed as ``x`` itself (exact at integers, continuous, unbiased by 1/2).

    For a count of blocks ``ceil(n / b)`` of integer ``n`` and ``b`` use :func:`ceil_div`, exact
    at every integer plan (``n / b`` is rarely an integer)."""
    x = jnp.asarray(x)
    if not sm.relaxed:
        return jnp.ceil(x)
    return x


def ceil_div(n: ArrayLike, b: ArrayLike, sm: Smoothing) -> Array:
    """``ceil(n / b)``: blocks of ``b`` items that ``n`` items fill (e.g. KV-cache pages, prompt
    chunks); dimensionless count, for ``b >= 1``.

    Relaxed: ``k + clip01(n - k b)`` with ``k = ceil(n / b) - 1``: a staircase in ``n`` whose
    smoothstep from ``k`` to ``k + 1`` is confined to ``n`` in ``(k b, k b + 1)``, so the value
    is exact at every integer ``n`` for integer ``b`` (the counts of integer plans, where
    ``n / b`` itself need not be an integer); C1, and flat elsewhere (``k`` is piecewise
    constant: derivative 0).  The hard limit is the exact function (the ramp of width 1 item
    shrinks to the jump at ``n = k b``).
    """
    n, b = jnp.asarray(n), jnp.asarray(b)
    blocks = jnp.ceil(n / b)
    if not sm.relaxed:
        return blocks
    below = blocks - 1.0
    return below + clip01(n - b * below, sm)


def divisibility_violation(x: ArrayLike, sm: Smoothing) -> Float[Array, "..."]:
    """How far ``x`` is from an integer: 0 iff x is an integer (e.g. ``heads / tp``).

    Exact: ``(x - round(x))^2``; relaxed: ``sin(pi x)^2 / pi^2``, smooth and zero at integers.
    The sine is taken of ``pi (x - round(x))``, the same function (period 1) without the
    rounding of ``sin(pi x)`` at large x (float32 ``sin(pi * 2**20)`` is ~0.1, not 0), so it
    is exactly 0 at every integer.
    """
    x = jnp.asarray(x)
    # lax.round to nearest even is jnp.round's rule, as one primitive
    r = x - lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN)
    if not sm.relaxed:
        return r**2
    return (jnp.sin(jnp.pi * r) / jnp.pi) ** 2


def mix(weights: Float[Array, " k"], values: Float[Array, "... k"]) -> Array:
    """Categorical choice relaxed to a mixture: exact when ``weights`` is one-hot."""
    return jnp.sum(jnp.asarray(weights) * jnp.asarray(values), axis=-1)


def safe_div(a: ArrayLike, b: ArrayLike) -> Array:
    """``a / b`` with ``b`` kept away from zero (finite gradients for degenerate inputs)."""
    return jnp.asarray(a) / jnp.maximum(jnp.asarray(b), _TINY)
