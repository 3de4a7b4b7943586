"""Serving under load: arrivals, the steady state of continuous batching, queueing and
percentiles (issue 13, first part).

One instance (``tp * pp`` chips) runs continuous batching with chunked prefill (Orca, OSDI'22;
Sarathi-Serve, OSDI'24; vLLM's scheduler): every iteration decodes one token of each running
sequence and spends the rest of a budget of ``prefill_chunk`` tokens on waiting prompts, first
come first served; at most ``batch`` sequences run.  Requests arrive at ``qps / replicas`` per
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

Near and beyond saturation ``1 - rho`` is floored smoothly at :data:`RHO_FLOOR`, so the waits
grow steeply but stay finite (never NaN) and the ``stable`` flag says the load is too high.
"""

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .._core.smooth import EXACT, Smoothing, ceil, relu, smax, smin
from .._inputs.hardware import System
from .._inputs.model import Model
from .passes import Work, consts, pass_time
from .plan import ServePlan

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
    (= TPOT); ``wait_s`` the mean queueing delay before a prompt's prefill starts.
    """

    utilisation: Array
    stable: Array
    running: Array
    prompt_tokens_per_iteration: Array
    iteration_s: Array
    wait_s: Array
    ttft_p50_s: Array
    ttft_p90_s: Array
    ttft_p99_s: Array
    tpot_s: Array
    tpot_p90_s: Array
    tpot_p99_s: Array


def iteration_s(
    system: System, model: Model, plan: ServePlan, decode: ArrayLike, prompt: ArrayLike, sm
) -> Array:
    """Seconds of one engine iteration with ``decode`` decode tokens and ``prompt`` prompt
    tokens (the cost model's pass, :func:`~diffcost._serve.passes.pass_time`; one micro-batch).

    Prompt tokens arrive as chunks of ``piece = min(chunk, input)``; an iteration without any
    is decode-only and replays a CUDA graph where the engine does (the share of such
    iterations is ``1 - min(1, prompt / piece)``, as in the averaged continuous iteration).
    """
    c = consts(system, model, plan, sm)
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


def _piece(plan: ServePlan, decode: ArrayLike, sm: Smoothing) -> Array:
    """Prompt tokens an iteration with ``decode`` decode tokens takes: ``min(L_in, chunk -
    decode)``, at least one."""
    free = smax(plan.prefill_chunk - decode, 1.0, sm)
    return smin(free, plan.input_len, sm)


def _floor(gap: ArrayLike, sm: Smoothing) -> Array:
    """``max(gap, RHO_FLOOR)`` (smooth when relaxed)."""
    return smax(gap, RHO_FLOOR, sm)


class Steady(NamedTuple):
    """Steady state of one instance: mean iteration ``t_s``, decode tokens ``n`` per
    iteration, prompt tokens ``piece`` a chunk iteration takes, share ``f`` of iterations that
    carry a chunk, and the times of a decode-only iteration ``t_decode_s`` and of one with a
    chunk ``t_chunk_s``."""

    t_s: Array
    n: Array
    piece: Array
    f: Array
    t_decode_s: Array
    t_chunk_s: Array


def steady_state(
    system: System, model: Model, plan: ServePlan, rate: ArrayLike, sm: Smoothing = EXACT
) -> Steady:
    """Steady state of one instance receiving ``rate`` requests/s (module docstring).

    The decode tokens count against the iteration's token budget (vLLM's
    ``max_num_batched_tokens``), so a prompt is prefilled in ``ceil(L_in / piece)`` iterations
    that each carry ``piece = min(L_in, chunk - N)`` of its tokens; a share ``f = min(1, rate
    L_in T / piece)`` of the iterations carry a chunk and ``T = f t(N, piece) + (1 - f)
    t(N, 0)`` with ``N = min(rate L_out T, batch)`` decode tokens; damped fixed-point
    iteration from an empty engine."""
    rate = jnp.asarray(rate)

    def parts(t):
        n = smin(rate * plan.output_len * t, plan.batch, sm)
        piece = _piece(plan, n, sm)
        f = smin(rate * plan.input_len * t / piece, jnp.ones(()), sm)
        t_d = iteration_s(system, model, plan, n, jnp.zeros(()), sm)
        t_c = iteration_s(system, model, plan, n, piece, sm)
        return Steady(f * t_c + (1.0 - f) * t_d, n, piece, f, t_d, t_c)

    t0 = iteration_s(system, model, plan, jnp.ones(()), jnp.zeros(()), sm)
    t = jax.lax.fori_loop(0, STEADY_ITERATIONS, lambda _, t: 0.5 * t + 0.5 * parts(t).t_s, t0)
    return parts(t)


#: Standard normal quantiles at 0.90 and 0.99.
Z90, Z99 = 1.2815516, 2.3263479


def _tpot_spread(plan: ServePlan, st: Steady, busy: Array, sm: Smoothing) -> Array:
    """Standard deviation of a request's TPOT (seconds): its ``L_out`` iterations include
    ``K`` chunk iterations, each ``t(N, piece) - t(N, 0)`` longer; ``K`` counts prompts
    arriving while it decodes, Poisson of mean ``L_out f`` with its variance raised by
    ``1 / (1 - rho)^2``, the clustering of a single-server queue's busy periods (the
    asymptotic variance of the work a queue serves, Whitt, "Stochastic-Process Limits",
    2002, §9.6): ``sigma = sqrt(L_out f) / (1 - rho) (t_c - t_d) / L_out``."""
    count_sd = jnp.sqrt(plan.output_len * st.f + 1e-12) / _floor(1.0 - busy, sm)
    return count_sd * relu(st.t_chunk_s - st.t_decode_s, sm, scale=st.t_chunk_s) / plan.output_len


def _quantile_wait(mean_wait: Array, busy: Array, q: float, sm: Smoothing) -> Array:
    """``q`` quantile of a wait that is 0 with probability ``1 - busy`` and exponential of mean
    ``mean_wait / busy`` beyond: ``mean / busy * max(0, ln(busy / (1 - q)))``."""
    busy = smax(busy, 1e-9, sm)
    return mean_wait / busy * relu(jnp.log(busy / (1.0 - q)), sm, scale=1.0)


def under_load(
    system: System, model: Model, plan: ServePlan, load: Workload, sm: Smoothing = EXACT
) -> LoadBreakdown:
    """One instance of ``plan`` (colocated continuous batching) receiving its share of
    ``load`` (module docstring).  Times in seconds.

    The prompts' server: each prompt occupies ``S = x t(N, piece)`` of chunk iterations
    (``x = L_in / piece`` chunks: a partial last chunk shares its iteration with the next
    prompt), utilisation ``rho = rate S``; the mean wait for it is the Pollaczek-Khinchine /
    Kingman ``rho / (1 - rho) (c_a^2 + c_s^2) / 2 S`` (it includes the residual of a prompt in
    service), plus the residual ``t(N, 0) / 2`` of a decode-only iteration an arrival lands in
    (probability ``1 - f``).  TTFT = wait + ``S + (ceil(x) - x) t(N, 0)`` (its last chunk ends
    one iteration later).
    """
    rate = load.qps / plan.replicas
    st = steady_state(system, model, plan, rate, sm)
    chunks = plan.input_len / st.piece
    service = chunks * st.t_chunk_s  # the prompt's share of chunk iterations
    own = service + (ceil(chunks, sm) - chunks) * st.t_decode_s  # its last, partial chunk
    rho_prefill = rate * service
    rho_slots = rate * plan.output_len * st.t_s / plan.batch
    rho = smax(rho_prefill, rho_slots, sm)
    busy = smin(rho_prefill, 1.0, sm)
    variability = 0.5 * (load.arrival_cv**2 + load.input_cv**2)
    queue = busy / _floor(1.0 - rho_prefill, sm) * variability * service
    residual = (1.0 - st.f) * 0.5 * st.t_decode_s
    quant = lambda q: own + residual + _quantile_wait(queue, busy, q, sm)  # noqa: E731
    spread = _tpot_spread(plan, st, busy, sm)
    return LoadBreakdown(
        utilisation=rho,
        stable=jnp.where(rho < 1.0, 1.0, 0.0),
        running=st.n,
        prompt_tokens_per_iteration=st.f * st.piece,
        iteration_s=st.t_s,
        wait_s=queue + residual,
        ttft_p50_s=quant(0.5),
        ttft_p90_s=quant(0.9),
        ttft_p99_s=quant(0.99),
        tpot_s=st.t_s,
        tpot_p90_s=st.t_s + Z90 * spread,
        tpot_p99_s=st.t_s + Z99 * spread,
    )


__all__ = [
    "LoadBreakdown",
    "Steady",
    "Workload",
    "iteration_s",
    "steady_state",
    "under_load",
    "workload",
]
