"""The serving cost model under jit, vmap and grad; its relaxation; the whole catalogue."""

import json
import os
import subprocess
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import pytest

import diffcost as dc

PLANS = [
    dict(tp=4, batch=64, input_len=2048, output_len=256),
    dict(tp=2, pp=2, batch=8, input_len=512, output_len=512, mode="static", kv_block=1),
    dict(tp=8, batch=1, input_len=128, output_len=64, weight_format="int4", kv_format="fp8"),
    dict(
        tp=4, batch=32, draft_len=4, acceptance=0.75, draft_params_fraction=0.03, prefill_chunk=512
    ),
    dict(
        tp=4,
        batch=48,
        disaggregated=True,
        prefill_chips=8,
        decode_chips=4,
        weight_format="fp8",
        compute_format="fp8",
        kv_format="fp8",
    ),
    dict(
        tp=1,
        pp=8,
        batch=16,
        input_len=1024,
        output_len=128,
        mode="static",
        weight_format="int8",
        compute_format="int8",
    ),
]


def _set(plan, **fields):
    """Replace plan fields by floats (relaxed values)."""
    names = list(fields)
    return eqx.tree_at(
        lambda p: [getattr(p, n) for n in names],
        plan,
        [jnp.asarray(float(v)) for v in fields.values()],
    )


def _stack(trees):
    return jtu.tree_map(lambda *xs: jnp.stack(xs), *trees)


predict = eqx.filter_jit(lambda cost, plan: cost(plan))
SHARP = dc.Smoothing(relaxed=True, rel_width=1e-9)


def _close(a, b, rtol=1e-12, atol=0.0):
    jtu.tree_map(lambda x, y: np.testing.assert_allclose(x, y, rtol=rtol, atol=atol), a, b)


@pytest.fixture(scope="module")
def h100():
    return dc.load_system("dgx-h100", chips=16)


@pytest.fixture(scope="module")
def llama70():
    return dc.load_model("llama-2-70b")


# --- transforms -----------------------------------------------------------------------------------
def test_jit_equals_eager_and_traces_once(h100, llama70):
    traces = []

    @eqx.filter_jit
    def predict(cost, plan):
        traces.append(1)
        return cost(plan)

    cost = dc.ServeCost(h100, llama70)
    for kwargs in PLANS:
        plan = dc.serve_plan(**kwargs)
        _close(predict(cost, plan), cost(plan), rtol=1e-12, atol=1e-300)
    assert len(traces) == 1


def test_vmap_over_plans_equals_loop(h100, llama70):
    cost = dc.ServeCost(h100, llama70)
    plans = [dc.serve_plan(**kwargs) for kwargs in PLANS]
    batched = eqx.filter_jit(lambda c, p: jax.vmap(c)(p))(cost, _stack(plans))
    for i, plan in enumerate(plans):
        _close(jtu.tree_map(lambda x, i=i: x[i], batched), cost(plan), rtol=1e-12, atol=1e-300)


@pytest.mark.slow  # 12 s on 2 cores (vmap over stacked chips and models compiles)
def test_vmap_over_chips_and_models():
    systems = [dc.load_system(chip=c, chips=8) for c in ["a100-sxm-80gb", "h100-sxm", "mi300x"]]
    models = [dc.load_model(m) for m in ["llama-2-7b", "llama-3-8b", "gpt-j-6b"]]
    plan = dc.serve_plan(tp=2, batch=16)
    fn = lambda s, m: dc.ServeCost(s, m)(plan).output_tokens_per_s_per_chip
    grid = jax.vmap(lambda s: jax.vmap(lambda m: fn(s, m))(_stack(models)))(_stack(systems))
    assert grid.shape == (3, 3)
    for i, s in enumerate(systems):
        for j, m in enumerate(models):
            assert float(grid[i, j]) == pytest.approx(float(fn(s, m)), rel=1e-12)


# --- gradients ------------------------------------------------------------------------------------
def _fd(f, x, eps=1e-6):
    return (f(x * (1 + eps)) - f(x * (1 - eps))) / (2 * eps * x)


RELAXED_PLAN = dict(
    tp=3.7,
    pp=1.6,
    batch=37.3,
    input_len=1500.0,
    output_len=300.0,
    prefill_chunk=700.0,
    kv_block=13.0,
    draft_len=2.5,
    acceptance=0.7,
    draft_params_fraction=0.04,
)


OUTPUTS = ["ttft_s", "tpot_s", "output_tokens_per_s_per_chip", "max_batch"]


@pytest.mark.slow  # 10-25 s on 2 cores: runs in `.ci/run`'s slow pass
def test_plan_gradients_match_finite_differences(h100, llama70):
    """One reverse pass checks every output: the loss weighs their logs differently."""
    cost = dc.ServeCost(h100, llama70, dc.RELAXED)
    plan = _set(
        dc.serve_plan(tp=4, pp=2, batch=32, draft_len=2, draft_params_fraction=0.05), **RELAXED_PLAN
    )
    plan = eqx.tree_at(lambda p: p.mode, plan, jnp.asarray([0.3, 0.7]))

    def loss(p):
        out = cost(p)
        return sum((i + 1.0) * jnp.log(getattr(out, name)) for i, name in enumerate(OUTPUTS))

    g = eqx.filter_jit(jax.grad(loss))(plan)
    loss = eqx.filter_jit(loss)
    for field in RELAXED_PLAN:
        x0 = float(getattr(plan, field))
        fd = _fd(lambda x, field=field: float(loss(_set(plan, **{field: x}))), x0)
        assert float(getattr(g, field)) == pytest.approx(fd, rel=1e-4, abs=1e-9), field
    assert float(g.mode[1] - g.mode[0]) != 0.0


def test_system_gradients_match_finite_differences(h100, llama70):
    plan = dc.serve_plan(tp=8, batch=24, input_len=1024, output_len=256)
    loss = eqx.filter_jit(lambda s: dc.ServeCost(s, llama70)(plan).request_latency_s)
    grads = eqx.filter_jit(eqx.filter_grad(loss))(h100)
    for path in [
        lambda s: s.chip.memory_bandwidth_bytes_per_s,
        lambda s: s.scale_up_bandwidth_bytes_per_s,
        lambda s: s.scale_up_latency_s,
        lambda s: s.efficiency.matmul_peak_fraction,
        lambda s: s.efficiency.kernel_launch_s,
    ]:
        x0 = float(path(h100))
        f = lambda x, path=path: float(loss(eqx.tree_at(path, h100, jnp.asarray(x))))
        assert float(path(grads)) == pytest.approx(_fd(f, x0), rel=1e-4, abs=1e-12)
    i = dc.FORMATS.index("bf16")
    bump = lambda x: float(
        loss(
            eqx.tree_at(
                lambda s: s.chip.peak_flop_per_s, h100, h100.chip.peak_flop_per_s.at[i].set(x)
            )
        )
    )
    assert float(grads.chip.peak_flop_per_s[i]) == pytest.approx(
        _fd(bump, float(h100.chip.peak_flop_per_s[i])), rel=1e-4
    )


@pytest.mark.slow  # every chip x every model
def test_gradients_finite_on_whole_catalogue():
    """d (latency, throughput) / d (plan, system, model) is finite for every chip and model."""
    models = _stack([dc.load_model(n) for n in dc.builtin_names("model")])
    plan = _set(
        dc.serve_plan(tp=8, pp=2, batch=16, draft_len=2, draft_params_fraction=0.05), **RELAXED_PLAN
    )

    def f(args):
        s, m, p = args
        out = dc.ServeCost(s, m, dc.RELAXED)(p)
        return jnp.log(out.request_latency_s) - jnp.log(out.output_tokens_per_s_per_chip)

    grads = eqx.filter_jit(
        lambda system: jax.vmap(lambda model: eqx.filter_grad(f)((system, model, plan)))(models)
    )
    for chip in dc.builtin_names("chip"):
        for leaf in jtu.tree_leaves(grads(dc.load_system(chip=chip, chips=64))):
            assert bool(jnp.all(jnp.isfinite(leaf))), chip


# --- relaxation -----------------------------------------------------------------------------------
INTEGER_PLANS = [  # block sizes and chunks divide the lengths: the relaxed ceil is exact there
    dict(tp=4, batch=64, input_len=2048, output_len=256, prefill_chunk=512),
    dict(tp=2, pp=2, batch=8, input_len=512, output_len=512, mode="static"),
    dict(tp=8, batch=1, input_len=128, output_len=64, weight_format="int4", kv_format="fp8"),
    dict(
        tp=4,
        batch=32,
        input_len=1024,
        output_len=1024,
        draft_len=4,
        acceptance=0.75,
        draft_params_fraction=0.03,
        prefill_chunk=256,
    ),
    dict(
        tp=4,
        batch=48,
        disaggregated=True,
        prefill_chips=8,
        decode_chips=4,
        weight_format="fp8",
        kv_format="fp8",
    ),
    dict(tp=1, pp=8, batch=16, input_len=1024, output_len=128, mode="static", kv_block=32),
]


@pytest.mark.parametrize("kwargs", INTEGER_PLANS)
def test_relaxed_equals_exact_at_integer_plans(h100, llama70, kwargs):
    """Integer-structured relaxations are exact at integers; the continuous blends converge."""
    plan = dc.serve_plan(**kwargs)
    exact = predict(dc.ServeCost(h100, llama70), plan)
    sharp = predict(dc.ServeCost(h100, llama70, SHARP), plan)
    _close(exact, sharp, rtol=1e-7, atol=1e-15)  # seconds: 1 fs; bytes: exact
    relaxed = predict(dc.ServeCost(h100, llama70, dc.RELAXED), plan)
    for field in ["ttft_s", "tpot_s", "output_tokens_per_s"]:
        assert float(getattr(relaxed, field)) == pytest.approx(
            float(getattr(exact, field)), rel=0.03
        )
    for field in ["chips", "tokens_per_step", "decode_batch", "accuracy_cost"]:
        assert float(getattr(relaxed, field)) == float(getattr(exact, field))
    _close(relaxed.memory, exact.memory, rtol=1e-12)


def test_mode_mixture_interpolates_one_hot_limits(h100, llama70):
    cost = dc.ServeCost(h100, llama70)
    static = cost(dc.serve_plan(tp=4, batch=32, mode="static"))
    cont = cost(dc.serve_plan(tp=4, batch=32, mode="continuous"))
    half = eqx.tree_at(lambda p: p.mode, dc.serve_plan(tp=4, batch=32), jnp.asarray([0.5, 0.5]))
    mixed = cost(half)
    for field in ["ttft_s", "tpot_s", "output_tokens_per_s"]:
        expected = 0.5 * (float(getattr(static, field)) + float(getattr(cont, field)))
        assert float(getattr(mixed, field)) == pytest.approx(expected, rel=1e-12)


_FLOAT32_SCRIPT = """
import json, sys
import jax, jax.numpy as jnp, jax.tree_util as jtu
import diffcost as dc
assert not jax.config.jax_enable_x64
system, model = dc.load_system("dgx-h100", chips=8), dc.load_model("llama-3-70b")
cost = dc.ServeCost(system, model, dc.RELAXED)
def f(p):
    out = cost(p)
    return jnp.log(out.request_latency_s) - jnp.log(out.output_tokens_per_s_per_chip)
bad = []
for kwargs in json.loads(sys.argv[1]):
    plan = dc.serve_plan(**kwargs)
    assert cost(plan).tpot_s.dtype == jnp.float32
    if not all(bool(jnp.all(jnp.isfinite(x))) for x in jtu.tree_leaves(jax.grad(f)(plan))):
        bad.append(kwargs)
print(json.dumps(bad))
"""


@pytest.mark.slow  # a float32 subprocess over every plan: about 12 s on 2 cores
def test_relaxed_plan_gradients_finite_in_float32():
    """The CLI and library run in float32 (x64 off, unlike this suite): the relaxed gradient
    must be finite there too.  A decode-only pass has exactly zero prefill attention, whose
    blend gave 0/0 in the float32 gradient before the blend width got a floor.  Run in a
    subprocess because x64 is a process-wide setting."""
    plans = PLANS + [
        dict(tp=4, pp=2, batch=64, weight_format="int8", fused_dequant=False, mode="static")
    ]
    env = {**os.environ, "JAX_ENABLE_X64": "0", "JAX_PLATFORMS": "cpu"}
    run = subprocess.run(
        [sys.executable, "-c", _FLOAT32_SCRIPT, json.dumps(plans)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == []
