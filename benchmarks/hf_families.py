"""Decoder families as ``transformers`` writes their configs, read by diffcost (issue 44).

Each case is a config built offline from the family's ``transformers`` config class (small but
representative sizes: width 1024, 8 layers, a 32000-token vocabulary; no network, no weights),
written as ``save_pretrained`` writes it and as ``to_dict()`` gives it, and read by
:func:`diffcost.testing.hf_document`.  diffcost's parameter count is compared with
``transformers``' own (the model built on PyTorch's meta device, ``sum(p.numel())``).

    python benchmarks/hf_families.py            # the table (needs torch for the counts)
    python benchmarks/hf_families.py --write    # also tests/data/hf_families.json

The JSON keeps each case's config arguments and ``transformers``' count with the versions
that produced them; tests/test_hf_families.py reads every case through diffcost without torch.
"""

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

TABLE = Path(__file__).resolve().parents[1] / "tests" / "data" / "hf_families.json"

_H, _FFN, _VOCAB, _LAYERS = 1024, 2816, 32000, 8
#: Llama-style shape keys (``LlamaConfig`` names): GQA 16 query heads of 64, 4 K/V heads.
_LLAMA: dict[str, Any] = {
    "hidden_size": _H,
    "intermediate_size": _FFN,
    "num_hidden_layers": _LAYERS,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "vocab_size": _VOCAB,
    "max_position_embeddings": 4096,
}
_MLA = {"kv_lora_rank": 128, "qk_nope_head_dim": 64, "qk_rope_head_dim": 32, "v_head_dim": 64}
_DEEPSEEK_MOE = {
    "n_routed_experts": 8,
    "n_shared_experts": 2,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 512,
    "first_k_dense_replace": 1,
    "n_group": 1,
    "topk_group": 1,
}
#: Llama 4 Maverick's layout: MoE blocks (8 experts, top-1, and a shared expert) every second
#: block, dense ones between.
_LLAMA4 = {
    **_LLAMA,
    "head_dim": 64,
    "intermediate_size": 512,
    "intermediate_size_mlp": _FFN,
    "num_local_experts": 8,
    "num_experts_per_tok": 1,
    "interleave_moe_layer_step": 2,
}

#: case -> (model_type, config arguments).  Every family of issue 44's list that this
#: transformers has (InternLM as ``internlm3``; Phi-4 is ``phi3``, Qwen2.5 ``qwen2``,
#: Command-R ``cohere``), with the variants whose keys differ (Falcon's three layouts, DeepSeek
#: V2-Lite without a query latent, Llama 4 with and without chunked attention), and the
#: encoder-decoder and state-space models that must be refused as such.
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "llama": ("llama", _LLAMA),
    "qwen2": ("qwen2", {**_LLAMA, "tie_word_embeddings": True}),
    "qwen2_moe": (
        "qwen2_moe",
        {
            **_LLAMA,
            "num_experts": 8,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 512,
            "shared_expert_intermediate_size": 1024,
        },
    ),
    "qwen3": ("qwen3", {**_LLAMA, "head_dim": 128}),
    "qwen3_moe": (
        "qwen3_moe",
        {**_LLAMA, "num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 512},
    ),
    "mistral": ("mistral", _LLAMA),
    "mixtral": ("mixtral", {**_LLAMA, "num_local_experts": 8, "num_experts_per_tok": 2}),
    "gemma": ("gemma", {**_LLAMA, "head_dim": 128, "vocab_size": 64000}),
    "gemma2": ("gemma2", {**_LLAMA, "head_dim": 128, "vocab_size": 64000}),
    "gemma3_text": ("gemma3_text", {**_LLAMA, "head_dim": 128, "vocab_size": 64000}),
    "phi": ("phi", {**_LLAMA, "num_key_value_heads": 16, "intermediate_size": 4096}),
    "phi3": ("phi3", {**_LLAMA, "vocab_size": 32064}),  # its pad token is 32000
    "deepseek_v2": ("deepseek_v2", {**_LLAMA, **_MLA, **_DEEPSEEK_MOE, "q_lora_rank": None}),
    "deepseek_v3": ("deepseek_v3", {**_LLAMA, **_MLA, **_DEEPSEEK_MOE, "q_lora_rank": 256}),
    "gpt_oss": (
        "gpt_oss",
        {**_LLAMA, "head_dim": 64, "num_local_experts": 8, "num_experts_per_tok": 2},
    ),
    "falcon-7b-style": (
        "falcon",
        {
            "hidden_size": _H,
            "num_hidden_layers": _LAYERS,
            "num_attention_heads": 16,
            "multi_query": True,
            "parallel_attn": True,
            "vocab_size": _VOCAB,
        },
    ),
    "falcon-40b-style": (
        "falcon",
        {
            "hidden_size": _H,
            "num_hidden_layers": _LAYERS,
            "num_attention_heads": 16,
            "num_kv_heads": 4,
            "new_decoder_architecture": True,
            "vocab_size": _VOCAB,
        },
    ),
    "falcon-rw-style": (
        "falcon",
        {
            "hidden_size": _H,
            "num_hidden_layers": _LAYERS,
            "num_attention_heads": 16,
            "multi_query": False,
            "parallel_attn": False,
            "alibi": True,
            "bias": True,
            "vocab_size": _VOCAB,
        },
    ),
    "bloom": ("bloom", {"hidden_size": _H, "n_layer": _LAYERS, "n_head": 16, "vocab_size": _VOCAB}),
    "gptj": (
        "gptj",
        {"n_embd": _H, "n_layer": _LAYERS, "n_head": 16, "rotary_dim": 32, "vocab_size": _VOCAB},
    ),
    "gpt_neox": (
        "gpt_neox",
        {
            "hidden_size": _H,
            "num_hidden_layers": _LAYERS,
            "num_attention_heads": 16,
            "intermediate_size": 4 * _H,
            "vocab_size": _VOCAB,
        },
    ),
    "opt": (
        "opt",
        {
            "hidden_size": _H,
            "num_hidden_layers": _LAYERS,
            "num_attention_heads": 16,
            "ffn_dim": 4 * _H,
            "word_embed_proj_dim": _H,
            "vocab_size": _VOCAB,
        },
    ),
    "starcoder2": ("starcoder2", {**_LLAMA, "intermediate_size": 4 * _H}),
    "olmo": ("olmo", _LLAMA),
    "olmo2": ("olmo2", _LLAMA),
    "olmoe": (
        "olmoe",
        {**_LLAMA, "intermediate_size": 512, "num_experts": 8, "num_experts_per_tok": 2},
    ),
    "granite": ("granite", _LLAMA),
    "cohere": ("cohere", _LLAMA),
    "internlm3": ("internlm3", _LLAMA),
    "gpt2": ("gpt2", {"n_embd": _H, "n_layer": _LAYERS, "n_head": 16, "vocab_size": _VOCAB}),
    "llama4_text": ("llama4_text", _LLAMA4),  # chunked attention: 8192 by default
    "llama4_text-unchunked": ("llama4_text", {**_LLAMA4, "attention_chunk_size": None}),
    "t5": ("t5", {"d_model": _H, "num_layers": 4, "num_heads": 16, "vocab_size": _VOCAB}),
    "mamba": ("mamba", {"hidden_size": _H, "num_hidden_layers": _LAYERS, "vocab_size": _VOCAB}),
}


def config(model_type: str, kwargs: dict[str, Any]) -> Any:
    """The family's ``transformers`` config object (``AutoConfig.for_model``, offline)."""
    import transformers

    return transformers.AutoConfig.for_model(model_type, **kwargs)


def write_both(cfg: Any, folder: Path) -> dict[str, Path]:
    """``cfg`` written as ``save_pretrained`` writes it and as ``to_dict()`` gives it."""
    saved, as_dict = folder / "save_pretrained", folder / "to_dict"
    cfg.save_pretrained(saved)
    as_dict.mkdir(parents=True, exist_ok=True)
    (as_dict / "config.json").write_text(json.dumps(cfg.to_dict(), default=str))
    return {"save_pretrained": saved / "config.json", "to_dict": as_dict / "config.json"}


def transformers_count(cfg: Any) -> int:
    """Parameters of the ``transformers`` model on PyTorch's meta device (tied weights once)."""
    import torch
    import transformers

    auto = (
        transformers.AutoModelForSeq2SeqLM
        if getattr(cfg, "is_encoder_decoder", False)
        else transformers.AutoModelForCausalLM
    )
    with torch.device("meta"):
        model = auto.from_config(cfg)
    return sum(p.numel() for p in model.parameters())


def diffcost_read(path: Path) -> tuple[float | None, str]:
    """diffcost's count of the config at ``path``, or its refusal (each problem's key, reason)."""
    import diffcost as dc
    from diffcost.testing import hf_document, model_module

    try:
        return float(model_module(hf_document(path)).num_params()), ""
    except dc.SpecError as err:
        return None, "; ".join(f"{p.key}: {p.reason}" for p in err.problems)


def rows(counts: dict[str, int | None]) -> list[dict[str, Any]]:
    """Per case and way of writing: diffcost's verdict against ``transformers``' count."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for case, (model_type, kwargs) in CASES.items():
            paths = write_both(config(model_type, kwargs), Path(tmp) / case)
            for way, path in paths.items():
                params, refusal = diffcost_read(path)
                expected = counts.get(case)
                error = None if params is None or not expected else params / expected - 1
                out.append(
                    {"case": case, "written": way, "transformers_params": expected,
                     "diffcost_params": params, "relative_error": error, "refused": refusal}
                )  # fmt: skip
    return out


def markdown(table: list[dict[str, Any]]) -> str:
    lines = [
        "| case | written by | transformers | diffcost | verdict |",
        "|---|---|---|---|---|",
    ]
    for r in table:
        count = r["transformers_params"]
        if r["refused"]:
            verdict = f"refused: {r['refused']}"
        else:
            verdict = f"accepted, {100 * r['relative_error']:+.4f} %"
        lines.append(
            f"| {r['case']} | {r['written']} | {count or '-'} | "
            f"{'-' if r['diffcost_params'] is None else int(r['diffcost_params'])} | {verdict} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {TABLE}")
    args = parser.parse_args()
    import torch
    import transformers

    absent = [case for case, (t, _) in CASES.items() if t not in transformers.CONFIG_MAPPING]
    for case in absent:  # an older transformers (4.51 has no deepseek_v2, gpt_oss, internlm3)
        del CASES[case]
    counts = {case: transformers_count(config(t, kw)) for case, (t, kw) in CASES.items()}
    table = rows(counts)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}")
    print(markdown(table))
    if absent:
        print(f"\nnot in transformers {transformers.__version__}: {', '.join(absent)}")
    accepted = sum(1 for r in table if not r["refused"])
    print(f"\n{accepted} of {len(table)} read, {len(table) - accepted} refused")
    if args.write and absent:
        sys.exit(f"not written: the table needs every case ({', '.join(absent)} absent)")
    if args.write:
        doc = {
            "command": "python benchmarks/hf_families.py --write",
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "cases": {
                case: {"model_type": t, "config": kw, "transformers_params": counts[case]}
                for case, (t, kw) in CASES.items()
            },
        }
        TABLE.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {TABLE}", file=sys.stderr)


if __name__ == "__main__":
    main()
