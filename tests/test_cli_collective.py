"""``--collective NAME``: the collective algorithm of a prediction or a search, chosen on the
command line (:data:`diffcost.COLLECTIVES`); bad names and unavailable algorithms exit 2."""

import json

import pytest
from typer.testing import CliRunner

import diffcost as dc
from diffcost.cli import app

runner = CliRunner()

#: A multi-node training plan: the DP all-reduce crosses the scale-out network.
_TRAIN = (
    "train", "--model", "llama-2-70b", "--system", "dgx-h100", "--chips", "64",
    "--tp", "8", "--pp", "2", "--dp", "4", "--json",
)  # fmt: skip


def _step_time(*extra: str) -> float:
    result = runner.invoke(app, [*_TRAIN, *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)["step_time_s"]


def test_the_flag_lists_every_registered_algorithm():
    assert set(dc.COLLECTIVES) == {
        "fastest", "hierarchical", "ring", "tree", "nvls", "nccl", "custom", "one_shot", "two_shot"
    }  # fmt: skip
    assert all(issubclass(cls, dc.AbstractCollective) for cls in dc.COLLECTIVES.values())


@pytest.mark.slow  # 12 s on 2 cores (two CLI predictions): kept out of the default run
def test_tree_changes_a_multi_node_step_and_fastest_is_the_default():
    default = _step_time()
    assert _step_time("--collective", "fastest") == default
    assert _step_time("--collective", "tree") != pytest.approx(default, rel=1e-3)


def test_json_names_the_collective_only_when_chosen():
    result = runner.invoke(app, [*_TRAIN, "--collective", "tree"])
    assert json.loads(result.output)["collective"] == "tree"
    assert "collective" not in json.loads(runner.invoke(app, list(_TRAIN)).output)
    result = runner.invoke(app, ["serve", "--collective", "ring", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["collective"] == "ring"


def test_the_table_title_names_a_chosen_collective():
    result = runner.invoke(app, [*_TRAIN[:-1], "--collective", "tree"])
    assert result.exit_code == 0, result.output
    assert "8x 400 Gb/s IB), tree collectives" in result.output


@pytest.mark.slow  # 9 s on 2 cores (two CLI predictions): kept out of the default run
def test_nvls_runs_where_the_system_reduces_in_the_network():
    assert _step_time("--collective", "nvls") <= _step_time("--collective", "hierarchical")


@pytest.mark.parametrize("command", [["train"], ["serve"], ["sensitivity", "train"]])
def test_an_unknown_algorithm_exits_2_naming_the_flag_and_the_choices(command):
    result = runner.invoke(app, [*command, "--collective", "bogus"])
    assert result.exit_code == 2, result.output
    assert (
        "command line: --collective: unknown collective algorithm 'bogus' "
        "(choices: fastest, hierarchical, ring, tree, nvls, nccl, custom, one_shot, two_shot)"
    ) in result.output


def test_a_near_miss_is_suggested():
    result = runner.invoke(app, ["train", "--collective", "tre"])
    assert result.exit_code == 2, result.output
    assert "unknown collective algorithm 'tre'; did you mean tree?" in result.output


@pytest.mark.parametrize("command", [["train"], ["serve"], ["plan", "train"], ["plan", "serve"]])
def test_nvls_without_in_network_reduction_exits_2(command):
    result = runner.invoke(app, [*command, "--system", "dgx-a100", "--collective", "nvls"])
    assert result.exit_code == 2, result.output
    assert (
        "command line: --collective: nvls needs a system whose scale-up switches reduce in the "
        "network ([interconnect] in_network_reduction = true"
    ) in result.output
