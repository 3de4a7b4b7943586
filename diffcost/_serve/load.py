"""Serving under load: arrivals, the steady state of continuous batching, queueing and
percentiles (issue 13, first part).

One instance (``tp * pp`` chips) runs continuous batching with chunked prefill (Orca, OSDI'22;
Sarathi-Serve, OSDI'24; vLLM's scheduler): every iteration decodes one token of each running
sequence and spends the rest of a budget of ``prefill_chunk`` tokens on waiting prompts, first
come first served; at most ``batch`` sequences run (under ``diffcost serve --qps`` the
engine's caps, :mod:`diffcost._serve.caps`, unless the user gives ``batch`` and
``prefill_chunk``).  Requests arrive at ``qps / replicas`` per
instance with a coefficient of variation ``arrival_cv`` of their gaps (1: Poisson).

Steady state (a fixed point, solved inside ``jit`` by a fixed number of damped iterations,
:func:`steady_state`): with ``lambda`` requests/s and a mean iteration of ``T`` seconds, an
iteration carries ``N = min(lambda L_out T, batch)`` decode tokens (Little's law: a request
decodes for ``L_out`` iterations); the decode tokens count against the token budget, so a prompt
takes ``piece = min(L_in, C - N)`` tokens per iteration, a share ``f`` of the iterations carry a
chunk, and ``T = f t(N, piece) + (1 - f) t(N, 0)`` with ``t`` the cost model's time of such an
iteration (:func:`iteration_s`).  The mean TPOT is ``T``.

Waiting (:func:`under_load`): prompts queue for the prefill budget, a single server on which a
prompt needs ``S = (L_in / piece) t(N, piece)`` seconds, utilisation ``rho = lambda S``.  The
mean wait is Kingman's G/G/1 formula ``rho / (1 - rho) (c_a^2 + c_s^2) / 2 S`` (Kingman 1961;
the Pollaczek-Khinchine formula for M/G/1, ``c_s`` the coefficient of variation of the prompt
length), plus the residual of a decode-only iteration an arrival lands in.  Waits are taken
exponential beyond zero with ``P(W > 0) = rho`` (the M/G/1 busy probability), so the ``q``
quantile is ``W / rho ln(rho / (1 - q))`` when ``rho > 1 - q``, else 0.  TTFT = wait + the
prompt's own chunk iterations.  TPOT percentiles come from the count of chunk iterations a
request meets while it decodes.  The slots are a second limit, ``N <= batch``; the utilisation
reported is the larger of the two shares.

Near and beyond saturation ``1 - rho`` is kept positive by a C1 continuation below
:data:`RHO_FLOOR` (:func:`_floor`), so the waits grow steeply with the load but stay finite
(never NaN), and the ``stable`` flag says the load is too high.  A third limit, every sequence
slot taken, adds a slot wait (:func:`_slot_wait`).

An engine's iteration policy (:mod:`diffcost._serve.scheduling`, from its profile) changes
the iterations: an engine of prefill-only iterations (SGLang's default, vLLM V0 without chunked
prefill) runs prompts in iterations ``t(0, p)`` that decode nothing, so the decodes' TPOT is
``t(N, 0) / (1 - rho)`` (prefill priority; against the simulation run the same way, TTFT
p50/p90/p99 within 9% and TPOT mean within 7% at 0.2-0.4 utilisation,
tests/test_serve_scheduling.py); a host share ``h`` not overlapped with the GPU makes every
iteration ``t / (1 - h)``.  Without a policy prompts mix with decodes and the host is free.
"""

from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.scipy.special import gammainc, ndtr
from jaxtyping import Array, ArrayLike, Float

from .._core.exported import ExportedProgram
from .._core.smooth import EXACT, Smoothing, ceil_div, relu, smax, smin
from .._inputs.hardware import System
from .._inputs.model import Model
from .._terms.memory_levels import placed_system
from .cost import ServeCost, memory_and_limits
from .modes import admission
from .passes import Work, consts, pass_time
from .plan import ServePlan
from .scheduling import IterationPolicy, host_scaled, prefill_only

#: Smallest ``1 - utilisation`` the waiting-time formulas divide by (dimensionless).
RHO_FLOOR = 1e-3

#: Damped fixed-point iterations of the steady state (converged to < 1e-6 relative within
#: 40 on every case of tests/test_serve_load.py).
STEADY_ITERATIONS = 60


class Workload(eqx.Module):
    """Offered load: ``qps`` requests/s to the whole deployment; ``arrival_cv`` the coefficient
    of variation of the gaps between arrivals (1: Poisson); ``input_cv`` that of the prompt
    lengths (0: all equal)."""

    qps: Float[Array, ""]
    arrival_cv: Float[Array, ""]
    input_cv: Float[Array, ""]


def workload(qps: float, arrival_cv: float = 1.0, input_cv: float = 0.0) -> Workload:
    """A :class:`Workload` from plain numbers."""
    return Workload(*(jnp.asarray(float(x)) for x in (qps, arrival_cv, input_cv)))


class LoadBreakdown(NamedTuple):
    """One instance under load (seconds unless named otherwise).

    ``utilisation`` the larger of the prefill-budget and batch-slot shares; ``stable`` 1 below
    saturation; ``running`` the mean decode sequences; ``iteration_s`` the mean iteration
    (= TPOT); ``kv_occupancy`` the mean share of the KV cache's room the running sequences
    take; ``preemption_risk`` the chance that they outgrow it (their count is Poisson, an
    M/G/inf occupancy, normal-approximated), when an engine preempts and recomputes; ``wait_s``
    the mean TTFT beyond a lone prompt's own iterations (queueing and
    the residual of the iteration an arrival lands in); ``ttft_mean_s`` the mean TTFT.
    """

    utilisation: Array
    stable: Array
    running: Array
    prompt_tokens_per_iteration: Array
    iteration_s: Array
    kv_occupancy: Array
    preemption_risk: Array
    wait_s: Array
    ttft_mean_s: Array
    ttft_p50_s: Array
    ttft_p90_s: Array
    ttft_p99_s: Array
    tpot_s: Array
    tpot_p90_s: Array
    tpot_p99_s: Array


def placed(system: System, model: Model, plan: ServePlan, sm: Smoothing) -> System:
    """``system`` seen by the plan's working set (weights, KV cache of ``plan.batch``
    sequences, activations: :func:`~diffcost._serve.cost.memory_and_limits`) placed over the
    chip's memory levels (:func:`~diffcost._terms.memory_levels.placed_system`; the system
    itself for a chip with one level)."""
    mem, _, _ = memory_and_limits(consts(system, model, plan, sm), plan, admission(plan, sm))
    return placed_system(system, mem.total_bytes - mem.reserved_bytes, sm)


def iteration_s(
    system: System, model: Model, plan: ServePlan, decode: ArrayLike, prompt: ArrayLike, sm
) -> Array:
    """Seconds of one engine iteration with ``decode`` decode tokens and ``prompt`` prompt
    tokens (the cost model's pass, :func:`~diffcost._serve.passes.pass_time`; one micro-batch).

    Prompt tokens arrive as chunks of ``piece = min(chunk, input)``; an iteration without any
    is decode-only and replays a CUDA graph where the engine does (the share of such
    iterations is ``1 - min(1, prompt / piece)``, as in the averaged continuous iteration).
    """
    c = consts(placed(system, model, plan, sm), model, plan, sm)
    n_in, n_out = plan.input_len, plan.output_len
    piece = smin(plan.prefill_chunk, n_in, sm, integer=True)
    decode, prompt = jnp.asarray(decode), jnp.asarray(prompt)
    w = Work(
        micro_batches=jnp.ones(()),
        decode_seqs=decode,
        query_tokens=jnp.ones(()),
        decode_ctx=model.attended_tokens(n_in + 0.5 * n_out, sm),
        prefill_tokens=prompt,
        prefill_piece=piece,
        prefill_ctx=model.prompt_attended_tokens(n_in, sm),
        prompts_done=prompt / n_in,
        decode_only=1.0 - smin(jnp.ones(()), prompt / piece, sm),
    )
    return pass_time(c, w).round_s


def _budget(plan: ServePlan, decode: ArrayLike, sm: Smoothing) -> Array:
    """Prompt tokens one iteration with ``decode`` decode tokens has room for: the token budget
    less the decode tokens, ``chunk - decode``, at least one."""
    return smax(plan.prefill_chunk - decode, 1.0, sm)


def _floor(gap: ArrayLike, sm: Smoothing) -> Array:
    """``1 - rho`` kept positive: itself above :data:`RHO_FLOOR` ``f``, below it ``f^2 / (2 f -
    gap)``, which meets it with the same value and slope (C1) and decreases towards 0 as the
    load grows, so waits beyond saturation are finite and keep rising with the load."""
    gap = jnp.asarray(gap)
    below = RHO_FLOOR**2 / (2.0 * RHO_FLOOR - jnp.minimum(gap, RHO_FLOOR))
    return jnp.where(gap >= RHO_FLOOR, gap, below)


class Steady(NamedTuple):
    """Steady state of one instance (seconds unless named otherwise).

    ``t_s`` the mean iteration; ``n`` decode tokens per iteration; ``cap`` the sequences that
    may run (:func:`sequence_cap`); ``chunks`` a prompt's length
    in full budgets (``L_in / (chunk - n)``); ``busy`` the share of time spent in iterations
    that carry prompt tokens (the prefill server's utilisation); ``service_s`` the time a
    prompt holds that server; ``f`` the share of iterations that carry prompt tokens;
    ``t_decode_s``, ``t_first_s``, ``t_full_s`` the iterations without prompt tokens, with a
    lone prompt's first piece ``min(L_in, budget)``, and with a full budget of them;
    ``pieces`` the iterations a lone prompt takes, ``ceil(chunks)`` (:func:`_pieces`);
    ``prefill_only`` 1 for an engine of prefill-only iterations (then ``t_first_s`` and
    ``t_full_s`` are those iterations, ``t(0, p)``, which decode nothing; 0 where prompts mix
    with decodes, :mod:`diffcost._serve.scheduling`)."""

    def decode_part_s(self) -> Array:
        """The decode part of an iteration carrying prompt tokens: ``t(N, 0)`` where prompts
        mix with decodes, 0 in a prefill-only iteration (s)."""
        return (1.0 - self.prefill_only) * self.t_decode_s

    def prompt_marginal_s(self, sm: Smoothing) -> Array:
        """Seconds a full budget of prompt tokens adds to an iteration: ``t(N, B) - t(N, 0)``
        mixed, ``t(0, B)`` prefill-only."""
        return relu(self.t_full_s - self.decode_part_s(), sm, scale=self.t_full_s)

    t_s: Array
    n: Array
    cap: Array
    chunks: Array
    busy: Array
    service_s: Array
    f: Array
    t_decode_s: Array
    t_first_s: Array
    t_full_s: Array
    pieces: Array
    prefill_only: float = 0.0


def _alone_s(x: Array, pieces: Array, t_d: Array, t_1: Array, t_f: Array, sm: Smoothing) -> Array:
    """Seconds a prompt of ``x`` budgets holds the iterations when no other prompt is waiting:
    its first piece ``t_1``, then ``pieces - 1`` more iterations (``pieces = ceil(x)``, from
    :func:`_pieces`), each ``t(N, 0)`` plus its prompt tokens at the full iteration's marginal
    rate ``(t(N, B) - t(N, 0)) / B`` (the last one partial)."""
    more = relu(pieces - 1.0, sm, scale=1.0)
    return t_1 + more * t_d + relu(x - 1.0, sm, scale=1.0) * (t_f - t_d)


def _pieces(plan: ServePlan, budget: Array, sm: Smoothing) -> Array:
    """Iterations a lone prompt of ``L_in`` tokens takes at ``budget`` prompt tokens each:
    ``ceil(L_in / budget)`` (dimensionless), through :func:`~diffcost._core.smooth.ceil_div`, whose
    relaxed staircase equals the exact count except within one prompt token of a step (the
    relaxation ``ceil(x) ~ x`` was off by up to one iteration everywhere)."""
    return ceil_div(plan.input_len, budget, sm)


def sequence_cap(
    system: System, model: Model, plan: ServePlan, sm: Smoothing
) -> tuple[Array, Array]:
    """Sequences that may run on one instance, and how many fit in memory (paged KV blocks).

    The plan's ``batch`` (the engine's ``max_num_seqs``;
    :func:`~diffcost._serve.caps.capped_plan` puts the engine's own default there where the
    user gives none) or, if fewer, the sequences whose KV
    cache fits beside the weights and buffers: the cost model's ``max_batch`` holds sequences
    at their final length ``L_in + L_out``; a running mix holds ``L_in + L_out / 2`` on
    average, so ``max_batch (L_in + L_out) / (L_in + L_out / 2)`` fit."""
    out = ServeCost(system, model, sm)(plan)
    n_in, n_out = plan.input_len, plan.output_len
    fit = relu(out.max_batch, sm, scale=plan.batch) * (n_in + n_out) / (n_in + 0.5 * n_out)
    return smin(plan.batch, fit, sm), fit


def iteration_times(system, model, plan, n: Array, policy: IterationPolicy | None, sm: Smoothing):
    """The prompt budget ``B`` of an iteration with ``n`` decodes, and the wall seconds of a
    decode-only iteration, of one carrying a lone prompt's first piece ``min(L_in, B)`` and
    of one carrying ``B`` prompt tokens.  Without a ``policy``, or with a mixing one, chunks
    ride with the decodes (``t(N, p)``); a prefill-only engine runs them alone, ``t(0, p)``,
    decoding nothing, and its budget ignores the decodes (:mod:`diffcost._serve.scheduling`);
    the host share scales every iteration.  The three iterations are one vmapped call: one
    copy of the cost model in the program."""
    if prefill_only(policy):
        budget = smax(plan.prefill_chunk, 1.0, sm)
        decodes = jnp.stack([n, jnp.zeros_like(n), jnp.zeros_like(n)])
    else:
        budget = _budget(plan, n, sm)
        decodes = jnp.stack([n, n, n])
    prompts = jnp.stack([jnp.zeros_like(budget), smin(plan.input_len, budget, sm), budget])
    step = lambda d, p: iteration_s(system, model, plan, d, p, sm)  # noqa: E731
    t_d, t_1, t_f = jax.vmap(step)(decodes, prompts)
    times = (t_d, t_1, t_f)
    if policy is not None:
        times = tuple(host_scaled(t, policy) for t in times)
    return budget, *times


def _steady_parts(
    system, model, plan, rate: Array, t: Array, cap: Array, sm: Smoothing, start: Array, policy=None
) -> Steady:
    """One evaluation of the steady-state map at a mean iteration ``t`` (:func:`steady_state`);
    where ``start``, at one decode sequence instead (the empty engine the iteration starts
    from: its ``t_decode_s`` is the first ``t``)."""
    n = jnp.where(start, 1.0, smin(rate * plan.output_len * t, cap, sm))
    budget, t_d, t_1, t_f = iteration_times(system, model, plan, n, policy, sm)
    only = prefill_only(policy)
    x = plan.input_len / budget
    pieces = _pieces(plan, budget, sm)
    extra = relu(pieces - 1.0, sm, scale=1.0)  # further iterations of a lone prompt
    alone = _alone_s(x, pieces, jnp.zeros_like(t_d) if only else t_d, t_1, t_f, sm)
    bulk = x * t_f
    rho = rate * alone / (1.0 + rate * (alone - bulk))
    busy = smin(rho, 1.0, sm)
    chunk_rate = rate * (busy * x + (1.0 - busy) * (1.0 + extra))  # chunk iterations / s
    chunk_rate = chunk_rate / smax(rho, 1.0, sm)  # saturated: prompt iterations fill the time
    if only:  # prefill iterations decode nothing: a token per decode iteration, (1 - busy)
        t_s = t_d / _floor(1.0 - busy, sm)
    else:
        t_s = 1.0 / (chunk_rate + (1.0 - busy) / t_d)
    service = alone - busy * (alone - bulk)
    f = chunk_rate * t_s
    return Steady(t_s, n, cap, x, rho, service, f, t_d, t_1, t_f, pieces, float(only))


def steady_state(
    system: System,
    model: Model,
    plan: ServePlan,
    rate: ArrayLike,
    sm: Smoothing = EXACT,
    cap: Array | None = None,
    policy: IterationPolicy | None = None,
) -> Steady:
    """Steady state of one instance receiving ``rate`` requests/s (module docstring).

    Prompts are served first come first served out of each iteration's budget of
    ``B = chunk - N`` prompt tokens (the decode tokens count against vLLM's
    ``max_num_batched_tokens``).  A prompt of ``x = L_in / B`` budgets that finds no other
    prompt waiting holds the iterations alone, ``S_alone = t(N, min(L_in, B)) + max(0, x - 1)
    t(N, B)``; in a backlog the iterations are full and it holds ``S_bulk = x t(N, B)`` (a bulk
    server: Sarathi-Serve packs several prompts into one chunk).  The next prompt is waiting
    when one starts with the probability ``rho`` that the server is busy (what a departing
    prompt leaves behind is what an arrival sees, PASTA), so ``S = S_alone - rho (S_alone -
    S_bulk)`` and ``rho = lambda S`` solve to ``rho = lambda S_alone / (1 + lambda (S_alone -
    S_bulk))``: saturation is at ``lambda S_bulk = 1``.  Iterations per second: ``lambda (rho x +
    (1 - rho)(1 + max(0, x - 1)))`` carry prompt tokens, ``(1 - rho) / t(N, 0)`` do not; the mean
    iteration ``T`` is one over their sum, and ``N = min(lambda L_out T, cap)`` (Little's law;
    ``cap`` = :func:`sequence_cap`).
    Damped fixed-point iteration on ``T`` from an empty engine.  ``cap``: the plan's
    :func:`sequence_cap` where the caller has it (it does not depend on the rate); ``policy``:
    the engine's iteration (:mod:`diffcost._serve.scheduling`; ``None``: mixed, no host
    share)."""
    rate = jnp.asarray(rate)
    if cap is None:
        cap, _ = sequence_cap(system, model, plan, sm)
    parts = lambda t, start: _steady_parts(  # noqa: E731
        system, model, plan, rate, t, cap, sm, start, policy
    )

    def update(i, carry):
        t, _ = carry
        now = parts(t, i == 0)
        return jnp.where(i == 0, now.t_decode_s, 0.5 * t + 0.5 * now.t_s), now

    # The map once in the program: the first pass gives the empty engine's iteration t(1, 0)
    # the damping starts from, and one pass beyond the damped iterations returns the map at
    # the fixed point.
    zero = jnp.zeros(())
    only = float(prefill_only(policy))
    start = (zero, Steady._make([zero] * (len(Steady._fields) - 1) + [only]))
    return jax.lax.fori_loop(0, STEADY_ITERATIONS + 2, update, start)[1]


#: Standard normal quantiles at 0.90 and 0.99.
Z90, Z99 = 1.2815516, 2.3263479


def _tpot_spread(plan: ServePlan, st: Steady, busy: Array, sm: Smoothing) -> Array:
    """Standard deviation of a request's TPOT (seconds): its ``L_out`` iterations include
    ``K`` that carry prompt tokens, each ``t_c - t(N, 0)`` longer (``t_c = rho / `` chunk
    iterations per second, their mean); ``K`` counts prompts arriving while it decodes,
    Poisson of mean ``L_out f`` with its variance raised by ``1 / (1 - rho)^2``, the
    clustering of a single-server queue's busy periods (the asymptotic variance of the work a
    queue serves, Whitt, "Stochastic-Process Limits", 2002, §9.6): ``sigma = sqrt(L_out f) /
    (1 - rho) (t_c - t_d) / L_out``."""
    t_c = busy * st.t_s / smax(st.f, 1e-12, sm)
    count_sd = jnp.sqrt(plan.output_len * st.f + 1e-12) / _floor(1.0 - busy, sm)
    return count_sd * relu(t_c - st.decode_part_s(), sm, scale=t_c) / plan.output_len


def _wait(st: Steady, load: Workload, sm: Smoothing) -> tuple[Array, Array]:
    """Mean and variance (s, s^2) of the queueing delay before a prompt's service starts,
    given that it is positive (it is with probability ``rho``).

    The mean is Kingman's G/G/1 ``rho / (1 - rho) (c_a^2 + c_s^2) / 2 S`` over ``rho``
    (Kingman 1961; the Pollaczek-Khinchine formula when ``c_a = 1``), ``c_s`` that of the
    service: the prompt lengths' ``c_v`` times the share of ``S`` their tokens take,
    ``x (t(N, B) - t(N, 0)) / S`` (the decode part of a prompt's iterations does not grow with
    its length; with all of ``S`` scaled by ``c_v`` the p90 TTFT was 20-37% above the
    simulation's at 512-token prompts of CV 1 in a 2,048-token budget, now within 11%:
    benchmarks/load_vs_simulation.py); the second moment the M/G/1 one (Takacs 1962:
    ``E[W^2] = 2 E[W]^2 + lambda E[S^3] / (3 (1 - rho))``, service moments of gamma prompt
    lengths) scaled alike: a uniform residual at light load, exponential in heavy traffic."""
    rho, s = st.busy, st.service_s
    marginal = st.prompt_marginal_s(sm)
    share = smin(st.chunks * marginal / smax(s, 1e-12, sm), 1.0, sm)
    cv2 = (load.input_cv * share) ** 2
    gap = _floor(1.0 - rho, sm)
    busy = smin(rho, 1.0, sm)
    pk = busy * (1.0 + cv2) * s / (2.0 * gap)  # M/G/1 mean wait
    second = 2.0 * pk**2 + busy * (1.0 + cv2) * (1.0 + 2.0 * cv2) * s**2 / (3.0 * gap)
    b = smax(busy, 1e-9, sm)
    scale = (load.arrival_cv**2 + cv2) / (1.0 + cv2)  # Kingman over Pollaczek-Khinchine
    m1, m2 = pk / b * scale, second / b * scale**2
    return m1, smax(m2 - m1**2, 1e-12 * m1**2 + 1e-30, sm)


def _gamma_cdf(t: Array, mean: Array, var: Array) -> Array:
    """``P(X <= t)`` of a gamma variable of the given mean and variance (shape clamped to
    [0.05, 1e4]: a near-constant becomes a narrow gamma)."""
    k = jnp.clip(mean**2 / jnp.maximum(var, 1e-30), 0.05, 1e4)
    return gammainc(k, jnp.maximum(t, 0.0) * k / jnp.maximum(mean, 1e-30))


#: Bisection steps of :func:`_mixture_quantile` (relative resolution 2^-48 of the bracket).
QUANTILE_STEPS = 48


def _mixture_cdf(t: Array, parts: tuple[tuple[Array, Array, Array], ...]) -> Array:
    """``P(X <= t)`` of a mixture of gamma variables, ``parts`` = ``(weight, mean, variance)``."""
    return sum((w * _gamma_cdf(t, m, v) for w, m, v in parts), jnp.zeros_like(t))


def _mixture_mean(parts: tuple[tuple[Array, Array, Array], ...]) -> Array:
    """Mean of a mixture, ``parts`` = ``(weight, mean, variance)``: ``sum w m``."""
    return jnp.sum(jnp.stack([w * m for w, m, _ in parts]))


def _meets_p99(
    parts: tuple[tuple[Array, Array, Array], ...],
    tpot_p99_s: Array,
    ttft_p99_limit_s: ArrayLike,
    tpot_p99_limit_s: ArrayLike,
) -> Array:
    """Whether the TTFT mixture ``parts`` and the p99 TPOT meet their p99 limits (s).  p99 TTFT
    <= limit exactly when the TTFT's distribution function reaches 0.99 at the limit (it is
    continuous and increasing): one evaluation of it instead of the quantile's bisection
    (:func:`_mixture_quantile`)."""
    ttft_ok = _mixture_cdf(jnp.asarray(ttft_p99_limit_s, tpot_p99_s.dtype), parts) >= 0.99
    return ttft_ok & (tpot_p99_s <= tpot_p99_limit_s)


def _mixture_quantile(q: float, parts: tuple[tuple[Array, Array, Array], ...]) -> Array:
    """``q`` quantile of a mixture of gamma variables, ``parts`` = ``(weight, mean, variance)``.

    Bisection on the mixture's CDF with the parameters held constant, then one Newton step
    ``t - (F(t) - q) / F'(t)`` through the live parameters: the value is the bisection's, the
    gradient the implicit-function one, ``dt/dtheta = -(dF/dtheta) / F'(t)``."""
    cdf = _mixture_cdf
    frozen = jax.lax.stop_gradient(parts)
    top = 4.0 * sum(m + 12.0 * jnp.sqrt(v) for _, m, v in frozen)

    def halve(_, bracket):
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        below = cdf(mid, frozen) < q
        return jnp.where(below, mid, lo), jnp.where(below, hi, mid)

    lo, hi = jax.lax.fori_loop(0, QUANTILE_STEPS, halve, (jnp.zeros(()), top))
    t0 = jax.lax.stop_gradient(0.5 * (lo + hi))
    slope = jax.grad(cdf)(t0, frozen)
    return t0 - (cdf(t0, parts) - q) / jnp.maximum(slope, 1e-30)


def _slot_wait(plan: ServePlan, st: Steady, rate: Array, sm: Smoothing) -> tuple[Array, Array]:
    """Probability that an arrival finds all ``cap`` sequence slots taken (:func:`sequence_cap`),
    and its mean wait for one then (s).  Each request holds a slot for ``H = L_out T``; ``c =
    cap`` servers at
    utilisation ``rho_s = lambda H / c``.  Mean wait by Sakasegawa's M/M/c approximation
    ``L_q = rho_s^sqrt(2(c+1)) / (1 - rho_s)`` (Sakasegawa 1977) with the Allen-Cunneen factor
    ``(1 + c_s^2) / 2 = 1/2`` of a fixed holding time, ``W_q = L_q / lambda``; given a wait it
    is ``H / (c (1 - rho_s)) / 2`` (the M/M/c conditional wait, halved alike)."""
    hold = plan.output_len * st.t_s
    rho_s = rate * hold / st.cap
    gap = _floor(1.0 - rho_s, sm)
    occupied = smin(rho_s, 1.0, sm)
    lq = 0.5 * occupied ** jnp.sqrt(2.0 * (st.cap + 1.0)) / gap
    cond = 0.5 * hold / (st.cap * gap)
    p_wait = smin(lq / smax(rate, 1e-12, sm) / cond, 1.0, sm)
    return p_wait, cond


def _ttft_parts(plan: ServePlan, st: Steady, load: Workload, rate: Array, sm: Smoothing):
    """TTFT as a mixture (weights, means in s, variances in s^2), and the mean of ``O``.

    An arrival that finds the prompt server idle (probability ``1 - rho``) waits the residual
    of a decode-only iteration (uniform on ``[0, t(N, 0)]``) and then its own iterations
    ``O``; one that finds it busy waits the queue's positive wait (:func:`_wait`) and then
    ``O``, or, when it shares its iterations with other prompts (:func:`_packing`), the
    longer packed time, spread uniformly down to ``O``; one that finds every sequence slot
    taken (:func:`_slot_wait`) waits for a slot too (exponential) and is packed.  ``O`` has
    the mean :func:`_alone_s` and the spread of the prompt lengths at the marginal cost of a
    prompt token, ``(t(N, B) - t(N, 0)) / B``."""
    busy = smin(st.busy, 1.0, sm)
    alone = _alone_s(st.chunks, st.pieces, st.decode_part_s(), st.t_first_s, st.t_full_s, sm)
    per_prompt = st.prompt_marginal_s(sm) * st.chunks
    var_own = (load.input_cv * per_prompt) ** 2
    mean_w, var_w = _wait(st, load, sm)
    idle = (1.0 - busy, alone + 0.5 * st.t_decode_s, var_own + st.t_decode_s**2 / 12.0)
    p_pack, packed_s = _packing(st, rate, mean_w, alone, sm)
    queued = (busy * (1.0 - p_pack), alone + mean_w, var_own + var_w)
    var_packed = var_own + var_w + (packed_s - alone) ** 2 / 3.0
    packed = (busy * p_pack, packed_s + mean_w, var_packed)
    p_slot, slot_w = _slot_wait(plan, st, rate, sm)
    no_slot = (p_slot, packed_s + mean_w + slot_w, var_packed + slot_w**2)
    keep = 1.0 - p_slot
    scaled = tuple((keep * w, m, v) for w, m, v in (idle, queued, packed))
    return (*scaled, no_slot), alone


def _packing(st: Steady, rate: Array, mean_w: Array, alone: Array, sm: Smoothing):
    """Probability that a prompt which queues shares its prefill iterations with other
    prompts, and its own time then (s).

    The token budget packs every waiting prompt into one iteration (Sarathi-Serve, OSDI'24;
    vLLM's scheduler; the simulation's), and the first token of each leaves at the end of the
    iteration that finishes it, so a packed prompt's iterations also carry its neighbours'
    tokens.  A queued prompt is packed when it finds another waiting ahead of it (probability
    ``rho``: what a departing prompt leaves behind is what an arrival sees, PASTA) or sees one
    arrive during its own wait ``W`` (Poisson): ``p = 1 - (1 - rho) exp(-lambda W)``.  It
    shares with ``1 + lambda W`` prompts' worth of tokens, each ``x`` budgets at the marginal
    ``t(N, B) - t(N, 0)`` per budget, and at most ``(x + 1/2) t(N, B)``, the backlog's (its
    tokens span ``x`` full iterations from a uniform offset in one; the bulk server of
    :func:`steady_state`).  Measured against the simulation (Llama 3 8B, H100, 1,024-token
    prompts, 2,048-token budget, 8 requests/s): 11.6% of the requests share an iteration
    though only 23% queue, and they make the TTFT's tail (p99 97 ms against 29 ms for a lone
    prefill); with every queued prompt alone the p99 was 31% low, with packing 8%
    (benchmarks/load_vs_simulation.py)."""
    busy = smin(st.busy, 1.0, sm)
    p = 1.0 - (1.0 - busy) * jnp.exp(-rate * mean_w)
    others = 1.0 + rate * mean_w  # prompts sharing its iterations: one, and those arriving
    marginal = st.prompt_marginal_s(sm)
    shared = alone + others * st.chunks * marginal
    bulk = smin(shared, (st.chunks + 0.5) * st.t_full_s, sm)
    return p, smax(bulk, alone, sm)


class _LoadState(NamedTuple):
    """What :func:`under_load` and :func:`goodput_qps` share at one arrival rate: the steady
    state, the utilisation, how many sequences fit, the TTFT mixture (:func:`_ttft_parts`) with
    its prompt-alone time, and the TPOT's standard deviation (s)."""

    rate: Array
    st: Steady
    rho: Array
    fit: Array
    parts: tuple[tuple[Array, Array, Array], ...]
    alone: Array
    spread: Array

    def tpot_quantile(self, z: float) -> Array:
        """The TPOT quantile at the standard normal quantile ``z`` (s): mean + ``z`` spread."""
        return self.st.t_s + z * self.spread


def _load_state(
    system: System,
    model: Model,
    plan: ServePlan,
    load: Workload,
    sm: Smoothing,
    cap_fit: tuple[Array, Array] | None = None,
    policy: IterationPolicy | None = None,
) -> _LoadState:
    """:class:`_LoadState` of one instance of ``plan`` receiving its share of ``load``;
    ``cap_fit`` is :func:`sequence_cap` of the plan where the caller has it (a rate search
    computes it once, not at every rate)."""
    cap, fit = sequence_cap(system, model, plan, sm) if cap_fit is None else cap_fit
    rate = load.qps / plan.replicas
    st = steady_state(system, model, plan, rate, sm, cap, policy)
    busy = smin(st.busy, 1.0, sm)
    rho_slots = rate * plan.output_len * st.t_s / st.cap
    rho = smax(st.busy, rho_slots, sm)
    parts, alone = _ttft_parts(plan, st, load, rate, sm)
    return _LoadState(rate, st, rho, fit, parts, alone, _tpot_spread(plan, st, busy, sm))


def under_load(
    system: System,
    model: Model,
    plan: ServePlan,
    load: Workload,
    sm: Smoothing = EXACT,
    *,
    policy: IterationPolicy | None = None,
) -> LoadBreakdown:
    """One instance of ``plan`` (colocated continuous batching) receiving its share of
    ``load`` (module docstring).  Times in seconds.

    TTFT = the residual ``t(N, 0) / 2`` of the decode-only iteration an arrival to an idle
    server lands in (probability ``1 - rho``) + the queueing delay (:func:`_wait`) + the
    prompt's own iterations: ``S_alone`` when it runs alone, ``(x + 1/2) t(N, B)`` in a
    backlog (its tokens end at a uniform point of a full iteration), weighted ``1 - rho`` and
    ``rho``.  ``policy``: the engine's iteration (:mod:`diffcost._serve.scheduling`; ``None``:
    prompts mixed with decodes, no host share)."""
    ls = _load_state(system, model, plan, load, sm, policy=policy)
    st, rho, parts, rate = ls.st, ls.rho, ls.parts, ls.rate
    mean_ttft = _mixture_mean(parts)
    return LoadBreakdown(
        utilisation=rho,
        stable=jnp.where(rho < 1.0, 1.0, 0.0),
        running=st.n,
        prompt_tokens_per_iteration=rate * plan.input_len * st.t_s,
        iteration_s=st.t_s,
        kv_occupancy=st.n / smax(ls.fit, 1e-9, sm),
        preemption_risk=ndtr((st.n - ls.fit) / jnp.sqrt(st.n + 1e-9)),
        wait_s=mean_ttft - ls.alone,
        ttft_mean_s=mean_ttft,
        ttft_p50_s=_mixture_quantile(0.5, parts),
        ttft_p90_s=_mixture_quantile(0.9, parts),
        ttft_p99_s=_mixture_quantile(0.99, parts),
        tpot_s=st.t_s,
        tpot_p90_s=ls.tpot_quantile(Z90),
        tpot_p99_s=ls.tpot_quantile(Z99),
    )


#: Bisection steps of :func:`goodput_qps`, on the logarithm of the rate over
#: :data:`GOODPUT_OCTAVES` octaves below the bracket's top: the answer to
#: ``GOODPUT_OCTAVES / 2^GOODPUT_STEPS`` of an octave, about 1e-6 relative.
GOODPUT_STEPS = 24

#: Octaves below the top of :func:`goodput_qps`'s bracket that it searches: a goodput under
#: ``2^-24`` of four times the saturating rate is reported as 0.
GOODPUT_OCTAVES = 24.0


def goodput_qps(
    system: System,
    model: Model,
    plan: ServePlan,
    arrival_cv: ArrayLike,
    input_cv: ArrayLike,
    ttft_p99_limit_s: ArrayLike,
    tpot_p99_limit_s: ArrayLike,
) -> Array:
    """Largest arrival rate (requests/s to the deployment) at which the deployment is stable
    and its p99 TTFT and p99 TPOT meet the limits (seconds); 0 when no rate does.

    Bisection on the logarithm of the rate, between :data:`GOODPUT_OCTAVES` octaves below
    and four times the rate that a linear extrapolation of the utilisation at 1 request/s calls
    saturating (every percentile rises with the load, so the predicate is monotone); one
    compilation, :data:`GOODPUT_STEPS` steps, each one fixed point of the steady state
    (:func:`steady_state`) and one evaluation of the TTFT's distribution at the limit."""
    cv_a, cv_s = jnp.asarray(arrival_cv), jnp.asarray(input_cv)
    cap_fit = sequence_cap(system, model, plan, EXACT)  # the same at every rate

    def ok(q):
        ls = _load_state(system, model, plan, Workload(q, cv_a, cv_s), EXACT, cap_fit)
        meets = _meets_p99(ls.parts, ls.tpot_quantile(Z99), ttft_p99_limit_s, tpot_p99_limit_s)
        return meets & (ls.rho < 1.0)

    unit = _load_state(system, model, plan, Workload(jnp.ones(()), cv_a, cv_s), EXACT, cap_fit).rho
    return bisect_rate(ok, unit)


def bisect_rate(ok: Callable[[Array], Array], unit_rho: Array) -> Array:
    """Largest rate (requests/s) at which ``ok`` holds, 0 when none does: bisection on its
    logarithm between :data:`GOODPUT_OCTAVES` octaves below and four times the rate that a
    linear extrapolation of the utilisation ``unit_rho`` at 1 request/s calls saturating,
    :data:`GOODPUT_STEPS` steps (``ok`` monotone: true below the answer, false above)."""
    top = jnp.log2(4.0 / jnp.maximum(unit_rho, 1e-9))
    bottom = top - GOODPUT_OCTAVES

    def halve(_, bracket):
        lo, hi = bracket
        mid = 0.5 * (lo + hi)
        good = ok(2.0**mid)
        return jnp.where(good, mid, lo), jnp.where(good, hi, mid)

    lo, _ = jax.lax.fori_loop(0, GOODPUT_STEPS, halve, (bottom, top))
    return jnp.where(ok(2.0**bottom), 2.0**lo, 0.0)


__all__ = [
    "bisect_rate",
    "goodput_qps",
    "LoadBreakdown",
    "Steady",
    "Workload",
    "iteration_s",
    "iteration_times",
    "steady_state",
    "under_load",
    "workload",
]


#: :func:`goodput_qps` compiled once per model structure (an :class:`ExportedProgram`: kept on
#: disk by the command line, ``eqx.filter_jit`` elsewhere), for
#: callers that ask one plan at a time: ``diffcost serve --qps`` and ``validate --load``.
goodput_qps_jit = ExportedProgram(goodput_qps, "serve-goodput-qps")
