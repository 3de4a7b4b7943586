"""Sensitivity: elasticities match finite differences of the exact model; the seed thesis holds."""

import json

import chex
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree
from typer.testing import CliRunner

import diffcost as dc
from diffcost import sensitivity
from diffcost.cli import app
from diffcost.testing import (
    HARDWARE_GROUPS,
    SERVE_METRICS,
    TRAIN_METRICS,
    parameter_names,
    serve_metrics,
    train_metrics,
)

BW = "chip.memory_bandwidth_bytes_per_s"
CAP = "chip.memory_capacity_bytes"


@pytest.fixture(scope="module")
def train_case():
    # Large-batch pre-training (1M tokens per step); tp=2, cp=1 so no min() sits at a tie.
    system = dc.load_system("dgx-h100", chips=64)
    model = dc.load_model("llama-3-70b")
    plan = dc.train_plan(
        tp=2, pp=4, dp=8, virtual_stages=5, global_batch=128, seq_len=8192, recompute="full", zero=1
    )
    return system, model, plan, sensitivity("train", system, model, plan)


def _serve(system: str, chips: int, model: str, **plan):
    sys_, model_ = dc.load_system(system, chips=chips), dc.load_model(model)
    plan_ = dc.serve_plan(batch=1, input_len=1024, output_len=256, **plan)
    return sys_, model_, plan_, sensitivity("serve", sys_, model_, plan_)


@pytest.fixture(scope="module")
def h100_decode():
    return _serve("dgx-h100", 8, "llama-3-70b", tp=4)


@pytest.fixture(scope="module")
def groq_decode():
    return _serve("groqrack", 1280, "llama-3-70b", tp=32, pp=40)


@pytest.fixture(scope="module")
def cerebras_decode():
    return _serve("cerebras-cs3", 4, "llama-3-70b", pp=4)


@eqx.filter_jit
def _perturbed(metric_fn, names, params, plan, h):
    """log|metric| with every scalar parameter multiplied by exp(+h) and exp(-h), one at a time."""
    flat, unravel = ravel_pytree(params)
    eye = jnp.eye(flat.size)

    def at(u):
        values = metric_fn(unravel(flat * jnp.exp(u)), plan)
        return jnp.stack([jnp.log(jnp.abs(values[n])) for n in names])

    both = jax.vmap(at)(jnp.concatenate([h * eye, -h * eye]))
    return both[: flat.size], both[flat.size :]


def _check_fd(case, fn, names):
    system, model, plan, sens = case
    params = (system, model)
    h = 1e-6
    up, down = (np.asarray(x) for x in _perturbed(fn, names, params, plan, h))
    with np.errstate(invalid="ignore"):  # log 0 of metrics left out (no price: no cost)
        fd = (up - down) / (2 * h)  # [parameter, metric]
    pnames = [n for n, _ in parameter_names(params)]
    checked = 0
    for j, metric in enumerate(names):
        if metric not in sens.metrics:
            continue
        for i, p in enumerate(pnames):
            row = sens.table[(sens.table.metric == metric) & (sens.table.parameter == p)]
            if row.empty:  # flags are not parameters
                continue
            e = float(row.elasticity.iloc[0])
            np.testing.assert_allclose(
                e, fd[i, j], rtol=1e-4, atol=1e-6, err_msg=f"{metric} w.r.t. {p}"
            )
            checked += 1
    assert checked > 200


@pytest.mark.slow  # shares module fixtures of ~45 s on 2 cores; two CLI tests stay fast
def test_train_elasticities_match_finite_differences(train_case):
    _check_fd(train_case, train_metrics, TRAIN_METRICS)


@pytest.mark.slow  # shares module fixtures of ~45 s on 2 cores; two CLI tests stay fast
def test_serve_elasticities_match_finite_differences(h100_decode, groq_decode):
    _check_fd(h100_decode, serve_metrics, SERVE_METRICS)
    _check_fd(groq_decode, serve_metrics, SERVE_METRICS)


@pytest.mark.slow  # shares module fixtures of ~45 s on 2 cores; two CLI tests stay fast
def test_metrics_under_jit_equal_eager(train_case, h100_decode):
    """jit(f) == f for both metric functions (dicts of arrays, compared leaf by leaf)."""
    system, model, plan, _ = train_case
    eager = train_metrics((system, model), plan)
    chex.assert_trees_all_close(
        eqx.filter_jit(train_metrics)((system, model), plan), eager, rtol=1e-12, atol=0.0
    )
    assert set(eager) == set(TRAIN_METRICS)
    system, model, plan, _ = h100_decode
    eager = serve_metrics((system, model), plan)
    chex.assert_trees_all_close(
        eqx.filter_jit(serve_metrics)((system, model), plan), eager, rtol=1e-12, atol=0.0
    )
    assert set(eager) == set(SERVE_METRICS)


@pytest.mark.slow  # shares module fixtures of ~45 s on 2 cores; two CLI tests stay fast
def test_parameters_are_named_and_grouped(train_case):
    system, model, _, sens = train_case
    names = parameter_names((system, model))
    assert len(names) == ravel_pytree((system, model))[0].size
    groups = dict(names)
    assert groups["chip.peak_flop_per_s[fp8]"] == "compute"
    assert groups[BW] == groups[CAP] == "memory"
    assert groups["system.scale_out_latency_s"] == "interconnect"
    assert groups["chip.tdp_w"] == "power" and groups["model.hidden"] == "model"
    assert groups["chip.energy.flop_j[bf16]"] == groups["chip.energy.idle_w"] == "power"
    assert groups["chip.on_chip_sram"] == "flag"
    assert groups["chip.near_memory.bandwidth_bytes_per_s"] == "memory"
    assert len(dict(names)) == len(names)  # every name once
    assert "chip.on_chip_sram" not in set(sens.table.parameter)  # flags are not ranked
    assert list(sens.metrics) == list(TRAIN_METRICS)


@pytest.mark.slow  # shares module fixtures of ~45 s on 2 cores; two CLI tests stay fast
def test_elasticity_identities(train_case):
    """Exact consequences of the formulas: scaling every power figure of the chip (running
    floor, energies per operation, power limit) and the node overhead by one factor leaves the
    clock under the power limit, and so the step time, unchanged (elasticities sum to 0) and
    scales the energy (sum 1); cost/token scales with price; the MFU's bf16 peak elasticity is
    that of step time minus one."""
    *_, sens = train_case
    table = sens.table
    power = table.parameter.str.startswith("chip.energy.") | table.parameter.isin(
        ["chip.tdp_w", "system.node_overhead_w"]
    )
    for metric, total in [("step_time_s", 0.0), ("energy_per_token_j", 1.0)]:
        figures = table[power & (table.metric == metric)]
        assert figures.elasticity.sum() == pytest.approx(total, abs=1e-6), metric
    # the H100's measured J/FLOP puts a large bf16 GEMM over 700 W at the top clock: the limit
    # binds (diffcost._terms.power), a higher one runs faster at more J/FLOP
    assert sens.elasticity("step_time_s", "chip.tdp_w") < -0.3
    assert sens.elasticity("energy_per_token_j", "chip.tdp_w") > 0.0
    assert sens.elasticity("cost_per_token_usd", "system.price_usd_per_chip_hour") == (
        pytest.approx(1.0, abs=1e-9)
    )
    e_step = sens.elasticity("step_time_s", "chip.peak_flop_per_s[bf16]")
    assert sens.elasticity("mfu", "chip.peak_flop_per_s[bf16]") == pytest.approx(-1.0 - e_step)
    assert sens.elasticity("step_time_s", CAP) == 0.0  # capacity only moves the headroom
    assert sens.elasticity("memory_headroom_bytes", CAP) > 1.0


# --- the seed thesis ------------------------------------------------------------------------------
@pytest.mark.slow  # shares module fixtures of ~45 s on 2 cores; two CLI tests stay fast
def test_large_batch_training_is_bound_by_the_tensor_units(train_case):
    """Most of the step is GEMM time at the clock the power limit allows: the most elastic
    hardware number is the tensor units' peak or their power limit, and more tensor units at
    the same energy per FLOP (peak, power limit and running floor scaled together: the clock
    unchanged) shorten the step almost one for one; bandwidth matters far less."""
    *_, sens = train_case
    assert sens.most_elastic("step_time_s") in ("chip.peak_flop_per_s[bf16]", "chip.tdp_w")
    units = sum(
        sens.elasticity("step_time_s", p)
        for p in ("chip.peak_flop_per_s[bf16]", "chip.tdp_w", "chip.energy.idle_w")
    )
    assert units < -0.5
    assert abs(sens.elasticity("step_time_s", BW)) < 0.5 * abs(units)


@pytest.mark.slow  # shares module fixtures of ~45 s on 2 cores; two CLI tests stay fast
def test_batch1_decode_on_hbm_is_bandwidth_bound(h100_decode):
    *_, sens = h100_decode
    assert sens.most_elastic("tpot_s") == BW
    assert sens.elasticity("tpot_s", BW) < -0.5
    assert abs(sens.elasticity("tpot_s", "chip.peak_flop_per_s[bf16]")) < 0.05
    # ... and so is the smallest deployment that holds the model
    assert sens.most_elastic("min_deployment_tokens_per_s_per_chip") == BW


@pytest.mark.slow  # shares module fixtures of ~45 s on 2 cores; two CLI tests stay fast
@pytest.mark.parametrize("case", ["groq_decode", "cerebras_decode"])
def test_batch1_decode_on_sram_chips_is_capacity_bound(case, request):
    *_, sens = request.getfixturevalue(case)
    metric = "min_deployment_tokens_per_s_per_chip"
    assert sens.most_elastic(metric) == CAP
    assert sens.elasticity(metric, CAP) > 0.9
    assert abs(sens.elasticity(metric, BW)) < 0.05  # SRAM bandwidth is never the limit
    assert sens.elasticity("chips_needed", CAP) == pytest.approx(-1.0, abs=0.35)


@pytest.mark.slow  # shares module fixtures of ~45 s on 2 cores; two CLI tests stay fast
def test_swings_are_exact_and_agree_in_sign(h100_decode, tmp_path):
    *_, sens = h100_decode
    sw = sens.swings("tpot_s", top=5, groups=HARDWARE_GROUPS)
    assert list(sw.parameter)[0] == BW
    assert (np.sign(sw["x2"]) == np.sign(sw.elasticity)).all()
    assert (np.sign(sw["x0.5"]) == -np.sign(sw.elasticity)).all()
    # exact: double the bandwidth, re-evaluate directly
    system, model, plan, _ = h100_decode
    faster = eqx.tree_at(
        lambda s: s.chip.memory_bandwidth_bytes_per_s,
        system,
        2.0 * system.chip.memory_bandwidth_bytes_per_s,
    )
    tpot = eqx.filter_jit(lambda s, m, p: dc.ServeCost(s, m)(p).tpot_s)
    direct = float(tpot(faster, model, plan)) / sens.metrics["tpot_s"] - 1.0
    assert float(sw["x2"].iloc[0]) == pytest.approx(direct, rel=1e-9)


# --- command line -----------------------------------------------------------------------------
runner = CliRunner()


@pytest.mark.slow  # 9-40 s on 2 cores: kept out of the ~6-minute default run
def test_cli_train_json_ranks_and_names_the_most_elastic():
    result = runner.invoke(
        app,
        [
            "sensitivity",
            "train",
            "--model",
            "llama-3-70b",
            "--system",
            "dgx-h100",
            "--chips",
            "64",
            "--tp",
            "8",  # tp 2 needs 145 GB per chip: its elasticities were of a plan that cannot run
            "--pp",
            "4",
            "--global-batch",
            "128",
            "--seq-len",
            "8192",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["feasible"] is True
    out = json.loads(result.stdout)
    assert out["ranked_by"] == "step_time_s"
    # the tensor units' power limit: an H100's large bf16 GEMMs run at the clock 700 W allows
    assert out["most_elastic_hardware"]["step_time_s"]["parameter"] == "chip.tdp_w"
    e = [abs(r["elasticity"]) for r in out["ranked"]]
    assert e == sorted(e, reverse=True)
    assert set(out["elasticities"]) == set(out["metrics"])


@pytest.mark.slow  # 9-40 s on 2 cores: kept out of the ~6-minute default run
def test_cli_serve_table_and_tornado(tmp_path):
    png = tmp_path / "tornado.png"
    result = runner.invoke(
        app,
        [
            "sensitivity",
            "serve",
            "--model",
            "llama-3-70b",
            "--system",
            "dgx-h100",
            "--chips",
            "8",
            "--tp",
            "4",
            "--batch",
            "1",
            "--input-len",
            "1024",
            "--output-len",
            "256",
            "--mode",
            "continuous",
            "--weight-format",
            "bf16",
            "--kv-format",
            "bf16",
            "--group",
            "hardware",
            "--tornado",
            str(png),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "most elastic hardware number for tpot_s: chip.memory_bandwidth_bytes_per_s" in (
        " ".join(result.output.split())
    )
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"


def test_cli_bad_metric_is_a_clear_error():
    result = runner.invoke(app, ["sensitivity", "train", "--metric", "ttft_s"])
    assert result.exit_code == 2
    assert "--metric: 'ttft_s' is not available here" in result.output


def test_sensitivity_of_an_infeasible_plan_says_so_and_exits_1():
    """Feasibility is never skipped: elasticities of a plan that needs more chips than the
    system has are printed, then why it cannot run, with exit status 1 (and in --json)."""
    args = ["sensitivity", "train", "--chips", "64", "--tp", "8", "--pp", "16", "--top", "3"]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)
    assert out["feasible"] is False
    assert out["problems"] == ["tp*pp*dp*cp = 512 but the system has 64 chips"]
    table = CliRunner().invoke(app, args)
    assert table.exit_code == 1 and "infeasible:" in table.output
