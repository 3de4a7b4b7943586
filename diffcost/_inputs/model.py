"""The transformer being trained or served, and its parameter and FLOP counts.

A decoder (or encoder) stack of ``layers`` blocks: attention with ``heads`` query heads and
``kv_heads`` key/value heads (MHA: equal, GQA: fewer, MQA: one) of size ``head_dim``, and an MLP
of ``mlp_matrices`` matrices of size ``hidden x width`` (2 for GeLU/ReLU, 3 for SwiGLU/GeGLU).

Mixture of experts (Shazeer et al. 2017; Fedus et al., "Switch Transformers", JMLR 2022; Jiang et
al., "Mixtral of Experts", arXiv:2401.04088; DeepSeek-AI, "DeepSeek-V3", arXiv:2412.19437 §2.1):
``moe_layers`` of the blocks replace the dense MLP (width ``ffn_hidden``) by a router
(``hidden x experts``), ``experts`` routed experts of width ``expert_ffn_hidden`` of which each
token uses ``experts_per_token`` (top-k), and always-active shared experts of total width
``shared_ffn_hidden``.  The cost model treats the blocks as identical, each carrying the average
over blocks: a fraction ``phi = moe_layers / layers`` of a MoE MLP and ``1 - phi`` of a dense one
(a pipeline stage's layers are charged the average, not its own mix).  A dense model has
``experts = moe_layers = 0`` and every MoE term vanishes.

Multi-head latent attention (MLA; DeepSeek-AI, "DeepSeek-V2", arXiv:2405.04434 §2.1, and
"DeepSeek-V3", arXiv:2412.19437 §2.1.1) replaces the K/V projections by a down-projection to a
latent of ``kv_lora_rank`` plus a shared rotary key of ``rope_head_dim``, which is all a decoder
caches, and per-head up-projections to keys (``head_dim - rope_head_dim`` plus the shared rotary
part) and values (``v_head_dim``); queries go through a ``q_lora_rank`` latent when it is
non-zero.  ``latent_attention`` is 1 for MLA (``kv_lora_rank > 0``), 0 otherwise.

Sliding-window attention (Child et al., "Generating Long Sequences with Sparse Transformers",
2019; Beltagy et al., "Longformer", 2020; Mistral 7B, arXiv:2310.06825 §2; Gemma 2,
arXiv:2408.00118 §2, local/global layers): ``sliding_layers`` of the blocks attend only the last
``sliding_window`` tokens, the others all earlier ones.  A query with ``c`` earlier tokens then
attends ``c - sigma relu(c - W)`` tokens on average over the layers (``sigma =
sliding_layers / layers``), which is also the average number of tokens a layer keeps in its KV
cache: current engines drop the tokens a window no longer reaches (vLLM's hybrid KV-cache
manager, TensorRT-LLM's cyclic KV cache).

Every field is a float leaf so models stack for ``vmap`` and get gradients.

References:
    Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
    Megatron-LM", SC'21 (arXiv:2104.04473), eq. (2) parameters, eq. (3) FLOPs.
    Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models",
    MLSys'23 (arXiv:2205.05198), Appendix A eqs. (7)-(8).
"""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .._core.shared import once
from .._core.smooth import Smoothing, relu, safe_div

MLP_MATRICES = {"gelu": 2.0, "relu": 2.0, "swiglu": 3.0, "geglu": 3.0}
NORM_PARAMS = {"layernorm": 2.0, "rmsnorm": 1.0}  # parameters per norm per hidden unit


class Model(eqx.Module):
    """Shape of a dense transformer (counts as floats; flags as 0.0 / 1.0).

    Attributes:
        layers, hidden, heads, kv_heads, head_dim, ffn_hidden, vocab, max_seq_len: shape.
        mlp_matrices: 2 (GeLU/ReLU MLP) or 3 (SwiGLU).
        norm_params: parameters per norm per hidden unit: 2 (LayerNorm), 1 (RMSNorm).
        learned_positions: 1 if a learned position table (``max_seq_len x hidden``) exists.
        tied_embeddings: 1 if the output projection shares the input embedding.
        bias: 1 if linear layers carry biases.
        dropout: 1 if training uses dropout (stores 1-byte masks, Korthikanti Table 2).
        causal: 1 for a decoder (causal attention), 0 for an encoder.
        experts: routed experts per MoE block (0 for a dense model).
        experts_per_token: routed experts each token uses (top-k).
        expert_ffn_hidden: MLP width of one routed expert.
        shared_ffn_hidden: total MLP width of a MoE block's always-active shared experts.
        moe_layers: blocks with a MoE MLP (the others have the dense MLP of ``ffn_hidden``).
        v_head_dim: value head size (``head_dim`` except MLA).
        latent_attention: 1 for multi-head latent attention, else 0.
        kv_lora_rank, q_lora_rank, rope_head_dim: MLA's latent sizes (0 without MLA; a zero
            ``q_lora_rank`` projects queries directly).
        sliding_window: tokens a sliding-window layer attends (0: no sliding window).
        sliding_layers: blocks with sliding-window attention (0 without a window).
    """

    layers: Float[Array, ""]
    hidden: Float[Array, ""]
    heads: Float[Array, ""]
    kv_heads: Float[Array, ""]
    head_dim: Float[Array, ""]
    ffn_hidden: Float[Array, ""]
    vocab: Float[Array, ""]
    max_seq_len: Float[Array, ""]
    mlp_matrices: Float[Array, ""]
    norm_params: Float[Array, ""]
    learned_positions: Float[Array, ""]
    tied_embeddings: Float[Array, ""]
    bias: Float[Array, ""]
    dropout: Float[Array, ""]
    causal: Float[Array, ""]
    experts: Float[Array, ""]
    experts_per_token: Float[Array, ""]
    expert_ffn_hidden: Float[Array, ""]
    shared_ffn_hidden: Float[Array, ""]
    moe_layers: Float[Array, ""]
    v_head_dim: Float[Array, ""]
    latent_attention: Float[Array, ""]
    kv_lora_rank: Float[Array, ""]
    q_lora_rank: Float[Array, ""]
    rope_head_dim: Float[Array, ""]
    sliding_window: Float[Array, ""] = eqx.field(default_factory=lambda: jnp.zeros(()))
    sliding_layers: Float[Array, ""] = eqx.field(default_factory=lambda: jnp.zeros(()))

    # --- sliding-window attention ---------------------------------------------------------------
    @once
    def sliding_fraction(self) -> Array:
        """Fraction of blocks with sliding-window attention: ``sigma = sliding_layers / layers``."""
        return safe_div(self.sliding_layers, self.layers)

    @once
    def window_tokens(self, context: ArrayLike, sm: Smoothing) -> Array:
        """Earlier tokens a sliding-window layer attends (and keeps cached) with ``context`` of
        them: ``min(c, W) = c - relu(c - W)`` (tokens); the relaxed ``relu`` blends over one
        token (token counts: exact whenever ``c - W`` is a whole number of tokens)."""
        c = jnp.asarray(context)
        return c - relu(c - self.sliding_window, sm)

    @once
    def attended_tokens(self, context: ArrayLike, sm: Smoothing) -> Array:
        """Earlier tokens a query with ``context`` of them attends, averaged over the layers
        (tokens): ``(1 - sigma) c + sigma min(c, W)`` (:meth:`window_tokens`); equally the
        tokens a layer keeps cached on average (module docstring).  ``c`` without a sliding
        window."""
        c = jnp.asarray(context)
        sigma = self.sliding_fraction()
        return (1.0 - sigma) * c + sigma * self.window_tokens(c, sm)

    @once
    def prompt_attended_tokens(self, prompt: ArrayLike, sm: Smoothing) -> Array:
        """Mean earlier tokens a token of a ``prompt``-token causal prefill attends, averaged over
        the layers (tokens): ``s / 2 - sigma relu(s - W)^2 / (2 s)``, the mean of
        ``min(i, W)`` over the prompt's positions ``i`` in ``[0, s]`` (``s / 2`` for ``s <= W``,
        ``W - W^2 / (2 s)`` beyond; C1 at ``s = W``)."""
        s = jnp.asarray(prompt)
        beyond = relu(s - self.sliding_window, sm, scale=s + self.sliding_window)
        return 0.5 * s - self.sliding_fraction() * safe_div(beyond * beyond, 2.0 * s)

    # --- mixture of experts: widths averaged over blocks --------------------------------------
    @once
    def moe_fraction(self) -> Array:
        """Fraction of blocks with a MoE MLP: ``phi = moe_layers / layers``."""
        return safe_div(self.moe_layers, self.layers)

    @once
    def dense_ffn_hidden(self) -> Array:
        """Average width of the MLP every expert-parallel rank holds (tensor-parallel sharded):
        ``(1 - phi) ffn_hidden + phi shared_ffn_hidden``."""
        phi = self.moe_fraction()
        return (1.0 - phi) * self.ffn_hidden + phi * self.shared_ffn_hidden

    @once
    def routed_ffn_hidden(self) -> Array:
        """Average width of the routed experts a block holds: ``phi experts expert_ffn_hidden``
        (sharded over the expert-parallel ranks)."""
        return self.moe_fraction() * self.experts * self.expert_ffn_hidden

    @once
    def active_ffn_hidden(self) -> Array:
        """Average MLP width one token runs through: ``dense + phi k expert_ffn_hidden``."""
        routed = self.moe_fraction() * self.experts_per_token * self.expert_ffn_hidden
        return self.dense_ffn_hidden() + routed

    @once
    def router_params(self) -> Array:
        """Router (gate) weights per block, average: ``phi hidden experts`` (no bias)."""
        return self.moe_fraction() * self.hidden * self.experts

    # --- parameters ---------------------------------------------------------------------------
    @once
    def attention_width(self) -> Array:
        """Q, K and V columns per token: ``heads e + kv_heads (e + e_v)`` (``(heads + 2
        kv_heads) e`` when ``e_v = e``): the fused QKV projection's output, or MLA's
        up-projected queries, keys and values."""
        return self.heads * self.head_dim + self.kv_heads * (self.head_dim + self.v_head_dim)

    @once
    def latent_projection_params(self) -> Array:
        """MLA's Q, K, V projections (DeepSeek-V2 §2.1.2-2.1.3, eqs. 9-18): query down
        ``h r_q`` and up ``r_q heads e`` (or ``h heads e`` without a query latent), KV down
        ``h (r_kv + e_rope)``, KV up ``r_kv heads (e - e_rope + e_v)``; 0 without MLA."""
        h, a = self.hidden, self.heads
        q_in = jnp.where(self.q_lora_rank > 0, self.q_lora_rank, h)
        query = h * self.q_lora_rank + q_in * a * self.head_dim
        kv_down = h * (self.kv_lora_rank + self.rope_head_dim)
        kv_up = self.kv_lora_rank * a * (self.head_dim - self.rope_head_dim + self.v_head_dim)
        return self.latent_attention * (query + kv_down + kv_up)

    @once
    def attention_projection_params(self) -> Array:
        """Weights of the attention projections: QKV ``hidden * attention_width`` (or MLA's,
        :meth:`latent_projection_params`) plus the output ``heads e_v hidden``."""
        qkv = (1.0 - self.latent_attention) * self.hidden * self.attention_width()
        return qkv + self.latent_projection_params() + self.heads * self.v_head_dim * self.hidden

    @once
    def kv_cache_elements(self, kv_heads_local: ArrayLike) -> Array:
        """Cached elements per token and layer on a chip holding ``kv_heads_local`` KV heads:
        ``kv_local (e + e_v)``, or MLA's latent and rotary key ``r_kv + e_rope`` (replicated
        on every tensor-parallel rank; DeepSeek-V2 §2.1.2)."""
        mla = self.latent_attention
        latent = self.kv_lora_rank + self.rope_head_dim
        return mla * latent + (1.0 - mla) * jnp.asarray(kv_heads_local) * (
            self.head_dim + self.v_head_dim
        )

    @once
    def decode_attention_dim(self) -> Array:
        """Multiply-adds per query head and cached token of decode attention, halved: score
        plus value dims, ``e + e_v``; MLA with its up-projections absorbed into the query and
        output (DeepSeek-V2 §2.1.2; FlashMLA) scores the latent and rotary key and weights the
        latent: ``(r_kv + e_rope) + r_kv``."""
        mla = self.latent_attention
        absorbed = 2.0 * self.kv_lora_rank + self.rope_head_dim
        return mla * absorbed + (1.0 - mla) * (self.head_dim + self.v_head_dim)

    @once
    def layer_matrix_params(self) -> Array:
        """Weights of one block's matrices that every expert-parallel rank holds (tensor
        parallelism shards them; the small router is counted here too).

        The attention projections (:meth:`attention_projection_params`) + ``mlp_matrices *
        hidden * dense_ffn_hidden`` + router.  For GPT (MHA, ffn = 4h): 12 h^2.
        """
        h = self.hidden
        return (
            self.attention_projection_params()
            + self.mlp_matrices * h * self.dense_ffn_hidden()
            + self.router_params()
        )

    @once
    def layer_bias_params(self) -> Array:
        """Biases of one block's shared matrices: QKV, output projection, dense MLP in (all but
        the last matrix) and out.  Shared experts carry none (DeepSeek-V3, Qwen-MoE have no
        biases); routed-expert biases (GPT-OSS) are in :meth:`layer_expert_params`."""
        dense = 1.0 - self.moe_fraction()
        mlp = dense * ((self.mlp_matrices - 1.0) * self.ffn_hidden + self.hidden)
        return self.bias * (self.attention_width() + self.hidden + mlp)

    @once
    def layer_expert_params(self) -> Array:
        """Routed-expert weights and biases of one block (average), which expert parallelism
        shards: ``mlp_matrices hidden routed + bias phi experts ((m - 1) f_e + hidden)``."""
        phi_e = self.moe_fraction() * self.experts
        mlp_in = (self.mlp_matrices - 1.0) * self.expert_ffn_hidden
        biases = self.bias * phi_e * (mlp_in + self.hidden)
        return self.mlp_matrices * self.hidden * self.routed_ffn_hidden() + biases

    @once
    def layer_active_expert_params(self) -> Array:
        """Routed-expert weights and biases one token uses per block (top-k of them)."""
        return safe_div(self.layer_expert_params() * self.experts_per_token, self.experts)

    @once
    def layer_norm_params(self) -> Array:
        """Two norms per block, replicated across tensor-parallel ranks, plus MLA's norms of
        its query and KV latents (DeepSeek-V2 eqs. 9-10)."""
        latents = self.latent_attention * (self.q_lora_rank + self.kv_lora_rank)
        return self.norm_params * (2.0 * self.hidden + latents)

    @once
    def layer_params(self) -> Array:
        """Parameters of one block every expert-parallel rank holds (all but routed experts).

        GPT: ``12 h^2 + 13 h`` (Narayanan eq. 2).
        """
        return self.layer_matrix_params() + self.layer_bias_params() + self.layer_norm_params()

    @once
    def embedding_params(self) -> Array:
        """Word embedding (``vocab x hidden``) plus a learned position table if any."""
        return self.vocab * self.hidden + self.learned_positions * self.max_seq_len * self.hidden

    @once
    def output_params(self) -> Array:
        """Untied output projection (``vocab x hidden``) plus the final norm."""
        return (1.0 - self.tied_embeddings) * self.vocab * self.hidden + self.norm_params * (
            self.hidden
        )

    @once
    def num_params(self) -> Array:
        """Total parameter count.

        GPT reproduces Narayanan eq. (2): ``12 l h^2 (1 + 13/(12 h) + (V + s)/(12 l h))``
        (eq. 2 omits the final LayerNorm's 2h, which is included here).
        """
        per_layer = self.layer_params() + self.layer_expert_params()
        return self.layers * per_layer + self.embedding_params() + self.output_params()

    @once
    def active_params(self) -> Array:
        """Parameters one token uses: all but the routed experts it is not sent to
        (``num_params`` for a dense model; Mixtral 8x7B 12.9B of 46.7B)."""
        unused = self.layer_expert_params() - self.layer_active_expert_params()
        return self.num_params() - self.layers * unused

    # --- FLOPs (one forward pass) -------------------------------------------------------------
    @once
    def layer_matmul_flop(self, tokens: ArrayLike) -> Array:
        """Matrix FLOP of one block's forward pass over ``tokens`` tokens: 2 per MAC, each token
        through the shared matrices and its top-k experts (active parameters).

        ``2 * tokens * (layer_matrix_params + phi k expert)``; GPT: ``24 b s h^2``.
        """
        routed = self.mlp_matrices * self.hidden * self.moe_fraction() * self.experts_per_token
        active = self.layer_matrix_params() + routed * self.expert_ffn_hidden
        return 2.0 * jnp.asarray(tokens) * active

    @once
    def layer_attention_flop(self, batch: ArrayLike, seq_len: ArrayLike) -> Array:
        """Attention-core FLOP of one block's forward pass (``QK^T`` and ``AV``), full matrix.

        ``2 * b * s^2 * heads * (head_dim + v_head_dim)`` (GPT: ``4 b s^2 h``), counting the
        masked half of a causal matrix as Megatron and PaLM do for model FLOPs.
        """
        s = jnp.asarray(seq_len)
        dims = self.head_dim + self.v_head_dim
        return 2.0 * jnp.asarray(batch) * s * s * self.heads * dims

    @once
    def logits_flop(self, tokens: ArrayLike) -> Array:
        """Output projection forward FLOP: ``2 * tokens * hidden * vocab``."""
        return 2.0 * jnp.asarray(tokens) * self.hidden * self.vocab

    @once
    def forward_flop(self, batch: ArrayLike, seq_len: ArrayLike) -> Array:
        """One forward pass over ``batch`` sequences of ``seq_len`` tokens, model FLOP.

        GPT: ``24 b s l h^2 (1 + s/(6h) + V/(12 l h))`` (Korthikanti eq. 7 divided by 3).
        """
        tokens = jnp.asarray(batch) * jnp.asarray(seq_len)
        per_layer = self.layer_matmul_flop(tokens) + self.layer_attention_flop(batch, seq_len)
        return self.layers * per_layer + self.logits_flop(tokens)
