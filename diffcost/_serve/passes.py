"""Time of one forward pass of a serving instance, and how the serving modes compose passes.

A pass is any mix of decode tokens (``decode_seqs`` sequences with ``query_tokens`` new tokens
each, attending ``decode_ctx`` cached tokens) and prompt tokens (chunks of ``prefill_piece``
tokens attending on average ``prefill_ctx`` earlier tokens), split into ``micro_batches`` that
flow through ``pp`` pipeline stages of ``layers / pp`` layers each.  Per layer and micro-batch
(Pope et al., MLSys'23; Williams et al., "Roofline", CACM 2009):

* four GEMMs (QKV, output projection, MLP in, MLP out) over all new tokens, each
  ``max(2 m n k / (peak * eff(m, n, k)), (k n w + (m k + m n) a) / bw)``: weights of ``w`` bytes
  are read once per pass whatever the batch, which makes small-batch decode memory-bound;
* the attention core per kernel (decode, prefill): ``max(4 q c heads e / (peak * eff),
  KV bytes / bw)``; decode reads the KV cache of every sequence (split-KV kernel, ``eff`` the
  large-GEMM fraction), flash-style prefill reads each chunk's context once, computes the causal
  half and tiles like a GEMM (``eff(m = group * chunk, n = context, k = head_dim)``);
* memory-bound kernels: KV-cache write, norms, residuals, activation (16-bit), and for 8-bit
  GEMMs the quantization of each GEMM input (read 2 bytes, write 1; Transformer Engine /
  TensorRT-LLM FP8 recipes);
* the engine's behaviours (:mod:`diffcost._serve.behaviours`, each weighted by its plan
  switch): extra KV-cache re-reads of a GQA-unaware decode kernel, the 16-bit weight copy of a
  separate dequantization kernel, the launches CUDA-graph replay saves;
* kernel launches: the per-kernel cost, less what the behaviours save, plus their per-pass
  launches (:func:`launch_time_s`);
* two tensor-parallel all-reduces (Shoeybi et al. 2019, §3) whose latency
  term dominates at small batch.

Each of these is a term of :mod:`diffcost._terms` (``layer``, ``attention``, ``kernels``,
``comm``) that the training step composes too; :func:`layer_time` sums them for one layer.

The last stage also runs the output projection and writes fp32 logits.  A micro-batch's
``traversal`` is every layer in sequence plus ``pp - 1`` hand-offs, so pipelining never shortens
one request; with ``m`` micro-batches in flight a round (every micro-batch advances once) takes
``max(traversal, m * bottleneck_stage)`` (GPipe/1F1B steady state, Huang et al. 2019).

All arrays broadcast: the cost model evaluates all the passes it needs as one stacked ``Work``.
"""

from collections.abc import Iterator, Sequence
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike

from .._core.smooth import Smoothing, excess, is_one, mix, smax
from .._inputs.hardware import BYTES_PER_ELEMENT, FORMATS, System
from .._inputs.model import Model
from .._terms.attention import (
    AttentionShape,
    FusedAttention,
    decode_attention,
    prefill_attention,
)
from .._terms.comm import point_to_point_s, tp_all_reduce_s
from .._terms.gemm import GemmFormat, gemm_time_s, stream_time_s
from .._terms.kernels import (
    GEMMS_PER_LAYER,
    KERNELS_PER_LAYER_FORWARD,
    elementwise_elements,
    launch_s,
    quantize_bytes,
)
from .._terms.layer import ExpertSplit, GemmOp, layer_weight_gemms, logits_gemm
from .._terms.moe import mixed_active_fraction
from .behaviours import ENGINE_BEHAVIOURS, AbstractEngineBehaviour, total
from .kv import kv_heads_per_chip
from .plan import ServePlan

# numpy, not jnp: importing diffcost must not start the XLA backend (jax.distributed.initialize
# must come first; diffcost sweep --distributed)
ELEMENT_BYTES = np.asarray([BYTES_PER_ELEMENT[f] for f in FORMATS])
#: Compute formats whose GEMM inputs are quantized from the 16-bit residual stream.
_NARROW = np.asarray([float(BYTES_PER_ELEMENT[f] < 2.0) for f in FORMATS])
_BF16 = FORMATS.index("bf16")


def _as(table: np.ndarray, like: Array) -> Array:
    """A numpy table as an array of ``like``'s dtype: never a float64 buffer beside float32
    operands (inside ``jax.enable_x64(False)`` a float64 numpy constant once reached a float32
    executable as a float64 buffer: JAX's RuntimeProgramInputMismatch)."""
    return jnp.asarray(table, dtype=like.dtype)


class Consts(NamedTuple):
    """Plan-dependent constants of the passes: degrees, formats and the peak that applies."""

    system: System
    model: Model
    sm: Smoothing
    tp: Array
    pp: Array
    peak_flop_per_s: Array  # dense peak of the compute format (Efficiency.achievable_peaks)
    flop_j: Array  # dynamic energy per FLOP of the compute format (power limit)
    weight_bytes: Array  # per parameter
    act_bytes: Array  # per activation element read or written by a GEMM
    kv_bytes: Array  # per KV-cache element
    kv_heads_local: Array
    weight_only: Array  # 1 when weights are stored narrower than the compute format
    quantized_acts: Array  # 1 when GEMM inputs are 8-bit or narrower (quantized from 16-bit)
    expert_parallel: Array  # 1 when routed experts are spread whole over the tp ranks
    engine: tuple[Array, ...]  # the plan's switch of each engine behaviour, registry order
    weight_copy_bytes: Array | None  # extra bytes per weight element of the behaviours

    def behaviours(self) -> Iterator[tuple[AbstractEngineBehaviour, Array]]:
        """``(behaviour, switch)`` of every engine behaviour (:data:`ENGINE_BEHAVIOURS`)."""
        return zip((cls() for cls in ENGINE_BEHAVIOURS.values()), self.engine, strict=True)

    def weight_element_bytes(self) -> Array:
        """Bytes moved per weight element a GEMM uses: ``w``, plus the behaviours' extra bytes
        (a separate dequantization kernel: ``2 a``, write the copy and read it back)."""
        if self.weight_copy_bytes is None:
            return self.weight_bytes
        return self.weight_bytes + self.weight_copy_bytes

    def gemm_format(self) -> GemmFormat:
        """Format of the weight GEMMs: compute-format peak and activation bytes, weight bytes
        :meth:`weight_element_bytes` (the ``k x n`` operand is the weight)."""
        return GemmFormat(
            self.peak_flop_per_s, self.act_bytes, self.weight_element_bytes(), self.flop_j
        )

    def expert_format(self, fmt: GemmFormat) -> GemmFormat | None:
        """Format of the routed experts' GEMMs: the behaviours' choice
        (:meth:`~diffcost._serve.behaviours.AbstractEngineBehaviour.expert_format`), applied in
        registry order, from the layer's ``fmt``; ``None`` when no behaviour sets one."""
        chip = self.system.chip
        peak16 = self.system.efficiency.achievable_peaks(chip.peak_flop_per_s)[_BF16]
        flop_j16 = chip.energy.flop_j[_BF16]
        out = None
        for b, on in self.behaviours():
            given = b.expert_format(on, fmt if out is None else out, peak16, flop_j16, self.system)
            out = given if given is not None else out
        return out

    def attention_shape(self) -> AttentionShape:
        """Heads of one layer on one chip: ``heads / tp`` query heads, the local KV heads."""
        model = self.model
        return AttentionShape(
            model.heads / self.tp,
            self.kv_heads_local,
            model.head_dim,
            self.kv_bytes,
            self.act_bytes,
            model.v_head_dim,
            model.kv_cache_elements(self.kv_heads_local),
            model.decode_attention_dim(),
        )


def consts(system: System, model: Model, plan: ServePlan, sm: Smoothing) -> Consts:
    """Resolve the plan's format mixtures into peak FLOP/s and element sizes (bytes), and the
    switches of the engine behaviours (:mod:`diffcost._serve.behaviours`) with the extra bytes
    per weight element they move.  Same weight and compute formats (``sum(w * c) = 1``) are not
    weight-only.
    """
    weight_only = 1.0 - jnp.sum(plan.weight_format * plan.compute_format)
    act_bytes = mix(plan.compute_format, _as(ELEMENT_BYTES, plan.compute_format))
    engine = tuple(getattr(plan, name) for name in ENGINE_BEHAVIOURS)
    copy = total(
        cls().weight_copy_bytes(on, weight_only, act_bytes)
        for cls, on in zip(ENGINE_BEHAVIOURS.values(), engine, strict=True)
    )
    return Consts(
        system=system,
        model=model,
        sm=sm,
        tp=plan.tp,
        pp=plan.pp,
        peak_flop_per_s=mix(
            plan.compute_format, system.efficiency.achievable_peaks(system.chip.peak_flop_per_s)
        ),
        flop_j=mix(plan.compute_format, system.chip.energy.flop_j),
        weight_bytes=mix(plan.weight_format, _as(ELEMENT_BYTES, plan.weight_format)),
        act_bytes=act_bytes,
        kv_bytes=mix(plan.kv_format, _as(ELEMENT_BYTES, plan.kv_format)),
        kv_heads_local=kv_heads_per_chip(model, plan.tp, sm),
        weight_only=weight_only,
        quantized_acts=jnp.sum(plan.compute_format * _as(_NARROW, plan.compute_format)),
        expert_parallel=plan.expert_parallel,
        engine=engine,
        weight_copy_bytes=copy,
    )


class Work(NamedTuple):
    """What one forward pass of one instance processes (totals over its micro-batches)."""

    micro_batches: ArrayLike
    decode_seqs: ArrayLike
    query_tokens: ArrayLike  # new tokens per decode sequence (k + 1 when verifying drafts)
    decode_ctx: ArrayLike  # cached tokens each decode sequence attends
    prefill_tokens: ArrayLike
    prefill_piece: ArrayLike  # prompt tokens of one sequence in this pass (a chunk or all)
    prefill_ctx: ArrayLike  # mean earlier tokens a prompt token attends (causal: ~ len/2)
    prompts_done: ArrayLike  # prompts whose last token is in the pass (one logits row each)
    decode_only: ArrayLike = 0.0  # 1 for a pass of decode tokens only (a CUDA graph replays it)


class PassTime(NamedTuple):
    """Seconds of one round of a pass (every micro-batch once), seen by the bottleneck chip.

    ``gemm_s + attention_s + memory_s + launch_s + tp_comm_s + p2p_s + pipeline_wait_s ==
    round_s``.  ``weight_read_s``, ``kv_read_s`` and ``compute_s`` are the roofline floors
    (bytes over achievable bandwidth, FLOP over the large-GEMM achievable peak) of that chip.
    """

    round_s: Array
    traversal_s: Array
    stage_s: Array
    gemm_s: Array
    attention_s: Array
    memory_s: Array
    launch_s: Array
    tp_comm_s: Array
    p2p_s: Array
    pipeline_wait_s: Array
    weight_read_s: Array
    kv_read_s: Array
    compute_s: Array


def gemm_s(m: ArrayLike, n: ArrayLike, k: ArrayLike, c: Consts) -> Array:
    """Seconds of an ``m x k x n`` GEMM whose ``k x n`` operand is a weight of ``c.weight_bytes``.

    ``max(2 m n k / (peak * eff(m, n, k)), (k n w' + (m k + m n) a) / bw_eff)`` (``w'``:
    :meth:`Consts.weight_element_bytes`, ``w`` plus a separate dequantization):
    :func:`diffcost._terms.gemm.gemm_time_s` in :meth:`Consts.gemm_format`, so weight-only
    formats move fewer bytes at the 16-bit peak.
    """
    return gemm_time_s(m, n, k, c.gemm_format(), c.system, c.sm)


def stacked_gemm_s(ops: Sequence[GemmOp], system: System, sm: Smoothing) -> Array:
    """Seconds of each of the GEMMs ``ops`` (one format), stacked on a leading axis: their
    rooflines (:func:`~diffcost._terms.gemm.gemm_time_s`) evaluated once over the stacked
    shapes instead of once per GEMM (a serving pass's fifteen weight GEMMs share every step of
    the law).  Unlike the training step's (:func:`~diffcost._terms.layer.layer_gemm_s`, summed
    op by op for its sweep), the serving sweep measured no slower stacked
    (``benchmarks/bench_sweep.py --job serve --no-intervals``, three interleaved runs on a
    loaded 2-core machine: 653,000-685,000 evaluations/s op by op, 460,000-698,000 stacked),
    and its compile faster."""
    fmt = ops[0].fmt
    if any(op.fmt is not fmt for op in ops):
        raise ValueError("stacked_gemm_s: every GEMM must share one GemmFormat")
    fields = [(op.m, op.n, op.k, op.repeats) for op in ops]
    shape = jnp.broadcast_shapes(*(jnp.shape(x) for row in fields for x in row))
    m, n, k, repeats = (
        jnp.stack([jnp.broadcast_to(row[i], shape) for row in fields]) for i in range(4)
    )
    return gemm_time_s(m, n, k, fmt, system, sm, repeats)


class LayerTime(NamedTuple):
    """Seconds of one layer for one micro-batch of a pass, by term, and its attention kernels."""

    gemm_s: Array
    attention_s: Array
    memory_s: Array
    launch_s: Array
    tp_comm_s: Array
    decode: FusedAttention
    prefill: FusedAttention
    tokens: Array  # new tokens of one micro-batch (decode and prompt)
    active_fraction: Array  # experts the micro-batch activates (mixed_active_fraction)
    logits_rows: Array  # logits rows of one micro-batch: decode tokens and finished prompts
    logits_gemm_s: Array  # the output layer's GEMM over them (charged on the last stage)

    def total_s(self) -> Array:
        """``gemm + attention + memory + launch + tp_comm``."""
        return self.gemm_s + self.attention_s + self.memory_s + self.launch_s + self.tp_comm_s


def launch_time_s(c: Consts, w: Work, extra_kernels: ArrayLike) -> Array:
    """Launch seconds of one layer of the pass ``w``, seconds.

    ``launch_s(extra) - saved``: every kernel of the layer pays the per-kernel cost
    ``kernel_launch_s`` (:func:`diffcost._terms.kernels.launch_s`), host launch and GPU-side
    time together, less what the engine behaviours save on the ``12 + extra`` kernels
    (:meth:`~diffcost._serve.behaviours.AbstractEngineBehaviour.launch_saved_s`: a replayed
    CUDA graph keeps only the GPU-side share of each kernel's cost).  The behaviours' launches
    per pass are charged in :func:`pass_time`.
    """
    kernels = KERNELS_PER_LAYER_FORWARD + jnp.asarray(extra_kernels)
    saved = total(
        b.launch_saved_s(on, w.decode_only, kernels, c.system) for b, on in c.behaviours()
    )
    base = launch_s(extra_kernels, c.system)
    return base if saved is None else base - saved


def expert_split(c: Consts, tokens: ArrayLike, active: ArrayLike) -> ExpertSplit:
    """Layout of the routed experts over the instance's ``t`` tensor-parallel ranks.

    Every rank of a tensor-parallel group holds the same ``tokens``, so the group routes
    ``tokens`` distinct tokens either way.  Tensor-parallel experts (``e = 0``): every expert
    split by width over the ``t`` ranks (``ep = 1``, ``expert_tp = t``).  Expert parallel
    (``e = 1``, vLLM ``--enable-expert-parallel`` with one data-parallel rank): ``E / t`` whole
    experts per rank (``ep = t``, ``expert_tp = 1``), each running the tokens routed to it at
    full width; the ranks' partial outputs are summed by the same all-reduce that closes a
    tensor-parallel MLP (vLLM ``FusedMoE`` reduces its results over the TP group), so the
    communication is unchanged and the difference is the GEMM shapes (fewer, wider expert
    GEMMs with more rows each).  Relaxed ``e`` interpolates both degrees linearly.  The
    expected read and FLOP per rank are the same; the busiest rank's excess rows are charged
    by :func:`~diffcost._terms.layer.expert_gemms` (:func:`~diffcost._terms.moe.
    expert_imbalance`).
    """
    e, t = c.expert_parallel, c.tp
    return ExpertSplit(
        ep=1.0 + e * (t - 1.0),
        expert_tp=t + e * (1.0 - t),
        group_tokens=tokens,
        active_fraction=active,
    )


def layer_time(c: Consts, w: Work) -> LayerTime:
    """One layer of one micro-batch of the pass ``w`` on one chip (seconds by term).

    The four weight GEMMs over the new tokens (:func:`~diffcost._terms.layer.layer_gemm_s`),
    decode and prefill attention kernels (:mod:`diffcost._terms.attention`), memory-bound
    kernels (KV-cache write, elementwise, input quantization for 8-bit GEMMs), launches (one
    more per weight GEMM for separate dequantization or quantization) and two TP all-reduces.
    The routed experts' two GEMMs run in the engine's MoE kernel format
    (:meth:`Consts.expert_format`: TensorRT-LLM <= 0.9's 16-bit Ampere-class grouped GEMM).
    """
    model, system, sm, t = c.model, c.system, c.sm, c.tp
    m = jnp.asarray(w.micro_batches)
    dec, pre = w.decode_seqs / m, w.prefill_tokens / m
    dec_tokens = dec * w.query_tokens
    tokens = jnp.asarray(dec_tokens + pre)  # new tokens of one micro-batch
    shape = c.attention_shape()
    peak = c.peak_flop_per_s
    rereads = total(b.kv_rereads(on, shape, system) for b, on in c.behaviours())
    decode = decode_attention(
        dec,
        w.query_tokens,
        w.decode_ctx,
        shape,
        0.0 if rereads is None else rereads,
        peak,
        system,
        sm,
        c.flop_j,
    )
    # Fewer prompt tokens than one piece (an averaged continuous iteration, P < piece): a share
    # P / piece of the iterations holds a whole piece, whose kernel tiles the whole piece, not
    # every iteration a sliver of it (whose few tiles would leave the chip idle: as P -> 0 the
    # sliver's time tended to one wave's, not 0).  So one piece, times that share; at P >= piece
    # (whole prompts in one pass) exactly the pass's own tokens (excess is exact there).
    piece = jnp.asarray(w.prefill_piece)
    whole = piece + excess(pre - piece, sm, scale=piece)
    one = prefill_attention(whole, piece, w.prefill_ctx, shape, peak, system, sm, c.flop_j)
    share = pre / whole
    prefill = FusedAttention(one.flop * share, one.kv_bytes * share, one.time_s * share)
    elementwise = 2.0 * elementwise_elements(tokens, model, t)
    quant = quantize_bytes(tokens, model, t, c.quantized_acts, c.act_bytes)
    kv_write = tokens * shape.kv_token_bytes()
    engine_kernels = total(b.extra_kernels(on, c.weight_only) for b, on in c.behaviours())
    extra_kernels = GEMMS_PER_LAYER * c.quantized_acts
    if engine_kernels is not None:
        extra_kernels = extra_kernels + engine_kernels
    active = mixed_active_fraction(dec_tokens, pre, w.prefill_piece, model, sm)
    split = expert_split(c, tokens, active)
    fmt = c.gemm_format()
    ops = layer_weight_gemms(tokens, model, t, fmt, split)
    # the layer's GEMMs and the output layer's (logits rows: decode tokens and finished prompts)
    # in one stacked roofline; the layer's summed in order, GEMM by GEMM, as layer_gemm_s does
    # (a reduction over the stacked axis rounds differently in float32)
    rows = jnp.asarray(dec_tokens + jnp.asarray(w.prompts_done) / m)
    logits = logits_gemm(rows, model, t, fmt)
    # the routed experts (the last two GEMMs) in the engine's MoE kernel format, priced once in
    # it (stacked apart: one stacked roofline takes one format)
    expert_fmt = c.expert_format(fmt)
    same = ops if expert_fmt is None else ops[:-2]
    times = stacked_gemm_s((*same, logits), system, sm)
    parts = [times[i] for i in range(len(same))]
    if expert_fmt is not None:
        own = stacked_gemm_s([op._replace(fmt=expert_fmt) for op in ops[-2:]], system, sm)
        parts += [own[0], own[1]]
    return LayerTime(
        gemm_s=sum(parts, start=jnp.zeros(times.shape[1:])),
        attention_s=decode.time_s + prefill.time_s,
        memory_s=stream_time_s(kv_write + elementwise + quant, system),
        launch_s=launch_time_s(c, w, extra_kernels),
        tp_comm_s=2.0 * tp_all_reduce_s(tokens, model.hidden, t, system, sm),
        decode=decode,
        prefill=prefill,
        tokens=tokens,
        active_fraction=active,
        logits_rows=rows,
        logits_gemm_s=times[len(same)],
    )


def pass_time(c: Consts, w: Work) -> PassTime:
    """Round time of a pass on one instance (see the module docstring for the formulas)."""
    model, system, sm = c.model, c.system, c.sm
    t, p, h, vocab = c.tp, c.pp, model.hidden, model.vocab
    m = jnp.asarray(w.micro_batches)
    layer = layer_time(c, w)
    tokens = layer.tokens
    rows = layer.logits_rows
    layers_s = layer.total_s()
    per_stage = model.layers / p
    t_logits_gemm = layer.logits_gemm_s
    t_logits_mem = stream_time_s(2.0 * 4.0 * rows * vocab / t, system)  # fp32 write + read
    p2p = point_to_point_s(2.0 * tokens * h, t, system, sm)
    has_pp = 1.0 - is_one(p, sm)
    # the behaviours' launches per stage and micro-batch (a replayed CUDA graph: one)
    graph_launch = total(b.pass_launch_s(on, w.decode_only, system) for b, on in c.behaviours())
    graph_launch = 0.0 if graph_launch is None else graph_launch
    stage = per_stage * layers_s + t_logits_gemm + t_logits_mem + has_pp * p2p + graph_launch
    traversal = (
        model.layers * layers_s + t_logits_gemm + t_logits_mem + (p - 1.0) * p2p + p * graph_launch
    )
    if sm.relaxed:  # the wait beyond the m busy stages, relaxed from one side: never negative,
        # and exact whenever the stages dominate (m = p: the traversal is shorter by p2p and
        # (p - 1) logits); the symmetric blend of smax dipped below m * stage there
        round_s = m * stage + excess(traversal - m * stage, sm, scale=traversal + m * stage)
    else:
        round_s = smax(traversal, m * stage, sm)
    # roofline floors of the bottleneck chip over the round
    matrices = model.layer_matrix_params() / t
    # a mixture of experts reads the experts the pass's tokens activate, computes with top-k
    experts_read = model.layer_expert_params() * layer.active_fraction / t
    weight_bytes = (
        per_stage * (matrices + experts_read) + vocab * h / t
    ) * c.weight_element_bytes()
    matrices = matrices + model.layer_active_expert_params() / t
    kv_bytes = per_stage * (layer.decode.kv_bytes + layer.prefill.kv_bytes)
    flop = (
        per_stage * (2.0 * tokens * matrices + layer.decode.flop + layer.prefill.flop)
        + 2.0 * rows * vocab * h / t
    )
    return PassTime(
        round_s=round_s,
        traversal_s=traversal,
        stage_s=stage,
        gemm_s=m * (per_stage * layer.gemm_s + t_logits_gemm),
        attention_s=m * per_stage * layer.attention_s,
        memory_s=m * (per_stage * layer.memory_s + t_logits_mem),
        launch_s=m * (per_stage * layer.launch_s + graph_launch),
        tp_comm_s=m * per_stage * layer.tp_comm_s,
        p2p_s=m * has_pp * p2p,
        pipeline_wait_s=round_s - m * stage,
        weight_read_s=m * stream_time_s(weight_bytes, system),
        kv_read_s=m * stream_time_s(kv_bytes, system),
        compute_s=m * flop / (c.peak_flop_per_s * system.efficiency.matmul_peak_fraction),
    )


def expected_tokens_per_step(acceptance: ArrayLike, draft_len: ArrayLike) -> Array:
    """Tokens a sequence gains per verify step of speculative decoding, count.

    ``(1 - a^(k+1)) / (1 - a)`` for i.i.d. acceptance ``a`` and ``k`` drafted tokens (Leviathan,
    Kalman, Matias, "Fast Inference from Transformers via Speculative Decoding", ICML 2023,
    eq. 1); ``k + 1`` at ``a = 1`` and 1 without drafts (``k = 0``).  Written with safe branches
    so the gradient is finite at ``a = 0`` and ``a = 1``.
    """
    a = jnp.asarray(acceptance)
    k1 = jnp.asarray(draft_len) + 1.0
    inside = (a > 0.0) & (a < 1.0)
    a_safe = jnp.where(inside, a, 0.5)
    geometric = (1.0 - jnp.exp(k1 * jnp.log(a_safe))) / (1.0 - a_safe)
    edge = jnp.where(a >= 1.0, k1, 1.0)  # a = 1: all accepted; a = 0: the verifier's token only
    return jnp.where(inside, geometric, edge)


__all__ = [
    "Consts",
    "LayerTime",
    "PassTime",
    "Work",
    "consts",
    "expected_tokens_per_step",
    "gemm_s",
    "launch_time_s",
    "layer_time",
    "pass_time",
    "stacked_gemm_s",
]
