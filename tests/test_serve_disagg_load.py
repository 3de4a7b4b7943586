"""Disaggregated prefill and decode pools under load (diffcost._serve.disagg_load): the prefill
pool is the colocated queue of prompts that stop at their first token plus the KV transfer, the
decode pool runs decode-only iterations (no prompt shares them), and the goodput search returns
a rate at which the p99 limits hold and just above which they do not.

The decode pool against the simulation of the same scheduler fed with prompts done elsewhere
(tests/serving_sim.decode_pool; Llama 3 8B on one H100, 128 slots, 128 output tokens, 20,000
requests): TPOT mean / p90 / p99 within 1% / 2% / 2.5% at slot utilisations 0.17-0.88 (e.g.
0.75: 12.45/12.49, 13.00/13.23, 13.44/13.58 ms), and at the cap both give t(128, 0).
"""

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest
from serving_sim import IterationTable, decode_pool

import diffcost as dc
from diffcost import EXACT, under_load, workload
from diffcost.testing import (
    disaggregated_goodput_qps,
    disaggregated_under_load,
    prefill_only,
    steady_state,
    transfer_s,
)

loaded = eqx.filter_jit(under_load)
split = eqx.filter_jit(disaggregated_under_load)
goodput = eqx.filter_jit(disaggregated_goodput_qps)


@pytest.fixture(scope="module")
def pools():
    system = dc.load_system("dgx-h100", chips=2)
    model = dc.load_model("llama-3-8b")
    plan = dc.serve_plan(batch=128, input_len=1024, output_len=128, prefill_chunk=2048)
    return system, model, plan


def test_prefill_pool_is_the_colocated_prompt_queue_plus_the_transfer(pools):
    system, model, plan = pools
    out = split(system, model, plan, plan, workload(6.0))
    alone = loaded(system, model, prefill_only(plan), workload(6.0))
    kv = float(transfer_s(system, model, plan, EXACT))
    assert 0.0 < kv < 0.01 * float(alone.ttft_p50_s) + 1e-3  # 64 MiB over NVLink
    assert float(out.kv_transfer_s) == pytest.approx(kv)
    # the decode pool's slots are far from full: the TTFT is the prefill pool's, shifted
    assert float(out.ttft_p50_s) == pytest.approx(float(alone.ttft_p50_s) + kv, rel=1e-3)
    assert float(out.ttft_p99_s) == pytest.approx(float(alone.ttft_p99_s) + kv, rel=1e-3)


def test_decode_pool_has_no_prefill_interference(pools):
    """At the same rate per instance the colocated TPOT carries the prompts' chunk iterations
    and the disaggregated one does not; at a low rate it is one decode step."""
    system, model, plan = pools
    out = split(system, model, plan, plan, workload(12.0))
    colocated = loaded(system, model, plan, workload(12.0))
    assert float(out.tpot_s) < 0.9 * float(colocated.tpot_s)
    assert float(out.tpot_p99_s) < float(colocated.tpot_p99_s)
    low = split(system, model, plan, plan, workload(0.01))
    step = steady_state(system, model, plan, jnp.asarray(0.01)).t_decode_s
    assert float(low.tpot_s) == pytest.approx(float(step), rel=0.02)
    assert float(out.tpot_s) > float(low.tpot_s)  # more sequences per iteration


@pytest.mark.slow  # one more compilation of the split pools (~10 s on 2 cores)
def test_more_decode_instances_lower_the_tpot_and_the_decode_utilisation(pools):
    system, model, plan = pools
    one = split(system, model, plan, plan, workload(20.0))
    two = split(system, model, plan, eqx.tree_at(lambda p: p.replicas, plan, 2.0), workload(20.0))
    assert float(two.decode_utilisation) == pytest.approx(0.5 * float(one.running) / 128, rel=0.3)
    assert float(two.running) < float(one.running)
    assert float(two.tpot_s) < float(one.tpot_s)
    assert float(two.ttft_p99_s) == pytest.approx(float(one.ttft_p99_s), rel=0.05)


@pytest.mark.slow  # the bisection's program compiles in ~20 s on 2 cores
def test_goodput_meets_the_limits_and_a_little_more_does_not(pools):
    system, model, plan = pools
    limits = (jnp.asarray(0.3), jnp.asarray(0.012))
    q = float(goodput(system, model, plan, plan, jnp.asarray(1.0), jnp.asarray(0.0), *limits))
    assert q > 0
    at, above = (split(system, model, plan, plan, workload(x)) for x in (q, 1.02 * q))
    assert float(at.ttft_p99_s) <= 0.3 + 1e-6 and float(at.tpot_p99_s) <= 0.012 + 1e-9
    assert float(above.ttft_p99_s) > 0.3 or float(above.tpot_p99_s) > 0.012


@pytest.mark.slow  # the iteration table and the simulation: ~30 s on 2 cores
@pytest.mark.parametrize("qps", [35.0, 60.0])
def test_decode_pool_tracks_the_simulation(qps):
    system, model = dc.load_system("dgx-h100", chips=1), dc.load_model("llama-3-8b")
    plan = dc.serve_plan(batch=128, input_len=1024, output_len=128, prefill_chunk=2048)
    out = split(system, model, plan, plan, workload(qps))
    tpot = decode_pool(IterationTable(system, model, plan), plan, qps, 8000, 3)
    assert float(out.tpot_s) == pytest.approx(np.mean(tpot), rel=0.02)
    assert float(out.tpot_p99_s) == pytest.approx(np.percentile(tpot, 99), rel=0.04)
