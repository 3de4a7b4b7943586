"""Serving a mixture of experts with the experts spread whole over the tensor-parallel ranks
(``ServePlan.expert_parallel``, vLLM ``--enable-expert-parallel``): the rules the engine checks,
relaxed == exact, the same memory and weight reads as tensor-parallel experts, wider expert GEMMs,
and the serving search trying both layouts."""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffcost as dc
from diffcost import ServeSearchSpace, Smoothing, serve_problems
from diffcost.testing import ServeProblem, enumerate_all

TIGHT = Smoothing(relaxed=True, rel_width=1e-9)
predict = eqx.filter_jit(lambda cost, plan: cost(plan))


@pytest.fixture(scope="module")
def mixtral():
    return dc.load_model("mixtral-8x7b")


def _serve(model, tp, ep, batch=64, **kw):
    system = dc.load_system("dgx-h100", chips=tp)
    plan = dc.serve_plan(tp=tp, batch=batch, expert_parallel=ep, **kw)
    return system, plan, predict(dc.ServeCost(system, model), plan)


def test_expert_parallel_rules_are_named(mixtral):
    llama = dc.load_model("llama-3-8b")
    _, plan, out = _serve(llama, 2, True)
    assert any("needs a mixture-of-experts model" in p for p in serve_problems(llama, plan, out, 2))
    # 8 experts over tp = 8 whole experts: valid; Mixtral's 14336-wide experts split by 8: valid
    for ep in (True, False):
        _, plan, out = _serve(mixtral, 8, ep)
        assert serve_problems(mixtral, plan, out, 8) == []
    odd = dataclasses.replace(mixtral, experts=jnp.asarray(6.0))
    _, plan, out = _serve(odd, 4, True)
    assert any(
        "experts (6) is not divisible by tp (4)" in p for p in serve_problems(odd, plan, out, 4)
    )
    assert float(out.divisibility_violation) > 0


def test_same_memory_and_weight_reads_wider_expert_gemms(mixtral):
    _, _, tp_experts = _serve(mixtral, 8, False)
    _, _, ep = _serve(mixtral, 8, True)
    assert float(ep.memory.total_bytes) == pytest.approx(float(tp_experts.memory.total_bytes))
    assert float(ep.decode_weight_read_s) == pytest.approx(float(tp_experts.decode_weight_read_s))
    # E / t = 1 whole expert per rank at full width instead of 8 experts of width 14336 / 8:
    # the same FLOP in wider GEMMs, so no slower
    assert float(ep.decode_gemm_s) <= float(tp_experts.decode_gemm_s)
    assert float(ep.decode_gemm_s) < 0.999 * float(tp_experts.decode_gemm_s)


def test_expert_parallel_at_tp1_is_the_same_plan(mixtral):
    _, _, a = _serve(mixtral, 1, False, batch=8)
    _, _, b = _serve(mixtral, 1, True, batch=8)
    assert float(a.tpot_s) == pytest.approx(float(b.tpot_s), rel=1e-12)


@pytest.mark.parametrize("ep", [False, True])
def test_relaxed_equals_exact_and_gradient_is_finite(mixtral, ep):
    system, plan, exact = _serve(mixtral, 4, ep)
    relaxed = dc.ServeCost(system, mixtral, TIGHT)(plan)
    assert float(relaxed.tpot_s) == pytest.approx(float(exact.tpot_s), rel=1e-6)
    assert float(relaxed.ttft_s) == pytest.approx(float(exact.ttft_s), rel=1e-6)

    def tpot(e):
        p = dataclasses.replace(plan, expert_parallel=e)
        return dc.ServeCost(system, mixtral, Smoothing(relaxed=True))(p).tpot_s

    for e in (0.0, 0.3, 1.0):
        assert np.isfinite(float(jax.grad(tpot)(jnp.asarray(e))))


def test_search_tries_both_layouts_only_where_the_engine_accepts_them(mixtral):
    system = dc.load_system("dgx-h100", chips=8)
    space = ServeSearchSpace(
        input_len=1024, output_len=256, chips=8, expert_parallel=(False, True), max_batch=64
    )
    problem = ServeProblem(system, mixtral, space)
    cand = enumerate_all(problem)
    ep, tp = cand.columns["expert_parallel"].astype(bool), cand.columns["tp"]
    assert ep.any() and (~ep).any()
    assert np.all(tp[ep] > 1) and np.all(8 % tp[ep] == 0)
    dense = ServeProblem(system, dc.load_model("llama-3-8b"), space)
    assert not enumerate_all(dense).columns["expert_parallel"].astype(bool).any()


def test_mixtral_bf16_does_not_fit_one_a100_80gb_but_int8_does(mixtral):
    """gpt-fast's Mixtral table: bf16 on 1 GPU 'OOM', int8 on 1 GPU runs (93 GB vs 47 GB of
    weights on an 80 GB A100; specs/measurements/gpt-fast-mixtral.toml)."""
    system = dc.load_system("dgx-a100", chips=1)
    for fmt, fits in (("bf16", False), ("int8", True)):
        plan = dc.serve_plan(batch=1, input_len=5, output_len=200, weight_format=fmt)
        assert bool(predict(dc.ServeCost(system, mixtral), plan).fits()) == fits
