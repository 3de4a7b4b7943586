"""Hugging Face ``config.json`` -> a model document of the model schema (nothing is downloaded).

The file is parsed by ``transformers`` (``AutoConfig.for_model``, offline; its defaults fill the
keys a config leaves out, exactly as the Hugging Face model would be built; nested configs such as
Llama 4's ``text_config`` are unwrapped with ``get_text_config()``).  diffcost's own checks stay on
top: the values are checked under their Hugging Face names before ``transformers`` sees them
(:mod:`.hf_values`: counts, flags, activations, values against the layer count and each other),
the layer keys of a MoE again once its defaults are filled in (no MoE block left), and every key
of the text config is one this module reads, refuses when active or knows to be irrelevant to
cost (:data:`.hf_keys.FAMILIES`), or is judged by its effect: a key whose value is the config
class's default or what the class derives from the other keys (``is_decoder: false``,
DeepSeek's ``qk_head_dim``) changes nothing and is accepted; any other value is refused with the
key, its value and the default.  What the cost model cannot represent is refused with the
file, the key and the reason, all problems at once, never approximated; an encoder-decoder or a
state-space model is refused as such.  The result has the form of a model TOML file and goes
through the same checks (:meth:`diffcost._inputs.checker.Checker.document`).

Reference: ``transformers/models/<family>/configuration_<family>.py`` and
``modeling_<family>.py`` (transformers >= 4.51) for what each key builds.
"""

import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._core.errors import Problem, SpecError
from .checker import Checker, read_json
from .hf_keys import (
    ALIBI,
    COMMON_KEYS,
    ENCODERS,
    FAMILIES,
    GATED_GELU,
    LAYERNORM,
    LEARNED,
    PARALLEL,
    Family,
)
from .hf_values import check_dense_prefix, check_values


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


_MISSING = object()


def _plain(value: Any) -> Any:
    """A config value as JSON would hold it (tuples as lists), for comparison."""
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _same(value: Any, default: Any) -> bool:
    """Whether a key's value is its default: equal, or False where the default is None (a flag
    transformers tests as ``if config.flag``: Gemma's ``use_bidirectional_attention``)."""
    value, default = _plain(value), _plain(default)
    off = (value is False and default is None) or (value is None and default is False)
    return off or value == default


def _without(raw: dict[str, Any], keys: set[str], nested: bool) -> dict[str, Any]:
    """``raw`` less ``keys`` (in its ``text_config`` when the config is nested)."""
    if nested:
        text = {k: v for k, v in raw["text_config"].items() if k not in keys}
        return {**raw, "text_config": text}
    return {k: v for k, v in raw.items() if k not in keys}


def _same_config(t: Any, base: Any) -> bool:
    """Whether two config objects hold the same settings (False where one cannot be listed)."""
    try:
        return _plain(t.to_dict()) == _plain(base.to_dict())
    except Exception:  # noqa: BLE001 - a value transformers cannot list is no proof of sameness
        return False


def _judge_other_keys(
    ck: Checker, path: Path, raw: dict[str, Any], t: Any, family: Family, model_type: str
) -> None:
    """Each key of the text config that :data:`FAMILIES` does not name for the family, judged by
    its effect: the config is built again without those keys, and a key whose value there is the
    same (the class default, or what the class derives from the other keys) changes nothing.
    Otherwise it is refused with its value and the default: transformers builds a different
    model from it (or does not know it: a key only some other code reads), which diffcost does
    not model."""
    nested = isinstance(raw.get("text_config"), dict)
    text_raw: dict[str, Any] = raw["text_config"] if nested else raw
    known = {*COMMON_KEYS, *family.read, *family.refused, *family.irrelevant}
    for alias, name in getattr(type(t), "attribute_map", {}).items():  # one setting, two names
        if alias in known or name in known:  # (Qwen3-MoE's num_experts is num_local_experts)
            known |= {alias, name}
    others = set(text_raw) - known
    if not others:
        return
    base = _transformers_config(path, _without(raw, others, nested)).get_text_config()
    same_config = _same_config(t, base)
    cls = type(t).__name__
    for key in sorted(others):
        value, default = getattr(t, key, _MISSING), getattr(base, key, _MISSING)
        if value is _MISSING:  # consumed by the class (BLOOM's n_embed): judged by what it builds
            if same_config:
                continue
            value, why = text_raw[key], f"changes the config transformers' {cls} builds"
        elif default is _MISSING:
            why = f"not a setting of transformers' {cls} nor a key diffcost knows for"
            why += f" {model_type!r}"
        elif _same(value, default):
            continue
        else:
            why = f"differs from {cls}'s default or derived value {_plain(default)!r}"
        ck.add(
            key,
            f"{_plain(value)!r}: {why}: it may change the architecture, which diffcost does not "
            "model, so the config is refused rather than misread",
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


def _refuse_embedding_projection(ck: Checker, t: Any, model_type: str) -> None:
    """OPT-350m embeds in ``word_embed_proj_dim`` and projects in and out of the model width
    (``modeling_opt.py``: ``project_in`` / ``project_out``): two matrices not modelled."""
    width = getattr(t, "word_embed_proj_dim", None)
    if model_type == "opt" and width not in (None, t.hidden_size):
        reason = f"differs from hidden_size ({t.hidden_size})"
        ck.add("word_embed_proj_dim", f"{width}: {reason}: embedding projections are not modelled")


def _refuse_bloom_inner_width(ck: Checker, raw: dict[str, Any], model_type: str) -> None:
    """BLOOM's published configs carry Megatron's ``n_inner`` as null (4 x hidden, the only
    width ``modeling_bloom.py`` builds); another value would be a model transformers ignores."""
    inner = raw.get("n_inner")
    if model_type == "bloom" and inner is not None:
        reason = "transformers' BLOOM always builds a 4 x hidden_size MLP; only null is read"
        ck.add("n_inner", f"{inner!r}: {reason}")


def _refuse_moe_layer_freq(ck: Checker, raw: dict[str, Any], model_type: str) -> None:
    """DeepSeek-V2's own code puts a MoE block every ``moe_layer_freq`` layers, transformers'
    (``modeling_deepseek_v2.py``) in every layer from ``first_k_dense_replace``: another
    frequency than 1 reads two ways, so it is refused."""
    nested = raw.get("text_config")
    freq = (nested if isinstance(nested, dict) else raw).get("moe_layer_freq", 1)
    if model_type == "deepseek_v2" and freq != 1:
        reason = "transformers' DeepSeek-V2 ignores it (a MoE block in every layer)"
        ck.add("moe_layer_freq", f"{freq!r}: {reason}, DeepSeek's code does not: ambiguous")


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
    if model_type in ("deepseek_v2", "deepseek_v3") and t.n_routed_experts:
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
    _refuse_embedding_projection(ck, t, model_type)
    _refuse_moe_layer_freq(ck, raw, model_type)
    _refuse_bloom_inner_width(ck, raw, model_type)


# --- mapping: the transformers config -> model document values ----------------------------------
def _mlp(act: str, model_type: str) -> str:
    """SiLU MLPs of these families are gated (SwiGLU, 3 matrices); Gemma's GELU is gated too
    (GeGLU, ``GemmaMLP``: gate, up, down); GPT-2/BERT/NeoX/Falcon GELU MLPs have 2 matrices."""
    act = act.lower()
    if model_type in GATED_GELU:
        return "geglu"
    if act in ("silu", "swish", "swiglu"):
        return "swiglu"
    return "relu" if act == "relu" else "gelu"


def _bias(t: Any, model_type: str) -> bool:
    """Whether the linear layers carry biases: Phi's always do (``modeling_phi.py``),
    StarCoder2's by ``use_bias``, the Llama-style ones by ``attention_bias`` / ``mlp_bias``."""
    if model_type == "phi":
        return True
    if model_type == "starcoder2":
        return bool(t.use_bias)
    return bool(getattr(t, "attention_bias", False) or getattr(t, "mlp_bias", False))


def _decoder_shape(t: Any, model_type: str) -> dict[str, Any]:
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
        "bias": _bias(t, model_type),
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
    if model_type in ("deepseek_v2", "deepseek_v3"):
        step = getattr(t, "moe_layer_freq", 1) or 1
        first = getattr(t, "first_k_dense_replace", 0) or 0
        return {
            "experts": t.n_routed_experts,
            "experts_per_token": t.num_experts_per_tok,
            "expert_ffn_hidden": t.moe_intermediate_size,
            "shared_expert_ffn_hidden": (t.n_shared_experts or 0) * t.moe_intermediate_size,
            "moe_layers": sum(1 for i in range(first, layers) if i % step == 0),
        }
    if model_type == "olmoe":  # every block a MoE block of intermediate_size-wide experts
        return {
            "experts": t.num_experts,
            "experts_per_token": t.num_experts_per_tok,
            "expert_ffn_hidden": t.intermediate_size,
            "moe_layers": layers,
        }
    if model_type == "llama4_text":
        # modeling_llama4.py: the blocks in moe_layers have routed experts and one shared
        # expert, both intermediate_size wide; the others a dense MLP of intermediate_size_mlp
        return {
            "ffn_hidden": t.intermediate_size_mlp,
            "experts": t.num_local_experts,
            "experts_per_token": t.num_experts_per_tok,
            "expert_ffn_hidden": t.intermediate_size,
            "shared_expert_ffn_hidden": t.intermediate_size,
            "moe_layers": len(set(t.moe_layers) & set(range(layers))),
        }
    return {}


def _gemma_layer_types(t: Any, layers: int) -> list[str]:
    """Gemma 2/3 layer kinds where the config has no ``layer_types`` (transformers < 4.53, whose
    modeling code derives them): Gemma 2's even layers slide (``modeling_gemma2.py``:
    ``not layer_idx % 2``), Gemma 3's all but every ``sliding_window_pattern``-th
    (``modeling_gemma3.py``: ``(layer_idx + 1) % pattern``); [] for other families."""
    model_type = getattr(t, "model_type", "")
    if model_type == "gemma2":
        slides = [i % 2 == 0 for i in range(layers)]
    elif model_type == "gemma3_text":
        pattern = getattr(t, "sliding_window_pattern", None) or 6
        slides = [(i + 1) % pattern != 0 for i in range(layers)]
    else:
        return []
    return ["sliding_attention" if slide else "full_attention" for slide in slides]


def _window(t: Any, layers: int) -> dict[str, Any]:
    """Sliding-window layers (Model docstring): those ``layer_types`` marks
    ``sliding_attention`` (Gemma 2/3, gpt-oss, Qwen2 with ``use_sliding_window``: transformers
    derives the list from ``sliding_window_pattern`` / ``max_window_layers``), or every layer
    when a config without ``layer_types`` sets ``sliding_window`` (Mistral v0.1); none when the
    window is null or ``use_sliding_window`` is false."""
    window = getattr(t, "sliding_window", None)
    types = list(getattr(t, "layer_types", None) or ()) or _gemma_layer_types(t, layers)
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


def _falcon(t: Any, model_type: str) -> dict[str, Any]:
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


def _gpt2(t: Any, model_type: str) -> dict[str, Any]:
    """GPT-2 and GPT-J (``configuration_gpt2.py``, ``configuration_gptj.py``): ``n_inner`` None
    means 4 x ``n_embd``; biased layers (GPT-J's attention has none, its MLP and output layer
    have: read as biased, as specs/models/gpt-j-6b.toml)."""
    return {
        "layers": t.n_layer,
        "hidden": t.n_embd,
        "heads": t.n_head,
        "kv_heads": t.n_head,
        "ffn_hidden": t.n_inner or 4 * t.n_embd,
        "bias": True,
    }


def _classic(t: Any, model_type: str) -> dict[str, Any]:
    """GPT-NeoX (Pythia), BERT, BLOOM and OPT: full multi-head attention, biased linear layers
    (OPT's by ``enable_bias``), a 4h MLP unless the config names its width (``ffn_dim``)."""
    h = t.hidden_size
    return {
        "layers": t.num_hidden_layers,
        "hidden": h,
        "heads": t.num_attention_heads,
        "kv_heads": t.num_attention_heads,
        "ffn_hidden": getattr(t, "intermediate_size", None) or getattr(t, "ffn_dim", None) or 4 * h,
        "bias": bool(getattr(t, "attention_bias", True) and getattr(t, "enable_bias", True)),
        "parallel_attention": bool(getattr(t, "use_parallel_residual", False)),
    }


_SHAPES: dict[str, Callable[[Any, str], dict[str, Any]]] = {
    "falcon": _falcon,
    "gpt2": _gpt2,
    "gptj": _gpt2,
    "gpt_neox": _classic,
    "bert": _classic,
    "bloom": _classic,
    "opt": _classic,
}
#: Keys whose value is a dropout probability: a positive one means training uses dropout.
_DROPOUT_KEYS = (
    "attention_dropout",
    "attn_pdrop",
    "attention_probs_dropout_prob",
    "dropout",
    "activation_dropout",
)


def _values(t: Any, model_type: str) -> dict[str, Any]:
    """The model document's shape and structure values from a (text) config object."""
    shape = _SHAPES.get(model_type, _decoder_shape)(t, model_type)
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
    dropout = max(float(getattr(t, k, 0.0) or 0.0) for k in _DROPOUT_KEYS)
    position = "alibi" if model_type in ALIBI else "rope"
    v.setdefault("position", "learned" if model_type in LEARNED else position)
    if model_type in PARALLEL:
        v["parallel_attention"] = True
    return {
        **v,
        "mlp": _mlp(act, model_type),
        "norm": "layernorm" if model_type in LAYERNORM else "rmsnorm",
        "tied_embeddings": bool(getattr(t, "tie_word_embeddings", True)),
        "dropout": dropout > 0,
    }


#: Attributes only a state-space model's config has (Mamba, Mamba-2, Jamba, Zamba, Bamba, ...).
_STATE_KEYS = ("state_size", "ssm_state_size", "mamba_d_state", "mamba_d_ssm")


def _kind(model_type: str) -> str:
    """Why a ``model_type`` outside :data:`FAMILIES` cannot be a decoder of this cost model, when
    its ``transformers`` class says so: an encoder-decoder (T5, BART, Whisper) or a state-space
    model; "" otherwise."""
    import transformers

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            default = transformers.CONFIG_MAPPING[model_type]()
    except Exception:  # noqa: BLE001 - an unknown or unbuildable type has no kind to report
        return ""
    if getattr(default, "is_encoder_decoder", False):
        return "an encoder-decoder model (its decoder cross-attends a separate encoder)"
    if any(hasattr(default, key) for key in _STATE_KEYS):
        return "a state-space model (a recurrent state scan, not attention)"
    return ""


def _family(path: Path, model_type: object) -> Family:
    """The key table of a ``model_type``; any other type is refused: an encoder-decoder or a
    state-space model as such, any other because its layers could be misread (transformers may
    know it, but diffcost's mapping does not)."""
    family = FAMILIES.get(model_type) if isinstance(model_type, str) else None
    if family is None:
        kind = _kind(model_type) if isinstance(model_type, str) else ""
        if kind:
            reason = f"{model_type!r} is {kind}: diffcost models decoder and encoder stacks only"
        else:
            supported = ", ".join(sorted(FAMILIES))
            reason = f"{model_type!r} is not a supported architecture (supported: {supported})"
            reason += "; its layers could be misread"
        raise SpecError([Problem(str(path), "model_type", reason)])
    return family


def hf_document(path: Path) -> dict[str, Any]:
    """A Hugging Face config as a model document (top-level keys and ``[source]``)."""
    raw = read_json(path)
    if not isinstance(raw, dict):
        raise SpecError([Problem(str(path), "", "must be a JSON object")])
    nested = isinstance(raw.get("text_config"), dict)
    text_raw: dict[str, Any] = raw["text_config"] if nested else raw
    if not nested and isinstance(raw.get("model_type"), str):
        _family(path, raw["model_type"])  # an encoder-decoder is refused as one, not for its keys
    ck = Checker(str(path))
    check_values(ck, text_raw)
    ck.raise_if_any()
    config = _transformers_config(path, raw)
    t = config.get_text_config()
    model_type = str(getattr(t, "model_type", ""))
    _judge_other_keys(ck, path, raw, t, _family(path, model_type), model_type)
    _refusals(ck, t, raw, model_type)
    _check_moe_layers(ck, t, model_type)
    ck.raise_if_any()
    text_only = " (its text model only: the vision tower is not counted)" if nested else ""
    return {
        "schema_version": 1,
        "kind": "model",
        "name": path.parent.name or path.stem,
        "display_name": f"{model_type} from {path}{text_only}",
        "architecture": "encoder" if model_type in ENCODERS else "decoder",
        **_values(t, model_type),
        "source": {"shape": f"Hugging Face config {path}, read by transformers"},
    }
