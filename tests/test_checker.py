"""The one checker: values, tables, whole documents and [source] rules, on small schemas; the
Hugging Face mapping into the model schema; values -> modules."""

import json
from pathlib import Path

import pytest

import diffcost as dc
from diffcost.testing import Checker, chip_module, hf_document, model_module, read_json, read_toml
from diffcost.testing import schema as S


def _problems(ck: Checker) -> list[str]:
    return [f"{p.key}: {p.reason}" for p in ck.problems]


@pytest.mark.parametrize(
    "field,raw,reason",
    [
        (S.Field("count"), 2.5, "must be an integer, got 2.5"),
        (S.Field("count"), True, "must be a number, got True"),
        (S.Field("count", positive=False), -1, "must not be negative, got -1"),
        (S.Field("number"), 0, "must be positive, got 0"),
        (S.Field("fraction"), 1.5, "is a fraction and must lie in [0, 1], got 1.5"),
        (S.Field("bool"), "yes", "must be true or false, got 'yes'"),
        (S.Field("str"), "", "must be a non-empty string, got ''"),
        (S.Field("enum", choices=("a", "b")), "c", "must be one of a, b; got 'c'"),
        (S.Field("list"), ["x", " "], "must be a list of non-empty strings"),
    ],
)
def test_bad_values(field, raw, reason):
    ck = Checker("f.toml")
    assert ck.value("k", raw, field) is None
    assert _problems(ck) == [f"k: {reason}"]


def test_table_converts_units_and_collects_every_problem():
    schema = {"size": S.Q("bytes", True), "n": S.Field("count", required=True)}
    ck = Checker("f.toml")
    assert ck.table({"size_gib": 2, "n": 3}, schema, "t.") == {"size_bytes": 2 * 2**30, "n": 3}
    assert ck.problems == []
    ck.table({"size_gb": 1, "size_mb": 5, "m": 1, "sub": {}, "sise_gb": 1}, schema, "t.")
    assert _problems(ck) == [
        "t.size_mb: given twice (also as 'size_gb')",
        "t.m: unknown key (allowed: n, size_<unit>)",
        "t.sub: unexpected table",
        "t.sise_gb: unknown key; did you mean 'size_gb'? (allowed: n, size_<unit>)",
        "t.n: missing required key",
    ]
    with pytest.raises(dc.SpecError) as err:
        ck.raise_if_any()
    assert str(err.value).startswith("5 problem(s) in the input:")


def test_document_checks_identity_tables_source_and_rules():
    def rule(values, add):
        """`a` below 10."""
        if values.get("t", {}).get("a", 0) >= 10:
            add("t.a", "must be below 10")

    kind = S.Kind(
        "thing",
        "things",
        top={"job": S.Field("enum", required=True, choices=("x",))},
        tables={"t": {"a": S.Field("count")}, "free": None},
        required_tables=("t",),
        source=S.Source("say why", required=("origin",), per_table="cite [{}]"),
        rules=(rule,),
    )
    ck = Checker("other.toml")
    data = {
        "schema_version": 2,
        "kind": "thing",
        "name": "thing-1",
        "display_name": "x",
        "job": "x",
        "t": {"a": 12},
        "free": {"anything": [1, 2]},
        "extra": {"b": 1},
        "source": {"origin": "here", "empty": " "},
    }
    values, source = ck.document(data, kind, stem="other")
    assert values["t"] == {"a": 12} and "free" not in values
    assert source == {"origin": "here", "empty": " "}
    assert _problems(ck) == [
        "schema_version: unsupported version 2 (expected 1)",
        "name: must equal the file name 'other', got 'thing-1'",
        "extra: unknown table (allowed: free, source, t)",
        "source.empty: must be a non-empty string",
        "source.t: missing: cite [t]",
        "source.free: missing: cite [free]",
        "t.a: must be below 10",
    ]


def test_sweep_like_file_on_the_engine(tmp_path):
    """How the sweep loader can use the engine: free tables checked by its own code."""
    kind = S.Kind(
        "sweep",
        "sweeps",
        top={
            "job": S.Field("enum", required=True, choices=("train", "serve")),
            "outputs": S.Field("list"),
        },
        tables={"base": None, "grid": None, "zip": None, "output": {"csv": S.Field("str")}},
        required_tables=("base",),
        source=S.Source("say what the sweep is for", nonempty=True),
    )
    path = tmp_path / "s.toml"
    path.write_text(
        'schema_version = 1\nkind = "sweep"\nname = "s"\ndisplay_name = "x"\njob = "train"\n'
        'outputs = ["mfu"]\n[base]\nmodel = "llama-3-8b"\n[grid]\ntp = [1, 2]\n'
        '[output]\ncsv = "a.csv"\n[source]\nsweep = "test"\n'
    )
    ck = Checker(str(path))
    values, source = ck.document(read_toml(path), kind, stem=path.stem)
    assert ck.problems == []
    assert values["outputs"] == ["mfu"] and values["output"] == {"csv": "a.csv"}
    assert source == {"sweep": "test"}


def test_groups_must_name_builtins():
    ck = Checker("c.toml")
    kind = S.KINDS["calibration"]
    out = ck._group("overrides", {"h100-sxm": {"kernel_launch_us": 4}}, *kind.groups["overrides"])
    assert out == {"h100-sxm": {"kernel_launch_s": pytest.approx(4e-6)}}
    ck._group("overrides", {"h100": {}}, *kind.groups["overrides"])
    ck._group("overrides", 3, *kind.groups["overrides"])
    assert _problems(ck) == [
        "overrides.h100: unknown chip name",
        "overrides: must be a table of chip-name tables",
    ]


def test_readers(tmp_path):
    good = tmp_path / "a.json"
    good.write_text(json.dumps({"x": 1}))
    assert read_json(good) == {"x": 1}
    bad = tmp_path / "b.json"
    bad.write_text("{")
    with pytest.raises(dc.SpecError, match="b.json: not a readable JSON file"):
        read_json(bad)
    with pytest.raises(dc.SpecError, match="missing.toml: file not found"):
        read_toml(tmp_path / "missing.toml")


def test_hugging_face_config_becomes_a_model_document(tmp_path):
    path = tmp_path / "tiny" / "config.json"
    path.parent.mkdir()
    config = {
        "model_type": "llama",
        "num_hidden_layers": 2,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 100,
        "rms_norm_eps": 1e-5,
    }
    path.write_text(json.dumps(config))
    doc = hf_document(path)
    assert (doc["name"], doc["mlp"], doc["norm"], doc["position"]) == (
        "tiny",
        "swiglu",
        "rmsnorm",
        "rope",
    )
    # keys the file leaves out take transformers' defaults, as the Hugging Face model would be
    # built (LlamaConfig: intermediate_size 11008, max_position_embeddings 2048)
    assert (doc["ffn_hidden"], doc["max_seq_len"], doc["bias"]) == (11008, 2048, False)
    path.write_text(json.dumps({**config, "num_key_value_heads": 3}))
    with pytest.raises(dc.SpecError) as err:  # named by the config's own key
        dc.load_model(path)
    assert [str(p) for p in err.value.problems] == [
        f"{path.resolve()}: num_key_value_heads: 3: num_attention_heads (4) is not a multiple of it"
    ]
    path.write_text(json.dumps([1]))
    with pytest.raises(dc.SpecError, match="must be a JSON object"):
        hf_document(path)


def test_modules_from_values_match_the_loaders():
    chip = dc.load_spec("chip", "h100-sxm").values
    assert (
        float(chip_module(chip).memory_capacity_bytes) == 81559 * 2**20
    )  # capacity_mib = 81559 (nvidia-smi)
    model = dc.load_spec("model", "llama-2-7b").values
    assert float(model_module(model).num_params()) == float(
        dc.load_model("llama-2-7b").num_params()
    )


@pytest.mark.parametrize(
    "field,raw,reason",
    [
        (S.Field("number", positive=False), float("nan"), "must be a finite number, got nan"),
        (S.Field("fraction", positive=False), float("nan"), "must be a finite number, got nan"),
        (S.Q("flop_per_s"), float("inf"), "must be a finite number, got inf"),
        (S.Field("number"), float("-inf"), "must be a finite number, got -inf"),
    ],
)
def test_non_finite_values_are_refused(field, raw, reason):
    """NaN passed every sign test of a non-negative field (``nan < 0`` is false) and infinity
    every positivity test: both reached the model and came out as NaN answers."""
    ck = Checker("f.toml")
    assert ck.value("k", raw, field) is None
    assert _problems(ck) == [f"k: {reason}"]


def test_values_beyond_float32_physics_are_refused():
    """1e300 TFLOP/s is finite in the file but overflows float32 in the model (a quantity
    without a plausible range of its own: the general bound)."""
    ck = Checker("c.toml")
    schema = {"bf16": S.Q("flop_per_s"), "fp16": S.Q("flop_per_s")}
    out = ck.table({"bf16_tflop_per_s": 1e300, "fp16_tflop_per_s": 1e9}, schema, "")
    assert out == {"fp16_flop_per_s": 1e21}  # a zettaFLOP/s: the largest accepted
    (problem,) = _problems(ck)
    assert problem.startswith("bf16_tflop_per_s: 1e+300 is beyond any physical input")


def test_values_below_float32_physics_are_refused():
    """1e-300 GB/s is positive in the file but vanishes in float32: bytes / 0 = inf."""
    ck = Checker("c.toml")
    memory = {"capacity_gb": 80, "bandwidth_gb_per_s": 1e-300, "on_chip_sram": False}
    ck.table(memory, S.CHIP["memory"], "memory.")
    (problem,) = _problems(ck)
    assert problem.startswith("memory.bandwidth_gb_per_s: 1e-300 is below any physical input")


@pytest.mark.parametrize(
    "key,value,reason",
    [
        ("attention_dropout", "0.1", "must be a number, got '0.1'"),
        ("attention_dropout", [0.1], "must be a number, got [0.1]"),
        ("attention_dropout", {"p": 0.1}, "must be a number, got {'p': 0.1}"),
        ("attention_dropout", -0.1, "must not be negative, got -0.1"),
        ("attention_dropout", float("nan"), "must be a finite number, got nan"),
        ("attn_pdrop", 1.5, "is a fraction and must lie in [0, 1], got 1.5"),
        ("tie_word_embeddings", "false", "must be true or false, got 'false'"),
        ("attention_bias", 0, "must be true or false, got 0"),
    ],
)
def test_hf_config_flags_and_dropout_are_typed(tmp_path, key, value, reason):
    """A string "false" was read as true and a list dropout crashed the loader: the flag and
    dropout keys of a config are checked like any spec value, named by their HF key."""
    fixture = Path(__file__).parent / "fixtures" / "hf" / "llama-2-7b-config.json"
    data = json.loads(fixture.read_text())
    data[key] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    with pytest.raises(dc.SpecError) as err:
        dc.load_model(path)
    assert f"{path}: {key}: {reason}" in str(err.value)
