"""Plan fields declared once: the command-line options, the launch flags and the search's plain
rows are derived from the field declarations (TRAIN_FIELDS, SERVE_FIELDS), and each TP split
rule's message, exact mask and relaxed violation from one declaration (TP_RULES)."""

import inspect

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

import diffcost as dc
from diffcost import EXACT, RELAXED, ZeroStage
from diffcost.cli import app
from diffcost.testing import (
    EXPERT_LAYOUT_RULES,
    SERVE_FIELDS,
    TP_RULES,
    TRAIN_FIELDS,
    PlanField,
    TpRule,
    field_option,
    flag,
    option_group,
    switch_args,
    tp_allowed,
    train_plan_flags,
)


def _options(fn) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(fn).parameters)


@pytest.mark.parametrize("fields,name", [(TRAIN_FIELDS, "train"), (SERVE_FIELDS, "serve")])
def test_every_field_with_a_flag_is_an_option_of_its_command(fields, name):
    """A field is a command-line option of ``diffcost train|serve`` exactly when it declares a
    flag, with the declared help text and spelling."""
    command = typer.main.get_command(app).commands[name]  # pyright: ignore[reportAttributeAccessIssue]
    params = {p.name: p for p in command.params}
    for f in fields:
        if f.cli_flag() is None:
            assert f.name not in params, f.name
            continue
        option = params[f.name]
        assert option.help == f.cli_help(), f.name
        spelled = "/".join(option.opts + option.secondary_opts)
        assert spelled == f.cli_flag(), f.name


def test_derived_spelling_help_and_type():
    f = PlanField("ep_dedup", "bool", False, "send a token once per remote node")
    assert f.cli_flag() == "--ep-dedup/--no-ep-dedup"
    assert f.cli_help() == "Send a token once per remote node."
    assert f.cli_type() is bool
    zero = PlanField("zero", "categorical", 1, "ZeRO stage", choices=ZeroStage)
    assert zero.cli_type() is int and zero.cli_help() == "0 | 1 | 2 | 3."
    assert PlanField("x", "count", 0, "x", flag=None).cli_flag() is None
    assert PlanField("micro_batch", "count", 1, "m").cli_flag() == "--micro-batch"


def test_an_option_is_declared_once_and_shared():
    """The same field gives the same option object to every group (one declaration)."""
    tp = next(f for f in TRAIN_FIELDS if f.name == "tp")
    assert field_option(tp) is field_option(tp)
    group = option_group(TRAIN_FIELDS, names=("tp",))
    assert _options(group)["tp"] is field_option(tp)
    assert list(_options(train_plan_flags)) == [f.name for f in TRAIN_FIELDS if f.cli_flag()]


def test_a_new_switch_reaches_the_command_line_and_the_launch_line(monkeypatch):
    """A boolean field that declares a Megatron-LM flag is emitted when on, with no change in
    the launcher (the switches it places itself keep their place)."""
    from diffcost.testing import megatron as mg

    new = PlanField("new_switch", "bool", False, "a switch", launch=(("megatron", "--new"),))
    monkeypatch.setattr(mg, "TRAIN_FIELDS", (*TRAIN_FIELDS, new))
    assert mg.switch_args({"new_switch": True, "sequence_parallel": True}) == ["--new"]
    assert mg.switch_args({"new_switch": False}) == []
    assert switch_args({"tp_comm_overlap": True}) == []  # placed by parallel_args
    assert flag("tp") == "--tensor-model-parallel-size"
    assert option_group((*TRAIN_FIELDS, new), names=("new_switch",))  # an option too


def test_the_search_varies_the_choices_its_fields_declare():
    """The training search's choices, candidate columns and relaxed weights are the fields
    declared ``axis=Choices()`` (categoricals, then bools), with the space's values, else the
    declaration's (every choice; False, True)."""
    from diffcost.testing import Choices, TrainProblem, searched_choices
    from diffcost.testing import train_layout as _layout

    model = dc.load_model("llama-2-7b")
    space = dc.TrainSearchSpace(global_batch=64, seq_len=2048, chips=(8,), precision=("bf16",))
    names = [c.name for c in TrainProblem(None, model, space).choices]
    assert names == ["recompute", "zero", "precision", "sequence_parallel"]
    assert names == [f.name for f in searched_choices(TRAIN_FIELDS)]
    assert list(_layout(space))[1:-1] == names
    new = PlanField("new_switch", "bool", False, "a switch", axis=Choices())
    assert isinstance(new.axis, Choices) and new.axis.of(new, space) == (False, True)
    order = [f.name for f in searched_choices((new, *TRAIN_FIELDS))]
    assert order == ["recompute", "zero", "precision", "new_switch", "sequence_parallel"]


def test_read_gives_back_the_plain_values():
    """An exact plan's leaves read back as the values it was built from."""
    plan = dc.train_plan(tp=2, recompute="full", zero=3, precision="fp8", sequence_parallel=True)
    field = {f.name: f for f in TRAIN_FIELDS}
    got = {k: field[k].read(getattr(plan, k)) for k in ("tp", "recompute", "zero", "precision")}
    assert got == {"tp": 2, "recompute": "full", "zero": 3, "precision": "fp8"}
    assert field["sequence_parallel"].read(plan.sequence_parallel) is True


def test_search_results_are_plans_and_rows_only_at_the_boundary():
    system, model = dc.load_system("dgx-a100", chips=8), dc.load_model("llama-2-7b")
    space = dc.TrainSearchSpace(global_batch=64, seq_len=2048, chips=(8,), max_cp=1)
    result = dc.search_train(system, model, space, exhaustive=True)
    assert isinstance(result.best, dc.TrainPlan)
    assert all(isinstance(p, dc.TrainPlan) for p, _ in result.alternatives)
    out = dc.TrainCost(system, model)(result.best)  # ready for the cost model as it is
    assert float(out.step_time_s) == pytest.approx(result.best_objective, rel=1e-9)
    row = result.rows()[0]
    assert row["chips"] == 8 and row["dp"] * row["tp"] * row["pp"] * row["cp"] == 8
    assert list(row)[-3:] == ["dp", "global_batch", "seq_len"]


@pytest.mark.parametrize("rule", (*TP_RULES, *EXPERT_LAYOUT_RULES), ids=lambda r: r.key)
def test_each_tp_rule_mask_message_and_violation_agree(rule: TpRule):
    """For every (n, tp) pair: the exact mask (numpy and Python), the message and the relaxed
    violation at integer points (exact and relaxed smoothing) say the same thing."""
    ns, tps = np.arange(1, 65), np.arange(1, 17)
    n, t = np.meshgrid(ns, tps.astype(float))
    mask = rule.holds(n, t)
    for i, j in [(0, 0), (3, 7), (5, 31), (15, 63), (7, 11)]:
        a, b = float(n[i, j]), float(t[i, j])
        assert bool(mask[i, j]) == bool(rule.holds(int(a), int(b)))
        assert (rule.problem(a, b) is None) == bool(mask[i, j])
        for sm in (EXACT, RELAXED):
            assert (float(rule.violation(a, b, sm)) < 1e-6) == bool(mask[i, j]), (a, b)


def test_tp_rule_messages_are_the_ones_users_see():
    heads, kv = TP_RULES[0], TP_RULES[2]
    assert heads.problem(32.0, 3.0) == "heads (32) is not divisible by tp (3): remainder 2"
    assert kv.problem(8.0, 3.0) == (
        "kv_heads (8) is neither a multiple nor a divisor of tp (3): Megatron-LM refuses the "
        "query-group split"
    )
    assert kv.problem(8.0, 16.0) is None and kv.problem(8.0, 4.0) is None
    spread, split = EXPERT_LAYOUT_RULES
    assert spread.problem(8.0, 3.0) == (
        "experts (8) is not divisible by tp (3) (expert parallel puts experts / tp whole "
        "experts on each rank)"
    )
    assert split.problem(14336.0, 5.0) == (
        "expert_ffn_hidden (14336) is not divisible by tp (5): remainder 1 (or spread whole "
        "experts with expert_parallel)"
    )
    assert tp_allowed(dc.load_model("llama-2-70b"), 8) and not tp_allowed(
        dc.load_model("llama-2-70b"), 3
    )


def test_serve_help_keeps_the_declared_spellings():
    text = CliRunner().invoke(app, ["serve", "--help"], terminal_width=200).output
    for spelled in (
        "--draft-fraction",
        "--disaggregated / --colocated",
        "--tensor-parallel-experts",
    ):
        assert spelled in text


def test_a_bad_flag_value_names_the_flag_as_declared():
    """``--draft-fraction`` is the declared spelling of ``draft_params_fraction``: its error
    names it (it named ``--draft-params-fraction``, a flag that does not exist)."""
    args = ["serve", "--model", "llama-2-7b", "--system", "dgx-h100", "--draft-fraction", "2"]
    out = CliRunner().invoke(app, args).output
    assert "command line: --draft-fraction: must lie in [0, 1), got 2.0" in out


def test_train_plan_keywords_are_the_declared_fields():
    """``train_plan``'s keywords, defaults and checks are :data:`TRAIN_FIELDS`'; an unknown
    keyword is a problem with the closest field suggested, listed with the others."""
    params = _options(dc.train_plan)
    assert list(params) == [*(f.name for f in TRAIN_FIELDS), "source"]
    assert all(params[f.name].default == f.default for f in TRAIN_FIELDS)
    with pytest.raises(dc.SpecError) as err:
        dc.train_plan(tpp=2, pp=0)
    assert [(p.key, p.reason) for p in err.value.problems] == [
        ("tpp", "not a training plan field; did you mean 'tp'?"),
        ("pp", "must be a positive integer, got 0"),
    ]


def test_a_new_number_reaches_both_launch_lines(monkeypatch):
    """A number that declares a Megatron-LM flag and a Megatron-Bridge key is emitted (flag
    and value, ``KEY=VALUE``) when it differs from its default, with no change in either
    launcher."""
    from diffcost.testing import bridge as br
    from diffcost.testing import megatron as mg

    new = PlanField(
        "new_degree", "degree", 1, "d", launch=(("megatron", "--new"), ("bridge", "model.new"))
    )
    monkeypatch.setattr(mg, "TRAIN_FIELDS", (*TRAIN_FIELDS, new))
    monkeypatch.setattr(br, "TRAIN_FIELDS", (*TRAIN_FIELDS, new))
    assert mg.switch_args({"new_degree": 4, "tp": 8}) == ["--new", "4"]
    assert mg.switch_args({"new_degree": 1}) == []
    assert br.declared_overrides({"new_degree": 4, "tp": 8}) == ["model.new=4"]
    assert br.declared_overrides({}) == []


def test_the_fields_a_search_shares_are_declared():
    """Every training field a search neither varies nor derives per plan takes the space's
    value, else its default (the launch line's and every evaluated plan's)."""
    from diffcost.testing import fixed_fields

    space = dc.TrainSearchSpace(global_batch=64, seq_len=2048, chips=(8,), lora_rank=8)
    fixed = fixed_fields(space)
    assert fixed["lora_rank"] == 8 and fixed["optimizer"] == "adam"
    assert fixed["overlap_grad_reduce"] is True and fixed["tp_comm_overlap"] is False
    assert fixed["global_batch"] == 64
    assert not {"tp", "recompute", "dp", "expert_tp", "shard_group"} & set(fixed)
