"""Hugging Face config values checked under their own keys, against the layer count and each
other (issue 39: each of these configs was read as a different model, exit 0, on main)."""

import ast
import json
from pathlib import Path

import pytest

import diffcost as dc
from diffcost.testing import ACTIVATIONS, hf_document

HF = Path(__file__).parent / "fixtures" / "hf"

#: DeepSeek-V3's shape keys (specs/models/deepseek-v3.toml's source quotes them).
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3", "num_hidden_layers": 61, "hidden_size": 7168,
    "num_attention_heads": 128, "num_key_value_heads": 128, "q_lora_rank": 1536,
    "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256,
    "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
    "vocab_size": 129280, "max_position_embeddings": 163840, "tie_word_embeddings": False,
}  # fmt: skip
#: Gemma 3 1B's text config (google/gemma-3-1b-pt config.json).
GEMMA3 = {
    "model_type": "gemma3_text", "num_hidden_layers": 26, "hidden_size": 1152,
    "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
    "intermediate_size": 6912, "vocab_size": 262144, "sliding_window": 512,
    "sliding_window_pattern": 6, "max_position_embeddings": 32768,
    "hidden_activation": "gelu_pytorch_tanh",
}  # fmt: skip


def _write(tmp_path: Path, config: dict) -> Path:
    path = tmp_path / "m" / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(config))
    return path


def _problems(tmp_path: Path, config: dict) -> dict[str, str]:
    path = _write(tmp_path, config)
    with pytest.raises(dc.SpecError) as err:
        hf_document(path)
    assert all(p.file == str(path) for p in err.value.problems)
    return {p.key: p.reason for p in err.value.problems}


def test_the_reference_configs_are_read(tmp_path):
    """The unchanged configs load: DeepSeek-V3 with 58 MoE blocks, Gemma 3 with 22 of its 26
    layers local (every 6th global)."""
    assert hf_document(_write(tmp_path, DEEPSEEK_V3))["moe_layers"] == 58
    doc = hf_document(_write(tmp_path, GEMMA3))
    assert (doc["sliding_layers"], doc["layers"]) == (22, 26)


def test_a_dense_prefix_longer_than_the_model_is_refused(tmp_path):
    """``first_k_dense_replace: 100`` of 61 layers made DeepSeek-V3 a dense 37.4B model."""
    problems = _problems(tmp_path, {**DEEPSEEK_V3, "first_k_dense_replace": 100})
    assert problems == {
        "first_k_dense_replace": "100: not less than num_hidden_layers (61): no block would be "
        "a MoE block for the 256 routed experts (n_routed_experts)"
    }


def test_transformers_default_dense_prefix_is_checked_too(tmp_path):
    """Without the key, transformers' default (3) applies; a 2-layer model then has no MoE
    block."""
    config = {k: v for k, v in DEEPSEEK_V3.items() if k != "first_k_dense_replace"}
    config["num_hidden_layers"] = 2
    assert list(_problems(tmp_path, config)) == ["first_k_dense_replace"]


def test_a_moe_frequency_past_the_last_layer_is_refused(tmp_path):
    config = {**DEEPSEEK_V3, "first_k_dense_replace": 59, "moe_layer_freq": 7}
    assert list(_problems(tmp_path, config)) == ["moe_layer_freq"]


@pytest.mark.parametrize("changes,key", [
    ({"decoder_sparse_step": 49}, "decoder_sparse_step"),
    ({"mlp_only_layers": list(range(48))}, "mlp_only_layers"),
    ({"mlp_only_layers": [0, 48]}, "mlp_only_layers"),
])  # fmt: skip
def test_qwen_moe_layer_keys_that_leave_no_moe_block_are_refused(tmp_path, changes, key):
    raw = json.loads((HF / "qwen3-30b-a3b" / "config.json").read_text())
    assert list(_problems(tmp_path, {**raw, **changes})) == [key]


@pytest.mark.parametrize("pattern", [-6, 1.5, 0, "6", 100])
def test_gemma3_window_pattern_is_a_positive_count_within_the_layers(tmp_path, pattern):
    """-6 read as 6 and 1.5 as "every third layer global" on main; 0 was transformers'
    ZeroDivisionError; 100 (> 26 layers) leaves no global layer."""
    problems = _problems(tmp_path, {**GEMMA3, "sliding_window_pattern": pattern})
    assert list(problems) == ["sliding_window_pattern"]
    assert problems["sliding_window_pattern"].startswith(f"{pattern!r}: ")


def test_an_unknown_activation_is_refused_listing_the_known_ones(tmp_path):
    problems = _problems(tmp_path, {**DEEPSEEK_V3, "hidden_act": "gelu_tanh"})
    reason = problems["hidden_act"]
    assert reason.startswith("'gelu_tanh' is not an activation transformers knows (known: gelu,")
    assert "gelu_pytorch_tanh" in reason and "silu" in reason


def test_the_known_activations_are_transformers_own():
    """:data:`ACTIVATIONS` is the ``ACT2CLS`` table of the newest tested transformers and holds
    the installed one's (read from its source: importing it needs PyTorch)."""
    import transformers

    source = Path(transformers.__file__).parent / "activations.py"
    table = next(
        node.value
        for node in ast.walk(ast.parse(source.read_text()))
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "ACT2CLS" for t in node.targets)
    )
    assert isinstance(table, ast.Dict)
    installed = {ast.literal_eval(k) for k in table.keys if k is not None}
    # every name the installed transformers builds is accepted; the newest tested (5.24) knows
    # exactly these, an older supported one (4.51) a subset
    assert installed <= set(ACTIVATIONS)
    if tuple(int(x) for x in transformers.__version__.split(".")[:2]) >= (5, 24):
        assert installed == set(ACTIVATIONS)


def test_a_zero_kv_latent_is_refused_not_read_as_standard_attention(tmp_path):
    """``kv_lora_rank: 0`` silently dropped multi-head latent attention on main.  DeepSeek's
    attention always runs through the latent (modeling_deepseek_v3.py), so 0 is a broken
    config, not standard attention: refused.  A null ``q_lora_rank`` (no query compression,
    DeepSeek-V2-Lite) is read as 0; a 0 one is refused."""
    assert list(_problems(tmp_path, {**DEEPSEEK_V3, "kv_lora_rank": 0})) == ["kv_lora_rank"]
    assert list(_problems(tmp_path, {**DEEPSEEK_V3, "q_lora_rank": 0})) == ["q_lora_rank"]
    doc = hf_document(_write(tmp_path, {**DEEPSEEK_V3, "q_lora_rank": None}))
    assert (doc["kv_lora_rank"], doc["q_lora_rank"]) == (512, 0)


def test_every_problem_of_a_config_comes_at_once(tmp_path):
    config = {
        **DEEPSEEK_V3,
        "num_experts_per_tok": 300,
        "num_key_value_heads": 3,
        "first_k_dense_replace": 61,
        "hidden_act": "gelu_tanh",
        "kv_lora_rank": 0,
    }
    problems = _problems(tmp_path, config)
    assert set(problems) == {
        "num_experts_per_tok",
        "num_key_value_heads",
        "first_k_dense_replace",
        "hidden_act",
        "kv_lora_rank",
    }
    assert problems["num_experts_per_tok"] == "300: more than the 256 experts (n_routed_experts)"
    assert problems["num_key_value_heads"] == "3: num_attention_heads (128) is not a multiple of it"
