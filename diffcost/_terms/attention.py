"""The attention core of one layer: scores and weighted values per head, per phase.

Training runs it as two batched GEMMs per local head, ``QK^T`` (``s_q x e @ e x s``) and ``AV``
(``s_q x s @ s x e``) at the 16-bit peak; a fused causal kernel (flash attention, Dao et al.
2022) skips the masked half (:func:`gemm_attention_s`).

Serving runs one fused kernel per phase (:func:`fused_attention`), a roofline of its FLOP
``4 q c heads e`` (two GEMMs of ``2 q c e`` per head) against the KV cache it reads plus Q and O
(Pope et al., MLSys'23; Williams et al., "Roofline", CACM 2009):

* decode is a split-KV kernel (Flash-Decoding; TensorRT-LLM masked MHA/XQA) that fills the chip
  by splitting the context, so its compute runs at the large-GEMM achievable peak; it reads the
  KV cache of every sequence, a GQA-unaware kernel re-reading a KV head for each query head of
  its group at ``kv_reread_fraction`` of a read (:func:`decode_attention`);
* flash-style prefill reads each chunk's context once, computes the causal half and tiles like
  a GEMM with ``eff(m = group * chunk, n = context, k = head_dim)`` (:func:`prefill_attention`).
"""

from typing import NamedTuple

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike

from .._core.smooth import Smoothing, safe_div, smax
from .._inputs.hardware import System
from .._inputs.model import Model
from .gemm import GemmFormat, matmul_efficiency, nonzero_rows, stream_time_s
from .layer import GemmOp
from .power import sustained

#: Names of the two attention GEMMs of :func:`attention_gemms`, in order.
ATTENTION_GEMMS = ("QK^T", "AV")


# --- training: attention as batched GEMMs ---------------------------------------------------
def causal_skip(
    model: Model, flash_attention: ArrayLike, seq_len: ArrayLike, sm: Smoothing
) -> Array:
    """Fraction of the ``s x s`` score matrix computed: ``1 - causal * flash * (1 - a / s)``
    with ``a`` the mean keys a query attends (:meth:`Model.prompt_attended_tokens`: ``s / 2``
    causal, less under a sliding window); a fused causal kernel skips the masked blocks
    (FlashAttention-2's ``window_size``, Dao 2023), an unfused one computes the whole matrix."""
    s = jnp.asarray(seq_len)
    kept = safe_div(model.prompt_attended_tokens(s, sm), s)
    return 1.0 - model.causal * jnp.asarray(flash_attention) * (1.0 - kept)


def attention_gemms(
    q_len: ArrayLike,
    kv_len: ArrayLike,
    head_dim: ArrayLike,
    heads: ArrayLike,
    fmt: GemmFormat,
    v_dim: ArrayLike | None = None,
) -> tuple[GemmOp, GemmOp]:
    """``QK^T`` (``q_len x head_dim @ head_dim x kv_len``) and ``AV`` (``q_len x kv_len @
    kv_len x v_dim``, ``v_dim`` default ``head_dim``), one of each per head of ``heads`` (local
    heads times sequences)."""
    v_dim = head_dim if v_dim is None else v_dim
    return (
        GemmOp(q_len, kv_len, head_dim, fmt, heads),
        GemmOp(q_len, v_dim, kv_len, fmt, heads),
    )


def gemm_attention_s(
    ops: tuple[GemmOp, GemmOp], skip: Array, system: System, sm: Smoothing
) -> Array:
    """Seconds of the attention core run as GEMMs: ``skip * (t(QK^T) + t(AV))``.

    ``skip`` from :func:`causal_skip`; each GEMM a roofline (:meth:`GemmOp.time_s`).
    """
    qk, av = ops  # op by op, as layer_gemm_s (a stacked roofline slows vmapped sweeps)
    return skip * (qk.time_s(system, sm) + av.time_s(system, sm))


# --- serving: one fused kernel per phase ------------------------------------------------------
class FusedAttention(NamedTuple):
    """One fused attention kernel on one chip, one layer: FLOP, KV-cache bytes read, seconds."""

    flop: Array
    kv_bytes: Array
    time_s: Array


def fused_attention_s(
    flop: ArrayLike,
    bytes_moved: ArrayLike,
    efficiency: ArrayLike,
    peak_flop_per_s: ArrayLike,
    system: System,
    sm: Smoothing,
) -> Array:
    """Roofline of one fused attention kernel, seconds: ``max(flop / (peak * eff), bytes /
    bw_eff)`` (zero FLOP gives zero compute time)."""
    compute = safe_div(flop, peak_flop_per_s * efficiency)
    return smax(compute, stream_time_s(bytes_moved, system), sm)


class AttentionShape(NamedTuple):
    """Heads of one layer on one chip: query heads, KV heads, head dims, KV and Q/O element
    bytes, cached elements per token and decode's dims (see :class:`~diffcost._inputs.model.
    Model` for multi-head latent attention, whose cache is a latent and whose decode scores it
    with the up-projections absorbed)."""

    heads: Array  # query heads on the chip
    kv_heads: Array  # KV heads on the chip (replicated beyond tp = kv_heads)
    head_dim: Array  # score (Q, K) head size
    kv_bytes: Array  # per KV-cache element
    act_bytes: Array  # per Q or O element
    v_dim: Array  # value head size
    kv_elements: Array  # cached elements per token: kv_heads (e + e_v), or MLA's latent
    decode_dim: Array  # score + value dims per head and cached token in decode

    def kv_token_bytes(self) -> Array:
        """Cached K and V of one token: ``kv_elements kv_bytes`` (``2 kv_heads e kv_bytes``)."""
        return self.kv_elements * self.kv_bytes

    def qo_bytes(self, tokens: ArrayLike) -> Array:
        """Read Q and write O of ``tokens`` tokens: ``tokens heads (e + e_v) act_bytes``."""
        dims = self.head_dim + self.v_dim
        return jnp.asarray(tokens) * self.heads * dims * self.act_bytes

    def group(self) -> Array:
        """Query heads sharing one KV head on the chip."""
        return self.heads / self.kv_heads


#: Query rows of one fused attention tile: FlashAttention-2 and -3 and cuDNN's fused SDPA run
#: 128-row query blocks per head (Dao, "FlashAttention-2", arXiv:2307.08691, §3.3; Shah et al.,
#: "FlashAttention-3", arXiv:2407.08608, §4: block size 128 for head dims 64-256).
ATTENTION_TILE_ROWS = 128.0


def fused_prefill_efficiency(
    tiles: ArrayLike,
    keys: ArrayLike,
    head_dim: ArrayLike,
    rows: ArrayLike,
    span: ArrayLike,
    system: System,
    sm: Smoothing,
) -> Array:
    """Fraction of peak FLOP/s of a fused (flash) attention kernel (dimensionless, in (0, 1)).

    On a GPU: ``f * e / (e + d_s) * c / (c + d_c) * C / (C + d_t)`` with ``f =
    matmul_peak_fraction`` (the tensor cores' share of peak in a large GEMM), ``e`` the head dim
    and ``d_s = attention_softmax_dim`` (the softmax's exponentials and row statistics per score,
    against ``2 (e + e_v)`` FLOP of its two GEMMs: FlashAttention-3 §3), ``c`` the keys a query
    tile attends and ``d_c = attention_half_span`` (each tile's fixed work: loading its queries,
    the last rescale, writing its output), ``C = tiles`` query tiles (:data:`ATTENTION_TILE_ROWS`
    rows of one head) and ``d_t = attention_half_tiles`` (a launch of few tiles leaves SMs idle
    in its last wave, and causal tiles are uneven).  No GEMM shape penalty at ``k = e``: the two
    GEMMs of a tile stay in registers and shared memory.  Other execution classes run attention
    as GEMMs on their arrays: :func:`~diffcost._terms.gemm.matmul_efficiency` of ``rows x e @ e x
    span`` (the class weights mix the two; one-hot for every built-in chip).
    """
    eff = system.efficiency
    e = jnp.asarray(head_dim)
    # no query tile or no key (a pass without prefill): the limit of a tiny kernel, not 0, so
    # that ``flop / (peak eff)`` stays 0 / positive with finite gradients
    c, t = nonzero_rows(keys), nonzero_rows(tiles)
    gpu = (
        eff.matmul_peak_fraction
        * (e / (e + eff.attention_softmax_dim))
        * (c / (c + eff.attention_half_span))
        * (t / (t + eff.attention_half_tiles))
    )
    w_gpu = system.chip.gpu_weight()
    arrays = matmul_efficiency(rows, span, head_dim, system, sm)
    return w_gpu * gpu + (1.0 - w_gpu) * arrays


def decode_attention(
    seqs: ArrayLike,
    query_tokens: ArrayLike,
    context: ArrayLike,
    shape: AttentionShape,
    kv_rereads: ArrayLike,
    peak_flop_per_s: ArrayLike,
    system: System,
    sm: Smoothing,
    flop_j: ArrayLike | None = None,
) -> FusedAttention:
    """Decode (or draft verification) attention of ``seqs`` sequences with ``query_tokens`` new
    tokens each over ``context`` cached tokens.

    FLOP ``2 seqs q c heads d`` (``d = decode_dim``, ``2 e`` for standard attention); KV bytes
    ``seqs c kv_token (1 + x)`` (``x = kv_rereads``, the extra reads of the cache of the
    engine's kernel: ``(g - 1) r`` for a GQA-unaware one,
    :class:`diffcost._serve.behaviours.GqaDecodeKernel`); compute at the large-GEMM achievable
    peak (split-KV kernel), sustained under the power limit for ``flop_j`` J/FLOP
    (:func:`~diffcost._terms.power.sustained`; None: the top clock).
    """
    held = system if flop_j is None else sustained(system, peak_flop_per_s, flop_j, sm)
    eff = held.efficiency
    seqs, query_tokens, context = (jnp.asarray(x) for x in (seqs, query_tokens, context))
    flop = 2.0 * seqs * query_tokens * context * shape.heads * shape.decode_dim
    reads = 1.0 + jnp.asarray(kv_rereads)
    kv = seqs * context * shape.kv_token_bytes() * reads
    traffic = kv + shape.qo_bytes(seqs * query_tokens)
    time = fused_attention_s(flop, traffic, eff.matmul_peak_fraction, peak_flop_per_s, system, sm)
    return FusedAttention(flop, kv, time)


def prefill_attention(
    tokens: ArrayLike,
    piece: ArrayLike,
    context: ArrayLike,
    shape: AttentionShape,
    peak_flop_per_s: ArrayLike,
    system: System,
    sm: Smoothing,
    flop_j: ArrayLike | None = None,
) -> FusedAttention:
    """Flash prefill attention of ``tokens`` prompt tokens in chunks of ``piece`` attending on
    average ``context`` earlier tokens.

    FLOP ``2 tokens c heads (e + e_v)`` (MLA prefill up-projects its keys and values: vLLM
    and SGLang run it unabsorbed); each of the ``tokens / piece`` chunks reads the context at its
    end, ``c + piece / 2`` on average, once; efficiency :func:`fused_prefill_efficiency` of
    ``tokens heads / 128`` query tiles over ``c`` keys at head dim ``e``;
    ``flop_j``: the compute format's J/FLOP, for the sustained fraction under the power limit
    (:func:`~diffcost._terms.power.sustained`; None: the top clock).
    """
    tokens, piece, context = (jnp.asarray(x) for x in (tokens, piece, context))
    flop = 2.0 * tokens * context * shape.heads * (shape.head_dim + shape.v_dim)
    span = context + 0.5 * piece
    kv = tokens / piece * span * shape.kv_token_bytes()
    tiles = tokens * shape.heads / ATTENTION_TILE_ROWS
    held = system if flop_j is None else sustained(system, peak_flop_per_s, flop_j, sm)
    eff = fused_prefill_efficiency(
        tiles, context, shape.head_dim, shape.group() * piece, span, held, sm
    )
    traffic = kv + shape.qo_bytes(tokens)
    time = fused_attention_s(flop, traffic, eff, peak_flop_per_s, system, sm)
    return FusedAttention(flop, kv, time)


__all__ = [
    "ATTENTION_GEMMS",
    "ATTENTION_TILE_ROWS",
    "AttentionShape",
    "FusedAttention",
    "attention_gemms",
    "causal_skip",
    "decode_attention",
    "fused_attention_s",
    "fused_prefill_efficiency",
    "gemm_attention_s",
    "prefill_attention",
]
