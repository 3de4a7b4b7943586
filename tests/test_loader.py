"""Strict loading: every built-in spec loads; bad input gives one clear message per problem."""

from pathlib import Path

import pytest

import diffcost as dc

FIX = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize("kind", ["chip", "system", "model", "calibration", "scenario"])
def test_every_builtin_spec_loads(kind):
    names = dc.builtin_names(kind)
    assert names, kind
    for name in names:
        if kind == "scenario":
            dc.load_scenario(name)
        else:
            spec = dc.load_spec(kind, name)
            assert spec.info.name == name and spec.info.source


def test_required_catalogue_is_present():
    chips = set(dc.builtin_names("chip"))
    assert {
        "a100-sxm-40gb",
        "a100-sxm-80gb",
        "h100-sxm",
        "h100-pcie",
        "h200",
        "b200",
        "mi300x",
        "tpu-v4",
        "tpu-v5e",
        "tpu-v5p",
        "tpu-v6e",
        "groq-lpu",
        "cerebras-wse3",
        "l4",
        "l40s",
        "gaudi3",
    } <= chips
    models = set(dc.builtin_names("model"))
    assert {
        "gpt3-175b",
        "megatron-gpt-1.7b",
        "megatron-gpt-1t",
        "llama-2-7b",
        "llama-2-13b",
        "llama-2-70b",
        "llama-3-8b",
        "llama-3-70b",
        "llama-3-405b",
        "gpt-j-6b",
        "falcon-180b",
        "bloom-176b",
        "bert-large",
    } <= models


def test_units_converted_to_si():
    chip = dc.load_spec("chip", "h100-sxm").values
    assert chip["memory"]["capacity_bytes"] == 80e9
    assert chip["memory"]["bandwidth_bytes_per_s"] == 3350e9
    assert chip["compute"]["bf16_flop_per_s"] == pytest.approx(989.4e12)
    tpu = dc.load_spec("chip", "tpu-v4").values
    assert tpu["memory"]["capacity_bytes"] == 32 * 2**30  # GiB, not GB


def test_missing_formats_fall_back_to_a_wider_one():
    a100 = dc.load_chip("a100-sxm-80gb")
    fp8 = dc.FORMATS.index("fp8")
    bf16 = dc.FORMATS.index("bf16")
    assert float(a100.peak_flop_per_s[fp8]) == float(a100.peak_flop_per_s[bf16])


def _messages(call):
    with pytest.raises(dc.SpecError) as info:
        call()
    return [str(p) for p in info.value.problems], str(info.value)


def test_bad_chip_reports_all_problems_at_once():
    path = FIX / "bad" / "bad-chip.toml"
    problems, text = _messages(lambda: dc.load_chip(path))
    assert problems == [
        f"{path}: compute.fp8_tflop_per_s: must be positive, got -5",
        f"{path}: memory.capacity_gb_per_s: unit of 'capacity_gb_per_s' is bytes_per_s, but "
        "capacity is in bytes (use one of _gb, _gib, _mb, _mib, _bytes)",
        f"{path}: memory.capacty_gb: unknown key; did you mean 'capacity_gb'? "
        "(allowed: bandwidth, capacity, on_chip_sram)",
        f"{path}: memory.capacity: missing required key "
        "(with a unit: _gb, _gib, _mb, _mib, _bytes)",
    ]
    assert text.startswith("4 problem(s) in the input:")


def test_missing_unit_suffix():
    path = FIX / "bad" / "unitless-chip.toml"
    problems, _ = _messages(lambda: dc.load_chip(path))
    assert problems == [
        f"{path}: memory.capacity: missing unit suffix: write capacity_gb "
        "(accepted: _gb, _gib, _mb, _mib, _bytes)"
    ]


def test_bad_model_heads_and_params():
    path = FIX / "bad" / "bad-model.toml"
    problems, _ = _messages(lambda: dc.load_model(path))
    assert problems[0] == f"{path}: kv_heads: heads (32) must be divisible by kv_heads (5)"
    assert problems[1].startswith(f"{path}: params_b: published 70B disagrees with the shape's")
    assert len(problems) == 2


def test_missing_source_key_and_enum():
    path = FIX / "bad" / "no-source.toml"
    problems, _ = _messages(lambda: dc.load_model(path))
    assert f"{path}: hidden: must be positive, got 0" in problems
    assert f"{path}: mlp: must be one of gelu, swiglu, relu; got 'geglu'" in problems
    assert f"{path}: layers: missing required key" in problems
    assert f"{path}: source: missing [source] table: every number needs a source" in problems


def test_unknown_builtin_name_suggests_close_ones():
    problems, _ = _messages(lambda: dc.load_model("llama-2-70"))
    assert problems[0].startswith("<arguments>: model: unknown model 'llama-2-70'; did you mean")
    assert "llama-2-70b" in problems[0]


def test_missing_file():
    problems, _ = _messages(lambda: dc.load_model("does/not/exist.toml"))
    assert problems == ["does/not/exist.toml: model file not found"]


def test_hugging_face_config():
    model = dc.load_model(FIX / "hf" / "llama-2-7b-config.json")
    assert float(model.num_params()) == pytest.approx(6_738_415_616, rel=1e-9)
    assert float(model.mlp_matrices) == 3.0 and float(model.kv_heads) == 32


def test_broken_hugging_face_config():
    path = FIX / "hf" / "broken-config.json"
    problems, _ = _messages(lambda: dc.load_model(path))
    assert f"{path}: hidden_size: must be positive, got -1" in problems
    assert f"{path}: num_hidden_layers or n_layer or num_layers: missing required key" in problems
    assert f"{path}: vocab_size: missing required key" in problems


def test_bad_plan_lists_every_field():
    problems, _ = _messages(lambda: dc.train_plan(tp=0, recompute="some", zero=5))
    assert problems == [
        "plan: tp: must be a positive integer, got 0",
        "plan: recompute: must be one of ('none', 'selective', 'full'), got 'some'",
        "plan: zero: must be one of (0, 1, 2, 3), got 5",
    ]


def test_system_overrides_and_chip_defaults():
    sys_pod = dc.load_system("tpu-v5p-pod")
    chip_default = dc.load_system(chip="tpu-v5p")
    assert float(sys_pod.scale_up_domain_chips) != float(chip_default.scale_up_domain_chips)
    assert float(dc.load_system("dgx-h100", chips=1024).num_chips) == 1024


def test_scenario_with_bad_plan_and_reference(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(
        'schema_version = 1\nkind = "train"\nname = "s"\ndisplay_name = "x"\n'
        'model = "gpt-4"\nsystem = "dgx-h100"\n[plan]\ntp = 2.5\npipeline = 2\n'
        '[source]\nscenario = "test"\n'
    )
    problems, _ = _messages(lambda: dc.load_scenario(path))
    assert f"{path}: plan.tp: must be an integer, got 2.5" in problems
    assert any(p.startswith(f"{path}: plan.pipeline: unknown key") for p in problems)
    assert any(p.startswith(f"{path}: model: unknown model 'gpt-4'") for p in problems)
