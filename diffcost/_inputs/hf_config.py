"""Hugging Face ``config.json`` -> a model document of the model schema (nothing is downloaded).

The shape keys are read under their Hugging Face names (and checked as counts, problems named by
those keys); the rest (MLP, norm, positions, biases) is inferred from the activation and the
model type.  The result has the form of a model TOML file and goes through the same checks
(:meth:`diffcost._inputs.checker.Checker.document`).
"""

from pathlib import Path
from typing import Any

from .._core.errors import Problem, SpecError
from .checker import Checker, read_json
from .schema import Field

#: model key -> the Hugging Face keys that may hold it, first found wins
HF_KEYS = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "heads": ("num_attention_heads", "n_head"),
    "kv_heads": ("num_key_value_heads", "num_kv_heads", "n_head_kv"),
    "ffn_hidden": ("intermediate_size", "n_inner", "ffn_dim"),
    "vocab": ("vocab_size",),
    "max_seq_len": ("max_position_embeddings", "n_positions", "seq_length"),
    "head_dim": ("head_dim",),
}
HF_REQUIRED = ("layers", "hidden", "heads", "vocab")
_SWIGLU_ACTS = ("silu", "swiglu", "swish")
_SWIGLU_TYPES = ("llama", "mistral", "qwen2", "gemma")
_ENCODER_TYPES = ("bert", "roberta", "deberta", "electra")
_LEARNED_TYPES = ("gpt2", "bert", "roberta", "opt", "gpt_bigcode", "electra")
#: Model types whose cost structure the inference below reads correctly (dense transformer,
#: full attention; rotary GPT-J/NeoX use the defaults).  Any other type is refused: its norm,
#: position or attention layout could be misread silently.
KNOWN_TYPES = (*_SWIGLU_TYPES, *_ENCODER_TYPES, *_LEARNED_TYPES, "gptj", "gpt_neox")
#: Keys that announce mixture-of-experts layers (Mixtral, Qwen-MoE, DeepSeek, DBRX, ...).
MOE_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")


#: Hugging Face keys read as flags or fractions: a string "false" is not false, and a dropout
#: must be a probability.
HF_TYPED = {
    "tie_word_embeddings": Field("bool"),
    "bias": Field("bool"),
    "attention_bias": Field("bool"),
    "attention_dropout": Field("fraction", positive=False),
    "attn_pdrop": Field("fraction", positive=False),
}


def _typed(ck: Checker, data: dict[str, Any]) -> dict[str, Any]:
    """The :data:`HF_TYPED` keys present (not null), each checked for its type and range."""
    return {
        key: ck.value(key, data[key], spec)
        for key, spec in HF_TYPED.items()
        if data.get(key) is not None
    }


def _shape(ck: Checker, data: dict[str, Any]) -> dict[str, Any]:
    v: dict[str, Any] = {}
    for field_name, keys in HF_KEYS.items():
        for key in keys:
            if data.get(key) is not None:
                v[field_name] = ck.value(key, data[key], Field("count"))
                break
    for required in HF_REQUIRED:
        if required not in v:
            ck.add(" or ".join(HF_KEYS[required]), "missing required key")
    return v


def _unsupported(ck: Checker, data: dict[str, Any]) -> None:
    """Refuse what the dense-transformer model cannot represent instead of approximating it:
    an unknown ``model_type``, mixture-of-experts layers, sliding-window attention."""
    model_type = data.get("model_type")
    if not isinstance(model_type, str) or model_type.lower() not in KNOWN_TYPES:
        ck.add(
            "model_type",
            f"{model_type!r} is not a supported architecture (supported: "
            f"{', '.join(sorted(set(KNOWN_TYPES)))}); its layers could be misread",
        )
    for key in MOE_KEYS:
        experts = data.get(key)
        if isinstance(experts, int) and not isinstance(experts, bool) and experts > 1:
            ck.add(key, f"{experts} experts: mixture-of-experts layers are not modelled")
    window = data.get("sliding_window")
    if data.get("use_sliding_window", True) is not False and window is not None:
        ck.add(
            "sliding_window",
            f"{window!r}: sliding-window attention is not modelled (its attention cost and "
            "KV cache would be overstated); set it to null for full attention",
        )


def hf_document(path: Path) -> dict[str, Any]:
    """A Hugging Face config as a model document (top-level keys and ``[source]``)."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise SpecError([Problem(str(path), "", "must be a JSON object")])
    ck = Checker(str(path))
    v, typed = _shape(ck, data), _typed(ck, data)
    _unsupported(ck, data)
    ck.raise_if_any()
    act = str(data.get("hidden_act", data.get("activation_function", "gelu"))).lower()
    model_type = str(data.get("model_type", "")).lower()
    swiglu = act in _SWIGLU_ACTS or model_type in _SWIGLU_TYPES
    # multi-query attention (StarCoder / gpt_bigcode): one K/V head shared by all query heads
    v.setdefault("kv_heads", 1 if data.get("multi_query") is True else v["heads"])
    v.setdefault("ffn_hidden", 4 * v["hidden"])
    v.setdefault("max_seq_len", 2048)
    rms = "rms_norm_eps" in data
    learned = model_type in _LEARNED_TYPES
    return {
        "schema_version": 1,
        "kind": "model",
        "name": path.parent.name or path.stem,
        "display_name": f"{model_type or 'transformer'} from {path}",
        "architecture": "encoder" if model_type in _ENCODER_TYPES else "decoder",
        **v,
        "mlp": "swiglu" if swiglu else ("relu" if act == "relu" else "gelu"),
        "norm": "rmsnorm" if rms else "layernorm",
        "position": "learned" if learned else ("alibi" if data.get("alibi") else "rope"),
        "tied_embeddings": typed.get("tie_word_embeddings", not swiglu),
        "bias": typed.get("bias", typed.get("attention_bias", not rms)),
        "dropout": typed.get("attention_dropout", typed.get("attn_pdrop", 0.0)) > 0,
        "source": {"shape": f"Hugging Face config {path}"},
    }
