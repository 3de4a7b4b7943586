"""Serving memory per chip: weights by format, the (paged) KV cache, activations, runtime reserve.

KV cache (Pope et al., "Efficiently Scaling Transformer Inference", MLSys'23, §2): every token
of every live sequence keeps a key and a value vector per layer and KV head,

    kv_bytes = 2 * layers * kv_heads * head_dim * bytes_per_element * tokens,

so MHA (kv_heads = heads), GQA (fewer) and MQA (one) differ only in ``kv_heads``.  Tensor
parallelism shards KV heads; beyond ``tp = kv_heads`` the heads are replicated (each rank keeps
at least one), as in Megatron/TensorRT-LLM.  Pipeline parallelism shards layers.

Paged attention (Kwon et al., "vLLM", SOSP'23, §4.2) allocates whole blocks of ``kv_block``
tokens, so a sequence of ``n`` tokens holds ``ceil(n / kv_block) * kv_block`` token slots; the
difference is the rounding waste.

Inference keeps no activations across layers: the workspace is the peak of the live tensors of
one layer for the tokens of one forward pass (16-bit) plus the fp32 logits.  Chips whose weights
live in on-chip SRAM (Groq, Cerebras) compile a static memory plan: no runtime reserve and no
allocator fragmentation.
"""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .._core.shared import once
from .._core.smooth import Smoothing, ceil_div, is_one, smax
from .._inputs.hardware import System
from .._inputs.model import Model
from .._inputs.reserve import runtime_reserve_bytes


class ServeMemory(eqx.Module):
    """Bytes per chip of the most loaded pipeline stage (of a decode instance when disaggregated).

    Attributes:
        weights_bytes: target (and draft) model weights in the weight format.
        kv_cache_bytes: KV cache of all resident sequences, paged blocks included.
        kv_block_waste_bytes: the part of ``kv_cache_bytes`` lost to block rounding.
        activations_bytes: one layer's live activations for the largest pass, plus logits.
        reserved_bytes: runtime context, communication buffers, allocator fragmentation.
        total_bytes: the sum.
    """

    weights_bytes: Float[Array, ""]
    kv_cache_bytes: Float[Array, ""]
    kv_block_waste_bytes: Float[Array, ""]
    activations_bytes: Float[Array, ""]
    reserved_bytes: Float[Array, ""]
    total_bytes: Float[Array, ""]


@once
def serve_params_per_chip(model: Model, tp: ArrayLike, pp: ArrayLike, sm: Smoothing) -> Array:
    """Parameters held by one chip of the most loaded stage, count.

    ``(L/p) * (matrices_and_biases / t + norms) + word_embedding / t + positions`` and, when
    ``p = 1``, the untied output projection ``vocab * hidden / t`` and the final norm (with
    ``p > 1`` the output layer sits on the last stage, the embedding on the first; the larger of
    the two is the same ``vocab * hidden / t``).  A mixture of experts' routed experts are
    sharded over the ``t`` ranks too (by width, or whole experts with expert parallelism over
    the same ranks: the same count per chip).
    """
    sharded = model.layer_matrix_params() + model.layer_bias_params() + model.layer_expert_params()
    layers = model.layers / pp * (sharded / tp + model.layer_norm_params())
    word = model.vocab * model.hidden / tp
    positions = model.learned_positions * model.max_seq_len * model.hidden
    untied = (1.0 - model.tied_embeddings) * word
    output = is_one(pp, sm) * (untied + model.norm_params * model.hidden)
    return layers + word + positions + output


@once
def kv_heads_per_chip(model: Model, tp: ArrayLike, sm: Smoothing) -> Array:
    """KV heads one tensor-parallel rank holds: ``max(kv_heads / tp, 1)`` (replicated beyond).

    Taken as ``max(kv_heads, tp) / tp``: the arguments are integers at integer plans, where the
    integer blend is exact (``max(kv_heads / tp, 1)`` blends ratios such as 1/2)."""
    return smax(model.kv_heads, tp, sm, integer=True) / tp


@once
def kv_bytes_per_token(
    model: Model, tp: ArrayLike, pp: ArrayLike, element_bytes: ArrayLike, sm: Smoothing
) -> Array:
    """KV-cache bytes of one token on one chip: ``(L/p) * kv_elements * bytes`` with
    ``kv_elements = kv_heads_local (e + e_v)`` (:meth:`~diffcost._inputs.model.Model.
    kv_cache_elements`; MLA: its latent and rotary key, on every TP rank).

    With ``tp = pp = 1`` this is Pope et al.'s ``2 * layers * kv_heads * head_dim * bytes``.
    """
    heads = kv_heads_per_chip(model, tp, sm)
    return model.layers / pp * model.kv_cache_elements(heads) * element_bytes


@once
def paged_tokens(tokens: ArrayLike, block: ArrayLike, sm: Smoothing) -> Array:
    """Token slots a sequence of ``tokens`` occupies in blocks of ``block``: ``ceil(n/b) * b``."""
    return ceil_div(tokens, block, sm) * block


@once
def cached_slots(model: Model, context: ArrayLike, block: ArrayLike, sm: Smoothing) -> Array:
    """Paged token slots a sequence of ``context`` tokens holds per layer, averaged over the
    layers: ``(1 - sigma) slots(c) + sigma slots(min(c, W))`` with ``slots`` =
    :func:`paged_tokens` (a sliding-window layer keeps the last ``W`` tokens; see
    :class:`~diffcost._inputs.model.Model`).  ``slots(c)`` without a sliding window."""
    windowed = paged_tokens(model.window_tokens(context, sm), block, sm)
    sigma = model.sliding_fraction()
    return (1.0 - sigma) * paged_tokens(context, block, sm) + sigma * windowed


@once
def activation_bytes_per_token(model: Model, tp: ArrayLike, sm: Smoothing) -> Array:
    """Peak live 16-bit activation bytes of one token inside one layer, on one chip.

    Inference frees each tensor once consumed, so the peak is the larger of the attention phase
    and the MLP phase, each with the residual stream and the norm output (``2 h``, replicated):
    ``2 * max(2 h + ((heads + 2 kv_heads) e + heads e) / t, 2 h + n_mat f / t)`` (QKV and
    attention output; MLP-in outputs and the activation's output; ``f`` the width a token runs
    through, its top-k experts' for a mixture of experts).
    """
    h = model.hidden
    attention = model.attention_width() + model.heads * model.v_head_dim
    mlp = model.mlp_matrices * model.active_ffn_hidden()
    return 2.0 * (2.0 * h + smax(attention / tp, mlp / tp, sm))


def serve_memory(
    model: Model,
    system: System,
    *,
    tp: ArrayLike,
    pp: ArrayLike,
    sequences: ArrayLike,
    context: ArrayLike,
    kv_block: ArrayLike,
    weight_bytes: ArrayLike,
    kv_element_bytes: ArrayLike,
    draft_fraction: ArrayLike,
    pass_tokens: ArrayLike,
    logit_rows: ArrayLike,
    sm: Smoothing,
) -> ServeMemory:
    """Per-chip serving memory, bytes.

    ``sequences`` live sequences of ``context`` tokens each keep paged KV; a draft model of
    ``draft_fraction`` of the target's size (0: none) adds that fraction of the weights and of
    the KV cache (a scaled-down copy of the target).  ``pass_tokens`` and ``logit_rows`` are the
    tokens and fp32 logit rows of the largest forward pass on the chip (per micro-batch).  The
    runtime reserve is :func:`~diffcost._inputs.reserve.runtime_reserve_bytes` (as in training).
    """
    draft = 1.0 + jnp.asarray(draft_fraction)
    sequences, pass_tokens = jnp.asarray(sequences), jnp.asarray(pass_tokens)
    weights = serve_params_per_chip(model, tp, pp, sm) * weight_bytes * draft
    per_token = kv_bytes_per_token(model, tp, pp, kv_element_bytes, sm) * draft
    slots = cached_slots(model, context, kv_block, sm)
    kv = sequences * slots * per_token
    waste = sequences * (slots - model.attended_tokens(context, sm)) * per_token
    activations = pass_tokens * activation_bytes_per_token(model, tp, sm) + logit_rows * 4.0 * (
        model.vocab / tp
    )
    reserved = runtime_reserve_bytes(system)
    total = weights + kv + activations + reserved
    return ServeMemory(weights, kv, waste, activations, reserved, total)


__all__ = [
    "ServeMemory",
    "activation_bytes_per_token",
    "kv_bytes_per_token",
    "kv_heads_per_chip",
    "paged_tokens",
    "serve_memory",
    "serve_params_per_chip",
]
