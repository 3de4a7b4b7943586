"""The raw values of a Hugging Face ``config.json``, checked before ``transformers`` reads them.

Each value diffcost reads is checked under its Hugging Face key (the one the user wrote): the
shape is stated, counts are counts, flags are booleans, dropouts are fractions, an activation is
one ``transformers`` can build; then values against the layer count and each other (a dense
prefix longer than the model, a top-k above the experts, a window pattern with no global layer).
Every problem is recorded on the file's :class:`~.checker.Checker`, all at once;
:mod:`.hf_config` raises them before ``transformers`` would fill in, coerce or crash on them.
"""

from typing import Any

from .checker import Checker
from .schema import Field

#: Shape keys checked as counts before transformers sees them (problems named by the HF key).
COUNT_KEYS = (
    "num_hidden_layers",
    "n_layer",
    "hidden_size",
    "n_embd",
    "n_embed",
    "num_attention_heads",
    "n_head",
    "num_key_value_heads",
    "num_kv_heads",
    "intermediate_size",
    "n_inner",
    "ffn_hidden_size",
    "ffn_dim",
    "intermediate_size_mlp",
    "word_embed_proj_dim",
    "interleave_moe_layer_step",
    "vocab_size",
    "max_position_embeddings",
    "n_positions",
    "head_dim",
    "num_local_experts",
    "num_experts",
    "n_routed_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
    "decoder_sparse_step",
    "moe_layer_freq",
)
#: Counts that may be 0 (none): shared experts, dense leading blocks, shared-expert width.
NONNEGATIVE_KEYS = ("n_shared_experts", "first_k_dense_replace", "shared_expert_intermediate_size")
#: Counts whose 0 would not mean "none" but a degenerate model: refused with the reason.
POSITIVE_WHY = {
    "kv_lora_rank": "deepseek_v3 attention always projects keys and values through this latent "
    "(modeling_deepseek_v3.py: kv_a_proj_with_mqa, kv_a_layernorm); 0 would leave them empty, "
    "not standard attention",
    "q_lora_rank": "a rank-0 query latent leaves the queries empty; null (no query "
    "compression) is how a config says none",
    "sliding_window_pattern": "every sliding_window_pattern-th layer attends globally "
    "(configuration_gemma3.py: (i + 1) % pattern); it must be a positive integer",
}
#: Hugging Face keys read as flags or fractions: a string "false" is not false, and a dropout
#: must be a probability.
HF_TYPED = {
    "tie_word_embeddings": Field("bool"),
    "bias": Field("bool"),
    "attention_bias": Field("bool"),
    "mlp_bias": Field("bool"),
    "use_bias": Field("bool"),
    "enable_bias": Field("bool"),
    "attention_dropout": Field("fraction", positive=False),
    "dropout": Field("fraction", positive=False),
    "activation_dropout": Field("fraction", positive=False),
    "attn_pdrop": Field("fraction", positive=False),
}
#: Activation names transformers can build (``transformers/activations.py``, ``ACT2CLS``, as of
#: 5.24; 4.51 lacks gelu_python_tanh, hardswish, sqrtsoftplus and xielu: tests/test_hf_values.py
#: compares the installed version's); any other name fails when the model is built, so a config
#: naming one is a typo or a function whose MLP diffcost cannot know.  The keys that name one:
#: :data:`ACTIVATION_KEYS`.
ACTIVATIONS = (
    "gelu",
    "gelu_10",
    "gelu_fast",
    "gelu_new",
    "gelu_python",
    "gelu_pytorch_tanh",
    "gelu_python_tanh",
    "gelu_accurate",
    "hardswish",
    "laplace",
    "leaky_relu",
    "linear",
    "mish",
    "quick_gelu",
    "relu",
    "relu2",
    "relu6",
    "sigmoid",
    "silu",
    "sqrtsoftplus",
    "swish",
    "tanh",
    "prelu",
    "xielu",
)
ACTIVATION_KEYS = ("hidden_act", "hidden_activation", "activation_function", "activation")
#: Gemma's ``hidden_activation`` null means "use hidden_act" (``modeling_gemma.py``; transformers
#: before 5 writes it so): the one activation key that may be null.
NULL_ACTIVATION = (None, "hidden_activation")

#: Shape keys a config must state (any one of the names): transformers would fill a default in,
#: and a config without its layer count or vocabulary is a broken file, not a default model.
REQUIRED_KEYS = (
    ("num_hidden_layers", "n_layer", "num_layers"),
    ("hidden_size", "n_embd", "n_embed", "d_model"),
    ("num_attention_heads", "n_head"),
    ("vocab_size",),
)


def _types(ck: Checker, raw: dict[str, Any]) -> None:
    """The shape is stated, counts are counts, flags are booleans, dropouts are fractions,
    activations are known."""
    for names in REQUIRED_KEYS:
        if all(raw.get(name) is None for name in names):
            ck.add(" or ".join(names), "missing required key")
    for key in COUNT_KEYS:
        if raw.get(key) is not None:
            ck.value(key, raw[key], Field("count"))
    for key in NONNEGATIVE_KEYS:
        if raw.get(key) is not None:
            ck.value(key, raw[key], Field("count", positive=False))
    for key, why in POSITIVE_WHY.items():
        value = raw.get(key, 1)
        if value is None and key == "q_lora_rank":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            ck.add(key, f"{value!r}: {why}")
    for key, spec in HF_TYPED.items():
        if raw.get(key) is not None:
            ck.value(key, raw[key], spec)
    for key in ACTIVATION_KEYS:
        if key in raw and raw[key] not in ACTIVATIONS and (raw[key], key) != NULL_ACTIVATION:
            ck.add(
                key,
                f"{raw[key]!r} is not an activation transformers knows (known: "
                f"{', '.join(ACTIVATIONS)}); its MLP cannot be read",
            )


def _count(raw: dict[str, Any], key: str) -> int | None:
    """A raw value that is a valid positive count, else None (its problem is reported once)."""
    value = raw.get(key)
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if ok else None


def _window_pattern(ck: Checker, raw: dict[str, Any]) -> None:
    """Gemma 3: a ``sliding_window_pattern`` above the layer count leaves no global layer."""
    pattern, layers = _count(raw, "sliding_window_pattern"), _count(raw, "num_hidden_layers")
    if pattern and layers and pattern > layers and not raw.get("layer_types"):
        ck.add(
            "sliding_window_pattern",
            f"{pattern}: more than num_hidden_layers ({layers}): no layer would attend globally "
            "(every pattern-th layer does)",
        )


def _heads_and_experts(ck: Checker, raw: dict[str, Any]) -> None:
    """Query heads are a multiple of the key/value heads; top-k is at most the experts."""
    heads = _count(raw, "num_attention_heads")
    kv_key = "num_key_value_heads" if "num_key_value_heads" in raw else "num_kv_heads"
    kv = _count(raw, kv_key)
    # Falcon reads num_kv_heads only under its new decoder architecture (modeling_falcon.py)
    read = kv_key == "num_key_value_heads" or raw.get("new_decoder_architecture")
    if heads and kv and heads % kv and read:
        ck.add(kv_key, f"{kv}: num_attention_heads ({heads}) is not a multiple of it")
    top_k = _count(raw, "num_experts_per_tok")
    for key in ("num_local_experts", "num_experts", "n_routed_experts"):
        experts = _count(raw, key)
        if top_k and experts and top_k > experts:
            ck.add("num_experts_per_tok", f"{top_k}: more than the {experts} experts ({key})")


def check_dense_prefix(ck: Checker, values: dict[str, Any]) -> None:
    """DeepSeek: ``first_k_dense_replace`` dense blocks come before the MoE ones; as many as the
    layers leave the routed experts unused (the model would be read as dense)."""
    layers, first = _count(values, "num_hidden_layers"), values.get("first_k_dense_replace")
    experts = _count(values, "n_routed_experts")
    if layers and isinstance(first, int) and first >= layers and experts:
        ck.add(
            "first_k_dense_replace",
            f"{first}: not less than num_hidden_layers ({layers}): no block would be a MoE "
            f"block for the {experts} routed experts (n_routed_experts)",
        )


def check_values(ck: Checker, raw: dict[str, Any]) -> None:
    """Every check of this module on a config's (text) values."""
    _types(ck, raw)
    _window_pattern(ck, raw)
    _heads_and_experts(ck, raw)
    check_dense_prefix(ck, raw)
