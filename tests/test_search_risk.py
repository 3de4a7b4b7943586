"""Risk-aware search (issue 11): the ``zero3_multinode`` layout regime of the training
discrepancy and the ``p90`` objective of the train and serve searches."""

import json
import math
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from typer.testing import CliRunner

import diffcost as dc
from diffcost import (
    RELAXED,
    ServeSearchSpace,
    SpecError,
    TrainSearchSpace,
    search_serve,
    search_train,
)
from diffcost.cli import app
from diffcost.testing import calibration as C
from diffcost.testing import uncertainty as U


def _plan(tp: int, dp: int, zero: int, deepspeed: bool = True) -> dc.TrainPlan:
    return dc.train_plan(
        tp=tp, pp=1, dp=dp, micro_batch=1, global_batch=64, zero=zero, deepspeed_zero3=deepspeed
    )


def test_fsdp_over_nodes_is_not_the_deepspeed_regime():
    """PyTorch FSDP across nodes is predicted as well as inside one (issue 42, llm-foundry's
    MPT-70B on 32-64 A100): outside the regime of DeepSpeed's ZeRO-3 runs."""
    system = dc.load_system("dgx-a100", chips=16)
    assert float(U.zero3_multinode_weight(_plan(1, 16, 3, deepspeed=False), system)) == 0.0


@pytest.mark.parametrize(
    ("tp", "dp", "zero", "weight"),
    [
        (1, 16, 3, 1.0),  # 16 shards over 2 nodes of 8
        (2, 8, 3, 1.0),  # 8 shards 2 apart: 4 per node, 2 nodes
        (1, 8, 3, 0.0),  # inside one node
        (8, 4, 3, 1.0),  # one shard per node: every gather crosses nodes
        (1, 16, 1, 0.0),  # ZeRO-1: not the regime
    ],
)
def test_zero3_multinode_weight_is_exact_at_integer_plans(tp, dp, zero, weight):
    system = dc.load_system("dgx-a100", chips=tp * dp)
    assert float(U.zero3_multinode_weight(_plan(tp, dp, zero), system)) == weight


def test_zero3_multinode_weight_relaxed_has_finite_gradients():
    system = dc.load_system("dgx-a100", chips=16)
    plan = _plan(1, 16, 3)

    def f(dp):
        p = plan.__class__(**{**plan.__dict__, "dp": dp})
        return U.zero3_multinode_weight(p, system, RELAXED)

    for dp in (8.0, 8.5, 12.0, 16.0):
        g = jax.grad(f)(jnp.asarray(dp))
        assert np.isfinite(float(g))
    assert float(f(jnp.asarray(16.0))) == 1.0 and float(f(jnp.asarray(8.0))) == 0.0


def _row(source, metric, log_error):
    return {"source": source, "metric": metric, "predicted": math.exp(log_error), "measured": 1.0}


def test_layout_regime_has_its_own_discrepancy_and_leaves_the_family_alone():
    """Points of a layout regime (a named unmodelled effect, ZeRO-3 across nodes) count there
    only: before, their 1.5-4x errors widened every A100 training interval."""
    rows = [_row("a", "train_throughput", 0.1) for _ in range(4)]  # ampere, 0.01
    rows += [_row("z", "train_throughput", -1.0) for _ in range(3)]  # ZeRO-3 runs, 1.0
    chips = ["a100-sxm-80gb"] * 7
    layouts = [None] * 4 + ["zero3_multinode"] * 3
    pv = np.zeros(len(rows))
    disc, default, counts = U.discrepancy(rows, chips, pv, regimes=layouts)
    assert disc["train_throughput"]["ampere"] == pytest.approx(0.01)
    assert disc["train_throughput"]["zero3_multinode"] == pytest.approx(1.0)
    assert default == pytest.approx(0.01)  # families only
    assert counts["train_throughput"]["zero3_multinode"] == 3
    # held out, the regime has no data: at least the worst family regime's value
    held, default_z, _ = U.discrepancy(rows, chips, pv, exclude="z", regimes=layouts)
    assert held["train_throughput"]["zero3_multinode"] == default_z


def test_stored_posterior_has_its_own_zero3_multinode_regime():
    """The six SC'21 ZeRO-3 runs across nodes form their own regime.  Predicted 1.5-4x too fast
    while the gathers went over the rails' share of the NICs (regime variance 0.96, sigma ~1),
    they are within +8% to +37% since ZeRO-3 across nodes is one flat ring through each GPU's NIC
    (issue 42): what the constants' posterior leaves of their mean square log error is small."""
    post = U.load_posterior()
    assert post is not None
    regime = post.layout_variance("zero3_multinode")
    assert post.counts["train_throughput"]["zero3_multinode"] == 6  # SC'21 Table 2
    assert 0.0 <= regime < 0.05  # sigma < 0.22 beyond the constants' share


def test_p90_needs_a_chip_and_a_posterior():
    system, model = dc.load_system("dgx-a100", chips=16), dc.load_model("llama-2-7b")
    space = TrainSearchSpace(global_batch=16, seq_len=2048, chips=(16,), objective="p90")
    with pytest.raises(SpecError, match="p90 needs the chip"):
        search_train(system, model, space, exhaustive=True)
    serve = ServeSearchSpace(input_len=128, output_len=128, chips=1, objective="p90")
    with pytest.raises(SpecError, match="p90 needs the chip"):
        search_serve(dc.load_system("dgx-h100", chips=1), model, serve, exhaustive=True)


def _space(objective: str, deepspeed: bool = True) -> TrainSearchSpace:
    return TrainSearchSpace(
        global_batch=128,
        seq_len=2048,
        chips=(128,),
        zero=(1, 3),
        objective=objective,
        chip="a100-sxm-80gb",
        deepspeed_zero3=deepspeed,
    )


@pytest.mark.slow
def test_neither_search_picks_deepspeed_zero3_across_nodes_but_both_take_fsdp():
    """Llama-2-70B on 16 DGX A100 nodes (128 GPUs), global batch 128 x 2048, ZeRO 1 or 3.
    DeepSpeed's ZeRO-3 across nodes (SC'21 Table 2: each GPU's collectives through its own NIC,
    ``deepspeed_zero3``) is priced so and carries that regime's wide discrepancy: neither the
    mean nor the p90 search picks it (they pick different ZeRO-1 layouts, tp 4 pp 2 against
    tp 2 pp 4: nearly tied means, different sensitivities; the comparison names the reason).
    PyTorch FSDP over the rails (the default; llm-foundry's MPT-70B on 32 and 64 A100 predicted
    +1% and +6%) is faster in the mean, 4.55 s against 4.70 s, and the mean search takes it
    (issue 42).  At p90 the two are tied within 0.1% (5.116 s against 5.110 s with the posterior
    of 2026-11-29): FSDP's exposed gathers carry overlap_contention's variance (log variance
    0.0044 against 0.00004), so the p90 search may take either; where it keeps ZeRO-1 the
    comparison names overlap_contention."""
    system, model = dc.load_system("dgx-a100", chips=128), dc.load_model("llama-2-70b")
    fsdp = search_train(system, model, _space("time", deepspeed=False), exhaustive=True)
    fsdp_risk = search_train(system, model, _space("p90", deepspeed=False), exhaustive=True)
    assert fsdp.best is not None and fsdp_risk.best is not None
    assert fsdp.row(fsdp.best)["zero"] == 3
    if fsdp_risk.row(fsdp_risk.best)["zero"] != 3:
        from diffcost.testing import risk_comparison

        why = risk_comparison(system, model, "a100-sxm-80gb", fsdp, fsdp_risk)
        assert why["differ"] and why["reason"].startswith("overlap_contention")
        assert fsdp_risk.best_objective <= why["mean_optimal"]["step_time_s_p90"] * (1 + 1e-4)
    mean = search_train(system, model, _space("time"), exhaustive=True)
    risk = search_train(system, model, _space("p90"), exhaustive=True)
    assert mean.best is not None and risk.best is not None
    assert fsdp.best_objective < mean.best_objective
    mean_row, risk_row = mean.row(mean.best), risk.row(risk.best)
    assert mean_row["zero"] == 1 and risk_row["zero"] == 1
    from diffcost.testing import risk_comparison

    cmp = risk_comparison(system, model, "a100-sxm-80gb", mean, risk)
    assert cmp["differ"] == (risk_row != mean_row)
    assert (cmp["reason"] is None) == (not cmp["differ"])
    m, r = cmp["mean_optimal"], cmp["p90_optimal"]
    assert r["step_time_s_p10"] < r["step_time_s_p50"] < r["step_time_s_p90"]
    assert r["step_time_s_p90"] == pytest.approx(risk.best_objective, rel=1e-4)
    assert r["step_time_s_p90"] <= m["step_time_s_p90"] * (1 + 1e-4)
    assert m["step_time_s_p50"] <= r["step_time_s_p50"] * (1 + 1e-4)


@pytest.mark.slow
def test_p90_search_relaxed_path_matches_exhaustive():
    system, model = dc.load_system("dgx-a100", chips=128), dc.load_model("llama-2-70b")
    exact = search_train(system, model, _space("p90"), exhaustive=True)
    relaxed = search_train(system, model, _space("p90"))
    assert relaxed.best_objective == pytest.approx(exact.best_objective, rel=0.02)
    assert np.isfinite(relaxed.best_objective)


@pytest.mark.slow
def test_cli_plan_train_p90_json_carries_both_plans():
    args = ["plan", "train", "--model", "llama-2-70b", "--system", "dgx-a100", "--chips", "128"]
    args += ["--global-batch", "128", "--seq-len", "2048", "--zero", "1,3", "--objective", "p90"]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    risk = out["risk"]
    # the mean-optimal plan is ZeRO-3 (PyTorch FSDP over the rails, as measured: issue 42); the
    # p90 search may keep ZeRO-1 (tied within 0.1%), and then the comparison says why (above)
    assert risk["p90_optimal"]["plan"] == out["best_plan"]
    assert risk["mean_optimal"]["plan"]["zero"] == 3
    if risk["p90_optimal"]["plan"]["zero"] != 3:
        assert risk["reason"].startswith("overlap_contention")
    assert risk["differ"] == (risk["mean_optimal"]["plan"] != risk["p90_optimal"]["plan"])
    assert (risk["reason"] is None) == (not risk["differ"])
    for key in ("step_time_s_p10", "step_time_s_p50", "step_time_s_p90"):
        assert risk["p90_optimal"][key] > 0 and risk["mean_optimal"][key] > 0
    assert out["objective"] == "p90"


@pytest.mark.slow
def test_serve_p90_search_ranks_by_the_upper_tpot():
    system, model = dc.load_system("dgx-h100", chips=8), dc.load_model("llama-3-8b")
    space = ServeSearchSpace(
        input_len=512, output_len=128, chips=8, objective="p90", chip="h100-sxm"
    )
    result = search_serve(system, model, space, exhaustive=True)
    assert result.best is not None and np.isfinite(result.best_objective)
    values = [result.best_objective, *(v for _, v in result.alternatives)]
    assert values == sorted(values)


@pytest.mark.slow  # 10-25 s on 2 cores: runs in `.ci/run`'s slow pass
def test_cli_plan_serve_p90_prints_the_median_optimal_plan_beside_it():
    """Llama 2 13B on four H100s of a DGX at batch-1 latency (tp 4, batch 1 either way): fp8
    weights halve the 6.5 GB of weights each chip reads per token (about 1.1 ms saved) but
    quantize each of the four GEMM inputs per layer, 160 more CUDA-graph kernels per step
    (about 0.9 ms), so the median-TPOT optimum serves fp8 weights by a small margin (5.34 ms
    against 5.58 ms for bf16).  More of its step is graphed kernels, whose per-kernel cost
    (graph_kernel_fraction) is uncertain, so its interval is wider (log variance 0.030 from that
    constant against 0.014) and the p90 search keeps bf16 weights (p90 6.82 ms against 7.02 ms).
    Both plans' TPOT quantiles and the reason are printed and in the JSON.  (Llama 3 8B on
    eight chips no longer shows it: at tp 8 fp8 saves only 0.3 ms of weight reads per token
    and bf16 wins both ways.)"""
    args = ["plan", "serve", "--model", "llama-2-13b", "--system", "dgx-h100", "--chips", "4"]
    args += ["--input-len", "512", "--output-len", "128", "--objective", "p90"]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    risk = out["risk"]
    mean, best = risk["mean_optimal"], risk["p90_optimal"]
    assert risk["differ"] and mean["plan"] != best["plan"]
    assert mean["tpot_s_p50"] <= best["tpot_s_p50"] and mean["tpot_s_p90"] > best["tpot_s_p90"]
    assert best["tpot_s_p90"] == pytest.approx(out["best_objective"], rel=1e-4)
    assert risk["reason"].split(":")[0] in (*C.NAMES, "model discrepancy")
    text = CliRunner().invoke(app, args)
    assert "mean-optimal vs p90-optimal" in text.stdout and "why they differ" in text.stdout


@pytest.mark.slow  # 10-25 s on 2 cores: runs in `.ci/run`'s slow pass
def test_tpot_objective_ranks_by_the_median_tpot():
    system, model = dc.load_system("dgx-h100", chips=8), dc.load_model("llama-3-8b")
    space = ServeSearchSpace(input_len=512, output_len=128, chips=8, objective="tpot")
    result = search_serve(system, model, space, exhaustive=True)
    assert result.best is not None
    values = [result.best_objective, *(v for _, v in result.alternatives)]
    assert values == sorted(values)
    # every plan's p90 is above its median, so the least p90 is above the least median
    p90 = search_serve(system, model, replace(space, objective="p90", chip="h100-sxm"))
    assert result.best_objective < p90.best_objective
