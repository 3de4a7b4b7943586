"""The transformer being trained or served, and its parameter and FLOP counts.

A dense decoder (or encoder) stack of ``layers`` identical blocks: attention with ``heads`` query
heads and ``kv_heads`` key/value heads (MHA: equal, GQA: fewer, MQA: one) of size ``head_dim``,
and an MLP of ``mlp_matrices`` matrices of size ``hidden x ffn_hidden`` (2 for GeLU/ReLU, 3 for
SwiGLU).  Every field is a float leaf so models stack for ``vmap`` and get gradients.

References:
    Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
    Megatron-LM", SC'21 (arXiv:2104.04473), eq. (2) parameters, eq. (3) FLOPs.
    Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models",
    MLSys'23 (arXiv:2205.05198), Appendix A eqs. (7)-(8).
"""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

MLP_MATRICES = {"gelu": 2.0, "relu": 2.0, "swiglu": 3.0}
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

    # --- parameters ---------------------------------------------------------------------------
    def attention_width(self) -> Array:
        """Columns of the fused QKV projection: ``(heads + 2 kv_heads) * head_dim``."""
        return (self.heads + 2.0 * self.kv_heads) * self.head_dim

    def layer_matrix_params(self) -> Array:
        """Weights of one block's matrices, which tensor parallelism shards.

        ``hidden * attention_width`` (QKV) + ``heads * head_dim * hidden`` (output projection)
        + ``mlp_matrices * hidden * ffn_hidden``.  For GPT (MHA, ffn = 4h): 12 h^2.
        """
        h = self.hidden
        return (
            h * self.attention_width()
            + self.heads * self.head_dim * h
            + self.mlp_matrices * h * self.ffn_hidden
        )

    def layer_bias_params(self) -> Array:
        """Biases of one block: QKV, output projection, MLP in (all but last matrix) and out."""
        mlp_in = (self.mlp_matrices - 1.0) * self.ffn_hidden
        return self.bias * (self.attention_width() + self.hidden + mlp_in + self.hidden)

    def layer_norm_params(self) -> Array:
        """Two norms per block, replicated across tensor-parallel ranks."""
        return 2.0 * self.norm_params * self.hidden

    def layer_params(self) -> Array:
        """All parameters of one block.  GPT: ``12 h^2 + 13 h`` (Narayanan eq. 2)."""
        return self.layer_matrix_params() + self.layer_bias_params() + self.layer_norm_params()

    def embedding_params(self) -> Array:
        """Word embedding (``vocab x hidden``) plus a learned position table if any."""
        return self.vocab * self.hidden + self.learned_positions * self.max_seq_len * self.hidden

    def output_params(self) -> Array:
        """Untied output projection (``vocab x hidden``) plus the final norm."""
        return (1.0 - self.tied_embeddings) * self.vocab * self.hidden + self.norm_params * (
            self.hidden
        )

    def num_params(self) -> Array:
        """Total parameter count.

        GPT reproduces Narayanan eq. (2): ``12 l h^2 (1 + 13/(12 h) + (V + s)/(12 l h))``
        (eq. 2 omits the final LayerNorm's 2h, which is included here).
        """
        return self.layers * self.layer_params() + self.embedding_params() + self.output_params()

    # --- FLOPs (one forward pass) -------------------------------------------------------------
    def layer_matmul_flop(self, tokens: ArrayLike) -> Array:
        """Dense-matrix FLOP of one block's forward pass over ``tokens`` tokens: 2 per MAC.

        ``2 * tokens * layer_matrix_params``; GPT: ``24 b s h^2``.
        """
        return 2.0 * jnp.asarray(tokens) * self.layer_matrix_params()

    def layer_attention_flop(self, batch: ArrayLike, seq_len: ArrayLike) -> Array:
        """Attention-core FLOP of one block's forward pass (``QK^T`` and ``AV``), full matrix.

        ``4 * b * s^2 * heads * head_dim`` (GPT: ``4 b s^2 h``), counting the masked half of a
        causal matrix as Megatron and PaLM do for model FLOPs.
        """
        s = jnp.asarray(seq_len)
        return 4.0 * jnp.asarray(batch) * s * s * self.heads * self.head_dim

    def logits_flop(self, tokens: ArrayLike) -> Array:
        """Output projection forward FLOP: ``2 * tokens * hidden * vocab``."""
        return 2.0 * jnp.asarray(tokens) * self.hidden * self.vocab

    def forward_flop(self, batch: ArrayLike, seq_len: ArrayLike) -> Array:
        """One forward pass over ``batch`` sequences of ``seq_len`` tokens, model FLOP.

        GPT: ``24 b s l h^2 (1 + s/(6h) + V/(12 l h))`` (Korthikanti eq. 7 divided by 3).
        """
        tokens = jnp.asarray(batch) * jnp.asarray(seq_len)
        per_layer = self.layer_matmul_flop(tokens) + self.layer_attention_flop(batch, seq_len)
        return self.layers * per_layer + self.logits_flop(tokens)
