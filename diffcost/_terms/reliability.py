"""Jitter and failures at scale: synchronisation delay and checkpoint/restart goodput.

Two effects that only appear at thousands of chips:

* **Jitter.**  A synchronising collective finishes when its *last* participant arrives.  With
  ``N`` participants whose arrival times scatter with standard deviation ``sigma`` (OS noise,
  clock and thermal variation, network congestion), the wait is the expected maximum of ``N``
  draws, ``sigma * g(N)`` with ``g(N) = E[max of N standard normals] ~ sqrt(2 ln N)``
  (Gumbel extreme-value limit; H. A. David and H. N. Nagaraja, *Order Statistics*, 3rd ed.,
  Wiley 2003, §10.5; applied to system noise by T. Hoefler, T. Schneider and A. Lumsdaine,
  "Characterizing the influence of system noise on large-scale applications by simulation",
  SC'10).
* **Failures.**  A job on ``n`` chips is interrupted at rate ``lambda = n * f`` (``f``
  failures per chip-second; Llama 3, arXiv:2407.21783 §3.3.4).  Checkpointing every ``tau``
  seconds at cost ``delta`` and restarting in ``R`` wastes the fraction
  ``delta / tau + lambda (tau + delta) / 2 + lambda R`` of the time, minimised at Young's
  interval ``tau = sqrt(2 delta / lambda)`` (J. W. Young, CACM 17(9), 1974; J. T. Daly,
  FGCS 22(3), 2006).
"""

import math

import jax.numpy as jnp
from jax.scipy.special import ndtri
from jaxtyping import Array, ArrayLike

from .._core.smooth import Smoothing, relu

#: Blom's plotting-position constant: ``E[X_(N:N)] ~ Phi^-1((N - a) / (N - 2a + 1))``
#: (G. Blom, *Statistical Estimates and Transformed Beta-Variables*, Wiley 1958; David and
#: Nagaraja §4.5).  With ``a = 3/8`` the argument is exactly 1/2 at ``N = 1``.
BLOM_ALPHA = 0.375


def expected_max_normal(n: ArrayLike) -> Array:
    """Expected maximum of ``n`` i.i.d. standard normals, dimensionless (Blom approximation).

    ``g(n) = -Phi^-1((1 - a) / (n + 1 - 2a))`` with ``a = 0.375``, the upper-tail form of
    Blom's ``Phi^-1((n - a) / (n - 2a + 1))`` (exact in float32 out to large ``n``).  It is
    0 exactly at ``n = 1`` (``Phi^-1(1/2) = 0``), smooth for every ``n >= 1`` (slope 1.00 at
    ``n = 1``, where ``sqrt(2 ln n)`` has an infinite one), and grows like ``sqrt(2 ln n)``.
    Error against the exact expectation: +4.4 % at ``n = 2`` (0.589 vs 0.5642), +0.7 % at
    ``n = 8`` (1.434 vs 1.4236), +1.0 % at ``n = 1024`` (3.23 vs 3.196); pinned in the tests.
    Defined for ``n >= 1`` (participants in a collective); below 1 (only reached by a relaxed
    search's continuous degrees) it continues with its slope at 1, ``sqrt(2 pi) (1 - a) /
    (2 - 2a)^2``, so it stays C1 and finite: the Blom form's ``Phi^-1`` argument reaches 1 at
    ``n = a`` (inf) and exceeds it below (NaN), and ``0 * inf`` made relaxed objectives NaN.
    """
    n = jnp.asarray(n)
    m = jnp.where(n >= 1.0, n, 1.0)  # both branches finite; the unused one's gradient is 0
    at_least_one = -ndtri((1.0 - BLOM_ALPHA) / (m + 1.0 - 2.0 * BLOM_ALPHA))
    slope = math.sqrt(2.0 * math.pi) * (1.0 - BLOM_ALPHA) / (2.0 - 2.0 * BLOM_ALPHA) ** 2
    return jnp.where(n >= 1.0, at_least_one, (n - 1.0) * slope)


def sync_wait_s(jitter_s: ArrayLike, participants: ArrayLike) -> Array:
    """Expected wait of one synchronising collective for its last participant, seconds:
    ``sigma * g(N)`` (:func:`expected_max_normal`; Hoefler et al. SC'10).  0 for ``N = 1``."""
    return jnp.asarray(jitter_s) * expected_max_normal(participants)


def _safe_sqrt(x: Array) -> Array:
    """``sqrt(x)`` for ``x >= 0`` with a zero (finite) gradient at ``x = 0``."""
    pos = x > 0.0
    return jnp.where(pos, jnp.sqrt(jnp.where(pos, x, 1.0)), 0.0)


def checkpoint_interval_s(checkpoint_s: ArrayLike, failure_rate_per_s: ArrayLike) -> Array:
    """Young's optimal checkpoint interval ``tau = sqrt(2 delta / lambda)``, seconds.

    ``delta``: checkpoint write time, s; ``lambda``: job interruption rate, 1/s (the mean time
    between interruptions is ``M = 1/lambda``, so ``tau = sqrt(2 delta M)``; Young, CACM
    1974).  0 where there are no failures or checkpoints are free (no interval to choose).
    """
    delta, lam = jnp.asarray(checkpoint_s), jnp.asarray(failure_rate_per_s)
    return _safe_sqrt(2.0 * delta * lam) / jnp.where(lam > 0.0, lam, 1.0)


def wasted_fraction(
    interval_s: ArrayLike,
    checkpoint_s: ArrayLike,
    restart_s: ArrayLike,
    failure_rate_per_s: ArrayLike,
) -> Array:
    """Fraction of wall time lost to checkpoints, rework and restarts (first order, Young 1974
    and Daly 2006): ``delta / tau + lambda (tau + delta) / 2 + lambda R`` (dimensionless).

    ``tau``: checkpoint interval, s; ``delta``: checkpoint write time, s; ``R``: restart
    (detection, reschedule, reload) time, s; ``lambda``: interruption rate, 1/s.  Each
    interruption loses on average half an interval plus its checkpoint, and the restart.
    """
    tau, delta, r, lam = map(jnp.asarray, (interval_s, checkpoint_s, restart_s, failure_rate_per_s))
    per_interval = jnp.where(tau > 0.0, delta / jnp.where(tau > 0.0, tau, 1.0), 0.0)
    return per_interval + lam * (tau + delta) / 2.0 + lam * r


def optimal_wasted_fraction(
    checkpoint_s: ArrayLike, restart_s: ArrayLike, failure_rate_per_s: ArrayLike
) -> Array:
    """:func:`wasted_fraction` at Young's interval, in closed form (dimensionless):
    ``sqrt(2 delta lambda) + lambda delta / 2 + lambda R``; 0 without failures."""
    delta, r, lam = map(jnp.asarray, (checkpoint_s, restart_s, failure_rate_per_s))
    return _safe_sqrt(2.0 * delta * lam) + lam * delta / 2.0 + lam * r


def goodput_fraction(
    checkpoint_s: ArrayLike, restart_s: ArrayLike, failure_rate_per_s: ArrayLike, sm: Smoothing
) -> Array:
    """Share of wall time that advances training, ``max(1 - waste, 0)`` (dimensionless), with
    the waste (>= 0) of :func:`optimal_wasted_fraction`; 1 without failures, 0 once failures
    come faster than checkpoint and restart can keep up (the clip relaxed by ``sm``)."""
    waste = optimal_wasted_fraction(checkpoint_s, restart_s, failure_rate_per_s)
    return relu(1.0 - waste, sm, scale=1.0)


__all__ = [
    "BLOM_ALPHA",
    "checkpoint_interval_s",
    "expected_max_normal",
    "goodput_fraction",
    "optimal_wasted_fraction",
    "sync_wait_s",
    "wasted_fraction",
]
