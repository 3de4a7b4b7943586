"""Serving engines as named, versioned profiles: loading, plan defaults, the CUDA-graph launch
term, measurements naming their engine, and ``diffcost serve --engine``."""

import json

import equinox as eqx
import jax
import jax.numpy as jnp
import pytest
from typer.testing import CliRunner

import diffcost as dc
from diffcost import RELAXED, SpecError, load_measurements
from diffcost.cli import app
from diffcost.testing import (
    DEFAULT_ENGINE,
    KERNELS_PER_LAYER_FORWARD,
    engine_names,
    load_engine,
    measurements_dir,
)

predict = eqx.filter_jit(lambda cost, plan: cost(plan))
BATCH1 = dict(batch=1, input_len=128, output_len=128, mode="static")


def run(system, model, **plan):
    return predict(dc.ServeCost(system, model), dc.serve_plan(**plan))


def gpu_share(system, fraction):
    """``system`` whose kernels keep ``fraction`` of their per-kernel cost inside a graph."""
    return eqx.tree_at(
        lambda s: s.efficiency.graph_kernel_fraction, system, jnp.asarray(float(fraction))
    )


@pytest.fixture(scope="module")
def h100():
    return dc.load_system("dgx-h100")


@pytest.fixture(scope="module")
def llama8():
    return dc.load_model("llama-3-8b")


# --- profiles ---------------------------------------------------------------------------------
def test_every_profile_loads_with_a_source_per_choice():
    names = engine_names()
    for name in ("trtllm-0.5", "trtllm-0.6", "deepspeed-inference-2022", "vllm-0.6", "vllm-0.10"):
        assert name in names
    assert DEFAULT_ENGINE in names
    for name in names:
        profile = load_engine(name)
        assert profile.name == name
        for key in ("gqa_decode_kernel", "fused_dequant", "cuda_graphs", "attention_kernel"):
            assert profile.source[key].strip(), (name, key)


def test_unknown_engine_is_a_clear_error_listing_the_known_ones():
    with pytest.raises(SpecError) as err:
        dc.serve_plan(engine="vllm-9", source="s.toml")
    text = str(err.value)
    assert "s.toml: engine: unknown engine 'vllm-9'" in text
    for name in engine_names():
        assert name in text


def test_engine_supplies_the_plan_defaults_and_an_explicit_value_wins():
    old = dc.serve_plan(engine="trtllm-0.6")
    assert float(old.gqa_decode_kernel) == 0.0 and float(old.cuda_graphs) == 0.0
    new = dc.serve_plan()  # the default engine: a current one
    assert float(new.gqa_decode_kernel) == 1.0 and float(new.cuda_graphs) == 1.0
    assert float(dc.serve_plan(engine="trtllm-1.3").kv_block) == 64.0
    assert float(dc.serve_plan(engine="trtllm-1.3", kv_block=1).kv_block) == 1.0
    ds = dc.serve_plan(engine="deepspeed-inference-2022", fused_dequant=True)
    assert float(ds.fused_dequant) == 1.0


# --- CUDA graphs: one launch per decode step instead of one per kernel ---------------------------
@pytest.mark.parametrize("fraction", [0.0, 0.3, 1.0])
def test_cuda_graph_replaces_host_launches_of_a_decode_step(h100, llama8, fraction):
    """Static decode at batch 1: per-kernel launches cost ``layers * 12 * kernel_launch_s``; a
    replayed graph costs one launch per step plus the GPU-side share ``f`` of each kernel's
    cost; everything else is unchanged."""
    system = gpu_share(h100, fraction)
    launch = float(h100.efficiency.kernel_launch_s)
    eager = run(system, llama8, cuda_graphs=False, **BATCH1)
    graph = run(system, llama8, cuda_graphs=True, **BATCH1)
    per_kernel = float(llama8.layers) * KERNELS_PER_LAYER_FORWARD * launch
    assert float(eager.decode_launch_s) == pytest.approx(per_kernel, rel=1e-9)
    assert float(graph.decode_launch_s) == pytest.approx(fraction * per_kernel + launch, rel=1e-9)
    saved = float(eager.decode_step_s - graph.decode_step_s)
    assert saved == pytest.approx(float(eager.decode_launch_s - graph.decode_launch_s), rel=1e-9)
    # prefill is not captured: TTFT is the same
    assert float(graph.ttft_s) == pytest.approx(float(eager.ttft_s), rel=1e-12)
    if fraction == 0.0:  # batch-1 decode then sits near the weight-read floor
        floor = float(graph.decode_weight_read_s + graph.decode_kv_read_s)
        assert float(graph.tpot_s) < 1.1 * floor


def test_graph_kernel_fraction_defaults_to_no_saving_until_calibrated(h100, tmp_path):
    """A calibration without the key assumes no saving (1: the fitted per-kernel cost is not
    assumed to be host launch, no published split); the default calibration fits it from the
    CUDA-graph decode points (gpt-fast, NIM, vLLM CI) inside its bounds (0.1, 1)."""
    assert 0.1 < float(h100.efficiency.graph_kernel_fraction) < 1.0
    from diffcost import specs_dir

    text = (specs_dir() / "calibration" / "default.toml").read_text()
    path = tmp_path / "nographs.toml"
    path.write_text(
        "\n".join(
            ln for ln in text.splitlines() if not ln.startswith("graph_kernel_fraction")
        ).replace('name = "default"', 'name = "nographs"', 1)
    )
    system = dc.load_system("dgx-h100", calibration=path)
    assert float(system.efficiency.graph_kernel_fraction) == 1.0


def test_tp8_batch1_decode_with_graphs_is_bound_by_weights_not_launches(h100):
    """The seed check of tests/test_serve.py (launches + all-reduces exceed the weight read at TP
    8) holds for per-kernel launches; with graphs the launches drop to one per step."""
    llama70 = dc.load_model("llama-2-70b")
    out = run(gpu_share(h100, 0.0), llama70, tp=8, **BATCH1)
    assert float(out.decode_launch_s) < 0.01 * float(out.decode_weight_read_s)
    assert float(out.decode_tp_comm_s + out.decode_launch_s) < float(out.decode_weight_read_s)


def test_continuous_iterations_with_a_prompt_chunk_launch_kernel_by_kernel(h100, llama8):
    """A share ``min(1, P / piece)`` of continuous iterations carries a prompt chunk and runs
    eagerly; the rest replay the graph: batch 2, 1024 in, 256 out, chunk 2048 -> P = 8 prompt
    tokens per iteration, of which a decoding request's iterations carry the other request's
    4 (its own prompt came before its first token), piece 1024, so 1/256 of the per-kernel
    launches stay (with f = 0); with one client no iteration of its decode holds a prompt."""
    plan = dict(batch=2, input_len=1024, output_len=256, mode="continuous")
    launch = float(h100.efficiency.kernel_launch_s)
    h100 = gpu_share(h100, 0.0)
    eager = run(h100, llama8, cuda_graphs=False, **plan)
    graph = run(h100, llama8, cuda_graphs=True, **plan)
    per_kernel = float(eager.decode_launch_s)
    expected = per_kernel / 256 + (255 / 256) * launch
    assert float(graph.decode_launch_s) == pytest.approx(expected, rel=1e-9)
    alone = run(h100, llama8, cuda_graphs=True, **(plan | dict(batch=1)))
    assert float(alone.decode_launch_s) == pytest.approx(launch, rel=1e-9)
    # a chunk in every iteration (prompt-heavy, P = chunk): the decoding request's iterations
    # carry the other 63 clients' share, 63/64 of them a chunk
    heavy = dict(batch=64, input_len=4096, output_len=16, prefill_chunk=512, mode="continuous")
    a = run(h100, llama8, cuda_graphs=False, **heavy)
    b = run(h100, llama8, cuda_graphs=True, **heavy)
    share = 63 / 64
    expected = share * float(a.decode_launch_s) + (1 - share) * launch
    assert float(b.decode_launch_s) == pytest.approx(expected, rel=1e-9)


def test_cuda_graphs_change_nothing_on_chips_that_launch_no_kernels(llama8):
    tpu = dc.load_system("tpu-v5p-pod", chips=8)
    a = run(tpu, llama8, cuda_graphs=False, **BATCH1)
    b = run(tpu, llama8, cuda_graphs=True, **BATCH1)
    assert float(b.tpot_s) == pytest.approx(float(a.tpot_s), rel=1e-12)


def test_relaxed_cuda_graph_weight_has_a_finite_gradient_and_interpolates(h100, llama8):
    cost = dc.ServeCost(gpu_share(h100, 0.2), llama8, smoothing=RELAXED)
    plan = dc.serve_plan(batch=4, input_len=512, output_len=128)

    def tpot(g):
        return cost(eqx.tree_at(lambda p: p.cuda_graphs, plan, g)).tpot_s

    grads = [float(jax.grad(tpot)(jnp.asarray(g))) for g in (0.0, 0.5, 1.0)]
    assert all(jnp.isfinite(jnp.asarray(grads)))
    assert all(g < 0 for g in grads)  # more graph replay, fewer launches
    mid = float(tpot(jnp.asarray(0.5)))
    assert mid == pytest.approx(0.5 * float(tpot(jnp.asarray(0.0)) + tpot(jnp.asarray(1.0))))


# --- measurements name their engine; the 2023 engines keep today's behaviour -------------------
def test_every_serving_point_names_a_known_engine():
    points = [m for m in load_measurements() if m.kind == "serve"]
    assert points
    known = set(engine_names())
    for m in points:
        assert m.plan["engine"] in known, m.id
    old = {"trtllm-0.5", "trtllm-0.6", "deepspeed-inference-2022", "hf-accelerate-2022"}
    for m in points:
        if m.plan["engine"] in old:
            assert load_engine(m.plan["engine"]).cuda_graphs is False, m.id


def test_a_serving_point_without_an_engine_is_an_error(tmp_path):
    text = (measurements_dir() / "trtllm-0.5-latency.toml").read_text()
    path = tmp_path / "no-engine.toml"
    path.write_text(text.replace('engine = "trtllm-0.5"\n', "", 1))
    with pytest.raises(SpecError) as err:
        load_measurements([path])
    assert "plan.engine: missing required key" in str(err.value)


# --- command line ---------------------------------------------------------------------------------
def test_serve_states_its_engine_in_text_and_json():
    runner = CliRunner()
    args = ["serve", "--model", "llama-3-8b", "--chip", "h100-sxm", "--batch", "1"]
    text = runner.invoke(app, args).output
    assert f"engine: {DEFAULT_ENGINE} (default" in text
    out = json.loads(runner.invoke(app, [*args, "--engine", "trtllm-0.6", "--json"]).output)
    assert out["engine"]["name"] == "trtllm-0.6" and out["engine"]["default"] is False
    assert out["engine"]["cuda_graphs"] is False and out["engine"]["gqa_decode_kernel"] is False
    bad = runner.invoke(app, [*args, "--engine", "vllm-9"])
    assert bad.exit_code != 0
    assert "--engine: unknown engine 'vllm-9'" in bad.output and "vllm-0.10" in bad.output


def test_a_calibration_may_set_the_graph_kernel_fraction(tmp_path):
    from diffcost import specs_dir

    text = (specs_dir() / "calibration" / "default.toml").read_text()
    assert "[efficiency]\n" in text
    path = tmp_path / "graphs.toml"
    kept = [ln for ln in text.splitlines() if not ln.startswith("graph_kernel_fraction")]
    path.write_text(
        "\n".join(kept)
        .replace("[efficiency]", "[efficiency]\ngraph_kernel_fraction = 0.25", 1)
        .replace('name = "default"', 'name = "graphs"', 1)
    )
    system = dc.load_system("dgx-h100", calibration=path)
    assert float(system.efficiency.graph_kernel_fraction) == 0.25
