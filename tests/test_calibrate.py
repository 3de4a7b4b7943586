"""Calibration: gradients, the leave-one-source-out logic, the calibration file it writes."""

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffcost as dc
from diffcost import load_measurements, load_spec
from diffcost.cli import app
from diffcost.testing import calibration as C
from diffcost.testing import efficiency_for, prepare

SUBSET = (
    "megatron_sc21_table1_1.7B",
    "megatron_sc21_table1_3.6B",  # train, A100
    "trtllm05_ttft_a100_gpt-j6b_tp1_isl128",
    "trtllm05_ttft_h100_llama7b_tp1_isl2048",  # TTFT
    "trtllm061_l40s_gpt-j6b_tp1_bs64_128x2048",  # serving throughput, Ada
    "bloom176b_dsinf_fp16_8xA100_bs8",  # per-token latency, unmodelled: weighs 0
)


@pytest.fixture(scope="module")
def small():
    points = [m for m in load_measurements() if m.id in SUBSET]
    return prepare(points)


def _theta():
    theta = C.initial_theta()
    rng = np.random.default_rng(0)
    return {
        "global": theta["global"] + 0.3 * rng.standard_normal(theta["global"].shape),
        "family": 0.2 * jnp.asarray(rng.standard_normal(theta["family"].shape)),
    }


def test_parametrisation_is_bounded_and_invertible():
    values = np.asarray([p.prior for p in C.PARAMS])
    assert np.allclose(C.from_u(jnp.asarray(C.to_u(values))), values, rtol=1e-6)
    extreme = C.from_u(jnp.asarray([(-50.0, 50.0)[k % 2] for k in range(len(C.PARAMS))]))
    lo = np.asarray([p.lo for p in C.PARAMS])
    hi = np.asarray([p.hi for p in C.PARAMS])
    assert np.all(extreme >= lo * (1 - 1e-9)) and np.all(extreme <= hi * (1 + 1e-9))


@pytest.mark.slow  # 9 s on 2 cores (gradient and finite differences of the fit loss)
def test_loss_gradient_matches_finite_differences(small):
    data = C.fit_data(small)
    _, weights = C.fold_weights(
        [m.source for m in small.points], [m.unmodelled for m in small.points]
    )
    theta = _theta()
    chosen = jnp.asarray(
        C._choose_all(jax.tree_util.tree_map(lambda x: x[None], theta), small, data)[0]
    )
    w = jnp.asarray(weights[0])
    value_and_grad = jax.jit(jax.value_and_grad(lambda th: C.loss(th, data, chosen, w)))
    f = lambda th: value_and_grad(th)[0]  # noqa: E731
    grad = value_and_grad(theta)[1]
    h = 1e-6
    entries = [("global", (k,)) for k in range(len(C.PARAMS))]
    entries += [("family", (0, 0)), ("family", (1, 2)), ("family", (2, 4))]
    for part, index in entries:
        up = {**theta, part: theta[part].at[index].add(h)}
        down = {**theta, part: theta[part].at[index].add(-h)}
        numeric = (f(up) - f(down)) / (2 * h)
        assert float(grad[part][index]) == pytest.approx(float(numeric), rel=1e-4, abs=1e-9), (
            part,
            index,
        )
    assert all(np.all(np.isfinite(g)) for g in jax.tree_util.tree_leaves(grad))
    assert float(jnp.abs(grad["global"]).max()) > 0


def test_fold_weights_leave_each_source_out():
    sources, unmodelled = zip(
        *[
            ("a", None),
            ("a", None),
            ("b", None),
            ("b", None),
            ("b", None),
            ("b", "effect"),
            ("c", "effect"),
        ],
        strict=True,
    )
    folds, w = C.fold_weights(list(sources), list(unmodelled))
    assert folds == ["all", "a", "b"]  # "c" has no fitted point: the fit never saw it anyway
    src = np.asarray(sources)
    # each source weighs sqrt(n fitted), unmodelled points nothing, normalised to the sources
    assert w[0, src == "a"].sum() / w[0, src == "b"].sum() == pytest.approx(np.sqrt(2 / 3))
    assert w[0].sum() == pytest.approx(2.0)
    assert w[0, 5] == 0 and w[0, 6] == 0
    for k, held in [(1, "a"), (2, "b")]:
        assert np.all(w[k, src == held] == 0)
        assert np.array_equal(w[k, src != held], w[0, src != held])


@pytest.fixture(scope="module")
def serving(small):
    return prepare([m for m in small.points if m.kind == "serve"])


@pytest.fixture(scope="module")
def fit(serving):
    return C.calibrate(serving, steps=8, rounds=1)


@pytest.mark.slow  # shares the fit fixture (~16 s on 2 cores)
def test_held_out_source_never_influences_its_own_prediction(serving, fit):
    fit1 = fit
    changed = [
        m if m.source != "trtllm-0.5-latency" else dataclass_replace(m, measured=m.measured * 2)
        for m in serving.points
    ]
    fit2 = C.calibrate(dataclass_replace(serving, points=changed), steps=8, rounds=1)
    assert fit1.folds == fit2.folds == ["all", "trtllm-0.5-latency", "trtllm-0.6.1-throughput"]
    for r1, r2 in zip(fit1.loso_rows, fit2.loso_rows, strict=True):
        if r1["source"] == "trtllm-0.5-latency":
            assert r1["predicted"] == pytest.approx(r2["predicted"], rel=1e-12)
    moved = [
        abs(r2["predicted"] / r1["predicted"] - 1)
        for r1, r2 in zip(fit1.fit_rows, fit2.fit_rows, strict=True)
        if r1["source"] == "trtllm-0.5-latency"
    ]
    assert max(moved) > 1e-3  # ... while the in-sample fit does follow the changed data


def dataclass_replace(obj, **changes):
    import dataclasses

    return dataclasses.replace(obj, **changes)


@pytest.mark.slow  # shares the fit fixture (~16 s on 2 cores)
def test_calibration_file_round_trip(serving, fit, tmp_path):
    summary = C.report(fit)
    path = tmp_path / "fitted.toml"
    path.write_text(
        C.calibration_toml(
            fit, serving, summary, "diffcost calibrate --write", date="2000-01-01", name="fitted"
        )
    )
    spec = load_spec("calibration", path)
    assert "Fitted 2000-01-01 with `diffcost calibrate --write`" in spec.info.source["efficiency"]
    constants = fit.constants(0)
    priors = load_spec("calibration", "default").values["overrides"]["tpu-v5e"]
    cases = [("h100-sxm", "hopper"), ("a100-sxm-80gb", "ampere"), ("tpu-v5e", "global")]
    for chip, family in cases:
        eff = efficiency_for(chip, path)
        for p in C.PARAMS:
            # a chip with no measurement keeps its prior (tpu-v5e: two constants), the rest fit
            prior = chip == "tpu-v5e" and p.name in priors
            expected = priors[p.name] if prior else constants[family][p.name]
            tol = 0.006 if p.name == "matmul_half_dim" else 1e-3  # written rounded
            assert float(getattr(eff, p.name)) == pytest.approx(expected, rel=tol), (chip, p.name)


@pytest.mark.slow  # shares the fit fixture (~16 s on 2 cores)
def test_a_refit_carries_every_prior_with_its_source(serving, fit, tmp_path):
    """The priors of chips with no measurement (MI300X, B200, TPUs, ...) are not fitted: a
    refitted file keeps their values and their source strings unchanged."""
    path = tmp_path / "fitted.toml"
    path.write_text(C.calibration_toml(fit, serving, C.report(fit), "test", name="fitted"))
    old, new = load_spec("calibration", "default"), load_spec("calibration", path)
    priors = [c for c in old.values["overrides"] if c in old.info.source]
    assert {"mi300x", "b200", "tpu-v5p", "gaudi3", "groq-lpu", "cerebras-wse3"} <= set(priors)
    for chip in priors:
        assert new.info.source[chip] == old.info.source[chip]
        for name, value in old.values["overrides"][chip].items():
            assert new.values["overrides"][chip][name] == pytest.approx(value, rel=1e-3)


def test_the_default_calibration_is_the_documented_fit():
    spec = load_spec("calibration", "default")
    text = spec.info.source["efficiency"]
    for needle in ["Fitted", "diffcost calibrate", "leave-one-source-out", "Bounds:"]:
        assert needle in text
    assert set(spec.values["overrides"]) >= {"a100-sxm-80gb", "h100-sxm", "l40s"}
    for p in C.PARAMS:
        value = spec.values["efficiency"][p.name if p.toml_scale == 1 else "kernel_launch_s"]
        assert p.lo <= value <= p.hi


# --- calibration files: the built-in one read-only, a fitted one written where asked ----------
def _cli(*args):
    from typer.testing import CliRunner

    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.mark.slow  # 11 s on 2 cores (a calibration and a validation run)
def test_calibrate_writes_where_asked_and_validate_reads_it_back(tmp_path):
    default = dc.specs_dir() / "calibration" / "default.toml"
    before = default.read_bytes()
    path = tmp_path / "out" / "mine.toml"
    source = dc.specs_dir() / "measurements" / "trtllm-0.5-latency.toml"
    args = ("--steps", 1, "--rounds", 1, "--no-loso", "--measurements", source)
    result = _cli("calibrate", *args, "--write", path, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["written"] == str(path)
    assert default.read_bytes() == before  # the package's file is untouched
    spec = load_spec("calibration", path)
    assert spec.info.name == "mine"
    assert f"--write {path}" in spec.info.source["efficiency"]
    fitted = json.loads(result.output)["constants"]["global"]
    eff = efficiency_for("tpu-v5e", path)  # no family: the global values beside its priors
    assert float(eff.link_bandwidth_fraction) == pytest.approx(
        fitted["link_bandwidth_fraction"], 1e-3
    )
    prior = load_spec("calibration", "default").values["overrides"]["tpu-v5e"]
    assert float(eff.matmul_peak_fraction) == pytest.approx(prior["matmul_peak_fraction"], 1e-6)
    check = _cli("validate", "--calibration", path, "--measurements", source, "--json")
    assert check.exit_code == 0, check.output
    assert json.loads(check.output)["calibration"] == str(path)
    assert default.read_bytes() == before


@pytest.mark.parametrize(
    "target,reason",
    [
        (None, "Option '--write' requires an argument"),
        ("--json", "--write: needs a PATH to write the calibration file to, got '--json'"),
        ("BUILTIN", "which are read-only: write to another path and use it with --calibration"),
    ],
)
def test_calibrate_refuses_to_write_into_the_package(target, reason):
    default = dc.specs_dir() / "calibration" / "default.toml"
    before = default.read_bytes()
    write = [] if target is None else [str(default) if target == "BUILTIN" else target]
    result = _cli("calibrate", "--steps", 1, "--write", *write)
    assert result.exit_code == 2
    assert reason in " ".join(result.output.replace("│", " ").split())
    assert default.read_bytes() == before


@pytest.mark.slow  # shares the fit fixture (~16 s on 2 cores)
def test_write_calibration_refuses_the_builtin_specs(serving, fit, tmp_path):
    text = C.calibration_toml(fit, serving, C.report(fit), "test", name="default")
    default = dc.specs_dir() / "calibration" / "default.toml"
    before = default.read_bytes()
    with pytest.raises(dc.SpecError, match="inside the built-in specs"):
        C.write_calibration(text, default)
    assert default.read_bytes() == before
    with pytest.raises(dc.SpecError, match="name: must equal the file name 'other'"):
        C.write_calibration(text, tmp_path / "other.toml")  # checked before anything is written
    assert not (tmp_path / "other.toml").exists()
    assert C.write_calibration(text, tmp_path / "default.toml") == tmp_path / "default.toml"
    assert Path(tmp_path / "default.toml").read_text() == text


# --- chips with no measurement: their own priors, with sources ---------------------------------
@pytest.mark.parametrize(
    "chip,matmul,memory,cited",
    [
        ("mi300x", 0.45, 0.81, "arXiv:2510.27583"),
        # B200: the GEMM constants fitted on per-kernel timings (issue 41; a range, refitted
        # with the kernel data), the rest a prior
        ("b200", (0.6, 0.8), 0.75, "specs/kernels"),
        ("tpu-v5p", 0.654, 0.8474, "MaxText"),  # worst family bw (ada); 0.8483 before the refit
    ],
)
def test_unmeasured_chips_use_their_own_priors_with_sources(chip, matmul, memory, cited):
    """MI300X and B200 no longer inherit the global efficiency (fitted mostly on A100/H100):
    each has its own prior from public microbenchmarks, cited in the calibration file."""
    spec = load_spec("calibration", "default")
    eff, glob = efficiency_for(chip), spec.values["efficiency"]
    if isinstance(matmul, tuple):
        assert matmul[0] <= float(eff.matmul_peak_fraction) <= matmul[1]
    else:
        assert float(eff.matmul_peak_fraction) == pytest.approx(matmul, rel=1e-6)
    assert float(eff.memory_bandwidth_fraction) == pytest.approx(memory, rel=1e-6)
    assert float(eff.matmul_peak_fraction) < glob["matmul_peak_fraction"]
    assert cited in spec.info.source[chip]
    assert float(eff.kernel_launch_s) == pytest.approx(glob["kernel_launch_s"])  # the rest: global


def test_every_override_is_a_fitted_family_or_a_sourced_prior():
    """No chip's constants are unexplained: an override belongs to a fitted family or has its
    own source.<chip>, and every built-in chip with no measurement has a prior."""
    spec = load_spec("calibration", "default")
    fitted = {c for members in C.FAMILIES.values() for c in members}
    for chip in spec.values["overrides"]:
        assert chip in fitted or chip in spec.info.source, chip
    for chip in dc.builtin_names("chip"):
        assert chip in fitted or chip in spec.info.source, chip
