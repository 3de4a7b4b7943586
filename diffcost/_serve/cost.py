"""Serving a model: latency, throughput, memory, energy and cost of a deployment.

``ServeCost(system, model)(plan)`` is the single jittable entry point; ``ServeCost.at_slo`` gives
the headline serving number, the most output tokens/s per chip whose TTFT and TPOT meet a
latency objective.  Built from the passes of :mod:`diffcost._serve.passes`, one named term
function per mode (:func:`static_mode`, :func:`continuous_mode`, :func:`disaggregated_mode`):

* static batching: the whole batch is prefilled (TTFT), then decodes together; the batch's
  decode steps read a cache whose length averages ``input + output / 2`` (exact for the terms
  linear in context).  Latency ``TTFT + (output - 1) TPOT``; throughput ``batch * output /
  latency`` per instance (the next batch starts when this one ends).
* continuous (in-flight) batching with chunked prefill, in a queueing-free steady state
  (requests always waiting, none waiting long; Yu et al. "Orca", OSDI'22; Agrawal et al.
  "Sarathi-Serve", OSDI'24): every iteration decodes the running batch and prefills up to
  ``prefill_chunk`` prompt tokens.  A slot is held for ``output_len / tau`` iterations, so keeping
  ``B`` slots busy needs ``P = B tau input / output`` prompt tokens per iteration; when the chunk
  is smaller the running batch shrinks to ``B_eff = min(B, chunk * output / (tau * input))``.
  TPOT is the iteration a decoding request sees (the other requests' prompts only); TTFT is
  ``ceil(input / chunk)`` iterations with a full chunk.
* speculative decoding: each step runs ``k`` draft passes (a draft of ``draft_params_fraction``
  of the target's size costs that fraction of a target decode pass) and one target pass that
  verifies ``k + 1`` tokens per sequence, gaining ``tau = (1 - a^(k+1)) / (1 - a)`` tokens.
* disaggregated prefill and decode pools (Zhong et al. "DistServe", OSDI'24; Patel et al.
  "Splitwise", ISCA'24): prefill instances run one prompt at a time, the KV cache crosses the
  network to a decode instance (added to TTFT), decode instances run ``batch`` sequences with
  no prefill interference; the replica's request rate is the smaller of the pools' rates.
* replicas multiply throughput and chips; energy per token is activity-based
  (:func:`energy_per_token_j`: idle power plus per-FLOP and per-byte energies, at most
  ``chips * TDP / (tokens/s)``, which it is for a chip without energy figures) and
  cost per million tokens ``chips * price / 3600 / (tokens/s) * 1e6`` (output tokens).
"""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .._core.errors import memory_problem
from .._core.shared import evaluation, once
from .._core.smooth import (
    EXACT,
    Smoothing,
    divisibility_violation,
    excess,
    is_one,
    mix,
    relu,
    smax,
)
from .._inputs.hardware import System
from .._inputs.model import Model
from .._terms.energy import activity_energy_j
from .._terms.execution import wasted_rows
from .._terms.memory_levels import placed_system
from .._terms.power import sustained, sustained_energy
from .._terms.tp_rules import EXPERT_LAYOUT_RULES
from .kv import (
    ServeMemory,
    activation_bytes_per_token,
    cached_slots,
    kv_bytes_per_token,
    serve_memory,
)
from .modes import (
    _DECODE,
    _DRAFT,
    _ITER,
    _ITER_DRAFT,
    _ITER_TPOT,
    _ONE_PROMPT,
    _PREFILL,
    Admission,
    Regime,
    admission,
    continuous_mode,
    disaggregated_mode,
    draft_s,
    kv_transfer_s,
    mode_weights,
    regime,
    serve_work,
    static_mode,
)
from .passes import Consts, PassTime, Work, consts, pass_time
from .plan import ServePlan, default_batch_grid


class ServeBreakdown(eqx.Module):
    """Prediction for a serving plan (SI units; every field a float array).

    Latency: ``ttft_s`` (time to first token), ``tpot_s`` (time per output token),
    ``request_latency_s = ttft + (output - 1) tpot``.  Throughput of the whole deployment
    (``output_tokens_per_s``), per user and per chip.  ``decode_*_s`` split one decode step
    (draft passes, then the verify/decode round: GEMMs, attention, memory-bound kernels,
    launches, TP all-reduces, pipeline hand-offs and waits); they sum to ``decode_step_s``,
    and ``tpot_s = decode_step_s / tokens_per_step``.
    """

    ttft_s: Float[Array, ""]
    tpot_s: Float[Array, ""]
    request_latency_s: Float[Array, ""]
    output_tokens_per_s: Float[Array, ""]
    output_tokens_per_s_per_user: Float[Array, ""]
    output_tokens_per_s_per_chip: Float[Array, ""]
    requests_per_s: Float[Array, ""]
    decode_step_s: Float[Array, ""]
    decode_draft_s: Float[Array, ""]
    decode_gemm_s: Float[Array, ""]
    decode_attention_s: Float[Array, ""]
    decode_memory_s: Float[Array, ""]
    decode_launch_s: Float[Array, ""]
    decode_tp_comm_s: Float[Array, ""]
    decode_pp_comm_s: Float[Array, ""]
    decode_pipeline_wait_s: Float[Array, ""]
    decode_weight_read_s: Float[Array, ""]
    decode_kv_read_s: Float[Array, ""]
    decode_compute_s: Float[Array, ""]
    decode_memory_bound_fraction: Float[Array, ""]
    tokens_per_step: Float[Array, ""]
    decode_batch: Float[Array, ""]
    critical_batch: Float[Array, ""]
    kv_transfer_s: Float[Array, ""]
    memory: ServeMemory
    capacity_bytes: Float[Array, ""]
    headroom_bytes: Float[Array, ""]
    max_batch: Float[Array, ""]
    min_chips_for_weights: Float[Array, ""]
    chips: Float[Array, ""]
    energy_per_token_j: Float[Array, ""]
    cost_per_million_tokens_usd: Float[Array, ""]
    accuracy_cost: Float[Array, ""]
    divisibility_violation: Float[Array, ""]

    def fits(self) -> Array:
        """1.0 if the plan fits in memory, else 0.0."""
        return jnp.where(self.headroom_bytes >= 0.0, 1.0, 0.0)


class SloResult(eqx.Module):
    """Best batch under a latency objective (:meth:`ServeCost.at_slo`).

    Attributes:
        batch: the batch with the most output tokens/s per chip that fits and meets both
            limits (0 when none does).
        feasible: 1.0 if some batch of the grid qualifies.
        breakdown: the prediction at that batch (at the grid's first batch when infeasible).
    """

    batch: Float[Array, ""]
    feasible: Float[Array, ""]
    breakdown: ServeBreakdown


def memory_and_limits(
    c: Consts, plan: ServePlan, r: Regime | Admission
) -> tuple[ServeMemory, Array, Array]:
    """``(memory, max_batch, min_chips_for_weights)`` of the plan.

    Memory from :func:`~diffcost._serve.kv.serve_memory` for the largest pass of each mode
    (mixed by :func:`mode_weights`); the largest batch that fits (continuous value,
    micro-batches = pp) is ``relu(capacity - fixed) / per_sequence``; the fewest chips whose
    usable memory holds the weights is ``params * w * (1 + draft) / (capacity - reserve)``.
    """
    model, sm = c.model, c.sm
    t, p, b, n_in = plan.tp, plan.pp, plan.batch, plan.input_len
    q, piece, one = r.query_tokens, r.piece, jnp.ones(())
    m_b, m_eff, b_eff = r.micro_static, r.micro_cont, r.batch_eff
    act_tokens = jnp.stack([b * n_in / m_b, (b_eff * q + piece) / m_eff, b * q / m_b])
    logit_rows = jnp.stack([b / m_b, (b_eff * q + piece / n_in) / m_eff, b * q / m_b])
    mode_w = mode_weights(plan)
    draft_fraction = (1.0 - is_one(q, sm)) * plan.draft_params_fraction
    context = n_in + plan.output_len
    mem = serve_memory(
        model,
        c.system,
        tp=t,
        pp=p,
        sequences=b,
        context=context,
        kv_block=plan.kv_block,
        weight_bytes=c.weight_bytes,
        kv_element_bytes=c.kv_bytes,
        draft_fraction=draft_fraction,
        pass_tokens=jnp.sum(mode_w * act_tokens),
        logit_rows=jnp.sum(mode_w * logit_rows),
        sm=sm,
    )
    capacity = c.system.chip.memory_capacity_bytes
    kv_seq = (
        cached_slots(model, context, plan.kv_block, sm)
        * (1.0 + draft_fraction)
        * (kv_bytes_per_token(model, t, p, c.kv_bytes, sm))
    )
    act_tok = activation_bytes_per_token(model, t, sm)
    logit_row = 4.0 * model.vocab / t
    per_seq_tokens = jnp.sum(mode_w * jnp.stack([n_in, q, q])) / p
    per_seq_rows = jnp.sum(mode_w * jnp.stack([one, q, q])) / p
    per_seq = kv_seq + act_tok * per_seq_tokens + logit_row * per_seq_rows
    fixed = (
        mem.weights_bytes
        + mem.reserved_bytes
        + mode_w[1] / p * (act_tok * piece + logit_row * piece / n_in)
    )
    max_batch = relu(capacity - fixed, sm, scale=capacity) / per_seq
    usable = capacity - mem.reserved_bytes
    min_chips = model.num_params() * c.weight_bytes * (1.0 + draft_fraction) / usable
    return mem, max_batch, min_chips


def critical_batch(c: Consts, plan: ServePlan, r: Regime) -> Array:
    """Decode batch above which the weight GEMMs turn compute-bound, sequences.

    The ridge ``w * peak * f_peak / (2 bw_eff)`` tokens (Williams et al. 2009; ``peak`` the
    compute format's achievable peak, ``f_peak`` its sustained large-GEMM fraction,
    :func:`~diffcost._terms.power.sustained`), less
    ``f_peak * d`` for the rows the chip's class wastes on a skinny GEMM,
    ``d = w_gpu * d_half + w_sys * R``, times ``pp / q`` (micro-batches and verified tokens per
    sequence).  With :func:`~diffcost._terms.gemm.matmul_efficiency` at large ``k, n`` (fill
    ``m / (m + d)``, ``1 / eff = 1 / f_peak + d / m``), ``m`` rows take
    ``2 k n (m / f_peak + d) / peak`` against ``w k n / bw_eff`` to read the weight, equal at
    ``m = f_peak (w peak / (2 bw_eff) - d) = ridge - f_peak d``: ``d`` is the GPU's fitted
    half-dimension ``matmul_half_dim``, a systolic array's ``R`` fill/drain rows per pass
    (Kung 1982), and 0 on a dataflow chip (no row penalty).  The idle rows run at the full
    clock, so they cost ``f_peak d``, not ``d`` (module docstring of diffcost._terms.gemm).
    """
    chip = c.system.chip
    # the GEMM law's large-GEMM fraction: sustained under the power limit (diffcost._terms.power)
    eff = sustained(c.system, c.peak_flop_per_s, c.flop_j, c.sm).efficiency
    bw_eff = chip.memory_bandwidth_bytes_per_s * eff.memory_bandwidth_fraction
    ridge = c.weight_bytes * c.peak_flop_per_s * eff.matmul_peak_fraction / (2.0 * bw_eff)
    wasted = wasted_rows(chip, eff)
    critical_tokens = relu(ridge - eff.matmul_peak_fraction * wasted, c.sm, scale=ridge)
    return critical_tokens * plan.pp / r.query_tokens


def accuracy_cost(plan: ServePlan) -> Array:
    """User-visible accuracy cost of the formats: the sum of each format's ``accuracy_cost``
    (weights, compute, KV), mixed by the format weights."""
    return (
        mix(plan.weight_format, plan.accuracy_cost)
        + mix(plan.compute_format, plan.accuracy_cost)
        + mix(plan.kv_format, plan.accuracy_cost)
    )


def divisibility(model: Model, plan: ServePlan, sm: Smoothing) -> Array:
    """Relaxed divisibility violations: heads, ffn and KV heads (or their replication) by
    ``tp``, layers by ``pp``, the disaggregated pools by the instance size, and a mixture of
    experts' routed experts by ``tp`` (expert parallel) or their width by ``tp`` (tensor-parallel
    experts)."""
    t, d = plan.tp, plan.disaggregated
    instance = plan.tp * plan.pp
    kv_split = smax(model.kv_heads / t, t / model.kv_heads, sm)
    e, moe = plan.expert_parallel, model.moe_fraction()
    # the expert-layout rules (EXPERT_LAYOUT_RULES), each weighted by its layout's weight
    experts, widths = [
        (e if r.layout else 1.0 - e) * r.violation(getattr(model, r.key), t, sm)
        for r in EXPERT_LAYOUT_RULES
    ]
    return (
        moe * (experts + widths)
        + divisibility_violation(model.heads / t, sm)
        + divisibility_violation(model.ffn_hidden / t, sm)
        + divisibility_violation(kv_split, sm)
        + divisibility_violation(model.layers / plan.pp, sm)
        + d * divisibility_violation(plan.prefill_chips / instance, sm)
        + d * divisibility_violation(plan.decode_chips / instance, sm)
    )


Mixer = Callable[[ArrayLike, ArrayLike, ArrayLike], Array]


@once
def _mixer(plan: ServePlan) -> Mixer:
    """``both(static, continuous, disaggregated) = (1-d)(w_s static + w_c continuous) + d
    disaggregated``: a quantity of the plan's mixture of modes."""
    d = plan.disaggregated
    w_static, w_cont = (1.0 - d) * plan.mode[0], (1.0 - d) * plan.mode[1]  # computed once

    def both(s_val: ArrayLike, c_val: ArrayLike, d_val: ArrayLike) -> Array:
        return w_static * s_val + w_cont * c_val + d * d_val

    return both


def decode_split(plan: ServePlan, pt: PassTime, both: Mixer) -> dict[str, Array]:
    """The ``decode_*`` fields of :class:`ServeBreakdown`: one decode step (draft passes, then
    the decode/verify round by term) and its roofline floors, mixed over the modes."""
    draft = both(
        draft_s(plan, pt, _DRAFT), draft_s(plan, pt, _ITER_DRAFT), draft_s(plan, pt, _DRAFT)
    )
    # every term of the round mixed at once: one (terms, passes) array, two columns
    names = (
        "round_s",
        "gemm_s",
        "attention_s",
        "memory_s",
        "launch_s",
        "tp_comm_s",
        "p2p_s",
        "pipeline_wait_s",
        "weight_read_s",
        "kv_read_s",
        "compute_s",
    )
    terms = jnp.stack([getattr(pt, name) for name in names])
    decode = terms[:, _DECODE]
    mixed = both(decode, terms[:, _ITER_TPOT], decode)
    part = dict(zip(names, mixed, strict=True))
    decode_round = part["round_s"]
    weight_read, kv_read = part["weight_read_s"], part["kv_read_s"]
    return dict(
        decode_step_s=draft + decode_round,
        decode_draft_s=draft,
        decode_gemm_s=part["gemm_s"],
        decode_attention_s=part["attention_s"],
        decode_memory_s=part["memory_s"],
        decode_launch_s=part["launch_s"],
        decode_tp_comm_s=part["tp_comm_s"],
        decode_pp_comm_s=part["p2p_s"],
        decode_pipeline_wait_s=part["pipeline_wait_s"],
        decode_weight_read_s=weight_read,
        decode_kv_read_s=kv_read,
        decode_compute_s=part["compute_s"],
        decode_memory_bound_fraction=(weight_read + kv_read) / decode_round,
    )


def pass_activity(c: Consts, w: Work, pt: PassTime) -> tuple[Array, Array, Array]:
    """``(FLOP, memory bytes, link bytes)`` of one round of each pass on one instance (all its
    ``tp * pp`` chips), for activity-based energy.

    FLOP and memory bytes are the bottleneck chip's roofline floors of :class:`~diffcost.
    _serve.passes.PassTime` times the achievable peak and bandwidth (weights and KV cache read;
    activations and logits, an order below them in decode, are not counted); link bytes are
    the TP all-reduces (two per layer of ``2 T h`` bytes, ring ``2 (t - 1)/t``, Shoeybi et al.
    2019 §3) and the ``p - 1`` pipeline hand-offs of ``2 T h`` bytes, ``T`` the pass's tokens.
    """
    system, model = c.system, c.model
    eff = system.efficiency
    chips = c.tp * c.pp
    flop = chips * pt.compute_s * c.peak_flop_per_s * eff.matmul_peak_fraction
    bandwidth = system.chip.memory_bandwidth_bytes_per_s * eff.memory_bandwidth_fraction
    memory = chips * (pt.weight_read_s + pt.kv_read_s) * bandwidth
    tokens = jnp.asarray(w.decode_seqs) * jnp.asarray(w.query_tokens) + w.prefill_tokens
    hidden_bytes = 2.0 * tokens * model.hidden
    tp = model.layers * c.tp * 2.0 * 2.0 * (c.tp - 1.0) / c.tp * hidden_bytes
    pp = (c.pp - 1.0) * c.tp * hidden_bytes
    return flop, memory, tp + pp


def activity_per_token(plan: ServePlan, r: Regime, a: Array, both: Mixer) -> Array:
    """Activity ``a`` of the passes (stacked ``_PREFILL ... _ONE_PROMPT`` on the last axis; the
    leading axes: kinds of activity, each mixed alike) per output token,
    mixed over the modes: static ``(a_prefill + (n / tau)(a_decode + k f a_draft)) / (B n)``,
    continuous ``(a_iter + k f a_iter_draft) / (B_eff tau)``, disaggregated ``a_prompt / n +
    (a_decode + k f a_draft) / (B tau)`` (``n`` output tokens, ``k f`` the draft passes' share
    of a target pass as in :func:`~diffcost._serve.modes.draft_s`)."""
    n, tau, kf = plan.output_len, r.tokens_per_step, plan.draft_len * plan.draft_params_fraction
    step = a[..., _DECODE] + kf * a[..., _DRAFT]
    static = (a[..., _PREFILL] + n / tau * step) / (plan.batch * n)
    cont = (a[..., _ITER] + kf * a[..., _ITER_DRAFT]) / (r.batch_eff * tau)
    disagg = a[..., _ONE_PROMPT] / n + step / (plan.batch * tau)
    return both(static, cont, disagg)


def energy_per_token_j(
    c: Consts, plan: ServePlan, r: Regime, w: Work, pt: PassTime, tokens_per_s: Array
) -> Array:
    """Energy per output token, J: :func:`~diffcost._terms.energy.activity_energy_j` of one
    second of the deployment (``chips`` powered, :func:`activity_per_token` times
    ``tokens_per_s`` of work, its FLOP at the sustained clock's J/FLOP,
    :func:`~diffcost._terms.power.sustained_energy`, plus the system's power besides the
    chips) over
    ``tokens_per_s``.  Without chip energy figures or system overhead:
    ``chips * TDP / tokens_per_s``."""
    both = _mixer(plan)
    # FLOP, memory bytes and link bytes per token in one stacked evaluation
    flop, memory, link = activity_per_token(plan, r, jnp.stack(pass_activity(c, w, pt)), both)
    chip = c.system.chip
    energy = activity_energy_j(
        sustained_energy(c.system, c.sm),
        chip.tdp_w,
        time_s=1.0,
        chips=plan.num_chips(),
        flop_by_format=flop * tokens_per_s * plan.compute_format,
        memory_bytes=memory * tokens_per_s,
        link_bytes=link * tokens_per_s,
        sm=c.sm,
        overhead_w=c.system.overhead_w(plan.num_chips()),
    )
    return energy / tokens_per_s


class ServeCost(eqx.Module):
    """Serving cost model of ``model`` on ``system``; call it on a :class:`ServePlan`.

    ``smoothing`` (static) selects the exact model (default) or its smooth relaxation.
    """

    system: System
    model: Model
    smoothing: Smoothing = eqx.field(static=True, default=EXACT)

    def __call__(self, plan: ServePlan) -> ServeBreakdown:
        with evaluation():  # each shared term traced once (diffcost._core.shared)
            return self._evaluate(plan)

    def _evaluate(self, plan: ServePlan) -> ServeBreakdown:
        model, sm = self.model, self.smoothing
        r_all = admission(plan, sm)  # every client running: the memory the plan asks for
        c_all = consts(self.system, model, plan, sm)
        mem, max_batch, min_chips = memory_and_limits(c_all, plan, r_all)
        # the running batch the KV cache holds; at least one sequence, so that a plan whose
        # weights do not fit (reported by serve_problems) still has finite times
        # (from above only: 1 + excess(max_batch - 1) >= 1, so one client never queues)
        r = regime(plan, sm, slots=1.0 + excess(max_batch - 1.0, sm, scale=max_batch))
        # the working set (weights, KV cache, activations) placed over the chip's memory levels
        sys = placed_system(self.system, mem.total_bytes - mem.reserved_bytes, sm)
        # the placement changes the memory's bandwidth and energy only: every constant of the
        # formats (peaks, J/FLOP, element sizes, KV heads) is the one computed above
        c = c_all._replace(system=sys)
        w = serve_work(plan, r, model, sm)
        pt = pass_time(c, w)
        static = static_mode(plan, r, pt)
        transfer = kv_transfer_s(c, plan)
        modes = (
            static,
            continuous_mode(plan, r, pt, sm),
            disaggregated_mode(c, plan, pt, static.tpot_s, transfer),
        )
        both = _mixer(plan)
        ttft = both(*(mode.ttft_s for mode in modes))
        tpot = both(*(mode.tpot_s for mode in modes))
        tokens_per_s = plan.replicas * both(*(mode.tokens_per_s for mode in modes))
        chips = plan.num_chips()
        chip, n_out = sys.chip, plan.output_len
        return ServeBreakdown(
            ttft_s=ttft,
            tpot_s=tpot,
            request_latency_s=ttft + (n_out - 1.0) * tpot,
            output_tokens_per_s=tokens_per_s,
            output_tokens_per_s_per_user=1.0 / tpot,
            output_tokens_per_s_per_chip=tokens_per_s / chips,
            requests_per_s=tokens_per_s / n_out,
            **decode_split(plan, pt, both),
            tokens_per_step=r.tokens_per_step,
            decode_batch=both(plan.batch, r.batch_eff, plan.batch),
            critical_batch=critical_batch(c, plan, r),
            kv_transfer_s=plan.disaggregated * transfer,
            memory=mem,
            capacity_bytes=chip.memory_capacity_bytes,
            headroom_bytes=chip.memory_capacity_bytes - mem.total_bytes,
            max_batch=max_batch,
            min_chips_for_weights=min_chips,
            chips=chips,
            energy_per_token_j=energy_per_token_j(c, plan, r, w, pt, tokens_per_s),
            cost_per_million_tokens_usd=chips
            * sys.price_usd_per_chip_hour
            / 3600.0
            / tokens_per_s
            * 1e6,
            accuracy_cost=accuracy_cost(plan),
            divisibility_violation=divisibility(model, plan, sm),
        )

    def at_slo(
        self,
        plan: ServePlan,
        ttft_slo_s: ArrayLike = float("inf"),
        tpot_slo_s: ArrayLike = float("inf"),
        batches: Float[Array, " n"] | None = None,
    ) -> SloResult:
        """Throughput at a latency objective: the batch of ``batches`` (default
        :func:`default_batch_grid`) with the most output tokens/s per chip among those that fit
        in memory with ``ttft_s <= ttft_slo_s`` and ``tpot_s <= tpot_slo_s``.

        Every batch is evaluated with ``self`` in one ``vmap``; jittable.
        """
        grid = default_batch_grid() if batches is None else jnp.asarray(batches)
        plans = jax.vmap(lambda bb: eqx.tree_at(lambda pl: pl.batch, plan, bb))(grid)
        outs = jax.vmap(self)(plans)
        ok = (
            (outs.headroom_bytes >= 0.0) & (outs.ttft_s <= ttft_slo_s) & (outs.tpot_s <= tpot_slo_s)
        )
        score = jnp.where(ok, outs.output_tokens_per_s_per_chip, -jnp.inf)
        best = jnp.argmax(score)
        feasible = jnp.any(ok)
        pick = jax.tree_util.tree_map(lambda x: x[best], outs)
        return SloResult(
            batch=jnp.where(feasible, grid[best], 0.0),
            feasible=jnp.where(feasible, 1.0, 0.0),
            breakdown=pick,
        )


def _expert_problems(model: Model, plan: ServePlan) -> list[str]:
    """Expert layout rules: expert parallel needs routed experts, ``E / tp`` whole experts per
    rank (vLLM ``FusedMoE`` with EP); tensor-parallel experts split each expert's width."""
    tp, experts = float(plan.tp), float(model.experts)
    spread = float(plan.expert_parallel) > 0.5
    if spread and experts == 0:
        return ["expert_parallel needs a mixture-of-experts model (this one has no experts)"]
    if experts == 0:
        return []
    rules = [r for r in EXPERT_LAYOUT_RULES if r.layout == spread]  # EXPERT_LAYOUT_RULES
    found = [r.problem(float(getattr(model, r.key)), tp) for r in rules]
    return [p for p in found if p is not None]


def serve_problems(
    model: Model, plan: ServePlan, out: ServeBreakdown, system_chips: float
) -> list[str]:
    """Every reason an exact serving plan cannot run as given (empty list: feasible)."""
    g = float
    tp, pp = g(plan.tp), g(plan.pp)
    problems = []
    chips = g(out.chips)
    if chips > system_chips:
        problems.append(f"the plan needs {chips:.0f} chips but the system has {system_chips:.0f}")
    heads, kv, ffn, layers = g(model.heads), g(model.kv_heads), g(model.ffn_hidden), g(model.layers)
    for num, den, a, b in [
        (heads, tp, "heads", "tp"),
        (ffn, tp, "ffn_hidden", "tp"),
        (layers, pp, "layers", "pp"),
    ]:
        if num % den:
            problems.append(
                f"{a} ({num:.0f}) is not divisible by {b} ({den:.0f}): remainder {num % den:.0f}"
            )
    problems += _expert_problems(model, plan)
    if tp <= kv and kv % tp:
        problems.append(f"kv_heads ({kv:.0f}) is not divisible by tp ({tp:.0f})")
    if tp > kv and tp % kv:
        problems.append(
            f"tp ({tp:.0f}) is not a multiple of kv_heads ({kv:.0f}) (KV heads are "
            "replicated beyond tp = kv_heads)"
        )
    context = g(plan.input_len) + g(plan.output_len)
    if context > g(model.max_seq_len):
        problems.append(
            f"input_len + output_len = {context:.0f} exceeds the model's "
            f"max_seq_len ({g(model.max_seq_len):.0f})"
        )
    memory = memory_problem(g(out.memory.total_bytes), g(out.capacity_bytes))
    if memory:
        problems.append(
            f"{memory}; the weights alone need {g(out.min_chips_for_weights):.1f} chips, the "
            f"largest batch that fits is {max(g(out.max_batch), 0.0):.0f}"
        )
    return problems


__all__ = [
    "ServeBreakdown",
    "ServeCost",
    "SloResult",
    "accuracy_cost",
    "critical_batch",
    "default_batch_grid",
    "divisibility",
    "memory_and_limits",
    "serve_problems",
]
