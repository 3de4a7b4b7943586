"""The web explorer's answers (diffcost/cli/_ui/answers.py): the page's requests read as the
command line reads its flags, every number the library's, bad controls refused with the command
line's reasons.  The elasticities (a gradient program of ~30 s to compile) are checked in the
slow tests: :func:`test_elasticities_match_the_sensitivity_analysis` and the browser's."""

import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import pytest

import diffcost as dc
from diffcost.testing import train_cmd, ui_answers

ROOT = Path(__file__).resolve().parent.parent
HF = Path(__file__).resolve().parent / "fixtures" / "hf"


def _serve_answer(job):
    """``diffcost serve``'s answer of a job, without load or limits."""
    load, limits = ui_answers._serve_load({})
    return ui_answers.serve_answer(job, load, limits)


def test_meta_offers_every_builtin_and_the_default_jobs():
    meta = ui_answers.meta()
    assert [m["name"] for m in meta["models"]] == dc.builtin_names("model")
    assert [s["name"] for s in meta["systems"]] == dc.builtin_names("system")
    for kind in ("train", "serve"):
        assert [k["name"] for k in meta["knobs"][kind]] == list(ui_answers.KNOBS[kind])
    scenario = dc.load_scenario("default-train")
    default = meta["defaults"]["train"]
    assert default["model"] == scenario.model
    assert default["plan"]["tp"] == scenario.plan["tp"]
    # categorical controls offer the declared choices
    precision = next(k for k in meta["knobs"]["train"] if k["name"] == "precision")
    assert "bf16" in precision["options"] and "fp8" in precision["options"]


def test_a_training_request_gives_the_library_answer():
    request: dict[str, Any] = {"model": "llama-3-8b", "system": "dgx-h100", "chips": 16}
    request["plan"] = {"tp": 2, "pp": 2, "micro_batch": 2, "global_batch": 64, "seq_len": 4096}
    job = ui_answers.job_of("train", request)
    shown = train_cmd.train_answer(job).json["step_time_s"]
    system, model = dc.load_system("dgx-h100", chips=16), dc.load_model("llama-3-8b")
    plan = dc.train_plan(tp=2, pp=2, dp=4, micro_batch=2, global_batch=64, seq_len=4096)
    expected = float(dc.TrainCost(system, model)(plan).step_time_s)
    assert shown == pytest.approx(expected, rel=1e-6)
    assert job.values["dp"] == 4  # dp left out fills the chips, as on the command line


def test_bad_controls_are_refused_all_at_once_with_the_command_lines_reasons():
    request: dict[str, Any] = {"model": "llama-3-8b", "system": "dgx-h100", "chips": "x"}
    request["plan"] = {"tp": 0, "bogus": 1}
    with pytest.raises(dc.SpecError) as err:
        ui_answers.job_of("train", request)
    keys = {p.key: p.reason for p in err.value.problems}
    assert {"control tp", "control bogus", "control chips"} <= set(keys)
    cli = subprocess.run(
        [sys.executable, "-m", "diffcost", "train", "--model", "llama-3-8b", "--tp", "0"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert cli.returncode == 2
    assert keys["control tp"] in cli.stderr  # the same reason, word for word


def test_an_unknown_model_names_the_control_and_lists_choices():
    with pytest.raises(dc.SpecError) as err:
        ui_answers.job_of("serve", {"model": "no-such-model", "system": "dgx-h100", "plan": {}})
    text = str(err.value)
    assert "no-such-model" in text


def test_serving_load_controls_must_be_positive():
    with pytest.raises(dc.SpecError) as err:
        ui_answers._serve_load({"qps": -1.0, "tpot_slo_ms": 0, "ttft_p99_ms": "fast"})
    keys = {p.key for p in err.value.problems}
    assert keys == {"control qps", "control tpot_slo_ms", "control ttft_p99_ms"}


@pytest.mark.parametrize("batch", [1, 64])
def test_roofline_points_lie_under_the_roofs(batch):
    request: dict[str, Any] = {"model": "llama-3-8b", "system": "dgx-h100", "chips": 1}
    request["plan"] = {"tp": 1, "batch": batch, "input_len": 1024, "output_len": 128}
    request["plan"] |= {"weight_format": "bf16", "kv_format": "bf16", "mode": "static"}
    job = ui_answers.job_of("serve", request)
    answer = _serve_answer(job).json
    rf = ui_answers.roofline(job, answer)
    assert rf["ridge_flop_per_byte"] == pytest.approx(
        rf["peak_flop_per_s"] / rf["memory_bandwidth_bytes_per_s"]
    )
    names = {p["name"]: p for p in rf["points"]}
    assert set(names) == {"decode", "prefill"}
    for p in rf["points"]:
        roof = min(rf["peak_flop_per_s"], rf["memory_bandwidth_bytes_per_s"] * p["intensity"])
        assert 0 < p["attained_flop_per_s"] <= roof * (1 + 1e-6), p
    # decode in bf16 does 2 FLOP per 2-byte weight per sequence: intensity ~ batch (KV reads
    # lower it); a prompt's prefill ~ its length
    assert 0.3 * batch <= names["decode"]["intensity"] <= 1.2 * batch
    assert 0.5 * 1024 <= names["prefill"]["intensity"] <= 1.5 * 1024


def test_the_serving_front_holds_no_dominated_point():
    plans = [
        {"tp": 1, "pp": 1, "weight_format": "fp8", "kv_format": "fp8", "compute_format": "fp8"},
        {"tp": 2, "pp": 1, "weight_format": "bf16", "kv_format": "bf16"},
    ]
    request: dict[str, Any] = {"model": "llama-3-8b", "system": "dgx-h100", "chips": 8}
    request["input_len"] = 1024
    request |= {"output_len": 128, "mode": "continuous", "plans": plans}
    points = ui_answers.pareto(request)["points"]
    assert len(points) == 2 * len(ui_answers.FRONT_BATCHES)
    front = [p for p in points if p["front"]]
    assert front
    for p in front:
        assert p["runs"]
        for q in points:
            if q["runs"] and q is not p:
                better_user = q["tokens_per_s_per_user"] > p["tokens_per_s_per_user"]
                better_chip = q["tokens_per_s_per_chip"] > p["tokens_per_s_per_chip"]
                no_worse = (
                    q["tokens_per_s_per_user"] >= p["tokens_per_s_per_user"]
                    and q["tokens_per_s_per_chip"] >= p["tokens_per_s_per_chip"]
                )
                assert not (no_worse and (better_user or better_chip))
    # the fastest point for a user is on the front, the densest per chip too
    running = [p for p in points if p["runs"]]
    assert max(running, key=lambda p: p["tokens_per_s_per_user"])["front"]
    assert max(running, key=lambda p: p["tokens_per_s_per_chip"])["front"]


def test_compare_reads_each_side_like_its_tab():
    side = {"model": "llama-3-8b", "chips": 8, "plan": {"tp": 1, "global_batch": 64}}
    res = ui_answers.compare(
        {"kind": "train", "a": {**side, "system": "dgx-h100"}, "b": {**side, "system": "dgx-a100"}}
    )
    rows = {r["key"]: r for r in res["rows"]}
    h100 = ui_answers.job_of("train", {**side, "system": "dgx-h100"})
    assert rows["step_time_s"]["a"] == pytest.approx(
        train_cmd.train_answer(h100).json["step_time_s"]
    )
    assert rows["step_time_s"]["b"] > rows["step_time_s"]["a"]  # an A100 is slower
    with pytest.raises(dc.SpecError) as err:
        ui_answers.compare({"kind": "train", "a": {**side, "system": "nope"}, "b": side})
    assert any(p.key.startswith("a.") for p in err.value.problems)


def test_an_uploaded_config_reads_as_the_model_loader_reads_it(tmp_path):
    text = (HF / "llama-3.1-8b" / "config.json").read_text()
    explorer = ui_server_explorer()
    try:
        res = explorer.upload({"filename": "my-config.json", "text": text})
        model = dc.load_model(res["model"])
        assert math.isclose(float(model.hidden), 4096.0)
        with pytest.raises(dc.SpecError) as err:
            explorer.upload({"filename": "broken.json", "text": "{not json"})
        assert "broken.json" in str(err.value)
    finally:
        explorer.jobs.close()


def ui_server_explorer():
    from diffcost.testing import ui_server

    return ui_server.Explorer()


@pytest.mark.slow
def test_elasticities_match_the_sensitivity_analysis():
    request = {"model": "llama-3-8b", "system": "dgx-h100", "chips": 8, "plan": {"tp": 2}}
    job = ui_answers.job_of("train", request)
    assert isinstance(job.plan, dc.TrainPlan)
    shown = ui_answers.elasticities("train", job)
    sens = dc.train_sensitivity(job.system, job.model, job.plan)
    for row in shown["hardware"]:
        assert row["elasticity"] == pytest.approx(
            sens.elasticity("step_time_s", row["parameter"]), rel=1e-5
        )
    # a plan input's elasticity against a central difference of the relaxed model in log space
    plan_rows = {r["parameter"]: r["elasticity"] for r in shown["plan"]}
    relaxed = dc.TrainCost(job.system, job.model, smoothing=dc.RELAXED)
    h = 1e-2

    def log_step(seq_len):
        plan = eqx.tree_at(lambda p: p.seq_len, job.plan, jnp.asarray(seq_len, jnp.float32))
        return math.log(float(relaxed(plan).step_time_s))

    seq = float(job.values["seq_len"])
    fd = (log_step(seq * math.exp(h)) - log_step(seq * math.exp(-h))) / (2 * h)
    assert plan_rows["plan.seq_len"] == pytest.approx(fd, rel=0.05, abs=0.02)
