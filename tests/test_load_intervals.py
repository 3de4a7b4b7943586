"""Bands of the latencies under load (diffcost._analysis.load_intervals).

Measured (`python -m diffcost._analysis.load_intervals`, the calibration's posterior): on the
21 modelled open-loop values (SGLang 0.3 / vLLM 0.6 ShareGPT medians, vLLM 0.8.3 A100 70B
mean/p50/p99) the band of the posterior, the serving discrepancy and the queue's holds 4
(19%): the model's -16..-22% median bias on these servers is outside it; widened by the
server-mode discrepancy left over on the other source (leave-one-source-out) it holds 15
(71%), nominal 80%.
"""

import math

import pytest

import diffcost as dc
from diffcost import under_load, workload
from diffcost.testing import QUEUE_LOG_SD, iteration_policy, load_coverage, load_intervals

Z80 = 1.2815516


@pytest.mark.slow
def test_band_brackets_the_prediction_and_carries_the_queue_term():
    system = dc.load_system("dgx-h100", chips=1)
    model = dc.load_model("llama-3-8b")
    plan = dc.serve_plan(batch=128, input_len=1024, output_len=128, prefill_chunk=2048)
    load = workload(10.0, 1.0, 0.5)
    policy = iteration_policy(False, 0.0)
    iv = load_intervals(system, model, plan, load, "h100-sxm", "default", None, policy)
    assert iv is not None
    out = under_load(system, model, plan, load, policy=policy)
    for name in ("ttft_p50_s", "ttft_p99_s", "tpot_s", "tpot_p99_s"):
        y = float(getattr(out, name))
        lo, hi = iv[f"{name}_p10"], iv[f"{name}_p90"]
        assert lo < y < hi
        assert math.sqrt(lo * hi) == pytest.approx(y, rel=1e-9)  # log-normal: y is the median
        parts = iv["interval"]["outputs"][name]
        assert parts["queue_var"] == pytest.approx(QUEUE_LOG_SD**2)
        sigma = math.log(hi / y) / Z80
        assert sigma**2 == pytest.approx(sum(parts.values()), rel=1e-6)  # Z80 to 8 digits


@pytest.mark.slow
def test_leave_one_source_out_coverage_of_the_server_points():
    result = load_coverage()
    assert result["n"] == 21
    assert result["inside"]["coverage"] < 0.3  # the known bias of these servers lies outside
    assert 0.65 <= result["inside_loso"]["coverage"] <= 0.9
    for r in result["rows"]:
        assert r["p10_loso"] <= r["p10"] <= r["predicted"] <= r["p90"] <= r["p90_loso"]
