"""Validation against published measurements: pinned accuracy, the rule, the CLI."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import diffcost as dc
from diffcost import load_measurements, validate
from diffcost.cli import app
from diffcost.testing import prepare, scenario_toml, train_space
from diffcost.testing import summarise_validation as summarise

runner = CliRunner()


@pytest.fixture(scope="module")
def points():
    return load_measurements()


@pytest.fixture(scope="module")
def prepared(points):
    return prepare(points)


@pytest.fixture(scope="module")
def result(prepared):
    return validate(prepared=prepared)


# Measured with specs/calibration/default.toml as fitted by `diffcost calibrate --write`
# (median, p90 of |predicted / measured - 1|), pinned slightly above: an accuracy regression
# fails here.  "modelled" leaves out the points with a named unmodelled effect.
PINNED = {
    # "modelled": the six SC'21 ZeRO-3 points (megatron-sc21-zero3) carry a named unmodelled
    # effect and are pinned by source below
    ("train_throughput", "modelled"): (0.055, 0.155),
    # p90 0.111 -> 0.124 after the refit with the CUDA-graph decode points (the global and Ampere
    # memory-bandwidth fractions drop ~1.5% and 3%)
    # the modelled points: since TensorRT-LLM 0.9's MoE GEMM is an engine behaviour
    # (moe_native_gemm), 15 of its 16 Mixtral rows count here: median 0.050 -> 0.082, p90
    # 0.126 -> 0.148 (the dense TensorRT-LLM 0.6.1 rows alone are pinned by source below)
    ("serve_throughput", "modelled"): (0.085, 0.15),
    # median 0.0424 -> 0.0510: skinny GEMM rows at the full clock (issue 17 item 4) speed up
    # the 128-token prefills by ~7%, which trtllm-0.5 on H100 does not show
    # median 0.051 -> 0.062 (issue 41): prefills now run at the sustained fraction under the
    # power limit (H100 2048-token prompts +5-8%: an isolated short prefill may run nearer the
    # top clock than a loaded server) and the all-reduce's NCCL/custom choice
    ("ttft", "all"): (0.065, 0.20),
    # p90 0.337 -> 0.356 (issue 41): decode all-reduces at NCCL's small-message latency or the
    # engines' custom kernel instead of 14 ring steps; BLOOM's 2022 runtimes, on NCCL, were
    # already predicted too fast
    ("token_latency", "all"): (0.26, 0.37),
    # current engines (gpt-fast, NIM 1.8, vLLM CI: CUDA-graph decode) without BLOOM's
    # Python-driven 2022 runtimes: median 0.064, p90 0.144 after the graph_kernel_fraction fit
    ("token_latency", "modelled"): (0.07, 0.16),
}
PINNED_SOURCES = {
    # p90 0.030 -> 0.040 (issue 42): the memory-bound backward counted from its kernels (the
    # unfused softmax backward streams as much as its forward, not twice) and the refit with
    # the MPT points (ampere matmul_peak_fraction 0.809 -> 0.761)
    ("train_throughput", "megatron-sc21"): (0.025, 0.045),
    # ZeRO-3 without model parallelism at 384-2240 A100 (SC'21 Table 2): unmodelled, predicted
    # +48% .. +321%; pinned so that a change in the ZeRO-3 physics shows here.  Issue 42: ZeRO-3
    # across nodes as one flat ring (each GPU's bytes through its NIC): +8% .. +37%, median
    # 0.218, p90 0.315
    # median 0.218 -> 0.243 after the issue-42 refit (ampere link_bandwidth_fraction 0.83 ->
    # 0.86)
    ("train_throughput", "megatron-sc21-zero3"): (0.25, 0.33),
    # p90 0.096 -> 0.120 after the issue-42 refit (the full-recomputation runs, which were
    # predicted 5-13% slow, lose a little more with the lower ampere GEMM fraction)
    ("train_throughput", "korthikanti-2022"): (0.062, 0.125),
    # MPT 1B-13B on one DGX A100, FSDP, flash attention, no recomputation (issue 42): predicted
    # +12% .. +19% with the ampere constants fitted before these points existed, +6% .. +13%
    # after the refit (held out: median 10.2%); with MPT-70B on 32 and 64 A100 (FSDP over the
    # rails: +5.5%, +1.1%) median 0.062, p90 0.096
    ("train_throughput", "llm-foundry-mpt"): (0.08, 0.14),
    # MPT 1B-13B on 8-512 H100, FSDP FULL_SHARD over 1-64 nodes, no recomputation (issue 42):
    # unmodelled, +33% .. +48% on one node and across nodes alike (ZeRO-3 over the rails; a
    # flat ring per GPU's NIC gave the 13B runs -52% .. -55%): median 0.371, p90 0.444
    ("train_throughput", "llm-foundry-mpt-h100"): (0.38, 0.45),
    # MT-NLG 530B on 2,240-3,360 A100 with DeepSpeed's pipeline engine (issue 17 item 5):
    # unmodelled, predicted +22.9%, +23.9%, +28.6%, where Megatron's 529.6B run is -3.3%
    ("train_throughput", "mt-nlg-530b"): (0.25, 0.29),
    # mixture-of-experts pre-training (Megatron-Bridge, H100, B200, GB200): unmodelled MoE
    # layer efficiency and layouts.  Issue 42: the published expert layout kept (EP, expert TP,
    # dispatch) and the eager expert layer's per-expert GEMM calls charged: 3 H100 points
    # +90 / +77 / -6% -> +37 / +11 / -13%; with the 5 rows added (GPT-OSS 120B on H100 / B200
    # +32 / +90%, Qwen3-30B-A3B eager on GB200 / B200 +13 / +9%, graphed on GB200 +34%)
    # median 0.225, p90 0.529
    ("train_throughput", "megatron-bridge-moe"): (0.24, 0.55),
    # Mixtral serving, TensorRT-LLM 0.9 static batches: -52% .. +117% (median 23.9%, p90 81%)
    # with the experts at the FP8 roofline; -52% .. +28% (median 13.1%, p90 29.9%) with the
    # engine's Ampere-class 16-bit MoE GEMM (moe_native_gemm false; 2/3 of the peak on Hopper)
    ("serve_throughput", "trtllm-0.9-mixtral"): (0.14, 0.31),
    # gpt-fast batch-1 decode on A100, the table measured after the expert down-projection's
    # reduction dimension was made innermost (gpt-fast 48328fb): -10.5% .. +8.5%, median 0.085,
    # p90 0.095 (the table before that commit: -38% .. -19%, median 0.319)
    ("token_latency", "gpt-fast-mixtral"): (0.09, 0.10),
    # median 0.0732 -> 0.0864 after the issue-17 item-4 refit (hopper f 0.6253 -> 0.6308)
    # p90 0.19 -> 0.196 (issue 41; median 0.086 -> 0.070): fp8 GEMMs at their own share of peak
    ("train_throughput", "nemo-24.07"): (0.088, 0.20),
    ("serve_throughput", "trtllm-0.6.1-throughput"): (0.05, 0.13),  # as above
    ("ttft", "trtllm-0.5-latency"): (0.065, 0.20),  # median 0.051 -> 0.062, as above
}


def test_every_point_is_predicted_and_the_errors_are_pinned(result, points):
    assert len(result.rows) == sum(1 for m in points if m.excluded is None) == 194
    assert {e["id"] for e in result.excluded} == {m.id for m in points if m.excluded}
    for row in result.rows:
        assert np.isfinite(row["predicted"]) and row["predicted"] > 0
        assert row["error"] == pytest.approx(row["predicted"] / row["measured"] - 1)
    for (metric, group), (median, p90) in PINNED.items():
        stats = result.summary[metric][group]
        assert stats["median_abs_error"] <= median, (metric, group, stats)
        assert stats["p90_abs_error"] <= p90, (metric, group, stats)
    for (metric, source), (median, p90) in PINNED_SOURCES.items():
        stats = result.summary[metric]["by_source"][source]
        assert stats["median_abs_error"] <= median, (metric, source, stats)
        assert stats["p90_abs_error"] <= p90, (metric, source, stats)


def test_summary_statistics():
    rows = [
        {"metric": "ttft", "source": "a", "error": e, "unmodelled": u}
        for e, u in [(0.1, None), (-0.3, None), (0.2, "x"), (0.0, None), (-0.05, None)]
    ]
    s = summarise(rows)["ttft"]
    assert s["all"]["n"] == 5 and s["all"]["median_abs_error"] == pytest.approx(0.1)
    assert s["all"]["p90_abs_error"] == pytest.approx(np.percentile([0.1, 0.3, 0.2, 0, 0.05], 90))
    assert s["modelled"]["n"] == 4 and s["modelled"]["median_abs_error"] == pytest.approx(0.075)
    assert s["all"]["median_error"] == pytest.approx(0.0)


@pytest.mark.slow  # 10 s on 2 cores (an exact search per point)
def test_the_rule_is_the_fastest_fitting_plan_under_the_published_constraints(points, result):
    m = next(p for p in points if p.id == "megatron_sc21_table1_39.1B")
    model = dc.load_model(m.model)
    space, cand = train_space(m, model)
    assert len(cand) > 1
    system = dc.load_system(m.system, chips=m.chips)
    times, fits = [], []
    for i in range(len(cand)):
        row = cand.row(i)
        plan = dc.train_plan(
            tp=m.plan["tp"],
            pp=m.plan["pp"],
            dp=m.plan["dp"],
            global_batch=m.plan["global_batch"],
            seq_len=2048,
            micro_batch=int(row["micro_batch"]),
            virtual_stages=int(row["virtual_stages"]),
            recompute=row["recompute"],
            zero=int(row["zero"]),
            sequence_parallel=bool(row["sequence_parallel"]),
            precision="fp16",
            flash_attention=False,
            overlap_grad_reduce=False,
        )
        out = dc.TrainCost(system, model)(plan)
        assert (row["tp"], row["pp"], row["recompute"], row["zero"]) == (8, 2, "full", 0)
        times.append(float(out.step_time_s))
        fits.append(float(out.headroom_bytes) >= 0)
    best = min(
        i
        for i in range(len(cand))
        if fits[i] and times[i] == min(t for t, f in zip(times, fits, strict=True) if f)
    )
    row = next(r for r in result.rows if r["id"] == m.id)
    assert row["chosen_by_rule"] == ["micro_batch", "virtual_stages"]
    assert (row["plan"]["micro_batch"], row["plan"]["virtual_stages"]) == (
        int(cand.row(best)["micro_batch"]),
        int(cand.row(best)["virtual_stages"]),
    )
    assert row["predicted"] == pytest.approx(2048 * 1536 / times[best], rel=1e-9)


def test_the_published_expert_layout_is_kept(prepared):
    """A MoE point's rows keep its published expert layout: ``ep`` is a degree the rule does
    not choose, and ``expert_tp`` and the deduplicated dispatch are the published ones (EP 32
    over the 32 ranks of a TP 2 x DP 16 stage with expert TP 1 is a valid folded grid)."""
    ts = prepared.train
    n_moe = 0
    for i, m in enumerate(prepared.points[: prepared.n_train]):
        if m.plan.get("ep", 1) == 1:
            continue
        n_moe += 1
        rows = np.nonzero(ts.row_point == i)[0]
        for key in ("ep", "expert_tp", "ep_dedup", "ep_overlap"):
            if key in m.plan:
                values = np.asarray(getattr(ts.plans, key))[rows]
                assert (values == float(m.plan[key])).all(), (m.id, key, values)
    assert n_moe >= 3


def test_batched_prediction_equals_the_single_cost_model(points, result):
    m = next(p for p in points if p.id == "trtllm061_h100_llama7b_tp1_bs768_128x128")
    out = dc.ServeCost(dc.load_system(m.system, chips=1), dc.load_model(m.model))(
        dc.serve_plan(**m.plan)
    )
    row = next(r for r in result.rows if r["id"] == m.id)
    assert row["predicted"] == pytest.approx(float(out.output_tokens_per_s_per_chip), rel=1e-9)


def test_one_trace_per_entry_point(prepared, result, monkeypatch):
    """All training candidates in one vmap, all serving points in another: validating again
    traces nothing."""
    calls = {"train": 0, "serve": 0}
    train_call, serve_call = dc.TrainCost.__call__, dc.ServeCost.__call__

    def count(kind, fn):
        def wrapped(self, plan):
            calls[kind] += 1
            return fn(self, plan)

        return wrapped

    monkeypatch.setattr(dc.TrainCost, "__call__", count("train", train_call))
    monkeypatch.setattr(dc.ServeCost, "__call__", count("serve", serve_call))
    again = validate(prepared=prepared)
    assert calls == {"train": 0, "serve": 0}
    assert [r["predicted"] for r in again.rows] == [r["predicted"] for r in result.rows]


# --- the command line --------------------------------------------------------------------------
SMALL = ["--source", "megatron-readme", "--source", "trtllm-0.5-latency"]


@pytest.mark.slow  # 9-40 s on 2 cores: kept out of the ~6-minute default run
def test_validate_json_plot_and_scenario_files(tmp_path):
    res = runner.invoke(
        app,
        [
            "validate",
            *SMALL,
            "--json",
            "--plot",
            str(tmp_path / "v.png"),
            "--write-scenarios",
            str(tmp_path),
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert set(out) == {"calibration", "points", "excluded", "summary"}
    assert len(out["points"]) == 21
    assert set(out["summary"]) == {"train_throughput", "ttft"}
    assert (tmp_path / "v.png").stat().st_size > 10_000
    assert len(list(tmp_path.glob("*.toml"))) == 21


def test_validate_table_and_point_detail(result):
    res = runner.invoke(app, ["validate"])
    assert res.exit_code == 0, res.output
    assert "megatron_readme_gpt3_175b_1024xA100" in res.output and "median |err|" in res.output
    res = runner.invoke(app, ["validate", "--point", "korthikanti_1T_full_recompute"])
    assert res.exit_code == 0, res.output
    assert "chosen by the rule: virtual_stages" in res.output
    assert 'kind = "train"' in res.output and "[plan]" in res.output


def test_each_point_is_a_scenario_the_cli_runs(tmp_path, points, result):
    by_id = {m.id: m for m in points}
    rows = {r["id"]: r for r in result.rows}
    for pid, cmd, key in [
        ("korthikanti_1T_selective_sp", "train", "tokens_per_s"),
        ("bloom176b_dsinf_int8_4xA100_bs8", "serve", "request_latency_s"),
    ]:
        path = tmp_path / f"{pid}.toml"
        path.write_text(scenario_toml(rows[pid], by_id[pid]))
        out = runner.invoke(app, [cmd, "--scenario", str(path), "--json"])
        value = json.loads(out.stdout)[key]
        if cmd == "serve":
            value /= 100  # output_len: per-token latency
        assert value == pytest.approx(rows[pid]["predicted"], rel=1e-6)


def test_bad_validate_input_is_a_message():
    res = runner.invoke(app, ["validate", "--source", "nope"])
    assert res.exit_code == 2
    assert "unknown source 'nope'" in res.output and "Traceback" not in res.output
