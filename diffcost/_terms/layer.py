"""The weight GEMMs of one transformer layer, as data that training, serving and plots share.

Megatron tensor parallelism (Shoeybi et al. 2019, §3) splits the QKV and MLP-in weights by
columns and the attention-output and MLP-out weights by rows, so on one of ``t`` ranks the four
GEMMs of a layer over ``m`` tokens are (``m x k @ k x n``):

    QKV            n = (heads + 2 kv_heads) head_dim / t    k = hidden
    attention out  n = hidden                               k = heads v_head_dim / t
    MLP in         n = (mlp_matrices - 1) ffn_hidden / t    k = hidden   (gate and up for SwiGLU)
    MLP out        n = hidden                               k = ffn_hidden / t

(for a mixture of experts the two MLP GEMMs count ``1 - phi`` times, the dense blocks' share;
the router, shared experts and routed experts of the MoE blocks are :func:`expert_gemms`)

and the output layer (logits) is ``n = vocab / t, k = hidden``.  The ``k x n`` operand is the
weight.  :func:`layer_gemms` is the one definition of these shapes: the training step, the
serving pass and :func:`diffcost._analysis.plots.roofline_ops` all read it.
"""

from typing import NamedTuple

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike

from .._core.smooth import Smoothing, safe_div
from .._inputs.hardware import System
from .._inputs.model import Model
from .gemm import GemmFormat, gemm_bytes, gemm_flop, gemm_time_s
from .moe import active_expert_fraction, expert_imbalance

#: Names of the four weight GEMMs of a layer, in the order of :func:`layer_gemms`.
LAYER_GEMMS = ("QKV", "attention out", "MLP in", "MLP out")


class GemmOp(NamedTuple):
    """``repeats`` independent ``m x k x n`` GEMMs in the formats ``fmt`` (a pytree of arrays;
    not ``count``, which would shadow ``tuple.count``)."""

    m: ArrayLike
    n: ArrayLike
    k: ArrayLike
    fmt: GemmFormat
    repeats: ArrayLike = 1.0

    def flop(self) -> Array:
        """FLOP: ``2 m n k repeats`` (:func:`~diffcost._terms.gemm.gemm_flop`)."""
        return gemm_flop(self.m, self.n, self.k, self.repeats)

    def bytes(self) -> Array:
        """Bytes moved (:func:`~diffcost._terms.gemm.gemm_bytes`)."""
        return gemm_bytes(self.m, self.n, self.k, self.fmt, self.repeats)

    def time_s(self, system: System, sm: Smoothing) -> Array:
        """Roofline seconds (:func:`~diffcost._terms.gemm.gemm_time_s`)."""
        return gemm_time_s(self.m, self.n, self.k, self.fmt, system, sm, self.repeats)


def layer_gemms(
    tokens: ArrayLike, model: Model, tp: ArrayLike, fmt: GemmFormat
) -> tuple[GemmOp, GemmOp, GemmOp, GemmOp]:
    """The four weight GEMMs of one layer over ``tokens`` rows on one of ``tp`` ranks.

    Shapes in the module docstring, named by :data:`LAYER_GEMMS`.
    """
    h, a, f = model.hidden, model.heads, model.ffn_hidden
    dense = 1.0 - model.moe_fraction()
    return (
        GemmOp(tokens, model.attention_width() / tp, h, fmt, 1.0 - model.latent_attention),
        GemmOp(tokens, h, a * model.v_head_dim / tp, fmt),
        GemmOp(tokens, (model.mlp_matrices - 1.0) * f / tp, h, fmt, dense),
        GemmOp(tokens, h, f / tp, fmt, dense),
    )


#: Names of multi-head latent attention's projections (:func:`latent_gemms`), in order.
LATENT_GEMMS = ("Q down", "Q up", "KV down", "KV up")


def latent_gemms(
    tokens: ArrayLike, model: Model, tp: ArrayLike, fmt: GemmFormat
) -> tuple[GemmOp, GemmOp, GemmOp, GemmOp]:
    """Multi-head latent attention's Q and K/V projections on one of ``tp`` ranks, in place of
    the fused QKV GEMM (weight ``latent_attention``, 0 without MLA).

    The down-projections are replicated on every TP rank (Megatron-Core MLA:
    ``linear_q_down_proj`` / ``linear_kv_down_proj`` "duplicated"), the up-projections split by
    heads: Q down ``n = r_q, k = h``; Q up ``n = heads e / t, k = r_q`` (``k = h``, no down
    projection, when ``r_q = 0``); KV down ``n = r_kv + e_rope, k = h``; KV up ``n = heads
    (e - e_rope + e_v) / t, k = r_kv`` (DeepSeek-V2 §2.1.2-2.1.3).
    """
    h, a, mla = model.hidden, model.heads, model.latent_attention
    has_q = jnp.where(model.q_lora_rank > 0, 1.0, 0.0)
    q_in = jnp.where(model.q_lora_rank > 0, model.q_lora_rank, h)
    kv_latent = jnp.maximum(model.kv_lora_rank, 1.0)  # 0 without MLA: weight 0, no 0/0
    up = a * (model.head_dim - model.rope_head_dim + model.v_head_dim) / tp
    return (
        GemmOp(tokens, jnp.maximum(model.q_lora_rank, 1.0), h, fmt, mla * has_q),
        GemmOp(tokens, a * model.head_dim / tp, q_in, fmt, mla),
        GemmOp(tokens, kv_latent + model.rope_head_dim, h, fmt, mla),
        GemmOp(tokens, up, kv_latent, fmt, mla),
    )


def logits_gemm(rows: ArrayLike, model: Model, tp: ArrayLike, fmt: GemmFormat) -> GemmOp:
    """The output-layer GEMM of ``rows`` tokens on one of ``tp`` ranks: ``n = vocab / t``,
    ``k = hidden`` (vocabulary-parallel output layer, Megatron)."""
    return GemmOp(rows, model.vocab / tp, model.hidden, fmt)


#: Names of the expert GEMMs of :func:`expert_gemms`, in order.
EXPERT_GEMMS = ("router", "shared in", "shared out", "experts in", "experts out")

#: Floor of ``E p`` in the rows per expert: ``E p >= min(E, G k) >= 1`` for every MoE block with
#: a token (a union bound), so it only keeps a dense model's ``0 / 0`` finite.
_MIN_ACTIVE = 1e-6


class ExpertSplit(NamedTuple):
    """How one block's routed experts are laid out (defaults: all experts on every rank of the
    layer's tensor-parallel group, sharded by width like the dense MLP).

    Attributes:
        ep: ranks the experts are spread over (each holds ``E / ep``).
        expert_tp: ranks each expert's width is split over (``None``: the layer's ``tp``).
        group_tokens: distinct tokens routed over the EP group (``None``: ``ep`` times the
            rank's tokens, EP ranks taken from data-parallel ones).
        active_fraction: expected fraction of the experts the pass runs, when its passes
            differ in size (``None``: :func:`~diffcost._terms.moe.active_expert_fraction` of
            ``group_tokens``; see :func:`~diffcost._terms.moe.mixed_active_fraction`).
    """

    ep: ArrayLike = 1.0
    expert_tp: ArrayLike | None = None
    group_tokens: ArrayLike | None = None
    active_fraction: ArrayLike | None = None


def expert_gemms(
    tokens: ArrayLike,
    model: Model,
    tp: ArrayLike,
    fmt: GemmFormat,
    split: ExpertSplit | None = None,
) -> tuple[GemmOp, GemmOp, GemmOp, GemmOp, GemmOp]:
    """The router, shared-expert and routed-expert GEMMs of one block (average over blocks) on
    one rank, named by :data:`EXPERT_GEMMS`.

    Router: ``tokens x hidden @ hidden x E`` (every rank routes its tokens), weight ``phi``.
    Shared experts: the dense MLP's two GEMMs at width ``shared_ffn_hidden / t``, weight
    ``phi``.
    Experts: ``phi (E / ep) p`` active local experts, each ``m x hidden @ hidden x
    (mlp_matrices - 1) f_e / t_e`` in and ``m x f_e / t_e @ f_e / t_e x hidden`` out, with
    ``m = G k / (E p)`` rows; together ``G k / ep`` assignments per rank (``T k`` when
    ``G = ep T``), the active-parameter FLOP of :meth:`Model.layer_matmul_flop`.  With
    ``ep > 1`` the rows are the busiest rank's: times
    :func:`~diffcost._terms.moe.expert_imbalance` of the ``G k`` assignments over ``ep``.
    """
    split = ExpertSplit() if split is None else split
    phi, e, k = model.moe_fraction(), model.experts, model.experts_per_token
    ep = jnp.asarray(split.ep)
    group = jnp.asarray(tokens) * ep if split.group_tokens is None else split.group_tokens
    t_e = tp if split.expert_tp is None else split.expert_tp
    if split.active_fraction is None:
        p = active_expert_fraction(group, model)
    else:  # the caller's (an averaged iteration); the group's own is not built
        p = jnp.asarray(split.active_fraction)
    rows = jnp.maximum(safe_div(jnp.asarray(group) * k, jnp.maximum(e * p, _MIN_ACTIVE)), 1.0)
    rows = rows * expert_imbalance(jnp.asarray(group) * k, ep)  # the busiest EP rank
    active = phi * e / ep * p
    f_e, h = model.expert_ffn_hidden / t_e, model.hidden
    # widths floored at 1 with the weight scaled to match: exact for every integer width, and
    # a zero width (no experts, no shared expert) gives weight 0 instead of a 0/0 efficiency
    f_s = jnp.maximum(model.shared_ffn_hidden, 1.0)
    shared = phi * model.shared_ffn_hidden / f_s
    return (
        GemmOp(tokens, jnp.maximum(e, 1.0), h, fmt, phi * e / jnp.maximum(e, 1.0)),
        GemmOp(tokens, (model.mlp_matrices - 1.0) * f_s / tp, h, fmt, shared),
        GemmOp(tokens, h, f_s / tp, fmt, shared),
        GemmOp(rows, (model.mlp_matrices - 1.0) * f_e, h, fmt, active),
        GemmOp(rows, h, f_e, fmt, active),
    )


def layer_weight_gemms(
    tokens: ArrayLike,
    model: Model,
    tp: ArrayLike,
    fmt: GemmFormat,
    split: ExpertSplit | None = None,
) -> tuple[GemmOp, ...]:
    """Every weight GEMM of one layer, in order: :func:`layer_gemms`, :func:`latent_gemms`
    (multi-head latent attention) and, for a mixture of experts, :func:`expert_gemms` (laid
    out by ``split``, default :class:`ExpertSplit`)."""
    return (
        *layer_gemms(tokens, model, tp, fmt),
        *latent_gemms(tokens, model, tp, fmt),
        *expert_gemms(tokens, model, tp, fmt, split),
    )


def layer_gemm_s(
    tokens: ArrayLike,
    model: Model,
    tp: ArrayLike,
    fmt: GemmFormat,
    system: System,
    sm: Smoothing,
    split: ExpertSplit | None = None,
) -> Array:
    """Seconds of the weight GEMMs of one layer (:func:`layer_weight_gemms`): the sum of their
    rooflines ``sum_i max(2 m n_i k_i / (peak eff_i), bytes_i / bw_eff)`` (Williams et al.,
    "Roofline", CACM 2009).
    """
    ops = layer_weight_gemms(tokens, model, tp, fmt, split)
    # summed op by op: a stacked (vectorised) roofline is a smaller program but, under a
    # sweep's vmap on a CPU, its concatenations and reduction split XLA's loop fusion (measured:
    # 1,000,000-point training sweep 186,000 -> 79,000 evaluations/s, 4.4x the memory)
    return sum((op.time_s(system, sm) for op in ops), start=jnp.zeros(()))


__all__ = [
    "EXPERT_GEMMS",
    "LATENT_GEMMS",
    "LAYER_GEMMS",
    "ExpertSplit",
    "GemmOp",
    "expert_gemms",
    "layer_gemm_s",
    "layer_weight_gemms",
    "latent_gemms",
    "layer_gemms",
    "logits_gemm",
]
