"""Disaggregated prefill and decode pools under load (issue 43): ``x`` prefill instances and
``y`` decode instances (xPyD), each pool with its own plan (tensor parallelism, caps), the KV
cache sent from one to the other, against the same Poisson (or G/G) arrivals as
:func:`diffcost.under_load`.

Prefill pool (DistServe, Zhong et al. OSDI'24, §3: a prefill instance is a queue of prompts;
Splitwise, Patel et al. ISCA'24): each instance receives ``qps / x`` prompts and runs them in
iterations of its token budget, as a colocated engine whose requests stop after their first
token: :func:`~diffcost._serve.load.under_load`'s prefill queue (waits, packing, prompt-length
spread) on the prefill plan with ``output_len = 1``.  TTFT = that queue's TTFT + the KV
transfer of one prompt (:func:`~diffcost._serve.modes.kv_transfer_s`, over the link the decode
pool sits behind: the pools are laid out prefill first, so the KV crosses ``x tp pp`` ranks).

Decode pool: each instance holds ``N = min(lambda_d L_out T, cap)`` sequences (Little's law,
``lambda_d = qps / y``) and runs only decode iterations, ``T = t(N, 0)`` (no prompt shares
them: the point of disaggregation), solved as a damped fixed point.  The TPOT spread comes
from the fluctuation of ``N``: an M/G/inf occupancy, Poisson with variance ``N``, whose
autocovariance over a fixed holding time ``H = L_out T`` falls linearly to 0 at ``H``, so the
mean of ``N`` over one request's life has variance ``2N/3``; TPOT sd ``= t'(N) sqrt(2N/3)``.
A request that finds every decode slot taken waits for one
(:func:`~diffcost._serve.load._slot_wait`).  Stable while both pools are below saturation.
"""

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike

from .._core.smooth import EXACT, Smoothing, smax, smin
from .._inputs.hardware import System
from .._inputs.model import Model
from .load import (
    STEADY_ITERATIONS,
    Z90,
    Z99,
    Steady,
    Workload,
    _load_state,
    _meets_p99,
    _mixture_mean,
    _mixture_quantile,
    _slot_wait,
    bisect_rate,
    iteration_s,
    sequence_cap,
)
from .modes import kv_transfer_s
from .passes import consts
from .plan import ServePlan


class DisaggregatedLoad(NamedTuple):
    """A disaggregated deployment under load (seconds unless named otherwise).

    ``prefill_utilisation`` the prefill queue's (:func:`~diffcost.under_load`'s utilisation on
    the prefill plan); ``decode_utilisation`` the share of the decode slots taken; ``stable`` 1
    when both are below 1; ``running`` decode sequences per decode instance; the TTFT
    percentiles as in :class:`~diffcost.LoadBreakdown`, the KV transfer of one prompt from a
    prefill to a decode instance inside them (``kv_transfer_s``); the TPOT's."""

    prefill_utilisation: Array
    decode_utilisation: Array
    stable: Array
    running: Array
    ttft_mean_s: Array
    ttft_p50_s: Array
    ttft_p90_s: Array
    ttft_p99_s: Array
    kv_transfer_s: Array
    tpot_s: Array
    tpot_p90_s: Array
    tpot_p99_s: Array


def prefill_only(plan: ServePlan) -> ServePlan:
    """The prefill plan as the colocated model runs it: requests end with their first token."""
    return eqx.tree_at(lambda p: p.output_len, plan, jnp.ones_like(plan.output_len))


def transfer_s(system: System, model: Model, prefill: ServePlan, sm: Smoothing) -> Array:
    """Seconds to send one prompt's KV cache to the decode pool, laid out after the
    ``replicas tp pp`` chips of the prefill pool (:func:`~diffcost._serve.modes.kv_transfer_s`)."""
    pool = prefill.replicas * prefill.tp * prefill.pp
    plan = eqx.tree_at(lambda p: p.prefill_chips, prefill, pool)
    return kv_transfer_s(consts(system, model, plan, sm), plan)


class _Decode(NamedTuple):
    """The decode pool's steady state: iteration ``t_s``, sequences ``n``, slot cap ``cap``,
    the slope of the iteration in the sequences ``slope`` (s per sequence), and a
    :class:`~diffcost._serve.load.Steady` for the slot wait."""

    t_s: Array
    n: Array
    cap: Array
    slope: Array
    steady: Steady


def _decode_pool(
    system: System,
    model: Model,
    decode: ServePlan,
    rate: Array,
    sm: Smoothing,
    cap: Array | None = None,
) -> _Decode:
    """Steady state of one decode instance receiving ``rate`` requests/s (module docstring);
    ``cap``: the plan's :func:`~diffcost._serve.load.sequence_cap` where the caller has it."""
    if cap is None:
        cap, _ = sequence_cap(system, model, decode, sm)
    zero = jnp.zeros(())
    step = lambda n: iteration_s(system, model, decode, n, zero, sm)  # noqa: E731
    occupancy = lambda t: smin(rate * decode.output_len * t, cap, sm)  # noqa: E731
    # One copy of the cost model in the program: each pass evaluates t(n) and t(n + 1)
    # together; the first pass is the empty engine's start t(1), and one pass beyond the
    # damped iterations gives the fixed point's pair.
    pair = jax.vmap(step)

    def update(i, carry):
        t, _, _ = carry
        first = i == 0
        n = jnp.where(first, 1.0, occupancy(t))
        t_n, t_next = pair(jnp.stack([n, n + 1.0]))
        return jnp.where(first, t_n, 0.5 * t + 0.5 * t_n), n, jnp.stack([t_n, t_next])

    start = (zero, zero, jnp.stack([zero, zero]))
    _, n, (t, t_next) = jax.lax.fori_loop(0, STEADY_ITERATIONS + 2, update, start)
    slope = t_next - t
    one = jnp.ones(())
    st = Steady(t, n, cap, zero, zero, zero, zero, t, t, t, one)
    return _Decode(t, n, cap, slope, st)


class _Prefill(NamedTuple):
    """The prefill pool at one rate: its TTFT mixture (:func:`~diffcost._serve.load._ttft_parts`
    of the prefill-only plan), its utilisation and the KV transfer of one prompt (s)."""

    parts: tuple[tuple[Array, Array, Array], ...]
    rho: Array
    transfer: Array


class _DecodeSide(NamedTuple):
    """The decode pool at one rate: its steady state, the share of its slots taken, and the
    probability and mean (s) of a wait for a slot."""

    decode: _Decode
    rho: Array
    p_slot: Array
    slot_w: Array


class _State(NamedTuple):
    """What :func:`disaggregated_under_load` and :func:`disaggregated_goodput_qps` share at one
    rate: the TTFT mixture, the decode pool, the TPOT spread, the utilisations, the
    transfer."""

    parts: tuple[tuple[Array, Array, Array], ...]
    decode: _Decode
    spread: Array
    rho_prefill: Array
    rho_decode: Array
    transfer: Array


def _prefill_side(
    system: System, model: Model, prefill: ServePlan, load: Workload, sm: Smoothing
) -> _Prefill:
    """The prefill pool's share of :func:`_state` (it does not depend on the decode pool)."""
    ls = _load_state(system, model, prefill_only(prefill), load, sm)
    return _Prefill(ls.parts, ls.rho, transfer_s(system, model, prefill, sm))


def _decode_side(
    system: System,
    model: Model,
    decode: ServePlan,
    load: Workload,
    sm: Smoothing,
    cap: Array | None = None,
) -> _DecodeSide:
    """The decode pool's share of :func:`_state` (it does not depend on the prefill pool);
    ``cap`` as in :func:`_decode_pool`."""
    rate_d = load.qps / decode.replicas
    d = _decode_pool(system, model, decode, rate_d, sm, cap)
    rho_d = rate_d * decode.output_len * d.t_s / d.cap
    p_slot, slot_w = _slot_wait(decode, d.steady, rate_d, sm)
    return _DecodeSide(d, rho_d, p_slot, slot_w)


def _join(p: _Prefill, d: _DecodeSide, sm: Smoothing) -> _State:
    """The deployment of a prefill and a decode pool: arithmetic on the two sides' states, so
    a search over pairs of pools evaluates each pool once (:mod:`diffcost._search.pools`)."""
    keep = 1.0 - d.p_slot
    shifted = tuple((keep * w, m + p.transfer, v) for w, m, v in p.parts)
    mean = _mixture_mean(p.parts)
    var = sum((w * (v + m**2) for w, m, v in p.parts), jnp.zeros(())) - mean**2
    waited = ((d.p_slot, mean + p.transfer + d.slot_w, smax(var, 0.0, sm) + d.slot_w**2),)
    spread = d.decode.slope * jnp.sqrt(2.0 * d.decode.n / 3.0)
    return _State(shifted + waited, d.decode, spread, p.rho, d.rho, p.transfer)


def _state(
    system: System,
    model: Model,
    prefill: ServePlan,
    decode: ServePlan,
    load: Workload,
    sm: Smoothing,
) -> _State:
    pre = _prefill_side(system, model, prefill, load, sm)
    return _join(pre, _decode_side(system, model, decode, load, sm), sm)


def disaggregated_under_load(
    system: System,
    model: Model,
    prefill: ServePlan,
    decode: ServePlan,
    load: Workload,
    sm: Smoothing = EXACT,
) -> DisaggregatedLoad:
    """``prefill.replicas`` prefill instances of ``prefill`` and ``decode.replicas`` decode
    instances of ``decode`` receiving ``load`` (module docstring).  Times in seconds."""
    return _result(_state(system, model, prefill, decode, load, sm))


def _result(s: _State) -> DisaggregatedLoad:
    """:class:`DisaggregatedLoad` of a joined state (:func:`_join`)."""
    stable = (s.rho_prefill < 1.0) & (s.rho_decode < 1.0)
    return DisaggregatedLoad(
        prefill_utilisation=s.rho_prefill,
        decode_utilisation=s.rho_decode,
        stable=jnp.where(stable, 1.0, 0.0),
        running=s.decode.n,
        ttft_mean_s=_mixture_mean(s.parts),
        ttft_p50_s=_mixture_quantile(0.5, s.parts),
        ttft_p90_s=_mixture_quantile(0.9, s.parts),
        ttft_p99_s=_mixture_quantile(0.99, s.parts),
        kv_transfer_s=s.transfer,
        tpot_s=s.decode.t_s,
        tpot_p90_s=s.decode.t_s + Z90 * s.spread,
        tpot_p99_s=s.decode.t_s + Z99 * s.spread,
    )


def disaggregated_goodput_qps(
    system: System,
    model: Model,
    prefill: ServePlan,
    decode: ServePlan,
    arrival_cv: ArrayLike,
    input_cv: ArrayLike,
    ttft_p99_limit_s: ArrayLike,
    tpot_p99_limit_s: ArrayLike,
) -> Array:
    """Largest arrival rate (requests/s) at which both pools are stable and the p99 TTFT and
    TPOT meet the limits (seconds); 0 when none does
    (:func:`~diffcost._serve.load.bisect_rate`, as :func:`~diffcost.goodput_qps`)."""
    cv_a, cv_s = jnp.asarray(arrival_cv), jnp.asarray(input_cv)

    def state(q):
        return _state(system, model, prefill, decode, Workload(q, cv_a, cv_s), EXACT)

    def ok(q):
        s = state(q)
        tpot_p99 = s.decode.t_s + Z99 * s.spread
        meets = _meets_p99(s.parts, tpot_p99, ttft_p99_limit_s, tpot_p99_limit_s)
        return meets & (s.rho_prefill < 1.0) & (s.rho_decode < 1.0)

    unit = state(jnp.ones(()))
    return bisect_rate(ok, smax(unit.rho_prefill, unit.rho_decode, EXACT))


__all__ = [
    "DisaggregatedLoad",
    "disaggregated_goodput_qps",
    "disaggregated_under_load",
    "prefill_only",
    "transfer_s",
]
