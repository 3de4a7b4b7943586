"""Multi-start co-design: the starting points, the exact ranking of starts, the CLI's refusal.
The runs themselves (best of two starts through the CLI) are in the slow pass:
tests/test_codesign_optimize.py::test_cli_codesign_json_smoke_with_two_starts."""

import numpy as np
import pytest
from typer.testing import CliRunner

from diffcost import load_technology
from diffcost.testing import (
    LEAVES,
    START_SPREAD,
    exact_rank,
    make_problem,
    start_points,
    start_vector,
)


@pytest.fixture(scope="module")
def problem():
    return make_problem("mix", load_technology("n4"))


def test_first_start_is_the_reference_and_the_others_perturb_only_the_design(problem):
    points = start_points(problem, 4, seed=3)
    assert len(points) == 4
    np.testing.assert_array_equal(points[0], start_vector(problem))
    n, (lo, hi) = len(LEAVES), problem.bounds()
    for x in points[1:]:
        np.testing.assert_array_equal(x[n:], points[0][n:])  # every plan at its initial point
        moved = x[:n] != points[0][:n]  # every design leaf moved, or is clipped at the box:
        assert np.all(moved | (x[:n] == lo[:n]) | (x[:n] == hi[:n]))  # H100 has no LPDDR
        assert moved.sum() >= n // 2 and np.all((lo <= x) & (x <= hi))
    spread = np.std(np.concatenate([x[:n] - points[0][:n] for x in points[1:]]))
    assert 0.3 * START_SPREAD < spread < 2.0 * START_SPREAD  # 24 draws of N(0, spread)


def test_starts_are_reproducible_by_seed(problem):
    a, b, c = (start_points(problem, 3, seed=s) for s in (0, 0, 1))
    np.testing.assert_array_equal(a[2], b[2])
    assert not np.array_equal(a[1], c[1])
    assert len(start_points(problem, 1)) == 1


def _exact(train: float, serve: float, edge: float, feasible: bool = True) -> dict:
    values = {"train": train, "serve": serve, "edge": edge}
    return {n: {"objective": v, "feasible": feasible} for n, v in values.items()}


def test_exact_rank_puts_within_budget_and_feasible_first_then_the_lower_objective(problem):
    within: dict[str, float] = dict(
        zip(("area_mm2", "power_w", "cost_usd"), problem.budgets, strict=True)
    )
    over = within | {"power_w": 1.1 * within["power_w"]}
    good = exact_rank(problem, _exact(8.0, 9.0, 0.003), within)
    better = exact_rank(problem, _exact(8.0, 9.0, 0.002), within)
    assert good == (False, 0.0, pytest.approx(np.log(8.0 * 9.0 * 0.003)))  # equal weights
    assert better < good
    cheap_but_over = exact_rank(problem, _exact(1.0, 1.0, 0.001), over)
    assert cheap_but_over[:2] == (True, pytest.approx(0.1)) and good < cheap_but_over
    infeasible = exact_rank(problem, _exact(1.0, 1.0, 0.001, feasible=False), within)
    assert infeasible[0] and good < infeasible


def test_cli_refuses_fewer_than_one_start():
    from diffcost.cli import app

    out = CliRunner().invoke(app, ["codesign", "--workload", "edge", "--starts", "0"])
    assert out.exit_code == 2
    assert "starts" in out.output and "at least 1" in out.output and "Traceback" not in out.output


def test_cli_names_every_bad_budget_and_count_at_once():
    """``--steps 0`` ran one step and a budget of infinity was accepted; each bad flag stopped
    the others being named (issue 39)."""
    from diffcost.cli import app

    args = ["codesign", "--workload", "edge", "--area-mm2", "0", "--power-w", "inf"]
    out = CliRunner().invoke(app, [*args, "--steps", "0", "--starts", "0"])
    assert out.exit_code == 2, out.output
    for text in (
        "--area-mm2: must be a positive number of mm^2, got 0.0: no chip fits a budget of 0",
        "--power-w: must be a positive number of W, got inf: not a finite number",
        "--steps: must be at least 1, got 0",
        "--starts: must be at least 1, got 0",
    ):
        assert text in out.output


def test_cli_lists_every_start_and_marks_the_kept_one():
    from diffcost.testing import console, print_starts

    starts = [
        {"ok": True, "log_score": 2.2, "objective_exact": {"serve": 9.04}, "kept": False},
        {"ok": True, "log_score": 2.1, "objective_exact": {"serve": 8.87}, "kept": True},
        {"ok": False, "log_score": 1.0, "objective_exact": {"serve": 2.0}, "kept": False},
    ]
    with console.capture() as cap:
        print_starts(starts)
    lines = cap.get().splitlines()
    assert len(lines) == 3 and lines[1].endswith("<- kept") and "serve 8.87" in lines[1]
    assert "over a budget or infeasible" in lines[2] and "kept" not in lines[0]
    with console.capture() as cap:
        print_starts(starts[:1])  # one start: nothing to list
    assert cap.get() == ""
