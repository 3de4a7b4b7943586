"""The command line: readable tables, one JSON object, clear errors and exit codes."""

import json

from typer.testing import CliRunner

from diffcost.cli import app

runner = CliRunner()


def _run(*args):
    return runner.invoke(app, list(args))


def test_train_default_scenario_prints_a_table():
    result = _run("train")
    assert result.exit_code == 0, result.output
    assert "Llama 3 70B" in result.output
    for label in ["step time", "MFU", "HFU", "activations", "feasible"]:
        assert label in result.output


def test_train_json_is_one_object_with_si_keys():
    result = _run(
        "train",
        "--model",
        "gpt3-175b",
        "--system",
        "dgx-a100",
        "--chips",
        "1024",
        "--tp",
        "8",
        "--pp",
        "16",
        "--micro-batch",
        "1",
        "--global-batch",
        "1536",
        "--seq-len",
        "2048",
        "--recompute",
        "full",
        "--json",
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    for key in [
        "step_time_s",
        "tokens_per_s",
        "mfu",
        "hfu",
        "fits",
        "memory_bytes",
        "energy_j",
        "cost_usd",
        "headroom_bytes",
    ]:
        assert key in out
    assert out["plan"]["dp"] == 8  # derived from chips / (tp * pp * cp)
    assert set(out["memory_bytes"]) == {
        "weights_bytes",
        "gradients_bytes",
        "optimizer_bytes",
        "activations_bytes",
        "reserved_bytes",
        "total_bytes",
    }
    assert out["fits"] is True and out["feasible"] is True


def test_train_infeasible_says_why_and_by_how_much():
    result = _run(
        "train",
        "--model",
        "llama-2-70b",
        "--chip",
        "h100-sxm",
        "--chips",
        "8",
        "--tp",
        "3",
        "--dp",
        "1",
        "--pp",
        "1",
        "--global-batch",
        "8",
        "--json",
    )
    assert result.exit_code == 1
    out = json.loads(result.stdout)
    assert out["feasible"] is False
    text = " | ".join(out["problems"])
    assert "tp*pp*dp*cp = 3 but the system has 8 chips" in text
    assert "heads (64) is not divisible by tp (3)" in text
    assert "does not fit in memory" in text and "over by" in text


def test_train_with_hugging_face_config(tmp_path):
    from pathlib import Path

    cfg = Path(__file__).parent / "fixtures" / "hf" / "llama-2-7b-config.json"
    result = _run("train", "--model", str(cfg), "--chip", "h100-sxm", "--chips", "8", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["step_time_s"] > 0


def test_bad_input_is_a_message_not_a_traceback():
    result = _run("train", "--model", "llama-9000", "--json")
    assert result.exit_code == 2
    assert "unknown model 'llama-9000'" in result.output
    assert "Traceback" not in result.output
    result = _run("train", "--recompute", "sometimes")
    assert result.exit_code == 2
    assert "recompute: must be one of" in result.output


def test_specs_lists_everything():
    result = _run("specs", "--json")
    assert result.exit_code == 0
    out = json.loads(result.stdout)
    assert {"chips", "systems", "models", "scenarios"} <= set(out)
    assert "h100-sxm" in [c["name"] for c in out["chips"]]
    table = _run("specs")
    assert "llama-3-405b" in table.output
