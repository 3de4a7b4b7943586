"""Engine behaviours (diffcost._serve.behaviours): each behaviour's cost effect in closed form,
and the declarations derived from the registry (plan fields, engine profile keys).  The generic
tests of every extension point (tests/test_extension_points.py) cover them too."""

import jax.numpy as jnp
import pytest

import diffcost as dc
from diffcost.testing import (
    ENGINE_BEHAVIOURS,
    ENGINE_KIND,
    ENGINE_PLAN_FIELDS,
    KERNELS_PER_LAYER_FORWARD,
    SERVE_FIELDS,
    AttentionShape,
    GemmFormat,
    load_engine,
    schema,
    serving_launches,
)


@pytest.fixture(scope="module")
def h100():
    return dc.load_system("dgx-h100")


def _shape(heads=8.0, kv_heads=1.0, e=128.0):
    values = (heads, kv_heads, e, 2.0, 2.0, e, 2.0 * kv_heads * e, 2.0 * e)
    return AttentionShape(*(jnp.asarray(x) for x in values))


ON, OFF = jnp.asarray(1.0), jnp.asarray(0.0)


def _f(x) -> float:
    """A behaviour's contribution (``None``: none) as a float."""
    assert x is not None
    return float(x)


def test_gqa_unaware_decode_rereads_the_cache_per_query_head(h100):
    """Off: ``(g - 1) r`` extra reads (g = 8 query heads per KV head); on: none."""
    gqa = ENGINE_BEHAVIOURS["gqa_decode_kernel"]()
    r = float(h100.efficiency.kv_reread_fraction)
    assert _f(gqa.kv_rereads(OFF, _shape(), h100)) == pytest.approx(7 * r, rel=1e-12)
    assert _f(gqa.kv_rereads(ON, _shape(), h100)) == 0.0
    half = gqa.kv_rereads(jnp.asarray(0.5), _shape(), h100)
    assert _f(half) == pytest.approx(3.5 * r, rel=1e-12)  # relaxed: linear in the switch


def test_separate_dequantization_copies_each_weight_and_adds_a_kernel_per_gemm():
    """Off with weight-only int8 (W8A16): ``2 a = 4`` bytes more per weight element and one
    kernel per weight GEMM; nothing when on, or when weights are not weight-only."""
    fused = ENGINE_BEHAVIOURS["fused_dequant"]()
    two = jnp.asarray(2.0)
    assert _f(fused.weight_copy_bytes(OFF, ON, two)) == 4.0
    assert _f(fused.extra_kernels(OFF, ON)) == 4.0
    for on, weight_only in ((ON, ON), (OFF, OFF)):
        assert _f(fused.weight_copy_bytes(on, weight_only, two)) == 0.0
        assert _f(fused.extra_kernels(on, weight_only)) == 0.0


def test_cuda_graphs_trade_per_kernel_launches_for_one_per_pass(h100):
    """A decode-only pass on a GPU saves ``(1 - f) kernels kernel_launch_s`` per layer and pays
    one launch per stage; a pass holding prompt tokens, or an engine without graphs, neither."""
    graphs = ENGINE_BEHAVIOURS["cuda_graphs"]()
    eff = h100.efficiency
    f, launch = float(eff.graph_kernel_fraction), float(eff.kernel_launch_s)
    kernels = jnp.asarray(KERNELS_PER_LAYER_FORWARD)
    saved = _f(graphs.launch_saved_s(ON, 1.0, kernels, h100))
    assert saved == pytest.approx((1 - f) * KERNELS_PER_LAYER_FORWARD * launch, rel=1e-12)
    assert _f(graphs.pass_launch_s(ON, 1.0, h100)) == pytest.approx(launch, rel=1e-12)
    for on, decode_only in ((ON, 0.0), (OFF, 1.0)):
        assert _f(graphs.launch_saved_s(on, decode_only, kernels, h100)) == 0.0
        assert _f(graphs.pass_launch_s(on, decode_only, h100)) == 0.0


def test_ampere_class_moe_gemms_run_16_bit_at_the_warp_mma_share_of_the_peak(h100):
    """TensorRT-LLM <= 0.9's MoE GEMM (off): the routed experts compute at the 16-bit peak and
    J/FLOP and sustain ``warp_mma_fraction`` of it (Hopper 0.667, A100 1); on: the layer's
    format unchanged; the weight bytes are the stored format's either way."""
    moe = ENGINE_BEHAVIOURS["moe_native_gemm"]()
    chip = h100.chip
    bf16, fp8 = dc.FORMATS.index("bf16"), dc.FORMATS.index("fp8")
    peak16 = h100.efficiency.achievable_peaks(chip.peak_flop_per_s)[bf16]
    j16 = chip.energy.flop_j[bf16]
    fmt = GemmFormat(chip.peak_flop_per_s[fp8], 1.0, 1.0, chip.energy.flop_j[fp8])

    def fields(on, system=h100):
        out = moe.expert_format(on, fmt, peak16, j16, system)
        assert out is not None and out.weight_bytes == 1.0
        return [float(jnp.asarray(x)) for x in (out.peak_flop_per_s, out.flop_j, out.mma_fraction)]

    assert fields(OFF) == [float(peak16), float(j16), pytest.approx(0.667)]
    assert fields(ON) == [float(jnp.asarray(x)) for x in (fmt.peak_flop_per_s, fmt.flop_j)] + [1.0]
    assert fields(OFF, dc.load_system("dgx-a100"))[2] == 1.0


def test_ampere_class_moe_gemms_slow_a_compute_bound_moe_and_leave_dense_models_alone():
    """Mixtral FP8 on two H100 at TensorRT-LLM 0.9's batch 512 and 128 + 128 tokens: the
    Ampere-class expert GEMMs cost throughput; a dense model's prediction is unchanged."""
    system = dc.load_system("dgx-h100", chips=2)
    rate = {}
    for name in ("mixtral-8x7b", "llama-3-8b"):
        cost = dc.ServeCost(system, dc.load_model(name))
        for native in (True, False):
            plan = dc.serve_plan(
                moe_native_gemm=native, tp=2, batch=512, input_len=128, output_len=128,
                weight_format="fp8", compute_format="fp8", mode="static",
            )  # fmt: skip
            rate[name, native] = float(cost(plan).output_tokens_per_s)
    assert rate["mixtral-8x7b", False] < 0.8 * rate["mixtral-8x7b", True]
    assert rate["llama-3-8b", False] == rate["llama-3-8b", True]


def test_declarations_derive_from_the_registry():
    """Each behaviour's plan field is a bool row of SERVE_FIELDS, a ServePlan leaf, a keyword
    of serve_plan, an engine-profile plan field and a key (with its [source]) of the engine
    schema (completed above the schema's layer: the base kind has none); every built-in
    profile reads them."""
    import inspect

    fields = {f.name: f for f in SERVE_FIELDS}
    engine = ENGINE_KIND
    params = inspect.signature(dc.serve_plan).parameters
    plan = dc.serve_plan(**{name: False for name in ENGINE_BEHAVIOURS})
    for name, cls in ENGINE_BEHAVIOURS.items():
        assert cls.field.name == name and fields[name] is cls.field
        assert cls.field.kind == "bool" and cls.reference.strip()
        assert name in ENGINE_PLAN_FIELDS
        assert engine.top[name].kind == "bool" and name not in schema.KINDS["engine"].top, name
        assert params[name].default is None and float(getattr(plan, name)) == 0.0, name
        allowed = engine.source.allowed or ()
        assert name in engine.source.required or name in allowed, name
    assert ENGINE_PLAN_FIELDS == (*ENGINE_BEHAVIOURS, "kv_block")
    assert [k for k in dc.ServePlan.__dataclass_fields__ if k in ENGINE_BEHAVIOURS] == list(
        ENGINE_BEHAVIOURS
    )
    profile = load_engine("trtllm-0.5")
    assert set(profile.behaviours) <= set(ENGINE_BEHAVIOURS)  # a key left out: the default
    assert profile.cuda_graphs is False and profile.plan_defaults()["gqa_decode_kernel"] is False


def test_the_engine_line_and_summary_name_every_behaviour():
    """``diffcost serve`` reports each behaviour of the registry as it names itself (on or
    off, as the engine's profile sets it): a new behaviour shows up without a change there."""
    from typer.testing import CliRunner

    from diffcost.cli import app

    profile = load_engine("trtllm-0.6")
    result = CliRunner().invoke(app, ["serve", "--engine", "trtllm-0.6"])
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if x.startswith("engine: trtllm-0.6"))
    labels = [b.shown[0 if getattr(profile, n) else 1] for n, b in ENGINE_BEHAVIOURS.items()]
    assert line.endswith(": " + ", ".join(labels))
    assert "per-query-head decode" in labels and "per-kernel launches" in labels


def test_a_misspelt_switch_is_named_with_the_closest_field():
    """Switches arrive as keywords checked against the registry: a typo is a SpecError naming
    the field it is closest to, with the other problems of the plan."""
    with pytest.raises(dc.SpecError) as err:
        dc.serve_plan(cuda_graph=False, tp=0, source="s.toml")
    text = str(err.value)
    assert "s.toml: cuda_graph: unknown serve_plan field; did you mean 'cuda_graphs'?" in text


@pytest.mark.parametrize("name", list(ENGINE_BEHAVIOURS))
def test_launch_lines_carry_each_behaviours_declared_options(name):
    """A behaviour's launch options (``launch``: per server, on and off) are what the vLLM line
    and the TensorRT-LLM YAML say for the plan's switch: a new behaviour with a server switch
    needs no change in the launch module."""
    declared = ENGINE_BEHAVIOURS[name].launch
    assert set(declared) <= {"vllm", "trtllm"}
    row = dict(tp=1, pp=1, replicas=1, batch=32, input_len=1024, output_len=256)
    row |= dict(weight_format="bf16", kv_format="bf16", prefill_chunk=2048, kv_block=16)
    for state, on in ((0, True), (1, False)):
        vllm, trt = serving_launches(row | {name: on}, "org/m", "m", 8)
        yaml = dict(trt.files)["extra.yaml"]
        for option in declared.get("vllm", ((), ()))[state]:
            assert option in vllm.args, (name, on, option)
        for option in declared.get("trtllm", ((), ()))[state]:
            assert option.format_map(row) in yaml, (name, on, option)
        for option in declared.get("vllm", ((), ()))[1 - state]:
            assert option not in vllm.args, (name, on, option)
