"""The input fuzz suite (tests/fuzz): no input may end in a traceback, an unclear message, a NaN
answer or an infeasible plan reported feasible.

Two profiles: the default run takes 60 hypothesis flag combinations; ``-m slow`` takes every
80th deterministic case (about 2 min on 2 cores), every 13th (over 4,000 of 56,045: about 6
min; every 3rd took 24 min, a third of the CI's slow pass) and 400 combinations.
The stride is prime, so cases generated in cycles of 2-12 variants are all sampled.  The
release profile, every case, is ``python -m tests.fuzz``.
"""

import pytest
from fuzz.cases import all_cases, flag_combinations
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


@pytest.mark.slow  # about 6 min on 2 cores
def test_fuzz_long_profile(runner):
    _run_every(runner, 13)
    assert sum(runner.tally.total().values()) >= 4_000


def _combinations(runner: Runner, examples: int) -> None:
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
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
