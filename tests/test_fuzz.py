"""The input fuzz suite (tests/fuzz): no input may end in a traceback, an unclear message, a NaN
answer, an infeasible plan reported feasible, an invalid input answered or a valid one refused
(the oracle, :mod:`fuzz.oracle`).

Two profiles: the default run takes 60 hypothesis flag combinations and the judge's self-test
(known defects, each of which must be rated a defect; the oracle's rules on known inputs);
``-m slow`` takes every 80th deterministic case (about 2 min on 2 cores), every 13th (over
5,000 of 70,187: about 7 min; every 3rd took 24 min, a third of the CI's slow pass), 400
combinations and the float32 numeric profile (relaxed training gradients finite on catalogue
chip x model pairs).  The stride is prime, so cases generated in cycles of 2-12 variants are
all sampled.  The release profile, every case, is ``python -m tests.fuzz``.
"""

import math

import pytest
from fuzz import oracle
from fuzz.cases import (
    all_cases,
    command_options,
    degree_cases,
    flag_combinations,
    key_typos,
    unit_typo_cases,
)
from fuzz.harness import BAD, Case, Runner, judge
from hypothesis import HealthCheck, given, settings


@pytest.fixture(scope="module")
def runner() -> Runner:
    return Runner()


def _run_every(runner: Runner, every: int) -> None:
    for i, case in enumerate(all_cases()):
        if i % every == 0:
            runner.run(case)
    total = runner.tally.total()
    print("\n" + runner.tally.table())
    defects = [f"{o}: {c.label}\n    {d}" for o, c, d in runner.tally.examples]
    assert not any(total[k] for k in BAD), "\n".join(defects)


@pytest.mark.slow  # about 2 min on 2 cores (130 s measured): `.ci/run`'s slow pass
def test_fuzz_ci_profile(runner):
    _run_every(runner, 80)
    assert sum(runner.tally.total().values()) > 350


@pytest.mark.slow  # about 7 min on 2 cores
def test_fuzz_long_profile(runner):
    _run_every(runner, 13)
    assert sum(runner.tally.total().values()) >= 5_000


def _combinations(runner: Runner, examples: int) -> None:
    # the command line's options read before hypothesis draws: the first ``import diffcost.cli``
    # of every command (they load lazily) touches the global ``random`` state, which
    # hypothesis refuses inside a strategy
    for path in (("train",), ("serve",)):
        command_options(path)

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        # iterating HealthCheck skips its deprecated members (HealthCheckMeta.__iter__), which
        # pyright types as HealthCheckMeta
        suppress_health_check=list(HealthCheck),  # pyright: ignore[reportArgumentType]
    )
    @given(flag_combinations())
    def check(case: Case) -> None:
        outcome, detail = runner.run(case)
        assert outcome not in BAD, f"{outcome}: {case.label}\n  {detail}"

    check()


def test_flag_combinations(runner):
    _combinations(runner, 60)


@pytest.mark.slow
def test_flag_combinations_long(runner):
    _combinations(runner, 400)


# --- the judge itself: each defect is recognised ------------------------------------------------
_CASE = Case("t", "t", ("train",), names=("chip.toml",), limits=(("ttft_s", 0.1),))


@pytest.mark.parametrize(
    ("code", "exc", "out", "err", "expected"),
    [
        (0, None, '{"step_time_s": 1.0, "feasible": true}', "", "answer"),
        (0, None, '{"step_time_s": NaN}', "", "nan_answer"),
        (0, None, '{"tokens_per_s": -3.0}', "", "nan_answer"),
        (0, None, '{"headroom_bytes": -3.0}', "", "answer"),
        (0, None, "step time  nan s", "", "nan_answer"),
        (0, None, '{"feasible": true, "ttft_s": 0.5}', "", "false_feasible"),
        (
            0,
            None,
            '{"feasible": true, "capacity_bytes": 1.0, "memory_bytes": {"total_bytes": 2.0}}',
            "",
            "false_feasible",
        ),
        (
            0,
            None,
            '{"feasible": true, "mfu": 0.5, "chips": 8, "plan": {"tp": 4, "pp": 1, "dp": 1}}',
            "",
            "false_feasible",
        ),
        (1, None, '{"feasible": false, "problems": ["does not fit"]}', "", "infeasible"),
        (1, None, "", "", "unclear"),
        (2, None, "", "error: invalid input:\n  - /x/chip.toml: a: b\n", "clear"),
        (2, None, "", "error: invalid input:\n  - <arguments>: a: b\n", "unclear"),
        (2, None, "", "╭─ Error ─╮ chip.toml", "unclear"),
        (1, KeyError("kind"), "", "", "traceback"),
        (3, None, "", "", "traceback"),
    ],
)
def test_judge_recognises_each_outcome(code, exc, out, err, expected):
    assert judge(code, exc, out, err, _CASE)[0] == expected


# --- the judge's self-test: known defects, each must be rated a defect (issue 39) -------------
_INVALID = Case("t", "t", ("train", "--tp", "0"), names=("--tp",), valid=False)
_VALID = Case("t", "t", ("train", "--tp", "2"), names=("--tp",), valid=True)
_KEYED = Case("t", "t", ("train",), names=("chip.toml",), keys=("bf16_flop_per_s",), valid=False)
_PLAN = (
    '{"feasible": true, "chips": 8, "best_plan": {"tp": 1, "pp": 1, "dp": 8, "cp": 1},'
    ' "best_breakdown": {"step_time_s": 1.0, "mfu": 0.4, "chips": 8},'
    ' "alternatives": [{"plan": {}, "breakdown": {"step_time_s": 1.0}},'
    ' {"plan": {}, "breakdown": {"step_time_s": 1.0}, "best_breakdown": {"ttft_s": %s}}]}'
)
_LOAD = '{"feasible": true, "ttft_s": 0.01, "load": {"utilisation": %s, "ttft_p99_s": %s}}'


@pytest.mark.parametrize(
    ("case", "code", "exc", "out", "err", "expected"),
    [
        # an invalid input answered, exit 0 with finite numbers, or exit 1 with reasons
        (_INVALID, 0, None, '{"step_time_s": 1.0, "feasible": true}', "", "accepted_invalid"),
        (_INVALID, 1, None, '{"feasible": false, "problems": ["x"]}', "", "accepted_invalid"),
        (_INVALID, 0, None, '{"step_time_s": NaN}', "", "accepted_invalid"),
        # NaN / Infinity / negative nested in a plan's alternatives or a load block
        (_CASE, 0, None, _PLAN % "NaN", "", "nan_answer"),
        (_CASE, 0, None, _PLAN % "-1.0", "", "nan_answer"),
        (_CASE, 0, None, _LOAD % ("0.5", "Infinity"), "", "nan_answer"),
        (_CASE, 0, None, _LOAD % ("NaN", "0.1"), "", "nan_answer"),
        # a saturated queue, a plan over its memory, an MFU above 1 in an alternative
        (_CASE, 0, None, _LOAD % ("1.9", "3.4e6"), "", "false_feasible"),
        (
            _CASE,
            0,
            None,
            '{"feasible": true, "best_plan": {}, "best_breakdown": {"capacity_bytes": 1.0,'
            ' "memory": {"total_bytes": 2.0}}}',
            "",
            "false_feasible",
        ),
        (
            _CASE,
            0,
            None,
            '{"feasible": true, "alternatives": [{"breakdown": {"mfu": 1.3}}]}',
            "",
            "false_feasible",
        ),
        # refusals that do not name the input: the value given, the bare word, the file only
        (
            _INVALID,
            2,
            None,
            "",
            "error: invalid input:\n  - <arguments>: 0 must be > 0\n",
            "unclear",
        ),
        (_INVALID, 2, None, "", "error: invalid input:\n  - <arguments>: tp = 0\n", "unclear"),
        (_KEYED, 2, None, "", "error: invalid input:\n  - /x/chip.toml: bad peak\n", "unclear"),
        # a traceback, and a valid input refused
        (_INVALID, 1, ZeroDivisionError("float division by zero"), "", "", "traceback"),
        (
            _VALID,
            2,
            None,
            "",
            "error: invalid input:\n  - --tp: 2 is not allowed\n",
            "refused_valid",
        ),
    ],
)
def test_judge_rates_known_defects_as_defects(case, code, exc, out, err, expected):
    outcome, detail = judge(code, exc, out, err, case)
    assert outcome == expected, detail
    assert outcome in BAD


@pytest.mark.parametrize(
    ("case", "code", "out", "err", "expected"),
    [
        (_INVALID, 2, "", "error: invalid input:\n  - --tp: 0 must be >= 1\n", "clear"),
        (_KEYED, 2, "", "error: /x/chip.toml: compute.bf16_flop_per_s: 989 FLOP/s\n", "clear"),
        (_VALID, 0, '{"step_time_s": 1.0, "feasible": true}', "", "answer"),
        (_VALID, 1, '{"feasible": false, "problems": ["does not fit"]}', "", "infeasible"),
        (_CASE, 0, _PLAN % "0.5", "", "answer"),
        (_CASE, 0, _LOAD % ("0.5", "0.2"), "", "answer"),
        (_CASE, 0, '{"feasible": true, "load": {"wait_s": null}}', "", "answer"),
    ],
)
def test_judge_rates_good_runs_good(case, code, out, err, expected):
    assert judge(code, None, out, err, case) == (expected, "")


def test_oracle_rules_on_known_inputs():
    # flags
    assert oracle.degree_valid("0", 8) is False  # train --tp 0 --chips 8
    assert oracle.degree_valid("2", 8) is True
    assert oracle.degree_valid("3", 8) is None
    assert oracle.flag_valid("--tp", int, "nan") is False
    assert oracle.flag_valid("--tp", int, "1.5") is False
    assert oracle.flag_valid("--ttft-slo-ms", float, "0") is False  # a limit <= 0
    assert oracle.flag_valid("--qps", float, "1e300") is False
    assert oracle.flag_valid("--arrival-cv", float, "0") is True
    assert oracle.flag_valid("--model", str, "{dir}/afile") is False
    # unit typos: another spelling of the same quantity only at the same SI value
    assert oracle.unit_typo_valid("bf16_tflop_per_s", "bf16_flop_per_s", 989.4, set()) is False
    assert oracle.unit_typo_valid("bf16_pj_per_flop", "bf16_j_per_flop", 0.9, set()) is False
    assert oracle.unit_typo_valid("scale_up_latency_us", "scale_up_latency_s", 2.5, set()) is False
    assert oracle.unit_typo_valid("collective_jitter_us", "collective_jitter_s", 0.0, set()) is True
    assert oracle.unit_typo_valid("capacity_gib", "capacity_gb", 80, set()) is None
    assert oracle.unit_typo_valid("tdp_w", "tdp", 700, set()) is False
    # spec values against the documented domain
    peak = ("compute", "bf16_tflop_per_s")
    assert oracle.spec_valid("chip", peak, "x", 989.4, math.nan) is False
    assert oracle.spec_valid("chip", peak, "x", 989.4, 0) is False
    assert (
        oracle.spec_valid("chip", ("memory", "capacity_gb"), "delete memory.capacity_gb", 80, None)
        is False
    )
    assert (
        oracle.spec_valid(
            "chip", ("compute", "fp32_tflop_per_s"), "delete compute.fp32_tflop_per_s", 1, None
        )
        is True
    )
    assert oracle.spec_valid("chip", ("display_name",), "x", "H100", "ünï-cødé") is True
    assert oracle.spec_valid("chip", ("name",), "x", "h100-sxm", "") is False
    # a model's [source] replaced by text, calibration keys every one required, a model key
    # another one needs (experts, experts_per_token): cannot tell
    assert oracle.spec_valid("model", ("source",), "source = 'table'", {}, "table") is False
    fraction = ("efficiency", "memory_bandwidth_fraction")
    assert oracle.spec_valid("calibration", fraction, "delete x", 0.86, None) is False
    assert oracle.spec_valid("calibration", fraction, "x", 0.86, 0) is False  # in (0, 1]
    assert oracle.spec_valid("model", ("experts",), "delete experts", 8, None) is None
    failures = ("system", ("reliability", "failures_per_chip_hour"))
    assert oracle.spec_valid(*failures, "x", 1e-5, 0) is True  # number >= 0
    assert oracle.spec_valid(*failures, "x", 1e-5, -1) is False


def test_unit_typo_generator_covers_the_census():
    """Every one-character deletion and adjacent swap of every unit-suffixed key of the
    built-in chips and systems: 13,970 on the catalogue of issue 39."""
    assert sorted(key_typos("tdp_w")) == sorted(
        ["dp_w", "tp_w", "td_w", "tdpw", "tdp_", "dtp_w", "tpd_w", "td_pw", "tdpw_"]
    )
    cases = list(unit_typo_cases())
    assert len(cases) >= 13_000
    by_label = {c.label.split(": ", 1)[1]: c for c in cases if "h100-sxm.toml" in c.label}
    assert by_label["compute.bf16_tflop_per_s -> bf16_flop_per_s"].valid is False
    assert by_label["energy.bf16_pj_per_flop -> bf16_j_per_flop"].valid is False
    assert sum(c.valid is None for c in cases) < 50


def test_degree_cases_include_tp_zero_against_chips():
    labels = {c.label: c for c in degree_cases()}
    tp0 = "train --json --model llama-3-8b --chip h100-sxm --chips 8 --tp 0"
    assert labels[tp0].valid is False
    assert labels[tp0].names == ("--tp",)


# --- the float32 numeric profile (issue 39): relaxed gradients finite, as users run -----------
_F32_PAIRS = [
    ("h100-sxm", 8, "llama-3-8b", {"tp": 2, "dp": 4}),
    ("a100-sxm-80gb", 16, "llama-2-13b", {"tp": 4, "pp": 2, "dp": 2}),
    ("tpu-v5p", 8, "llama-2-7b", {"tp": 4, "dp": 2}),
    ("b200", 8, "mixtral-8x7b", {"tp": 2, "dp": 4, "ep": 2}),
    ("mi300x", 8, "megatron-gpt-39.1b", {"tp": 8}),
]


@pytest.mark.slow  # about 30 s on 2 cores
@pytest.mark.parametrize(("chip", "chips", "model", "degrees"), _F32_PAIRS)
def test_float32_relaxed_training_gradients_are_finite(chip, chips, model, degrees):
    """With x64 off and every leaf cast to float32, the gradient of the relaxed training step
    time with respect to the plan and the system is finite (users run in float32)."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp
    import numpy as np

    import diffcost as dc
    from diffcost import RELAXED

    system = dc.load_system(chip=chip, chips=chips)
    built = dc.load_model(model)
    plan = dc.train_plan(global_batch=64, seq_len=2048, **degrees)
    with jax.enable_x64(False):
        sys32, model32, plan32 = jax.tree_util.tree_map(
            lambda x: jnp.asarray(x, jnp.float32) if eqx.is_inexact_array(x) else x,
            (system, built, plan),
        )

        def step(p, s):
            return jnp.log(dc.TrainCost(s, model32, RELAXED)(p).step_time_s)

        value = step(plan32, sys32)
        grads = eqx.filter_grad(lambda ps: step(*ps))((plan32, sys32))
    assert value.dtype == jnp.float32 and np.isfinite(float(value))
    leaves = [x for x in jax.tree_util.tree_leaves(grads) if eqx.is_inexact_array(x)]
    bad = [i for i, x in enumerate(leaves) if not np.all(np.isfinite(np.asarray(x)))]
    assert leaves and not bad, f"{len(bad)} of {len(leaves)} gradient leaves not finite"
