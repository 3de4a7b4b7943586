"""The kernel fit (diffcost._analysis.calibrate_kernels): it recovers the GEMM and fused
attention constants that generated synthetic timings, holds each source out in turn, and its
constants reach the end-to-end fit as tight priors and family values."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

import diffcost as dc
from diffcost import EXACT
from diffcost.testing import (
    AttentionShape,
    GemmFormat,
    burst,
    calibration,
    fit_attention,
    fit_family,
    fit_kernels,
    fixed_s,
    format_index,
    gemm_time_s,
    prefill_attention,
    read_kernel_measurements,
    with_constants,
)

TRUE = {"matmul_peak_fraction": 0.8, "matmul_half_dim": 64.0, "narrow_matmul_fraction": 0.76}
SHAPES = [(m, n, 4096) for m in (128, 512, 2048, 8192) for n in (1024, 4096, 16384)]


def _gemm_points(tmp_path, name: str, dtype: str, chip: str = "h100-sxm"):
    """Timings of ``SHAPES`` made by the model itself with ``TRUE`` constants."""
    system = with_constants(dc.load_system(chip=chip), TRUE)
    peaks = system.efficiency.achievable_peaks(system.chip.peak_flop_per_s)
    fmt = GemmFormat(peaks[format_index(dtype)], 2.0 if dtype == "bf16" else 1.0)
    lines = [
        f'schema_version = 1\nkind = "kernel-measurements"\nname = "{name}"\n'
        'display_name = "synthetic"\ntiming = "kernel"\n[source]\nreference = "test"\n'
        'conventions = "model"\nhardware = "model"\ndata = "model"\n'
    ]
    for m, n, k in SHAPES:
        t = float(gemm_time_s(float(m), float(n), float(k), fmt, burst(system), EXACT))
        t += fixed_s(system, "kernel")
        lines.append(
            f'[[kernel]]\nid = "{name}-{m}-{n}"\nop = "gemm"\nchip = "{chip}"\n'
            f'dtype = "{dtype}"\nm = {m}\nn = {n}\nk = {k}\ntime_s = {t!r}\n'
            'as_published = "x"\nverified = true\n'
        )
    path = tmp_path / f"{name}.toml"
    path.write_text("\n".join(lines))
    return read_kernel_measurements([path])


def test_gemm_fit_recovers_the_constants_and_holds_sources_out(tmp_path):
    points = _gemm_points(tmp_path, "a", "bf16") + _gemm_points(tmp_path, "b", "fp8")
    fit = fit_family("hopper", points)
    assert fit.constants == pytest.approx(TRUE, rel=1e-6)
    measured = np.asarray([p.time_s for p in points])
    np.testing.assert_allclose(fit.fitted_s, measured, rtol=1e-4)
    # held out: without the fp8 source nothing says how fp8 GEMMs fare (narrow stays 1)
    assert fit.held_out_s is not None
    held = np.asarray(fit.held_out_s) / measured - 1.0
    fp8 = np.asarray([p.dtype == "fp8" for p in points])
    assert np.all(np.abs(held[~fp8]) < 1e-3)  # the bf16 source: the fp8 one fixes the rest
    assert np.median(held[fp8]) < -0.05  # the fp8 source, fitted without: too fast


def test_a_point_under_a_lowered_power_limit_weighs_nothing(tmp_path):
    """Its time is the power law's, not the shape constants': the fit is the same with it,
    and it is predicted at the capped clock (slower than the same shape at the top clock)."""
    points = _gemm_points(tmp_path, "a", "bf16")
    text = (tmp_path / "a.toml").read_text().replace('name = "a"', 'name = "c"')
    text = text.replace('id = "a-', 'id = "c-').replace(
        "time_s = ", "power_limit_w = 300\ntime_s = "
    )
    (tmp_path / "c.toml").write_text(text)
    capped = read_kernel_measurements([tmp_path / "c.toml"])
    alone, both = fit_family("hopper", points), fit_family("hopper", points + capped)
    assert both.constants == alone.constants
    n = len(points)
    assert np.all(np.asarray(both.fitted_s[n:]) >= np.asarray(both.fitted_s[:n]))
    assert np.any(np.asarray(both.fitted_s[n:]) > 1.05 * np.asarray(both.fitted_s[:n]))


def test_one_source_has_no_held_out_error(tmp_path):
    fit = fit_family("hopper", _gemm_points(tmp_path, "a", "bf16"))
    assert fit.held_out_s is None
    assert fit.constants["narrow_matmul_fraction"] == 1.0  # no 8-bit point: stays at 1


def test_attention_fit_recovers_the_constants(tmp_path):
    true = {
        "attention_softmax_dim": 32.0,
        "attention_half_span": 384.0,
        "attention_half_tiles": 32.0,
    }
    system = with_constants(dc.load_system(chip="h200"), true)
    peak = system.chip.peak_flop_per_s[format_index("bf16")]
    lines = [
        'schema_version = 1\nkind = "kernel-measurements"\nname = "att"\n'
        'display_name = "synthetic"\ntiming = "call"\n[source]\nreference = "test"\n'
        'conventions = "model"\nhardware = "model"\ndata = "model"\n'
    ]

    for heads, s in [(8, 2048), (8, 8192), (64, 2048), (64, 8192), (64, 32768), (32, 4096)]:
        one = lambda x: jnp.asarray(float(x))  # noqa: E731
        sh = AttentionShape(
            one(heads), one(heads // 8), one(128), one(2), one(2), one(128),
            one(heads // 8 * 256), one(256),
        )  # fmt: skip
        got = prefill_attention(float(s), float(s), s / 2.0, sh, peak, burst(system), EXACT)
        t = float(got.time_s) + fixed_s(system, "call")
        lines.append(
            f'[[kernel]]\nid = "att-{heads}-{s}"\nop = "attention_prefill"\nchip = "h200"\n'
            f'dtype = "bf16"\nbatch = 1\nq_len = {s}\nkv_len = {s}\nheads = {heads}\n'
            f"kv_heads = {heads // 8}\nhead_dim = 128\ncausal = true\ntime_s = {t!r}\n"
            'as_published = "x"\nverified = true\n'
        )
    path = tmp_path / "att.toml"
    path.write_text("\n".join(lines))
    points = read_kernel_measurements([path])
    fit = fit_attention("hopper", points)
    assert fit is not None
    assert fit.constants == pytest.approx(true, rel=1e-6)
    assert fit.held_out_s is None


def test_builtin_fit_is_physical_and_reaches_the_end_to_end_fit():
    fits = fit_kernels(read_kernel_measurements())
    consts = fits.constants
    assert set(consts) == {"hopper", "blackwell"}
    for fam in consts.values():
        assert 0.4 <= fam["matmul_peak_fraction"] <= 1.0
        assert 0.6 <= fam["narrow_matmul_fraction"] <= 1.0
    # hopper: several sources per operation, so a held-out prediction for every point
    held = fits.held_out_s()
    assert all(i in held for i in fits.gemm["hopper"].ids)
    # the end-to-end fit: hopper's GEMM constants become tight priors, the others family values
    prior = calibration.kernel_prior(consts)
    assert prior is not None
    h = calibration.FAMILY_NAMES.index("hopper")
    mask = np.asarray(prior.mask)
    names = calibration.NAMES
    assert mask[h, names.index("matmul_peak_fraction")] == 1.0
    assert mask[h, names.index("memory_bandwidth_fraction")] == 0.0
    extra = {k: np.asarray(v) for k, v in prior.extra.items()}
    assert extra["narrow_matmul_fraction"][h] == consts["hopper"]["narrow_matmul_fraction"]
    assert np.isnan(extra["narrow_matmul_fraction"][calibration.FAMILY_NAMES.index("ampere")])
    base = dc.load_system(chip="h100-sxm").efficiency
    theta = calibration.initial_theta()
    family = jnp.asarray([h, len(calibration.FAMILY_NAMES)])
    rows = calibration.efficiency_rows(theta, family, base, prior)
    assert float(rows.narrow_matmul_fraction[0]) == pytest.approx(
        consts["hopper"]["narrow_matmul_fraction"]
    )
    assert float(rows.narrow_matmul_fraction[1]) == float(base.narrow_matmul_fraction)
    # a hopper fraction 10% off its kernel value costs far more than under the loose prior
    j = names.index("matmul_peak_fraction")
    at = dict(theta)
    want = consts["hopper"]["matmul_peak_fraction"]
    values = np.array(calibration.from_u(theta["global"]))
    values[j] = want
    u = calibration.to_u(values)[j] - float(theta["global"][j])
    at["family"] = theta["family"].at[h, j].set(u)
    values[j] = 0.9 * want
    off = dict(theta)
    off["family"] = theta["family"].at[h, j].set(calibration.to_u(values)[j] - theta["global"][j])
    loose = float(calibration.prior_penalty(off) - calibration.prior_penalty(at))
    tight = float(calibration.prior_penalty(off, prior) - calibration.prior_penalty(at, prior))
    assert tight > 0.5 and tight > 10 * abs(loose)


def test_narrow_fraction_scales_only_the_8_bit_peaks():
    system = with_constants(dc.load_system(chip="h100-sxm"), {"narrow_matmul_fraction": 0.5})
    peaks = np.asarray(system.chip.peak_flop_per_s)
    got = np.asarray(system.efficiency.achievable_peaks(system.chip.peak_flop_per_s))
    for i, f in enumerate(dc.FORMATS):
        want = 0.5 if f in ("fp8", "int8", "fp4", "int4") else 1.0
        assert got[i] == pytest.approx(want * peaks[i])


def test_with_constants_replaces_only_what_it_names():
    base = dc.load_system(chip="h100-sxm")
    got = with_constants(base, {"matmul_half_dim": 77.0})
    assert float(got.efficiency.matmul_half_dim) == 77.0
    for f in dataclasses.fields(base.efficiency):
        if f.name != "matmul_half_dim":
            assert float(getattr(got.efficiency, f.name)) == float(getattr(base.efficiency, f.name))
