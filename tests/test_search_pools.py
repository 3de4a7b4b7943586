"""Aggregated against disaggregated layouts at one rate (diffcost._search.pools): the answer
of each kind meets the limits at the rate, no layout of fewer chips does (checked one by one
with the exact model), and the verdict names the winner and the margin."""

import numpy as np
import pytest

import diffcost as dc
from diffcost import under_load, workload
from diffcost.testing import (
    PoolAnswer,
    disaggregated_under_load,
    size_pools,
    size_pools_formats,
    verdict,
)


def _answer(kind, chips):
    return PoolAnswer(kind, chips, None, None, 1)


def test_verdict_names_the_winner_and_the_margin():
    assert verdict(_answer("aggregated", 6), _answer("disaggregated", 8)) == (
        "aggregated wins: 6 chips (8 disaggregated, 33% more)"
    )
    assert verdict(_answer("aggregated", 8), _answer("disaggregated", 4)) == (
        "disaggregated wins: 4 chips (8 aggregated, 100% more)"
    )
    assert verdict(_answer("aggregated", 4), _answer("disaggregated", 4)).startswith("aggregated")
    assert verdict(_answer("aggregated", None), _answer("disaggregated", 2)) == (
        "disaggregated wins: 2 chips"
    )
    assert "neither" in verdict(_answer("aggregated", None), _answer("disaggregated", None))


def _meets(out, limits):
    return (
        bool(out.stable)
        and float(out.ttft_p99_s) <= limits[0]
        and (float(out.tpot_p99_s) <= limits[1])
    )


@pytest.mark.slow  # two vmapped programs compile (~60 s on 2 cores)
def test_each_answer_is_the_fewest_chips_meeting_the_limits():
    system, model = dc.load_system("dgx-h100", chips=4), dc.load_model("llama-3-8b")
    shape = dict(batch=128, input_len=1024, output_len=256, prefill_chunk=2048)
    plan = dc.serve_plan(**shape)
    limits, qps = (0.25, 0.015), 20.0
    agg, dis = size_pools(system, model, plan, qps, limits, 4, tps=(1, 2))
    assert agg.chips is not None and dis.chips is not None
    load = workload(qps)

    def colocated(tp, r):
        p = dc.serve_plan(**shape, tp=tp, replicas=r)
        return under_load(system, model, p, load)

    assert agg.layout is not None and agg.latency is not None
    best = colocated(agg.layout["tp"], agg.layout["replicas"])
    assert _meets(best, limits)
    for key, value in agg.latency.items():  # the same expressions as under_load's
        assert float(getattr(best, key)) == pytest.approx(value, rel=1e-5), key
    for tp in (1, 2):
        for r in range(1, 4 // tp + 1):
            if tp * r < agg.chips:
                assert not _meets(colocated(tp, r), limits), (tp, r)
    assert dis.layout is not None and dis.latency is not None
    lay = dis.layout
    pre = dc.serve_plan(**shape, tp=lay["prefill_tp"], replicas=lay["prefill_instances"])
    dec = dc.serve_plan(**shape, tp=lay["decode_tp"], replicas=lay["decode_instances"])
    out = disaggregated_under_load(system, model, pre, dec, load)
    assert _meets(out, limits)
    for key, value in dis.latency.items():  # pools joined from their states, one by one here
        assert float(getattr(out, key)) == pytest.approx(value, rel=1e-5), key


def test_every_format_and_both_kinds_are_one_program_call(monkeypatch):
    """The structure that makes ``plan serve --qps`` quick: one call of one program per
    question (not one per kind or format), each (tp, count) group evaluated once for all
    disaggregated rows that use it, the rows indices into the groups."""
    calls = []

    def fake(system, model, plans, groups, pairs, load):
        calls.append((plans, groups, pairs))
        formats, k, rows = plans.tp.shape[0], groups[0].shape[0], pairs[0].shape[0]
        fill = lambda n: {  # noqa: E731  every candidate unstable: no answer
            key: np.zeros((formats, n))
            for key in ("stable", "ttft_p99_s", "tpot_p99_s", "ttft_p50_s", "tpot_s")
        }
        return fill(k), fill(rows)

    monkeypatch.setattr("diffcost._search.pools.POOLS", fake)
    system, model = dc.load_system("dgx-h100", chips=4), dc.load_model("llama-3-8b")
    plans = [dc.serve_plan(weight_format=f, kv_format=f) for f in ("bf16", "fp8")]
    found = size_pools_formats(system, model, plans, 5.0, (1.0, 0.1), 4, tps=(1, 2))
    assert len(calls) == 1 and len(found) == 2
    assert all(a.chips is None and d.chips is None for a, d in found)
    _, (tp, count), (kp, kd) = calls[0]
    groups = list(zip(np.asarray(tp).tolist(), np.asarray(count).tolist(), strict=True))
    assert groups == [(1, 1), (1, 2), (1, 3), (1, 4), (2, 1), (2, 2)]
    rows = {(groups[p], groups[d]) for p, d in zip(np.asarray(kp), np.asarray(kd), strict=True)}
    every = {(a, b) for a in groups for b in groups if a[0] * a[1] + b[0] * b[1] <= 4}
    assert rows == every and len(kp) == len(every)  # each row once, as pairs of groups
