"""Unit suffixes convert to SI in one place; GB is 1e9, GiB is 2**30."""

import pytest

from diffcost.testing import split_unit


@pytest.mark.parametrize(
    "key,expected",
    [
        ("capacity_gb", ("capacity", "bytes", 1e9)),
        ("capacity_gib", ("capacity", "bytes", 2.0**30)),
        ("bandwidth_gb_per_s", ("bandwidth", "bytes_per_s", 1e9)),
        ("scale_out_bandwidth_gbit_per_s", ("scale_out_bandwidth", "bytes_per_s", 1.25e8)),
        ("bf16_tflop_per_s", ("bf16", "flop_per_s", 1e12)),
        ("scale_up_latency_us", ("scale_up_latency", "s", 1e-6)),
        ("tdp_w", ("tdp", "w", 1.0)),
    ],
)
def test_split_unit(key, expected):
    assert split_unit(key) == expected


def test_no_suffix_is_none():
    assert split_unit("layers") is None
    assert split_unit("_gb") is None


def test_every_suffix_is_documented_with_its_factor():
    """specs/SCHEMA.md's Units table lists every suffix of UNITS, on its dimension's row."""
    import re

    import diffcost as dc
    from diffcost.testing import UNITS

    text = (dc.specs_dir() / "SCHEMA.md").read_text().split("## Units", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in text.splitlines() if line.startswith("| ") and "`_" in line]
    documented = [set(re.findall(r"`(_[a-z_]+)`", row)) for row in rows]
    assert sorted(map(sorted, documented)) == sorted(sorted(table) for table in UNITS.values())
    for row in rows:
        for suffix, factor in re.findall(r"`(_[a-z_]+)` \(([0-9e*./-]+)\)", row):
            dim = next(d for d, table in UNITS.items() if suffix in table)
            assert UNITS[dim][suffix] == _number(factor), suffix


def _number(text: str) -> float:
    """``1e12``, ``2**30`` or ``1e9/8`` as written in the Units table."""
    if "**" in text:
        base, exponent = text.split("**")
        return float(base) ** float(exponent)
    if "/" in text:
        num, den = text.split("/")
        return float(num) / float(den)
    return float(text)
