"""Typed options: every kind coerces its member or plain value and rejects anything else with
the CLI's error (key and choices); the field tables agree with every place that reads them."""

import enum

import jax
import numpy as np
import pytest
from typer.testing import CliRunner

import diffcost as dc
from diffcost import (
    FORMATS,
    Format,
    Optimizer,
    Recompute,
    ServeMode,
    ServeObjective,
    SpecError,
    TrainObjective,
    TrainPrecision,
    TrainSearchSpace,
    ZeroStage,
)
from diffcost.cli import app
from diffcost.testing import (
    PLAN_FIELDS,
    PLAN_SCHEMAS,
    SERVE_PLAN,
    TRAIN_FIELDS,
    TRAIN_PLAN,
    TRAINING_PRECISIONS,
    coerce,
    coerce_all,
    objective_of,
    values,
)

KINDS: list[tuple[type[enum.Enum], object, object]] = [  # kind, a valid value, an invalid one
    (Format, "fp8", "fp6"),
    (TrainPrecision, "bf16", "int8"),
    (Recompute, "full", "some"),
    (ZeroStage, 3, 5),
    (Optimizer, "adam", "adamw"),
    (ServeMode, "static", "dynamic"),
    (TrainObjective, "energy", "enrgy"),
    (ServeObjective, "latency", "latncy"),
]


def _message(err: pytest.ExceptionInfo[SpecError]) -> str:
    (problem,) = err.value.problems
    return str(problem)


@pytest.mark.parametrize("kind,good,bad", KINDS)
def test_each_option_kind_coerces_and_rejects_with_the_choices(kind, good, bad):
    member = coerce(kind, good, "key")
    assert member is kind(good) and coerce(kind, member, "key") is member
    assert member == good  # a StrEnum/IntEnum member compares (and serialises) as its value
    with pytest.raises(SpecError) as err:
        coerce(kind, bad, "some_key", source="file.toml")
    choices = ", ".join(map(str, values(kind)))
    assert _message(err) == f"file.toml: some_key: must be one of {choices}; got {bad!r}"


def test_a_bool_is_not_a_zero_stage():
    with pytest.raises(SpecError, match="zero: must be one of 0, 1, 2, 3; got True"):
        coerce(ZeroStage, True, "zero")


def test_coerce_all_lists_every_bad_entry():
    assert coerce_all(Recompute, ("none", Recompute.FULL), "recompute") == (
        Recompute.NONE,
        Recompute.FULL,
    )
    with pytest.raises(SpecError) as err:
        coerce_all(Recompute, ("none", "some", "most"), "recompute")
    assert _message(err) == (
        "<arguments>: recompute: each must be one of none, selective, full; got 'some', 'most'"
    )
    with pytest.raises(SpecError, match="got nothing"):
        coerce_all(Recompute, (), "recompute")


def test_format_enum_is_the_format_order():
    assert values(Format) == FORMATS


def test_train_search_space_rejects_a_misspelt_objective():
    with pytest.raises(SpecError) as err:
        TrainSearchSpace(global_batch=8, seq_len=128, chips=(8,), objective="enrgy")
    assert _message(err) == (
        "<arguments>: objective: must be one of time, cost, energy, p90; got 'enrgy'"
    )


@pytest.mark.parametrize(
    "key,value,expect",
    [
        ("recompute", ("some",), "recompute: each must be one of none, selective, full"),
        ("zero", (0, 4), "zero: each must be one of 0, 1, 2, 3; got 4"),
        ("precision", ("int4",), "precision: each must be one of fp32, tf32, bf16, fp16, fp8"),
        ("optimizer", "adamw", "optimizer: must be one of adam, adam_no_master, sgd"),
    ],
)
def test_train_search_space_checks_every_option(key, value, expect):
    with pytest.raises(SpecError, match=expect):
        TrainSearchSpace(global_batch=8, seq_len=128, chips=(8,), **{key: value})


def test_train_search_space_stores_members():
    space = TrainSearchSpace(global_batch=8, seq_len=128, chips=(8,), objective="cost")
    assert space.objective is TrainObjective.COST
    assert space.recompute == tuple(Recompute) and space.zero == tuple(ZeroStage)


@pytest.mark.parametrize(
    "kw,expect",
    [
        (dict(objective="throughpt"), "objective: must be one of throughput, latency, cost"),
        (dict(weight_formats=("bf16", "fp6")), "weight_formats: each must be one of fp32"),
        (dict(kv_formats=("int3",)), "kv_formats: each must be one of fp32"),
        (dict(mode="dynamic"), "mode: must be one of static, continuous; got 'dynamic'"),
        (dict(accuracy_cost=(("fp6", 0.1),)), "accuracy_cost: expected FORMAT=non-negative"),
        (dict(accuracy_cost=(("int4", -1.0),)), "got int4=-1.0"),
    ],
)
def test_serve_search_space_checks_every_option(kw, expect):
    with pytest.raises(SpecError, match=expect):
        dc.ServeSearchSpace(input_len=8, output_len=8, chips=8, **kw)


def test_train_objective_is_checked_inside_the_library_too():
    sys_ = dc.load_system("dgx-a100", chips=8)
    out = dc.TrainCost(sys_, dc.load_model("llama-2-7b"))(dc.train_plan(dp=8, global_batch=8))
    assert float(objective_of(out, TrainObjective.TIME)) == float(out.step_time_s)
    with pytest.raises(SpecError, match="objective: must be one of time, cost, energy"):
        objective_of(out, "enrgy")


def test_train_plan_accepts_members_or_values_alike():
    by_member = dc.train_plan(
        recompute=Recompute.FULL,
        zero=ZeroStage.WEIGHTS,
        precision=TrainPrecision.FP8,
        optimizer=Optimizer.SGD,
    )
    by_value = dc.train_plan(recompute="full", zero=3, precision="fp8", optimizer="sgd")
    for a, b in zip(jax.tree.leaves(by_member), jax.tree.leaves(by_value), strict=True):
        np.testing.assert_array_equal(a, b)


def test_training_precisions_agree_everywhere():
    """One list of training formats: the constructor, the scenario schema (the field table's
    and the loader's), the sweep, the search space and the CLI accept exactly
    :class:`TrainPrecision` (fp32, tf32, bf16, fp16, fp8); integer and 4-bit formats are
    inference formats and rejected everywhere."""
    allowed = values(TrainPrecision)
    assert allowed == TRAINING_PRECISIONS == ("fp32", "tf32", "bf16", "fp16", "fp8")
    assert TRAIN_PLAN["precision"].choices == allowed
    assert PLAN_SCHEMAS["train"]["precision"].choices == allowed
    assert PLAN_FIELDS["train"]["precision"] == allowed
    for fmt in FORMATS:
        ok = fmt in allowed
        for build in (
            lambda f: dc.train_plan(precision=f),
            lambda f: TrainSearchSpace(global_batch=8, seq_len=128, chips=(8,), precision=(f,)),
        ):
            if ok:
                build(fmt)
            else:
                with pytest.raises(SpecError, match="precision"):
                    build(fmt)
    result = CliRunner().invoke(app, ["plan", "train", "--precision", "int8"])
    text = " ".join(result.output.split())  # the console wraps long lines
    assert result.exit_code == 2 and f"subset of {', '.join(allowed)}; got 'int8'" in text


def test_train_field_table_is_the_scenario_schema():
    """The loader's ``[plan]`` schemas are the ones derived from the field tables (one source:
    :func:`diffcost._inputs.schema.plan_table`), with each field's doc."""
    assert PLAN_SCHEMAS["train"] is TRAIN_PLAN and PLAN_SCHEMAS["serve"] is SERVE_PLAN
    assert list(TRAIN_PLAN) == [f.name for f in TRAIN_FIELDS]
    assert all(TRAIN_PLAN[f.name].doc == f.doc for f in TRAIN_FIELDS)
    assert TRAIN_PLAN["zero"].kind == "count" and not TRAIN_PLAN["zero"].positive  # 0..3
    assert TRAIN_PLAN["grad_bytes_per_param"].positive  # its check rejects 0
    assert [f.name for f in TRAIN_FIELDS] == list(PLAN_FIELDS["train"])


def test_train_field_table_matches_the_constructor():
    import inspect

    params = inspect.signature(dc.train_plan).parameters
    assert [f.name for f in TRAIN_FIELDS] == [k for k in params if k != "source"]
    for f in TRAIN_FIELDS:
        assert f.default == params[f.name].default, f.name
