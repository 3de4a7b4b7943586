"""Unit suffixes convert to SI in one place; GB is 1e9, GiB is 2**30."""

import pytest

from diffcost._core.units import split_unit


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
