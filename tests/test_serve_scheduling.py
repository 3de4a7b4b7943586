"""An engine's iteration under load (diffcost._serve.scheduling): prefill-only iterations
and the host's share, read from the engine profiles, applied by diffcost._serve.load.

Prefill-only iterations against the SimPy simulation of the same scheduler
(tests/serving_sim.simulate with mixed=False), Llama 3 8B on one H100, 2,048-token budget,
20,000 requests (`python benchmarks/load_vs_simulation.py` style, measured here): at 0.2-0.4
utilisation TTFT p50/p90/p99 within 0-9%, TPOT mean within 2-7%, TPOT p99 7-16% low.
"""

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import pytest
from serving_sim import IterationTable, simulate
from test_engine_caps import CAP_SOURCES
from test_engine_caps import GOOD as PROFILE
from test_serve_load import _case

from diffcost import EXACT, SpecError, under_load, workload
from diffcost.testing import (
    host_scaled,
    iteration_policy,
    iteration_s,
    iteration_times,
    load_engine,
    profile_policy,
)

loaded = eqx.filter_jit(under_load)


@pytest.fixture(scope="module")
def case():
    return _case("1024in-128out-cv0.5")[:3]


@pytest.mark.parametrize(
    "name, mixed, share",
    [
        ("sglang-0.3", False, 0.09),
        ("sglang-0.4", False, 0.0),
        ("vllm-0.6", False, 0.0),
        ("vllm-0.10", True, 0.0),
        ("trtllm-1.3", True, 0.0),  # neither key: mixed, no host share
    ],
)
def test_profiles_give_the_iteration_with_a_source(name, mixed, share):
    profile = load_engine(name)
    policy = profile_policy(profile)
    assert policy.mixed_prefill is mixed
    assert float(policy.host_share) == pytest.approx(share)
    for key in ("mixed_prefill", "host_share"):
        assert (key in profile.caps) == (key in profile.source)


def test_sglang_03_host_share_is_the_v04_overlap_gain():
    # the v0.4 blog's 1.1x throughput from overlapping the scheduler: 1 - 1/1.1 of the time
    assert float(profile_policy(load_engine("sglang-0.3")).host_share) == pytest.approx(
        1.0 - 1.0 / 1.1, abs=0.001
    )


def test_no_policy_is_the_mixed_policy_without_host_share(case):
    system, model, plan = case
    load = workload(10.0, 1.0, 0.5)
    a = loaded(system, model, plan, load)
    b = loaded(system, model, plan, load, policy=iteration_policy(True, 0.0))
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-12)


def test_iterations_golden(case):
    system, model, plan = case
    n = jnp.asarray(40.0)
    it = lambda d, p: float(iteration_s(system, model, plan, d, p, EXACT))  # noqa: E731
    budget, t_d, t_1, t_f = iteration_times(
        system, model, plan, n, iteration_policy(True, 0.2), EXACT
    )
    assert float(budget) == 2048 - 40
    assert float(t_d) == pytest.approx(it(40.0, 0.0) / 0.8, rel=1e-9)
    assert float(t_1) == pytest.approx(it(40.0, 1024.0) / 0.8, rel=1e-9)
    assert float(t_f) == pytest.approx(it(40.0, 2008.0) / 0.8, rel=1e-9)
    budget, t_d, t_1, t_f = iteration_times(
        system, model, plan, n, iteration_policy(False, 0.0), EXACT
    )
    assert float(budget) == 2048  # the decodes do not count against a prefill-only budget
    assert float(t_d) == pytest.approx(it(40.0, 0.0), rel=1e-9)
    assert float(t_1) == pytest.approx(it(0.0, 1024.0), rel=1e-9)
    assert float(t_f) == pytest.approx(it(0.0, 2048.0), rel=1e-9)
    assert float(host_scaled(jnp.asarray(1.0), iteration_policy(True, 0.5))) == 2.0


def test_host_share_slows_every_percentile(case):
    system, model, plan = case
    load = workload(10.0, 1.0, 0.5)
    a = loaded(system, model, plan, load, policy=iteration_policy(True, 0.0))
    b = loaded(system, model, plan, load, policy=iteration_policy(True, 0.09))
    for key in ("ttft_p50_s", "ttft_p99_s", "tpot_s", "tpot_p99_s"):
        assert float(getattr(b, key)) > float(getattr(a, key)) * 1.09


def test_prefill_only_stalls_the_decodes_more_than_mixed_chunks(case):
    # a mixed chunk costs the decodes its marginal time; a prefill-only iteration all of it
    system, model, plan = case
    load = workload(10.0, 1.0, 0.5)
    mixed = loaded(system, model, plan, load, policy=iteration_policy(True, 0.0))
    only = loaded(system, model, plan, load, policy=iteration_policy(False, 0.0))
    assert float(only.tpot_s) > float(mixed.tpot_s)


CASES = [
    ("1024in-128out-cv0.5", 14.0),
    pytest.param("512in-256out-cv1", 24.0, marks=pytest.mark.slow),
]


@pytest.mark.parametrize("name, qps", CASES)
def test_prefill_only_against_the_simulation(name, qps):
    system, model, plan, input_cv = _case(name)
    out = loaded(system, model, plan, workload(qps, 1.0, input_cv), policy=iteration_policy(False))
    ttft, tpot = simulate(IterationTable(system, model, plan), plan, qps, 20000, 0, input_cv, False)
    for got, want, tol in [
        (out.ttft_p50_s, np.percentile(ttft, 50), 0.08),
        (out.ttft_p90_s, np.percentile(ttft, 90), 0.12),
        (out.ttft_p99_s, np.percentile(ttft, 99), 0.10),
        (out.tpot_s, tpot.mean(), 0.10),
        (out.tpot_p99_s, np.percentile(tpot, 99), 0.20),
    ]:
        assert abs(float(got) / want - 1.0) < tol, (float(got), want)


def test_an_iteration_key_needs_its_source_and_a_share_is_a_fraction(tmp_path):
    path = tmp_path / "bad-iteration.toml"
    sources = "\n".join(f'{k} = "s"' for k in (*CAP_SOURCES, "mixed_prefill"))
    path.write_text(
        PROFILE.format(caps="mixed_prefill = false\nhost_share = 1.5\n", sources=sources)
    )
    with pytest.raises(SpecError) as err:
        load_engine(path)
    problems = {p.key: p.reason for p in err.value.problems}
    assert all(p.file == str(path) for p in err.value.problems)
    assert problems["source.host_share"].startswith("missing: every engine choice needs a source")
    assert "host_share" in problems and "1.5" in problems["host_share"]
