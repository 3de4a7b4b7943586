"""Hugging Face config.json -> model document, read by transformers, one fixture per family
(tests/fixtures/hf/<model>/config.json; where each was copied from: fixtures/hf/SOURCES.md)."""

import json
from pathlib import Path

import pytest

import diffcost as dc
from diffcost.testing import FAMILIES, hf_config, hf_document, model_module

HF = Path(__file__).parent / "fixtures" / "hf"

#: fixture -> (published total, published active or None, where the numbers were read).
#: Qwen3-30B-A3B's "3.3B activated" is two significant figures: the exact module sum is 3.353B
#: (embedding 0.311B + untied head 0.311B + 48 x (attention 18.9M + router 0.26M + 8 experts
#: 37.7M)), 1.6 % above it; its own test below checks that sum exactly.
PUBLISHED = {
    "llama-3.1-8b": (8.0, None, "Meta Llama 3.1 model card: 8B (Params column)"),
    "qwen2.5-7b": (7.61, None, "Qwen2.5-7B model card: 7.61B (76.1 亿) parameters in total"),
    "qwen3-8b": (8.2, None, "Qwen3-8B model card: Number of Parameters: 8.2B"),
    "mixtral-8x7b": (46.7, 12.9, "Mistral AI: 46.7B total parameters, 12.9B per token"),
    "qwen3-30b-a3b": (30.5, 3.3, "Qwen3-30B-A3B model card: 30.5B in total, 3.3B activated"),
    "qwen1.5-moe-a2.7b": (14.3, 2.7, "Qwen1.5-MoE-A2.7B model card: 14.3B total, 2.7B activated"),
}


def _doc(name: str) -> dict:
    return hf_document(HF / name / "config.json")


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_fixture_parameter_counts_match_the_published_sizes(name):
    """Each family's published config read through transformers gives the published total (and
    active, for MoE) parameter count within 1 %."""
    total_b, active_b, _source = PUBLISHED[name]
    model = model_module(_doc(name))
    assert float(model.num_params()) / 1e9 == pytest.approx(total_b, rel=0.01)
    if active_b is None:
        assert float(model.active_params()) == float(model.num_params())
    elif name != "qwen3-30b-a3b":
        assert float(model.active_params()) / 1e9 == pytest.approx(active_b, rel=0.01)


def test_qwen3_30b_a3b_active_count_is_the_module_sum():
    h, vocab, layers = 2048, 151936, 48
    attention = h * 32 * 128 + 2 * h * 4 * 128 + 32 * 128 * h  # q, k, v, o (head_dim 128)
    routed = 8 * 3 * h * 768 + h * 128  # top-8 SwiGLU experts of width 768 + router
    norms = 2 * h + 2 * 128  # two RMSNorms and the q/k norms (not modelled: 256 per layer)
    expected = 2 * vocab * h + layers * (attention + routed + norms) + h
    active = float(model_module(_doc("qwen3-30b-a3b")).active_params())
    assert active == pytest.approx(expected, rel=1e-4)
    assert active / 1e9 == pytest.approx(3.3, abs=0.06)  # "3.3B" to two significant figures


def test_moe_fields_are_read_under_each_familys_keys():
    mixtral, qwen3 = _doc("mixtral-8x7b"), _doc("qwen3-30b-a3b")
    qwen15 = _doc("qwen1.5-moe-a2.7b")
    assert (mixtral["experts"], mixtral["experts_per_token"]) == (8, 2)
    assert "expert_ffn_hidden" not in mixtral  # the experts are intermediate_size wide
    assert (qwen3["experts"], qwen3["experts_per_token"]) == (128, 8)
    assert qwen3["expert_ffn_hidden"] == 768
    assert (qwen3["moe_layers"], qwen3["head_dim"]) == (48, 128)
    assert (qwen15["experts"], qwen15["expert_ffn_hidden"]) == (60, 1408)
    assert qwen15["shared_expert_ffn_hidden"] == 5632


def test_falcon_7b_multi_query_has_one_kv_head():
    """Falcon-7B's config says num_kv_heads 71, but without the new decoder architecture
    ``multi_query`` gives one K/V head (modeling_falcon.py); the block is parallel, the
    embedding tied.  Its count is the module sum: embedding + 32 x (q, one k/v pair, dense,
    4h MLP, one LayerNorm) + final LayerNorm (the card's "7B" is too coarse for a 1 % test)."""
    doc = _doc("falcon-7b")
    assert (doc["kv_heads"], doc["parallel_attention"], doc["tied_embeddings"]) == (1, True, True)
    h, d, vocab = 4544, 64, 65024
    per_layer = h * (h + 2 * d) + h * h + 2 * h * 4 * h + 2 * h
    expected = vocab * h + 32 * per_layer + 2 * h
    assert float(model_module(doc).num_params()) == pytest.approx(expected, rel=1e-3)


def _write(tmp_path: Path, config: dict) -> Path:
    path = tmp_path / "m" / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(config))
    return path


def _llama(**changes) -> dict:
    return {**json.loads((HF / "llama-3.1-8b" / "config.json").read_text()), **changes}


def _problems(path: Path) -> list[str]:
    with pytest.raises(dc.SpecError) as err:
        hf_document(path)
    return [str(p) for p in err.value.problems]


def test_an_unknown_architecture_key_is_refused_not_ignored(tmp_path):
    """transformers keeps any extra key as an attribute; a made-up ``moe_frequency`` could
    change the layers, so diffcost refuses it, naming file and key."""
    path = _write(tmp_path, _llama(moe_frequency=2))
    (problem,) = _problems(path)
    assert problem.startswith(
        f"{path}: moe_frequency: 2: not a setting of transformers' LlamaConfig nor a key "
        "diffcost knows for 'llama'"
    )


def test_gemma2_local_layers_are_read_as_sliding_window_layers():
    """Gemma 2 alternates local (sliding window 4096) and global layers: 13 of its 26 layers
    (transformers' ``layer_types``)."""
    doc = hf_document(HF / "gemma-2-2b" / "config.json")
    assert (doc["sliding_window"], doc["sliding_layers"], doc["layers"]) == (4096, 13, 26)


@pytest.mark.parametrize("window,sliding", [(4096, 32), (None, 0)])
def test_mistral_sliding_window_covers_every_layer_only_when_set(tmp_path, window, sliding):
    """Mistral-7B v0.1 has sliding_window 4096 on every layer; v0.3 has null (full attention)."""
    doc = hf_document(_write(tmp_path, _llama(model_type="mistral", sliding_window=window)))
    assert doc.get("sliding_layers", 0) == sliding and doc["kv_heads"] == 8
    if window:
        assert doc["sliding_window"] == window


def test_an_unknown_layer_kind_is_refused(tmp_path):
    kinds = ["full_attention", "linear_attention"] * 16
    path = _write(tmp_path, _llama(model_type="qwen2", layer_types=kinds))
    problems = _problems(path)
    assert any(
        p.startswith(f"{path}: layer_types:") and "'linear_attention'] are not modelled" in p
        for p in problems
    )


def test_all_problems_come_at_once(tmp_path):
    raw = _llama(moe_frequency=2, quantization_config={"quant_method": "gptq"})
    keys = [p.split(": ")[1] for p in _problems(_write(tmp_path, raw))]
    assert keys == ["moe_frequency", "quantization_config"]


def test_llama4_nested_text_config_with_chunked_attention_is_refused(tmp_path):
    text = {k: v for k, v in _llama().items() if k not in ("architectures", "model_type")}
    config = {"model_type": "llama4", "text_config": {**text, "attention_chunk_size": 8192}}
    path = _write(tmp_path, config)
    (problem,) = _problems(path)
    assert problem == f"{path}: attention_chunk_size: 8192: chunked local attention is not modelled"


@pytest.mark.parametrize(
    "changes,key",
    [
        ({"model_type": "no_such_family"}, "model_type"),  # transformers does not know it
        ({"model_type": "codegen"}, "model_type"),  # transformers knows it, diffcost's table not
        ({"quantization_config": {"quant_method": "gptq"}}, "quantization_config"),
    ],
)
def test_configs_transformers_or_diffcost_cannot_read_are_spec_errors(tmp_path, changes, key):
    path = _write(tmp_path, _llama(**changes))
    (problem,) = _problems(path)
    assert problem.startswith(f"{path}: {key}: ")


def test_bad_json_is_a_spec_error(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(dc.SpecError, match="not a readable JSON file"):
        hf_document(path)


def test_deepseek_v3_mla_and_moe_read_as_the_built_in_spec(tmp_path):
    """The deepseek_v3 keys quoted in specs/models/deepseek-v3.toml's source, read through
    transformers, give that spec's shape (MLA head sizes, 58 MoE blocks, one shared expert)."""
    config = {
        "model_type": "deepseek_v3",
        "num_hidden_layers": 61,
        "hidden_size": 7168,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "first_k_dense_replace": 3,
        "vocab_size": 129280,
        "max_position_embeddings": 163840,
        "tie_word_embeddings": False,
    }
    doc = hf_document(_write(tmp_path, config))
    spec = dc.load_spec("model", "deepseek-v3").values
    keys = ("layers", "heads", "kv_heads", "head_dim", "v_head_dim", "kv_lora_rank", "q_lora_rank")
    keys += ("rope_head_dim", "ffn_hidden", "experts", "experts_per_token", "expert_ffn_hidden")
    for key in (*keys, "shared_expert_ffn_hidden", "moe_layers", "vocab"):
        assert doc[key] == spec[key], key


def test_every_family_lists_its_keys_once():
    """The table is the documentation: a key is read, refused or irrelevant, not two of them."""
    for name, family in FAMILIES.items():
        read, refused, irrelevant = set(family.read), set(family.refused), set(family.irrelevant)
        assert not (read & refused or refused & irrelevant or read & irrelevant), name


def test_gemma2_is_read_as_gated_gelu_with_its_head_dim():
    """The values read for Gemma 2 are a GeGLU MLP
    (3 matrices; the old reader's plain GELU gave 0.79 of the size), head_dim 256 (not
    2304 / 8 = 288) and tied embeddings: the module sum of gemma-2-2b, 2.614B."""
    raw = json.loads((HF / "gemma-2-2b" / "config.json").read_text())
    text = hf_config._transformers_config(HF / "gemma-2-2b", raw).get_text_config()
    values = hf_config._values(text, "gemma2")
    assert (values["mlp"], values["head_dim"], values["tied_embeddings"]) == ("geglu", 256, True)
    h, d = 2304, 256
    attention = h * 8 * d + 2 * h * 4 * d + 8 * d * h
    expected = 256000 * h + 26 * (attention + 3 * h * 9216 + 2 * h) + h
    model = model_module({**values, "architecture": "decoder"})
    assert float(model.num_params()) == pytest.approx(expected, rel=1e-4)


def test_gpt_oss_is_refused_for_its_sinks(tmp_path):
    """gpt-oss: attention sinks are refused with their key (its alternating sliding-window layers
    are read); its MoE keys are known, not "unknown"."""
    config = {
        "model_type": "gpt_oss", "num_hidden_layers": 2, "hidden_size": 64,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "intermediate_size": 64, "vocab_size": 100, "num_local_experts": 4,
        "num_experts_per_tok": 2,
    }  # fmt: skip
    keys = [p.split(": ")[1] for p in _problems(_write(tmp_path, config))]
    assert keys == ["model_type"]


def _from_class(tmp_path: Path, model_type: str, **changes) -> Path:
    """A small config as transformers' own class writes it (``to_dict``), with ``changes``
    (skipped where the installed transformers predates the family)."""
    import transformers

    if model_type not in transformers.CONFIG_MAPPING:
        pytest.skip(f"transformers {transformers.__version__} has no {model_type!r}")

    small = {"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4}
    if model_type == "gpt2":
        small = {"n_layer": 4, "n_embd": 256, "n_head": 4}
    if hasattr(transformers.AutoConfig.for_model(model_type), "num_key_value_heads"):
        small["num_key_value_heads"] = 4
    if model_type.startswith("deepseek"):
        small |= {"first_k_dense_replace": 1, "n_group": 1, "topk_group": 1}
    config = transformers.AutoConfig.for_model(model_type, vocab_size=1000, **small).to_dict()
    return _write(tmp_path, {**config, **changes})


@pytest.mark.parametrize(
    "model_type,key,default,other",
    [
        ("gpt2", "add_cross_attention", False, True),
        ("gpt_neox", "is_decoder", False, True),
        ("gemma", "use_bidirectional_attention", False, True),  # the class default is None
        ("deepseek_v3", "qk_head_dim", 192, 100),  # derived: qk_nope_head_dim + qk_rope_head_dim
    ],
)
def test_a_key_is_judged_by_its_effect(tmp_path, model_type, key, default, other):
    """A key diffcost's tables do not name is accepted at its default or derived value (issue
    44: these refused gpt2, gpt_neox, gemma and deepseek_v3 configs as transformers writes
    them), and refused at any other value, with the value and the default."""
    import transformers

    if not hasattr(transformers.AutoConfig.for_model(model_type), key):
        pytest.skip(f"transformers {transformers.__version__}'s {model_type} has no {key}")
    hf_document(_from_class(tmp_path, model_type, **{key: default}))
    path = _from_class(tmp_path, model_type, **{key: other})
    (problem,) = _problems(path)
    assert problem.startswith(f"{path}: {key}: {other!r}: differs from ")
    assert "default or derived value" in problem


def test_judged_keys_and_other_problems_come_at_once(tmp_path):
    path = _from_class(
        tmp_path,
        "gpt2",
        add_cross_attention=True,
        moe_frequency=2,
        quantization_config={"quant_method": "gptq"},
    )
    keys = [p.split(": ")[1] for p in _problems(path)]
    assert keys == ["add_cross_attention", "moe_frequency", "quantization_config"]


@pytest.mark.parametrize(
    "model_type,phrase",
    [
        ("t5", "'t5' is an encoder-decoder model"),
        ("bart", "'bart' is an encoder-decoder model"),
        ("mamba", "'mamba' is a state-space model"),
        ("mamba2", "'mamba2' is a state-space model"),
    ],
)
def test_encoder_decoder_and_state_space_models_are_refused_as_such(tmp_path, model_type, phrase):
    """Not for a missing ``num_attention_heads`` (T5 names it num_heads, Mamba has none)."""
    import transformers

    config = transformers.AutoConfig.for_model(model_type).to_dict()
    path = _write(tmp_path, config)
    (problem,) = _problems(path)
    assert problem.startswith(f"{path}: model_type: {phrase}")


def test_opt_embedding_projection_is_refused(tmp_path):
    """OPT-350m embeds in 512 and projects to the 1024-wide model: not modelled."""
    import transformers

    config = transformers.AutoConfig.for_model(
        "opt", hidden_size=1024, word_embed_proj_dim=512, num_hidden_layers=2
    ).to_dict()
    path = _write(tmp_path, config)
    (problem,) = _problems(path)
    assert problem.startswith(f"{path}: word_embed_proj_dim: 512: differs from hidden_size (1024)")


def test_deepseek_v2_moe_layer_freq_other_than_one_is_refused(tmp_path):
    """transformers' DeepSeek-V2 has a MoE block in every layer from first_k_dense_replace;
    DeepSeek's own code every moe_layer_freq-th: 1 reads one way, 2 two ways."""
    path = _from_class(tmp_path, "deepseek_v2", moe_layer_freq=1)
    assert hf_document(path)["moe_layers"] == 3  # layers 1, 2, 3 of 4
    path = _from_class(tmp_path, "deepseek_v2", moe_layer_freq=2)
    assert [p.split(": ")[1] for p in _problems(path)] == ["moe_layer_freq"]


def test_llama4_interleaved_moe_blocks_are_read(tmp_path):
    """Llama 4 Maverick interleaves dense and MoE blocks (``moe_layers`` from
    ``interleave_moe_layer_step``): the dense ones ``intermediate_size_mlp`` wide, the MoE
    ones routed experts plus one shared expert of ``intermediate_size``."""
    import transformers

    config = transformers.AutoConfig.for_model(
        "llama4_text", num_hidden_layers=6, hidden_size=256, num_attention_heads=4,
        num_key_value_heads=4, head_dim=64, vocab_size=1000, interleave_moe_layer_step=2,
        intermediate_size=128, intermediate_size_mlp=512, attention_chunk_size=None,
    )  # fmt: skip
    assert config.moe_layers == [1, 3, 5]
    path = _write(tmp_path, config.to_dict())
    doc = hf_document(path)
    assert (doc["moe_layers"], doc["ffn_hidden"], doc["expert_ffn_hidden"]) == (3, 512, 128)
    assert doc["shared_expert_ffn_hidden"] == 128


def test_bloom_560m_published_config_is_read_as_the_module_sum():
    """bigscience/bloom-560m as published (its Megatron-DeepSpeed switches, ``n_inner`` null):
    ALiBi, LayerNorms, biases, a 4h GELU MLP, tied embeddings.  transformers' module sum adds
    the embedding LayerNorm (2h), which diffcost does not count (0.0004 %)."""
    doc = _doc("bloom-560m")
    assert (doc["position"], doc["norm"], doc["bias"], doc["tied_embeddings"]) == (
        "alibi", "layernorm", True, True,
    )  # fmt: skip
    h, vocab, layers = 1024, 250880, 24
    expected = vocab * h + 2 * h + layers * (12 * h * h + 13 * h) + 2 * h
    assert float(model_module(doc).num_params()) == pytest.approx(expected, rel=1e-5)


def test_bloom_inner_width_other_than_null_is_refused(tmp_path):
    raw = json.loads((HF / "bloom-560m" / "config.json").read_text())
    path = _write(tmp_path, {**raw, "n_inner": 2048})
    assert [p.split(": ")[1] for p in _problems(path)] == ["n_inner"]


@pytest.mark.parametrize("model_type,sliding", [("gemma2", 13), ("gemma3_text", 22)])
def test_gemma_layer_kinds_without_layer_types_follow_the_modeling_code(model_type, sliding):
    """transformers before 4.53 writes no ``layer_types``: its Gemma 2 slides on even layers,
    Gemma 3 on all but every 6th (``sliding_window_pattern``); not on every layer."""
    from types import SimpleNamespace

    t = SimpleNamespace(model_type=model_type, sliding_window=4096, sliding_window_pattern=6)
    assert hf_config._window(t, 26) == {"sliding_window": 4096, "sliding_layers": sliding}


def test_gpt_j_6b_published_config_is_read_as_the_built_in_spec():
    """EleutherAI/gpt-j-6b as published (its GPT-2 legacy keys kept) reads as
    specs/models/gpt-j-6b.toml.  transformers' module sum (6,050,882,784 on the meta device):
    embedding, 28 x (q, k, v, out without biases, fc_in and fc_out with, one LayerNorm), final
    LayerNorm, biased untied head; diffcost's one ``bias`` flag and two norms per block give
    0.01 % more."""
    doc = _doc("gpt-j-6b")
    spec = dc.load_spec("model", "gpt-j-6b").values
    for key in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab", "max_seq_len"):
        assert doc[key] == spec[key], key
    for key in ("mlp", "norm", "position", "tied_embeddings", "bias", "parallel_attention"):
        assert doc[key] == spec[key], key
    h, f, vocab = 4096, 16384, 50400
    layer = 4 * h * h + (h * f + f) + (f * h + h) + 2 * h
    expected = vocab * h + 28 * layer + 2 * h + (h * vocab + vocab)
    assert expected == 6_050_882_784
    assert float(model_module(doc).num_params()) == pytest.approx(expected, rel=2e-4)


def test_opt_125m_published_config_is_read_as_the_module_sum():
    """facebook/opt-125m as published (``activation_dropout``, ``prefix``, ``layerdrop`` 0):
    learned positions, ReLU MLP of ffn_dim, biases, LayerNorms, tied embeddings, dropout 0.1.
    transformers' module sum; OPT's position table has 2 extra rows (offset 2), 1536
    parameters diffcost does not count."""
    doc = _doc("opt-125m")
    assert (doc["position"], doc["mlp"], doc["bias"], doc["dropout"]) == (
        "learned", "relu", True, True,
    )  # fmt: skip
    h, f, vocab, layers = 768, 3072, 50272, 12
    layer = 4 * (h * h + h) + (h * f + f) + (f * h + h) + 2 * 2 * h
    expected = vocab * h + (2048 + 2) * h + layers * layer + 2 * h
    assert expected == 125_239_296  # the published "125M"
    assert float(model_module(doc).num_params()) == pytest.approx(expected, rel=2e-5)
