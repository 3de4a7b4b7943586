"""Hugging Face ``config.json`` -> a model document of the model schema (nothing is downloaded).

The file is parsed by ``transformers`` (``AutoConfig.for_model``, offline; its defaults fill the
keys a config leaves out, exactly as the Hugging Face model would be built; nested configs such as
Llama 4's ``text_config`` are unwrapped with ``get_text_config()``).  diffcost's own checks stay on
top: the values are checked under their Hugging Face names before ``transformers`` sees them
(:mod:`.hf_values`: counts, flags, activations, values against the layer count and each other),
the layer keys of a MoE again once its defaults are filled in (no MoE block left), and every key
of the text config must be one this module knows for the family (:data:`FAMILIES`: read, refused
when active, or irrelevant to cost).  What the cost model cannot represent is refused with the
file, the key and the reason, all problems at once, never approximated.  The result has the form
of a model TOML file and goes through the same checks
(:meth:`diffcost._inputs.checker.Checker.document`).

Reference: ``transformers/models/<family>/configuration_<family>.py`` and
``modeling_<family>.py`` (transformers >= 4.51) for what each key builds.
"""

import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._core.errors import Problem, SpecError
from .checker import Checker, read_json
from .hf_values import check_dense_prefix, check_values


@dataclass(frozen=True)
class Family:
    """What diffcost does with each key of one ``model_type`` (besides :data:`COMMON_KEYS`)."""

    read: tuple[str, ...]  # mapped onto the model document
    refused: tuple[str, ...]  # the cost model cannot represent it when active: refused
    irrelevant: tuple[str, ...] = ()  # no effect on parameters, FLOPs or bytes moved


#: Keys of every family that do not change cost: token ids, initialisation, numerics (norm
#: epsilon), rotary frequencies and their scaling (elementwise on q/k), router loss terms
#: (training loss only), bookkeeping, and the attention-layout keys read by :func:`_window`
#: (``sliding_window``, ``layer_types``; unknown layer kinds refused).
COMMON_KEYS = (
    "architectures",
    "model_type",
    "_name_or_path",
    "auto_map",
    "torch_dtype",
    "dtype",
    "transformers_version",
    "use_cache",
    "bos_token_id",
    "eos_token_id",
    "pad_token_id",
    "initializer_range",
    "initializer_factor",
    "rms_norm_eps",
    "layer_norm_eps",
    "layer_norm_epsilon",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "attention_dropout",
    "hidden_dropout",
    "output_router_logits",
    "router_aux_loss_coef",
    "router_jitter_noise",
    "norm_topk_prob",
    "tokenizer_class",
    "id2label",
    "label2id",
    "problem_type",
    "return_dict",
    "output_attentions",
    "output_hidden_states",
    "chunk_size_feed_forward",
    "tie_word_embeddings",
    "is_encoder_decoder",
    "sliding_window",
    "use_sliding_window",
    "max_window_layers",
    "layer_types",
    "quantization_config",
    "vocab_size",
    "max_position_embeddings",
    "pretraining_tp",
)
_DECODER = (
    "num_hidden_layers",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "hidden_act",
    "attention_bias",
    "mlp_bias",
)
_QWEN_MOE = (
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "decoder_sparse_step",
    "mlp_only_layers",
)
_GEMMA = (
    "hidden_activation",
    "query_pre_attn_scalar",
    "attn_logit_softcapping",
    "final_logit_softcapping",
    "rope_local_base_freq",
    "sliding_window_pattern",
    "cache_implementation",
)
_MLA = ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
_DEEPSEEK_ROUTING = (
    "n_group",
    "topk_group",
    "topk_method",
    "routed_scaling_factor",
    "scoring_func",
    "aux_loss_alpha",
    "seq_aux",
    "ep_size",
    "rope_interleave",
    "num_nextn_predict_layers",
)

#: Per ``model_type``: the keys read, the keys refused when active, the keys irrelevant to cost.
#: Approximations, all below 0.01 % of the parameters: Qwen2 / Qwen2-MoE q/k/v biases (the
#: document's ``bias`` flag is all-or-nothing: read as no biases), Qwen3 / Gemma q/k norms and
#: Gemma's extra post-norms, the Qwen2-MoE shared-expert gate (hidden x 1).  ``rotary_pct`` and
#: ``partial_rotary_factor`` rotate part of each head (elementwise work only).
FAMILIES: dict[str, Family] = {
    "llama": Family(_DECODER, ()),
    "mistral": Family(_DECODER, ("sliding_window",)),
    "mixtral": Family((*_DECODER, "num_local_experts", "num_experts_per_tok"), ("sliding_window",)),
    "qwen2": Family(_DECODER, ("use_sliding_window",), ("use_mrope",)),
    "qwen2_moe": Family(
        (*_DECODER, *_QWEN_MOE, "shared_expert_intermediate_size"),
        ("use_sliding_window",),
        ("qkv_bias",),
    ),
    "qwen3": Family(_DECODER, ("use_sliding_window",)),
    "qwen3_moe": Family((*_DECODER, *_QWEN_MOE), ("use_sliding_window",)),
    "gemma": Family((*_DECODER, "hidden_activation"), ()),
    "gemma2": Family((*_DECODER, *_GEMMA), ("sliding_window", "layer_types")),
    "gemma3_text": Family(
        (*_DECODER, *_GEMMA), ("sliding_window", "layer_types"), ("use_bidirectional_attention",)
    ),
    "phi3": Family(
        _DECODER,
        ("sliding_window",),
        ("original_max_position_embeddings", "partial_rotary_factor", "resid_pdrop", "embd_pdrop"),
    ),
    "olmo": Family(_DECODER, (), ("clip_qkv",)),
    "deepseek_v3": Family(
        (
            *_DECODER,
            *_MLA,
            "n_routed_experts",
            "n_shared_experts",
            "moe_intermediate_size",
            "first_k_dense_replace",
            "moe_layer_freq",
            "num_experts_per_tok",
        ),
        (),
        _DEEPSEEK_ROUTING,
    ),
    "llama4_text": Family(
        _DECODER,
        ("attention_chunk_size",),
        ("no_rope_layers", "use_qk_norm", "attn_temperature_tuning", "floor_scale", "attn_scale"),
    ),
    "gpt_oss": Family(
        (*_DECODER, "num_local_experts", "num_experts_per_tok"),
        ("model_type", "layer_types", "sliding_window"),
        ("swiglu_limit",),
    ),
    "falcon": Family(
        (
            "num_hidden_layers",
            "hidden_size",
            "num_attention_heads",
            "num_kv_heads",
            "multi_query",
            "new_decoder_architecture",
            "parallel_attn",
            "bias",
            "alibi",
            "ffn_hidden_size",
            "activation",
        ),
        (),
        ("apply_residual_connection_post_layernorm", "num_ln_in_parallel_attn"),
    ),
    "gpt_neox": Family(
        (
            "num_hidden_layers",
            "hidden_size",
            "num_attention_heads",
            "intermediate_size",
            "hidden_act",
            "use_parallel_residual",
            "attention_bias",
        ),
        (),
        ("rotary_pct", "partial_rotary_factor", "rotary_emb_base", "classifier_dropout"),
    ),
    "gpt2": Family(
        ("n_layer", "n_embd", "n_head", "n_inner", "n_positions", "activation_function"),
        (),
        (
            "n_ctx",
            "attn_pdrop",
            "resid_pdrop",
            "embd_pdrop",
            "scale_attn_weights",
            "scale_attn_by_inverse_layer_idx",
            "reorder_and_upcast_attn",
            "summary_type",
            "summary_use_proj",
            "summary_activation",
            "summary_proj_to_labels",
            "summary_first_dropout",
            "task_specific_params",
        ),
    ),
    "bert": Family(
        (
            "num_hidden_layers",
            "hidden_size",
            "num_attention_heads",
            "intermediate_size",
            "hidden_act",
            "attention_probs_dropout_prob",
            "hidden_dropout_prob",
        ),
        ("position_embedding_type",),
        ("type_vocab_size", "gradient_checkpointing", "classifier_dropout"),
    ),
}
_ENCODERS = ("bert",)
_LEARNED = ("gpt2", "bert")
_LAYERNORM = ("gpt2", "bert", "falcon", "gpt_neox", "olmo")


def _transformers_config(path: Path, raw: dict[str, Any]) -> Any:
    """``transformers``' config object for ``raw``; any failure (unknown ``model_type``, a value
    its class rejects) becomes a :class:`SpecError` naming the file and the reason."""
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")  # "PyTorch was not found"
    import transformers  # lazily: ~0.8 s

    model_type = raw.get("model_type")
    if not isinstance(model_type, str):
        _family(path, model_type)  # raises: no model_type, no architecture
    rest = {k: v for k, v in raw.items() if k != "model_type"}
    try:
        with warnings.catch_warnings():  # its deprecation notices are not the user's problem
            warnings.simplefilter("ignore", FutureWarning)
            return transformers.AutoConfig.for_model(str(model_type), **rest)
    except Exception as err:  # noqa: BLE001 - any parse failure is the file's problem
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise SpecError(
            [
                Problem(
                    str(path),
                    "model_type",
                    f"transformers {transformers.__version__} cannot "
                    f"read this config ({type(err).__name__}: {reason})",
                )
            ]
        ) from None


def _unknown_keys(ck: Checker, text_raw: dict[str, Any], family: Family, model_type: str) -> None:
    """A key this module does not know for the family may change the architecture: refused."""
    known = {*COMMON_KEYS, *family.read, *family.refused, *family.irrelevant}
    for key in sorted(set(text_raw) - known):
        ck.add(
            key,
            f"not a key diffcost knows for {model_type!r}: it may change the "
            "architecture, so the config is refused rather than misread",
        )


# --- refusals: one small function each, so a lifted one is one deletion -------------------------
#: Attention kinds of ``layer_types`` diffcost reads: full and sliding-window layers
#: (:func:`_window`); chunked ones are refused by :func:`_refuse_chunked_attention`.
_LAYER_KINDS = frozenset({"full_attention", "sliding_attention", "chunked_attention"})


def _refuse_unknown_layer_kinds(ck: Checker, t: Any) -> None:
    """A ``layer_types`` entry of another kind (a new attention variant) is refused."""
    kinds = set(getattr(t, "layer_types", None) or ())
    if unknown := kinds - _LAYER_KINDS:
        reason = f"layer kinds {sorted(unknown)} are not modelled"
        ck.add("layer_types", f"{sorted(kinds)}: {reason}")


def _refuse_chunked_attention(ck: Checker, t: Any) -> None:
    """Llama 4's local chunked attention (``attention_chunk_size``) is not modelled."""
    chunk = getattr(t, "attention_chunk_size", None)
    if chunk:
        ck.add("attention_chunk_size", f"{chunk}: chunked local attention is not modelled")


def _refuse_attention_sinks(ck: Checker, model_type: str) -> None:
    """gpt-oss attention has learned sinks per head (``modeling_gpt_oss.py``): not modelled."""
    if model_type == "gpt_oss":
        ck.add("model_type", "'gpt_oss': attention sinks are not modelled")


def _refuse_encoder_decoder(ck: Checker, t: Any) -> None:
    """Encoder-decoder models (T5, BART, Whisper) have cross-attention: not modelled."""
    if getattr(t, "is_encoder_decoder", False):
        ck.add("is_encoder_decoder", "true: encoder-decoder models are not modelled")


def _refuse_quantized(ck: Checker, raw: dict[str, Any]) -> None:
    """A quantized checkpoint stores weights in other formats than the plan's precision."""
    quant = raw.get("quantization_config")
    if quant is not None:
        method = quant.get("quant_method") if isinstance(quant, dict) else quant
        ck.add(
            "quantization_config",
            f"{method!r}: quantized checkpoints are not modelled; "
            "use the unquantized release's config",
        )


def _refuse_relative_positions(ck: Checker, t: Any) -> None:
    """BERT's relative position embeddings (``relative_key``) add per-layer tables: not modelled."""
    kind = getattr(t, "position_embedding_type", None)
    if kind not in (None, "absolute"):
        ck.add("position_embedding_type", f"{kind!r}: only absolute positions are modelled")


#: Keys by which a family's attention takes a sliding window (its modeling code reads them).
_WINDOW_KEYS = frozenset({"sliding_window", "layer_types", "use_sliding_window"})


def _refuse_window_without_support(ck: Checker, t: Any, model_type: str) -> None:
    """A sliding window in a family whose attention has none (e.g. ``llama``: its modeling code
    never reads ``sliding_window``): the config contradicts its own architecture."""
    family = FAMILIES.get(model_type)
    if family is None or _WINDOW_KEYS & set(family.refused):
        return
    if _window(t, 1):
        window = getattr(t, "sliding_window", None)
        reason = f"{model_type!r} attention has no sliding window; the config is inconsistent"
        ck.add(
            "sliding_window", f"{window!r}: sliding-window attention is not modelled for {reason}"
        )


# --- values against the layer count and each other ------------------------------------------------
def _check_moe_layers(ck: Checker, t: Any, model_type: str) -> None:
    """A MoE config whose layer keys leave no MoE block (``first_k_dense_replace`` at least the
    layer count, a ``decoder_sparse_step`` or ``moe_layer_freq`` past the last layer, every
    layer in ``mlp_only_layers``) declares experts no layer uses: refused, not read as a dense
    model.  ``mlp_only_layers`` holds layer indices below ``num_hidden_layers``."""
    layers = t.num_hidden_layers
    if model_type in ("qwen2_moe", "qwen3_moe"):
        dense = list(getattr(t, "mlp_only_layers", None) or ())
        bad = [
            i for i in dense if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < layers
        ]
        if bad:
            ck.add("mlp_only_layers", f"{bad}: not layer indices (0 .. {layers - 1})")
        elif t.num_experts and not _moe_layer_count(t, layers):
            step = getattr(t, "decoder_sparse_step", 1)
            ck.add(
                "decoder_sparse_step" if step > layers else "mlp_only_layers",
                f"{step if step > layers else dense}: leaves no MoE block of the {layers} layers "
                f"for the {t.num_experts} experts (num_experts)",
            )
    if model_type == "deepseek_v3" and t.n_routed_experts:
        first = getattr(t, "first_k_dense_replace", 0) or 0
        step = getattr(t, "moe_layer_freq", 1) or 1
        filled = {"num_hidden_layers": layers, "first_k_dense_replace": first}
        if first >= layers:
            check_dense_prefix(ck, {**filled, "n_routed_experts": t.n_routed_experts})
        elif not any(i % step == 0 for i in range(first, layers)):
            ck.add(
                "moe_layer_freq",
                f"{step}: leaves no MoE block among layers {first} .. {layers - 1} "
                f"(first_k_dense_replace {first}, num_hidden_layers {layers})",
            )


def _refusals(ck: Checker, t: Any, raw: dict[str, Any], model_type: str) -> None:
    _refuse_unknown_layer_kinds(ck, t)
    _refuse_window_without_support(ck, t, model_type)
    _refuse_relative_positions(ck, t)
    _refuse_chunked_attention(ck, t)
    _refuse_attention_sinks(ck, model_type)
    _refuse_encoder_decoder(ck, t)
    _refuse_quantized(ck, raw)


# --- mapping: the transformers config -> model document values ----------------------------------
def _mlp(act: str, model_type: str) -> str:
    """SiLU MLPs of these families are gated (SwiGLU, 3 matrices); Gemma's GELU is gated too
    (GeGLU, ``GemmaMLP``: gate, up, down); GPT-2/BERT/NeoX/Falcon GELU MLPs have 2 matrices."""
    act = act.lower()
    if model_type.startswith("gemma"):
        return "geglu"
    if act in ("silu", "swish", "swiglu"):
        return "swiglu"
    return "relu" if act == "relu" else "gelu"


def _decoder_shape(t: Any) -> dict[str, Any]:
    """The shape keys of the Llama-style families (``LlamaConfig`` and its relatives)."""
    heads = t.num_attention_heads
    head_dim = getattr(t, "head_dim", None) or t.hidden_size // heads
    return {
        "layers": t.num_hidden_layers,
        "hidden": t.hidden_size,
        "heads": heads,
        "kv_heads": getattr(t, "num_key_value_heads", None) or heads,
        "head_dim": head_dim,
        "ffn_hidden": t.intermediate_size,
        "bias": bool(getattr(t, "attention_bias", False) or getattr(t, "mlp_bias", False)),
    }


def _moe_layer_count(t: Any, layers: int) -> int:
    """Qwen-MoE: block i is MoE when ``i`` is not in ``mlp_only_layers`` and
    ``(i + 1) % decoder_sparse_step == 0`` (``modeling_qwen2_moe.py``)."""
    step = getattr(t, "decoder_sparse_step", 1) or 1
    dense = set(getattr(t, "mlp_only_layers", None) or ())
    return sum(1 for i in range(layers) if i not in dense and (i + 1) % step == 0)


def _moe(t: Any, model_type: str, layers: int) -> dict[str, Any]:
    """The MoE fields (MOE_FIELDS.md) from the family's own keys."""
    if model_type == "mixtral":
        return {"experts": t.num_local_experts, "experts_per_token": t.num_experts_per_tok}
    if model_type in ("qwen2_moe", "qwen3_moe"):
        moe = {
            "experts": t.num_experts,
            "experts_per_token": t.num_experts_per_tok,
            "expert_ffn_hidden": t.moe_intermediate_size,
            "moe_layers": _moe_layer_count(t, layers),
        }
        shared = getattr(t, "shared_expert_intermediate_size", 0) or 0
        return {**moe, "shared_expert_ffn_hidden": shared} if shared else moe
    if model_type == "deepseek_v3":
        step = getattr(t, "moe_layer_freq", 1) or 1
        first = getattr(t, "first_k_dense_replace", 0) or 0
        return {
            "experts": t.n_routed_experts,
            "experts_per_token": t.num_experts_per_tok,
            "expert_ffn_hidden": t.moe_intermediate_size,
            "shared_expert_ffn_hidden": (t.n_shared_experts or 0) * t.moe_intermediate_size,
            "moe_layers": sum(1 for i in range(first, layers) if i % step == 0),
        }
    return {}


def _window(t: Any, layers: int) -> dict[str, Any]:
    """Sliding-window layers (Model docstring): those ``layer_types`` marks
    ``sliding_attention`` (Gemma 2/3, gpt-oss, Qwen2 with ``use_sliding_window``: transformers
    derives the list from ``sliding_window_pattern`` / ``max_window_layers``), or every layer
    when a config without ``layer_types`` sets ``sliding_window`` (Mistral v0.1); none when the
    window is null or ``use_sliding_window`` is false."""
    window = getattr(t, "sliding_window", None)
    types = list(getattr(t, "layer_types", None) or ())
    if types:
        sliding = sum(1 for kind in types if kind == "sliding_attention")
    elif window is not None and getattr(t, "use_sliding_window", True) is not False:
        sliding = layers
    else:
        sliding = 0
    return {"sliding_window": int(window), "sliding_layers": sliding} if sliding and window else {}


def _mla(t: Any) -> dict[str, Any]:
    """DeepSeek multi-head latent attention: the query/key head is the no-rope part plus the
    shared rotary part (``modeling_deepseek_v3.py``: ``qk_head_dim = nope + rope``)."""
    if not getattr(t, "kv_lora_rank", None):
        return {}
    return {
        "head_dim": t.qk_nope_head_dim + t.qk_rope_head_dim,
        "v_head_dim": t.v_head_dim,
        "kv_lora_rank": t.kv_lora_rank,
        "q_lora_rank": t.q_lora_rank or 0,
        "rope_head_dim": t.qk_rope_head_dim,
    }


def _falcon(t: Any) -> dict[str, Any]:
    """Falcon (``modeling_falcon.py``): the new decoder architecture has ``num_kv_heads`` groups;
    the old one one K/V head with ``multi_query`` (Falcon-7B), else one per query head."""
    heads = t.num_attention_heads
    if t.new_decoder_architecture:
        kv = t.num_kv_heads
    else:
        kv = 1 if t.multi_query else heads
    return {
        "layers": t.num_hidden_layers,
        "hidden": t.hidden_size,
        "heads": heads,
        "kv_heads": kv,
        "ffn_hidden": getattr(t, "ffn_hidden_size", None) or 4 * t.hidden_size,
        "bias": bool(t.bias),
        "parallel_attention": bool(t.parallel_attn or t.new_decoder_architecture),
        "position": "alibi" if t.alibi else "rope",
    }


def _gpt2(t: Any) -> dict[str, Any]:
    """GPT-2 (``configuration_gpt2.py``): ``n_inner`` None means 4 x ``n_embd``."""
    return {
        "layers": t.n_layer,
        "hidden": t.n_embd,
        "heads": t.n_head,
        "kv_heads": t.n_head,
        "ffn_hidden": t.n_inner or 4 * t.n_embd,
        "bias": True,
    }


def _classic(t: Any) -> dict[str, Any]:
    """GPT-NeoX (Pythia) and BERT: full multi-head attention, biased linear layers."""
    return {
        "layers": t.num_hidden_layers,
        "hidden": t.hidden_size,
        "heads": t.num_attention_heads,
        "kv_heads": t.num_attention_heads,
        "ffn_hidden": t.intermediate_size,
        "bias": bool(getattr(t, "attention_bias", True)),
        "parallel_attention": bool(getattr(t, "use_parallel_residual", False)),
    }


_SHAPES: dict[str, Callable[[Any], dict[str, Any]]] = {
    "falcon": _falcon,
    "gpt2": _gpt2,
    "gpt_neox": _classic,
    "bert": _classic,
}


def _values(t: Any, model_type: str) -> dict[str, Any]:
    """The model document's shape and structure values from a (text) config object."""
    shape = _SHAPES.get(model_type, _decoder_shape)(t)
    layers = shape["layers"]
    v = {**shape, **_moe(t, model_type, layers), **_mla(t), **_window(t, layers)}
    v["vocab"] = t.vocab_size
    v["max_seq_len"] = getattr(t, "max_position_embeddings", None) or 2048
    act = next(
        (
            str(a)
            for k in ("hidden_activation", "hidden_act", "activation_function", "activation")
            if (a := getattr(t, k, None))
        ),
        "gelu",
    )
    dropout = max(
        float(getattr(t, k, 0.0) or 0.0)
        for k in ("attention_dropout", "attn_pdrop", "attention_probs_dropout_prob")
    )
    v.setdefault("position", "learned" if model_type in _LEARNED else "rope")
    return {
        **v,
        "mlp": _mlp(act, model_type),
        "norm": "layernorm" if model_type in _LAYERNORM else "rmsnorm",
        "tied_embeddings": bool(getattr(t, "tie_word_embeddings", True)),
        "dropout": dropout > 0,
    }


def _family(path: Path, model_type: object) -> Family:
    """The key table of a ``model_type``; any other type is refused: its layers could be
    misread (transformers may know it, but diffcost's mapping does not)."""
    family = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if family is None:
        supported = ", ".join(sorted(FAMILIES))
        reason = f"{model_type!r} is not a supported architecture (supported: {supported})"
        raise SpecError(
            [Problem(str(path), "model_type", f"{reason}; its layers could be misread")]
        )
    return family


def hf_document(path: Path) -> dict[str, Any]:
    """A Hugging Face config as a model document (top-level keys and ``[source]``)."""
    raw = read_json(path)
    if not isinstance(raw, dict):
        raise SpecError([Problem(str(path), "", "must be a JSON object")])
    nested = isinstance(raw.get("text_config"), dict)
    text_raw: dict[str, Any] = raw["text_config"] if nested else raw
    ck = Checker(str(path))
    check_values(ck, text_raw)
    ck.raise_if_any()
    config = _transformers_config(path, raw)
    t = config.get_text_config()
    model_type = str(getattr(t, "model_type", ""))
    _unknown_keys(ck, text_raw, _family(path, model_type), model_type)
    _refusals(ck, t, raw, model_type)
    _check_moe_layers(ck, t, model_type)
    ck.raise_if_any()
    text_only = " (its text model only: the vision tower is not counted)" if nested else ""
    return {
        "schema_version": 1,
        "kind": "model",
        "name": path.parent.name or path.stem,
        "display_name": f"{model_type} from {path}{text_only}",
        "architecture": "encoder" if model_type in _ENCODERS else "decoder",
        **_values(t, model_type),
        "source": {"shape": f"Hugging Face config {path}, read by transformers"},
    }
