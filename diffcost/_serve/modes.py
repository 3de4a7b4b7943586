"""The serving modes as named terms over the stacked passes of :mod:`diffcost._serve.passes`.

Static batching, continuous batching with chunked prefill (Orca, OSDI'22; Sarathi-Serve,
OSDI'24), speculative decoding (Leviathan et al., ICML 2023) and disaggregated prefill/decode
pools (DistServe, OSDI'24; Splitwise, ISCA'24); the formulas are in
:mod:`diffcost._serve.cost`'s docstring and in each function's.
"""

from typing import NamedTuple

import jax.numpy as jnp
from jaxtyping import Array

from .._core.shared import once
from .._core.smooth import Smoothing, ceil_div, excess, smin
from .._inputs.model import Model
from .._terms.comm import point_to_point_s
from .kv import kv_bytes_per_token
from .passes import Consts, PassTime, Work, expected_tokens_per_step
from .plan import ServePlan

# Indices of the passes evaluated together (one stacked Work).
_PREFILL, _DECODE, _DRAFT, _ITER, _ITER_TTFT, _ITER_DRAFT, _ONE_PROMPT, _ITER_TPOT = range(8)


class Regime(NamedTuple):
    """Per-plan quantities the serving modes share (module docstring), all float arrays."""

    tokens_per_step: Array  # tau: tokens a sequence gains per decode step
    query_tokens: Array  # q = k + 1 tokens verified per sequence and step
    context_avg: Array  # cached tokens a decode step attends on average: input + output / 2
    piece: Array  # prompt tokens per prefill chunk: min(chunk, input)
    batch_eff: Array  # running batch of continuous batching
    prompt_rate: Array  # prompt tokens per continuous iteration
    micro_static: Array  # micro-batches of static / disaggregated passes: min(pp, batch)
    micro_cont: Array  # micro-batches of continuous iterations: min(pp, batch_eff)
    decode_only_share: Array  # continuous iterations holding no prompt chunk: 1 - min(1, P/piece)
    others_rate: Array  # prompt tokens per iteration of the other requests: P (1 - 1 / B_run)
    others_decode_only: Array  # iterations a decoding request sees with no prompt chunk
    prompt_iterations: Array  # iterations holding a piece of one prompt: ceil(input / piece)
    cohort_tokens: Array  # prompt tokens of a first-token iteration: min(chunk, B_run in / its)
    running: Array  # sequences the KV cache holds at once: min(batch, slots)
    queued: Array  # clients of a closed loop waiting for a slot: max(batch - slots, 0)


@once
def _slot_free(plan: ServePlan, sm: Smoothing) -> tuple[Array, Array, Array, Array, Array]:
    """The parts of :func:`regime` the KV cache's slots do not change, once per evaluation
    (the cost model asks for the regime of every client running and of the running batch):
    ``(tau, piece, ceil(input / piece), chunk * output / (tau * input), min(pp, batch))``."""
    n_in, n_out, chunk = plan.input_len, plan.output_len, plan.prefill_chunk
    tau = expected_tokens_per_step(plan.acceptance, plan.draft_len)
    piece = smin(chunk, n_in, sm, integer=True)
    iterations = ceil_div(n_in, piece, sm)
    chunk_batch = chunk * n_out / (tau * n_in)
    return tau, piece, iterations, chunk_batch, smin(plan.pp, plan.batch, sm, integer=True)


class Admission(NamedTuple):
    """The fields of :class:`Regime` the plan's memory needs, with every client running
    (:func:`admission`; :func:`diffcost._serve.cost.memory_and_limits`)."""

    query_tokens: Array
    piece: Array
    batch_eff: Array
    micro_static: Array
    micro_cont: Array


def admission(plan: ServePlan, sm: Smoothing) -> Admission:
    """:func:`regime`'s ``query_tokens, piece, batch_eff, micro_static, micro_cont`` with no
    cap on the running batch (``B_run = B``): the memory the plan asks for; the same values as
    ``regime(plan, sm)``'s without building the fields the memory does not read."""
    _, piece, _, chunk_batch, micro_static = _slot_free(plan, sm)
    b_eff = smin(plan.batch, chunk_batch, sm)
    return Admission(
        query_tokens=plan.draft_len + 1.0,
        piece=piece,
        batch_eff=b_eff,
        micro_static=micro_static,
        micro_cont=smin(plan.pp, b_eff, sm),
    )


def regime(plan: ServePlan, sm: Smoothing, slots: Array | None = None) -> Regime:
    """Speculative tokens per step, chunking and the continuous running batch of ``plan``.

    ``tau`` from :func:`expected_tokens_per_step`; ``B_eff = min(B_run, chunk * output / (tau *
    input))`` and ``P = B_eff tau input / output`` prompt tokens per iteration (Sarathi-Serve).
    ``B_run = min(B, slots)``: of ``B`` clients, the KV cache holds ``slots`` sequences of
    ``input + output`` tokens (:func:`diffcost._serve.cost.memory_and_limits`' ``max_batch``;
    ``None``: no cap) and the other ``max(B - slots, 0)`` wait for a slot
    (:func:`continuous_mode`).  Both go through :func:`~diffcost._core.smooth.excess`, exactly
    ``B`` and 0 for every plan that fits.
    Prompts arrive as chunks of ``piece`` tokens, so a share ``min(1, P / piece)`` of the
    iterations carries one and the rest are decode-only, the batches an engine replays as a
    CUDA graph (:func:`diffcost._serve.behaviours.graphed`); the averaged iteration pays launches
    in that proportion (linear in the share, so the average is exact).
    """
    p, b = plan.pp, plan.batch
    n_in, n_out, chunk = plan.input_len, plan.output_len, plan.prefill_chunk
    tau, piece, iterations, chunk_batch, micro_static = _slot_free(plan, sm)
    queued = jnp.zeros(()) if slots is None else excess(b - slots, sm, scale=b)
    running = b - queued
    b_eff = smin(running, chunk_batch, sm)
    rate = b_eff * tau * n_in / n_out
    # a request's own prompt is prefilled before its first token, never in its decode: the
    # others' share of the prompt tokens, over whole running sequences (running >= 1, so no
    # blend: exact at every integer plan)
    others = rate * (1.0 - 1.0 / running)
    return Regime(
        tokens_per_step=tau,
        query_tokens=plan.draft_len + 1.0,
        context_avg=n_in + 0.5 * n_out,
        piece=piece,
        batch_eff=b_eff,
        prompt_rate=rate,
        micro_static=micro_static,
        micro_cont=smin(p, b_eff, sm),  # b_eff is a rate, not an integer: continuous blend
        decode_only_share=1.0 - smin(jnp.ones(()), rate / piece, sm),
        others_rate=others,
        others_decode_only=1.0 - smin(jnp.ones(()), others / piece, sm),
        prompt_iterations=iterations,
        # the cohort's prompt tokens spread over the iterations of one prompt, at most the
        # budget: one client's 5,000 tokens in 2,048-token pieces are 3 iterations of 1,667
        # (its last piece is 904), not 3 full ones; two or more clients fill every one
        cohort_tokens=smin(chunk, running * n_in / iterations, sm, integer=True),
        running=running,
        queued=queued,
    )


def serve_work(plan: ServePlan, r: Regime, model: Model, sm: Smoothing) -> Work:
    """Every pass the modes need, stacked in the order ``_PREFILL ... _ONE_PROMPT``.

    Contexts are the tokens attended, averaged over the layers
    (:meth:`~diffcost._inputs.model.Model.attended_tokens`: a sliding-window layer attends at
    most its window; a decode sequence's mean context is taken before the window, exact while
    the window covers it), and a prompt's causal mean
    (:meth:`~diffcost._inputs.model.Model.prompt_attended_tokens`, ``input / 2`` without a
    window)."""
    b, n_in = plan.batch, plan.input_len
    q, piece, rate = r.query_tokens, r.piece, r.prompt_rate
    ctx = model.attended_tokens(r.context_avg, sm)
    half = model.prompt_attended_tokens(plan.input_len, sm)
    m_b, m_eff, b_eff = r.micro_static, r.micro_cont, r.batch_eff
    graph, others = r.decode_only_share, r.others_rate
    z = jnp.zeros(())
    one = jnp.ones(())
    cohort = r.cohort_tokens
    rows = [  # micro, dec_seqs, q, dec_ctx, pre_tokens, piece, pre_ctx, prompts_done, decode_only
        (m_b, z, one, n_in, b * n_in, n_in, half, b, z),  # static prefill
        (m_b, b, q, ctx, z, n_in, half, z, one),  # decode / verify
        (m_b, b, one, ctx, z, n_in, half, z, one),  # draft-sized decode
        (m_eff, b_eff, q, ctx, rate, piece, half, rate / n_in, graph),  # continuous iter.
        (m_eff, b_eff, q, ctx, cohort, piece, half, cohort / n_in, z),  # TTFT iteration
        (m_eff, b_eff, one, ctx, z, n_in, half, z, one),  # continuous draft
        (one, z, one, n_in, n_in, n_in, half, one, z),  # one prompt (disaggregated)
        (m_eff, b_eff, q, ctx, others, piece, half, others / n_in, r.others_decode_only),  # TPOT
    ]
    return Work(*(jnp.stack([jnp.broadcast_to(row[i], ()) for row in rows]) for i in range(9)))


class ModeTimes(NamedTuple):
    """TTFT, TPOT and output tokens/s of one instance (a replica when disaggregated)."""

    ttft_s: Array
    tpot_s: Array
    tokens_per_s: Array


@once
def draft_s(plan: ServePlan, pt: PassTime, index: int) -> Array:
    """Seconds of the ``k`` draft passes of a step: ``k * draft_fraction * round(index)``."""
    return plan.draft_len * plan.draft_params_fraction * pt.round_s[index]


def static_mode(plan: ServePlan, r: Regime, pt: PassTime) -> ModeTimes:
    """Static batching: prefill the batch (TTFT), then decode together.

    ``latency = TTFT + (output - 1) TPOT``, throughput ``batch * output / latency``.
    """
    ttft = pt.traversal_s[_PREFILL] + (r.micro_static - 1.0) * pt.stage_s[_PREFILL]
    step = pt.round_s[_DECODE] + draft_s(plan, pt, _DRAFT)
    tpot = step / r.tokens_per_step
    latency = ttft + (plan.output_len - 1.0) * tpot
    return ModeTimes(ttft, tpot, plan.batch * plan.output_len / latency)


def continuous_mode(plan: ServePlan, r: Regime, pt: PassTime, sm: Smoothing) -> ModeTimes:
    """Continuous batching with chunked prefill in steady state (Orca, Sarathi-Serve), as a
    closed loop of ``batch`` clients: each sends its next request when the last one ends, the
    way concurrency benchmarks drive a server (NVIDIA AIPerf / GenAI-Perf ``--concurrency``,
    vLLM ``bench serve --max-concurrency``); independent users arriving at a rate are
    :func:`diffcost.under_load`'s open loop.

    Throughput ``B_eff tau / step``, ``step`` the iteration with ``P`` prompt tokens.  TPOT is
    the iteration a decoding request sees over ``tau``: its own prompt was prefilled before its
    first token, so its iterations carry the prompts of the other ``B_run - 1`` running requests
    only, ``P (1 - 1 / B_run)`` tokens (one client: none; many: ``P``).  On the NIM 1.8 rows
    at one client, where TTFT already holds the prompt, TPOT was 15-52% above the published ITL
    with the prompt share counted, most at the longest prompts.  TTFT: the
    ``ceil(input / piece)`` iterations that carry a prompt (``piece = min(chunk, input)``), each
    lasting the iteration with the prompt tokens of its *cohort*.  Requests of equal lengths
    that end in the same iteration come back together (the clients re-send at once; benchmark
    clients also start together), so prompts arrive in cohorts, and the iteration that
    finishes a prompt is filled with its cohort's prompts up to the token budget: ``cohort =
    min(chunk, batch * input / iterations)`` prompt tokens beside the ``B_eff`` decodes (the
    budget is the prompts', as in :func:`regime`).  With one client (``batch = 1``) the cohort
    is the prompt alone, in ``ceil(input / piece)`` equal pieces (a 5,000-token prompt in a
    2,048-token budget: 3 iterations of 1,667 tokens, not 3 full ones, which overcounted the
    NIM 1.8 one-client TTFT by 20-40% at 5,000 tokens); with two or more the iterations are
    full (``batch * input / ceil(input / chunk) >= chunk`` whenever ``input >= chunk``).
    Checked against a discrete-event simulation of the same scheduler driven
    by a closed loop that starts all clients together (``tests/serving_sim.py``,
    :func:`closed_loop` there, whose decodes take their tokens out of the budget): median
    |error| 5.2% over 39 plans (Llama 3 70B fp8 on 2 H100, prompts 200-5,000 tokens, 5-200
    clients, budgets 2,048-8,192); the old one-prompt iteration was 3-20x below the simulation
    at 25 clients or more.  The simulation with clients at random phases forms no cohorts and
    gives the one-prompt iteration (``docs/serving-model.md``).  ``smin`` with integer blends
    and :func:`~diffcost._core.smooth.ceil_div` are exact at every integer plan.

    More clients than the KV cache holds (``B > slots``, :func:`regime`): the engine admits a
    request only when its ``input + output`` tokens fit (TensorRT-LLM's
    ``GUARANTEED_NO_EVICT`` capacity scheduler reserves them at admission; vLLM admits while
    blocks are free), so ``B_run = slots`` sequences run and the others queue.  A saturated
    closed loop of ``B`` clients over ``S`` busy servers, each request holding one for
    ``T = TTFT_run + (output - 1) TPOT``, completes ``X = S / T`` requests/s, and by the
    response time law ``R = B / X`` (Lazowska et al., "Quantitative System Performance", 1984,
    §3.5 and §6.3), so the wait for a slot, ``R - T = (B - S) T / S``, adds to TTFT.  On the
    NIM 1.8 sweeps (``specs/measurements/load/nim-llm-concurrency.toml``) the running batch
    that the response time law recovers from the published TTFT, ITL and throughput plateaus
    at 86 (Llama 3.3 70B, 5000/500 tokens), 23.5 (20000/2000), 171 and 46 (Llama 3.1 8B,
    5000/500 and 20000/2000), where ``max_batch`` gives 99, 24.8, 199 and 49.9.
    """
    step = pt.round_s[_ITER] + draft_s(plan, pt, _ITER_DRAFT)
    tpot = (pt.round_s[_ITER_TPOT] + draft_s(plan, pt, _ITER_DRAFT)) / r.tokens_per_step
    ttft = r.prompt_iterations * (pt.round_s[_ITER_TTFT] + draft_s(plan, pt, _ITER_DRAFT))
    hold = ttft + (plan.output_len - 1.0) * tpot
    wait = r.queued * hold / r.running
    return ModeTimes(ttft + wait, tpot, r.batch_eff * r.tokens_per_step / step)


def kv_transfer_s(c: Consts, plan: ServePlan) -> Array:
    """Seconds to send one prompt's KV cache from a prefill to a decode instance:
    ``input * kv_bytes_per_token`` per chip over the link ``prefill_chips`` ranks away."""
    cached = c.model.attended_tokens(plan.input_len, c.sm)  # a window keeps its last W tokens
    kv = cached * kv_bytes_per_token(c.model, plan.tp, plan.pp, c.kv_bytes, c.sm)
    return point_to_point_s(kv, plan.prefill_chips, c.system, c.sm)


def disaggregated_mode(
    c: Consts, plan: ServePlan, pt: PassTime, tpot: Array, transfer_s: Array
) -> ModeTimes:
    """Disaggregated pools (DistServe, Splitwise): prefill instances run one prompt at a time,
    the KV cache crosses the network (added to TTFT), decode instances run ``batch``
    sequences at ``tpot`` (static decode); a replica's rate is the smaller pool's."""
    ttft = pt.traversal_s[_ONE_PROMPT] + transfer_s
    instance = plan.tp * plan.pp
    prefill_rate = plan.prefill_chips / instance / pt.stage_s[_ONE_PROMPT]
    decode_rate = plan.decode_chips / instance * plan.batch / (plan.output_len * tpot)
    return ModeTimes(ttft, tpot, smin(prefill_rate, decode_rate, c.sm) * plan.output_len)


def mode_weights(plan: ServePlan) -> Array:
    """Weights of (static, continuous, disaggregated): ``((1-d) w_s, (1-d) w_c, d)``."""
    d = plan.disaggregated
    return jnp.stack([(1.0 - d) * plan.mode[0], (1.0 - d) * plan.mode[1], d])


__all__ = [
    "Admission",
    "ModeTimes",
    "Regime",
    "continuous_mode",
    "disaggregated_mode",
    "draft_s",
    "admission",
    "kv_transfer_s",
    "mode_weights",
    "regime",
    "serve_work",
    "static_mode",
]
