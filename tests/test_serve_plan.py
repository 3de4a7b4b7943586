"""Serving plans, serve scenarios and the ``diffcost serve`` command line."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from typer.testing import CliRunner

import diffcost as dc
from diffcost import MODES
from diffcost.cli import app
from diffcost.testing import plan_kwargs

runner = CliRunner()


def _messages(call):
    with pytest.raises(dc.SpecError) as info:
        call()
    return [str(p) for p in info.value.problems]


# --- the builder ----------------------------------------------------------------------------------
def test_defaults_are_one_hot_and_float():
    plan = dc.serve_plan()
    assert float(plan.tp) == 1.0 and float(plan.batch) == 1.0
    assert float(jnp.sum(plan.weight_format)) == 1.0
    assert float(plan.weight_format[dc.FORMATS.index("bf16")]) == 1.0
    assert float(plan.mode[MODES.index("continuous")]) == 1.0
    assert float(plan.prefill_chips) == 1.0 and float(plan.decode_chips) == 1.0
    assert float(jnp.sum(plan.accuracy_cost)) == 0.0


@pytest.mark.parametrize(
    "weight,compute",
    [("int8", "bf16"), ("int4", "bf16"), ("fp8", "fp8"), ("fp4", "fp4"), ("fp16", "fp16")],
)
def test_compute_format_defaults(weight, compute):
    """Integer weights default to weight-only (W8A16, W4A16); float formats compute as stored."""
    plan = dc.serve_plan(weight_format=weight)
    assert float(plan.compute_format[dc.FORMATS.index(compute)]) == 1.0
    w8a8 = dc.serve_plan(weight_format="int8", compute_format="int8")
    assert float(w8a8.compute_format[dc.FORMATS.index("int8")]) == 1.0


def test_disaggregated_pool_defaults_and_chip_counts():
    plan = dc.serve_plan(tp=4, pp=2, replicas=3, disaggregated=True, decode_chips=16)
    assert float(plan.prefill_chips) == 8.0
    assert float(plan.num_chips()) == 3 * (8 + 16)
    assert float(dc.serve_plan(tp=4, pp=2, replicas=3).num_chips()) == 24


BAD_PLANS = [
    (dict(tp=0), "plan: tp: must be a positive integer, got 0"),
    (dict(batch=2.5), "plan: batch: must be a positive integer, got 2.5"),
    (dict(input_len=True), "plan: input_len: must be a positive integer, got True"),
    (dict(draft_len=-1), "plan: draft_len: must be a non-negative integer, got -1"),
    (
        dict(weight_format="int3"),
        "plan: weight_format: must be one of fp32, tf32, bf16, fp16, "
        "fp8, int8, fp4, int4; got 'int3'",
    ),
    (
        dict(kv_format="fp6"),
        "plan: kv_format: must be one of fp32, tf32, bf16, fp16, fp8, int8, fp4, int4; got 'fp6'",
    ),
    (dict(mode="dynamic"), "plan: mode: must be one of static, continuous; got 'dynamic'"),
    (dict(acceptance=1.5), "plan: acceptance: must be a probability in [0, 1], got 1.5"),
    (
        dict(draft_len=4),
        "plan: draft_params_fraction: must be > 0 when draft_len > 0 (the draft "
        "model's size as a fraction of the target's parameters)",
    ),
    (dict(draft_params_fraction=1.0), "plan: draft_params_fraction: must lie in [0, 1), got 1.0"),
    (
        dict(tp=4, decode_chips=6),
        "plan: decode_chips: must be a multiple of tp*pp = 4 (whole instances), got 6",
    ),
    (dict(prefill_chips=0), "plan: prefill_chips: must be a positive integer, got 0"),
    (dict(disaggregated="yes"), "plan: disaggregated: must be true or false, got 'yes'"),
    (dict(kv_block=0), "plan: kv_block: must be a positive integer, got 0"),
    (
        dict(accuracy_cost={"int3": 1.0}),
        "plan: accuracy_cost.int3: unknown format (allowed: "
        "fp32, tf32, bf16, fp16, fp8, int8, fp4, int4)",
    ),
    (
        dict(accuracy_cost={"int4": -1}),
        "plan: accuracy_cost.int4: must be a non-negative number, got -1",
    ),
]


@pytest.mark.parametrize("kwargs,message", BAD_PLANS)
def test_bad_plan_field_message(kwargs, message):
    assert _messages(lambda: dc.serve_plan(**kwargs)) == [message]


def test_every_bad_field_is_reported_at_once():
    problems = _messages(
        lambda: dc.serve_plan(tp=0, mode="x", kv_format="y", acceptance=-1, source="my.toml")
    )
    assert [p.split(":")[1].strip() for p in problems] == ["tp", "kv_format", "mode", "acceptance"]
    assert all(p.startswith("my.toml: ") for p in problems)


# --- scenarios ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name", ["default-serve", "bloom-176b-8xa100-deepspeed", "llama-3-70b-h200-disaggregated"]
)
def test_builtin_serve_scenarios_load_and_fit(name):
    sc = dc.load_scenario(name)
    assert sc.kind == "serve" and sc.source["scenario"]
    plan = dc.serve_plan(**plan_kwargs(sc.plan))
    system = dc.load_system(sc.system, chips=sc.chips)
    out = dc.ServeCost(system, dc.load_model(sc.model))(plan)
    assert float(out.fits()) == 1.0
    assert sc.chips is not None and float(out.chips) <= sc.chips


def test_serve_scenario_unknown_key_and_accuracy_costs(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text(
        'schema_version = 1\nkind = "serve"\nname = "s"\ndisplay_name = "s"\n'
        'model = "llama-2-7b"\nchip = "h100-sxm"\n[plan]\nbatch = 4\n'
        'batch_size = 8\nmode = "dynamic"\naccuracy_cost_int4 = 0.3\n'
        '[source]\nscenario = "test"\n'
    )
    problems = _messages(lambda: dc.load_scenario(path))
    assert problems[0].startswith(f"{path}: plan.batch_size: unknown key; did you mean 'batch'?")
    assert problems[1] == f"{path}: plan.mode: must be one of static, continuous; got 'dynamic'"
    assert len(problems) == 2
    path.write_text(path.read_text().replace('batch_size = 8\nmode = "dynamic"\n', ""))
    kwargs = plan_kwargs(dc.load_scenario(path).plan)
    assert kwargs == {"batch": 4, "accuracy_cost": {"int4": 0.3}}


# --- command line ---------------------------------------------------------------------------------
def _run(*args):
    return runner.invoke(app, list(args))


def test_serve_default_scenario_prints_a_table():
    result = _run("serve")
    assert result.exit_code == 0, result.output
    assert "Llama 2 70B" in result.output
    for label in [
        "TTFT",
        "TPOT",
        "output tokens / s / chip",
        "KV cache",
        "largest batch",
        "feasible",
    ]:
        assert label in result.output


def test_serve_json_keys():
    result = _run(
        "serve",
        "--model",
        "llama-2-7b",
        "--chip",
        "h100-sxm",
        "--chips",
        "8",
        "--tp",
        "2",
        "--batch",
        "16",
        "--input-len",
        "512",
        "--output-len",
        "128",
        "--weight-format",
        "int8",
        "--kv-format",
        "fp8",
        "--mode",
        "continuous",
        "--accuracy-cost",
        "int8=0.2",
        "--json",
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    for key in [
        "ttft_s",
        "tpot_s",
        "request_latency_s",
        "output_tokens_per_s",
        "output_tokens_per_s_per_chip",
        "output_tokens_per_s_per_user",
        "memory_bytes",
        "fits",
        "max_batch",
        "critical_batch",
        "energy_per_token_j",
        "cost_per_million_tokens_usd",
        "accuracy_cost",
        "feasible",
        "problems",
    ]:
        assert key in out, key
    assert set(out["memory_bytes"]) == {
        "weights_bytes",
        "kv_cache_bytes",
        "kv_block_waste_bytes",
        "activations_bytes",
        "reserved_bytes",
        "total_bytes",
    }
    assert out["plan"]["replicas"] == 4  # derived: 8 chips / (tp * pp)
    assert out["chips"] == 8.0 and out["fits"] is True and out["feasible"] is True
    assert out["accuracy_cost"] == pytest.approx(0.2)


@pytest.mark.slow  # 10-25 s on 2 cores: runs in `.ci/run`'s slow pass
def test_serve_slo_flags():
    result = _run(
        "serve",
        "--model",
        "llama-2-70b",
        "--system",
        "dgx-h100",
        "--chips",
        "4",
        "--tp",
        "4",
        "--input-len",
        "1024",
        "--output-len",
        "256",
        "--ttft-slo-ms",
        "1000",
        "--tpot-slo-ms",
        "40",
        "--json",
    )
    assert result.exit_code == 0, result.output
    slo = json.loads(result.stdout)["slo"]
    assert slo["feasible"] is True and slo["batch"] > 1
    assert slo["tpot_s"] <= 0.04 and slo["ttft_s"] <= 1.0
    table = _run(
        "serve", "--model", "llama-2-70b", "--chips", "4", "--tp", "4", "--tpot-slo-ms", "0.01"
    )
    # an unmeetable limit makes the request infeasible (exit 1), with the floor it misses
    assert table.exit_code == 1 and "no batch meets the SLO" in table.output
    assert "no batch meets TPOT <= 0.01 ms (batch 1 gives" in table.output


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf"])
def test_serve_slo_limits_must_be_positive_and_finite(value):
    result = _run("serve", "--tpot-slo-ms", value, "--ttft-slo-ms", "500")
    assert result.exit_code == 2
    assert "command line: --tpot-slo-ms: must be a positive number of milliseconds" in result.output


def test_serve_infeasible_says_why():
    result = _run(
        "serve",
        "--model",
        "llama-2-70b",
        "--chip",
        "h100-sxm",
        "--chips",
        "2",
        "--tp",
        "3",
        "--replicas",
        "1",
        "--batch",
        "1",
        "--json",
    )
    assert result.exit_code == 1
    out = json.loads(result.stdout)
    text = " | ".join(out["problems"])
    assert "the plan needs 3 chips but the system has 2" in text
    assert "heads (64) is not divisible by tp (3)" in text
    assert "kv_heads (8) is not divisible by tp (3)" in text
    result = _run("serve", "--model", "llama-2-70b", "--chip", "h100-sxm", "--chips", "1", "--json")
    assert result.exit_code == 1
    (problem,) = json.loads(result.stdout)["problems"]
    assert problem.startswith("does not fit in memory: needs 143.9 GB per chip")
    assert "capacity 85.5 GB" in problem and "the weights alone need 1.7 chips" in problem


def test_serve_bad_input_is_a_message_not_a_traceback():
    result = _run("serve", "--model", "llama-2-7b", "--weight-format", "int3")
    assert result.exit_code == 2
    assert "command line: --weight-format: must be one of" in result.output
    assert "Traceback" not in result.output
    result = _run("serve", "--scenario", "default-train")
    text = " ".join(result.output.split())  # rich wraps long lines
    assert result.exit_code == 2 and "diffcost serve needs 'serve'" in text
    result = _run("serve", "--accuracy-cost", "int4")
    assert result.exit_code == 2 and "expected FORMAT=NUMBER" in result.output


def test_serve_field_table_drives_constructor_schema_and_sweep():
    """One table: its names and defaults are :func:`serve_plan`'s keywords, the scenario schema
    and the sweep's fields are derived from it (``accuracy_cost`` is written per format)."""
    import inspect

    from diffcost.testing import (
        DEFAULT_ENGINE,
        ENGINE_PLAN_FIELDS,
        PLAN_FIELDS,
        SERVE_FIELDS,
        SERVE_PLAN,
        load_engine,
    )

    params = inspect.signature(dc.serve_plan).parameters
    per_format = [f"accuracy_cost_{fmt}" for fmt in dc.FORMATS]
    assert [f.name for f in SERVE_FIELDS] == [
        k for k in params if k not in ("accuracy_cost", "engine", "source")
    ]
    # the engine-owned fields default to the engine's profile (None: ask the engine); the
    # table's default is the default engine's value, which sweeps and searches start from
    engine_defaults = load_engine(DEFAULT_ENGINE).plan_defaults()
    for f in SERVE_FIELDS:
        if f.name in ENGINE_PLAN_FIELDS:
            assert params[f.name].default is None, f.name
            assert f.default == engine_defaults.get(f.name, f.default), f.name
        else:
            assert f.default == params[f.name].default, f.name
    assert set(SERVE_PLAN) == {f.name for f in SERVE_FIELDS} | set(per_format) | {"engine"}
    assert list(PLAN_FIELDS["serve"]) == [k for k in SERVE_PLAN if k != "engine"]
    for f in SERVE_FIELDS:
        if f.kind == "categorical":
            assert SERVE_PLAN[f.name].choices == f.options() == PLAN_FIELDS["serve"][f.name]


def test_serve_plan_accepts_typed_options():
    from diffcost import Format, ServeMode

    typed = dc.serve_plan(weight_format=Format.INT4, kv_format=Format.FP8, mode=ServeMode.STATIC)
    plain = dc.serve_plan(weight_format="int4", kv_format="fp8", mode="static")
    for a, b in zip(jax.tree.leaves(typed), jax.tree.leaves(plain), strict=True):
        np.testing.assert_array_equal(a, b)
    assert float(typed.compute_format[dc.FORMATS.index("bf16")]) == 1.0  # W4A16 default
