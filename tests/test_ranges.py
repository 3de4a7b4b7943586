"""Plausible ranges of spec values (diffcost/_inputs/ranges.py): a unit-suffix typo that scales
a value by 1e3..1e12 is refused with the file, key, value, unit and range, every problem of a
file at once; every number of a chip, system, calibration, model and engine has a range, and
the built-in specs lie inside them; the unit-typo census (benchmarks/unit_typo_census.py) accepts no
silent typo."""

from pathlib import Path

import pytest
from benchmark_module import load_benchmark

import diffcost as dc
from diffcost.testing import Checker, Plausible
from diffcost.testing import schema as S


def _census():
    return load_benchmark("unit_typo_census")


def _typo(tmp_path: Path, name: str, kind: str, renames: dict[str, str]) -> Path:
    """A copy of a built-in spec with keys renamed (a file the user could have written)."""
    text = (dc.specs_dir() / f"{kind}s" / f"{name}.toml").read_text()
    for old, new in renames.items():
        assert f"\n{old} = " in text, old
        text = text.replace(f"\n{old} = ", f"\n{new} = ")
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def test_unit_suffix_typos_of_a_chip_are_refused_all_at_once(tmp_path):
    """Issue 39: ``bf16_tflop_per_s`` -> ``bf16_flop_per_s`` read an H100 at 989 FLOP/s,
    ``_pj_per_flop`` -> ``_j_per_flop`` an energy x1e12 and ``_us`` -> ``_s`` a latency x1e6;
    each was accepted with a confident answer."""
    path = _typo(
        tmp_path,
        "h100-sxm",
        "chip",
        {
            "bf16_tflop_per_s": "bf16_flop_per_s",
            "fp8_pj_per_flop": "fp8_j_per_flop",
            "scale_up_latency_us": "scale_up_latency_s",
        },
    )
    with pytest.raises(dc.SpecError) as err:
        dc.load_chip(path)
    problems = {p.key: p for p in err.value.problems}
    assert set(problems) == {
        "compute.bf16_flop_per_s",
        "energy.fp8_j_per_flop",
        "interconnect.scale_up_latency_s",
    }
    assert all(p.file == str(path) for p in problems.values())
    peak = problems["compute.bf16_flop_per_s"].reason
    assert peak.startswith("989.4 (its suffix _flop_per_s reads 989.4 FLOP/s) is outside")
    assert "1e10..1e18 FLOP/s" in peak and "accepted: _tflop_per_s" in peak
    assert "1e-14..1e-10 J/FLOP" in problems["energy.fp8_j_per_flop"].reason
    assert "1e-8..0.01 s" in problems["interconnect.scale_up_latency_s"].reason


def test_unit_suffix_typo_of_a_system_is_refused(tmp_path):
    """``restart_s`` -> ``restart_ms`` reads 660 ms for an 11-minute restart."""
    path = _typo(tmp_path, "dgx-h100", "system", {"restart_s": "restart_ms"})
    with pytest.raises(dc.SpecError) as err:
        dc.load_spec("system", path)
    (problem,) = err.value.problems
    assert problem.key == "reliability.restart_ms"
    assert "0.66 s" in problem.reason and "1..1e6 s" in problem.reason


def test_zero_is_accepted_where_a_key_allows_it():
    """0 means "not counted" (a statically scheduled system has no jitter): not a range miss."""
    ck = Checker("s.toml")
    table = {
        "collective_jitter_us": 0.0,
        "failures_per_chip_hour": 0.0,
        "checkpoint_bandwidth_gb_per_s": 1.0,
        "restart_s": 0.0,
    }
    assert ck.table(table, S.RELIABILITY, "reliability.")["collective_jitter_s"] == 0.0
    assert ck.problems == []


def test_a_count_outside_its_range_is_refused():
    ck = Checker("c.toml")
    ck.table({"architecture": "systolic", "array_dim": 65536}, S.CHIP["execution"], "execution.")
    (problem,) = ck.problems
    assert problem.key == "execution.array_dim"
    assert problem.reason.startswith("65536 is outside the plausible range of a matrix array's")
    assert "suffix" not in problem.reason  # a count has no unit to check


def _numbers(kind: S.Kind) -> list[tuple[str, S.Field]]:
    tables = {"": {**kind.top}, **{k: v for k, v in kind.tables.items() if v is not None}}
    for name, (_, fields) in kind.groups.items():
        tables[name] = fields
    return [
        (f"{table}.{key}", f)
        for table, fields in tables.items()
        for key, f in fields.items()
        if f.kind in ("quantity", "count", "number")
    ]


@pytest.mark.parametrize("kind", ["chip", "system", "calibration", "model", "engine"])
def test_every_number_of_the_spec_kinds_has_a_plausible_range(kind):
    """Every quantity, count and number of a chip, system, calibration, model or engine file
    (fractions lie in [0, 1] by their kind) has a range, with a rationale."""
    missing = [key for key, f in _numbers(S.KINDS[kind]) if f.plausible is None]
    assert missing == []
    for _, f in _numbers(S.KINDS[kind]):
        assert isinstance(f.plausible, Plausible)
        assert 0 < f.plausible.lo < f.plausible.hi and f.plausible.why and f.plausible.what


@pytest.mark.parametrize("kind", ["chip", "system", "calibration", "model", "engine"])
def test_every_builtin_spec_lies_inside_the_ranges(kind):
    for name in dc.builtin_names(kind):
        dc.load_spec(kind, name)


def _assert_no_silent_typo(every: int) -> None:
    census = _census()
    counts, accepted = census.census(every=every)
    assert counts["typo"] > 0
    silent = [
        m for m, harmless in accepted if not harmless and census.factor_ratio(m) >= census.NEAR
    ]
    assert [m for m in silent if m.how != "suffix"] == []
    # substitutions that change a value by 1e6 or more (a prefix dropped) never pass
    assert [m for m in silent if census.factor_ratio(m) >= 1e6] == []


def test_census_sample_accepts_no_silent_typo():
    """One mutation in 17 of the census (~850 specs, ~1 s): no deletion or swap of a unit
    suffix is accepted unless it reads the same value or a binary for a decimal prefix."""
    _assert_no_silent_typo(every=17)


@pytest.mark.slow
def test_full_census_accepts_no_silent_typo():
    """All 13,970 deletions and swaps and 752 suffix substitutions (~15 s)."""
    _assert_no_silent_typo(every=1)


def test_a_peak_out_of_proportion_to_the_16_bit_peak_is_refused(tmp_path):
    """``fp8_tflop_per_s`` -> ``fp8_pflop_per_s`` on an L4 reads 242 PFLOP/s: inside the range
    of any chip's peak, but 2000x its own bf16 peak; each format is held within 1/100..16x of
    the 16-bit peak."""
    path = _typo(tmp_path, "l4", "chip", {"fp8_tflop_per_s": "fp8_pflop_per_s"})
    with pytest.raises(dc.SpecError) as err:
        dc.load_chip(path)
    (problem,) = err.value.problems
    assert problem.key == "compute.fp8_<unit>"
    assert "2e+03x the bf16 peak" in problem.reason and "0.01..16 times" in problem.reason


def test_a_model_shape_beyond_any_transformer_is_refused(tmp_path):
    """A hidden size of 4e7 (a pasted parameter count) is no model width."""
    text = (dc.specs_dir() / "models" / "llama-3-8b.toml").read_text()
    path = tmp_path / "llama-3-8b.toml"
    path.write_text(text.replace("\nhidden = 4096\n", "\nhidden = 40960000\n"))
    with pytest.raises(dc.SpecError) as err:
        dc.load_model(path)
    reasons = {p.key: p.reason for p in err.value.problems}
    assert reasons["hidden"].startswith("40960000 is outside the plausible range of a matrix")


def test_every_measured_number_has_a_plausible_range():
    """The measured values and offered loads of measurement files (the points the model is
    validated against) are held to ranges as well; every built-in one lies inside."""
    from diffcost import load_measurements
    from diffcost.testing import load_load_measurements

    tables = [*S.MEASURED.values(), S.LOAD, S.LOAD_MEASURED]
    missing = [
        key
        for table in tables
        for key, f in table.items()
        if f.kind in ("quantity", "count", "number") and f.plausible is None
    ]
    assert missing == []
    assert load_measurements() and load_load_measurements()


def test_a_measured_time_in_the_wrong_unit_is_refused():
    """A time per token of 0.69 ms written as ``amortized_time_per_token_s = 690`` is refused."""
    ck = Checker("m.toml")
    ck.table(
        {"amortized_time_per_token_s": 690, "as_published": "0.69 ms"}, S.MEASURED["serve"], ""
    )
    (problem,) = ck.problems
    assert problem.key == "amortized_time_per_token_s" and "1e-7..100 s" in problem.reason
