"""Aggregated against disaggregated layouts at one rate (diffcost._search.pools): the answer
of each kind meets the limits at the rate, no layout of fewer chips does (checked one by one
with the exact model), and the verdict names the winner and the margin."""

import pytest

import diffcost as dc
from diffcost import under_load, workload
from diffcost.testing import PoolAnswer, disaggregated_under_load, size_pools, verdict


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

    assert agg.layout is not None
    assert _meets(colocated(agg.layout["tp"], agg.layout["replicas"]), limits)
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
    assert float(out.ttft_p99_s) == pytest.approx(dis.latency["ttft_p99_s"], rel=1e-4)
