"""A scenario file's ``collective = "NAME"``: the collective algorithm of its predictions (a
name of :data:`diffcost.COLLECTIVES`, checked with the rest of the file, all problems at once);
the command line's ``--collective``, when given, wins."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import diffcost as dc
from diffcost.cli import app

runner = CliRunner()


def _scenario(tmp_path: Path, system: str = "dgx-h100", **top: str) -> Path:
    """A multi-node training scenario (the DP all-reduce crosses the scale-out network)."""
    lines = [f'{key} = "{value}"' for key, value in top.items()]
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "collective-test.toml"
    path.write_text(
        "\n".join(
            [
                "schema_version = 1",
                'kind = "train"',
                'name = "collective-test"',
                'display_name = "Llama 2 70B on 64 chips"',
                'model = "llama-2-70b"',
                f'system = "{system}"',
                "chips = 64",
                *lines,
                "[plan]",
                "tp = 8",
                "pp = 2",
                "dp = 4",
                "[source]",
                'scenario = "a test"',
            ]
        )
        + "\n"
    )
    return path


def _step_time(path: Path, *extra: str) -> float:
    result = runner.invoke(app, ["train", "--scenario", str(path), "--json", *extra])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    return out["step_time_s"]


def test_the_scenario_collective_is_used_and_the_flag_wins(tmp_path):
    tree = _scenario(tmp_path / "tree", collective="tree")
    plain = _scenario(tmp_path)
    assert dc.load_scenario(tree).collective == "tree"
    assert dc.load_scenario(plain).collective is None
    default = _step_time(plain)
    assert _step_time(tree) != pytest.approx(default, rel=1e-3)
    assert _step_time(tree) == _step_time(plain, "--collective", "tree")
    assert _step_time(tree, "--collective", "fastest") == default
    result = runner.invoke(app, ["train", "--scenario", str(tree), "--json"])
    assert json.loads(result.output)["collective"] == "tree"


def test_an_unknown_name_is_named_with_the_file_key_and_a_suggestion(tmp_path):
    path = _scenario(tmp_path, collective="tre", model_typo="x")
    with pytest.raises(dc.SpecError) as err:
        dc.load_scenario(path)
    problems = {p.key: p for p in err.value.problems}
    assert set(problems) == {"model_typo", "collective"}  # every problem at once
    assert problems["collective"].file == str(path)
    assert problems["collective"].reason == (
        "unknown collective algorithm 'tre'; did you mean tree? "
        f"(choices: {', '.join(dc.COLLECTIVES)})"
    )
    result = runner.invoke(app, ["train", "--scenario", str(path)])
    assert result.exit_code == 2
    assert f"  - {path}: collective: unknown collective algorithm 'tre'" in result.output


def test_nvls_needs_a_system_that_reduces_in_the_network(tmp_path):
    path = _scenario(tmp_path, system="dgx-a100", collective="nvls")
    with pytest.raises(dc.SpecError) as err:
        dc.load_scenario(path)
    [problem] = err.value.problems
    assert (problem.file, problem.key) == (str(path), "collective")
    assert problem.reason.startswith("nvls needs a system whose scale-up switches reduce in")
    nvls = _scenario(tmp_path / "nvls", collective="nvls")  # dgx-h100 reduces in the network
    assert dc.load_scenario(nvls).collective == "nvls"
    # the scenario's system overridden by one without: named with the scenario's file
    result = runner.invoke(app, ["train", "--scenario", str(nvls), "--system", "dgx-a100"])
    assert result.exit_code == 2
    assert f"  - {nvls}: collective: " in result.output
