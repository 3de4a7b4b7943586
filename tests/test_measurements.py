"""Measurement files: the built-in data, the conventions they convert, and every bad input."""

import collections

import pytest

import diffcost as dc
from diffcost import SpecError, load_measurements, load_spec

SOURCE = """
[source]
reference = "a paper"
conventions = "iteration times"
hardware = "a node"
unreported = "nothing"
data = "typed in"
"""
TRAIN_POINT = """
[[point]]
id = "p1"
kind = "train"
model = "megatron-gpt-22b"
system = "dgx-a100"
chips = 8
verified = true

[point.plan]
tp = 8
pp = 1
dp = 1
cp = 1
micro_batch = 4
global_batch = 4
seq_len = 2048
precision = "fp16"
flash_attention = false
overlap_grad_reduce = false

[point.measured]
step_time_s = 1.42
as_published = "1.42 s"
"""


def _write(tmp_path, body: str, name: str = "src") -> str:
    path = tmp_path / f"{name}.toml"
    head = f'schema_version = 1\nkind = "measurements"\nname = "{name}"\ndisplay_name = "x"\n'
    path.write_text(head + body)
    return str(path)


def _problems(tmp_path, body: str, name: str = "src") -> str:
    with pytest.raises(SpecError) as err:
        load_measurements([_write(tmp_path, body, name)])
    return str(err.value)


# --- the built-in data ------------------------------------------------------------------------
def test_builtin_measurements_load_with_their_sources_and_metrics():
    points = load_measurements()
    counts = collections.Counter((m.source, m.metric) for m in points)
    assert counts == {
        ("megatron-sc21", "train_throughput"): 10,
        ("megatron-sc21-zero3", "train_throughput"): 6,
        ("mt-nlg-530b", "train_throughput"): 3,
        ("korthikanti-2022", "train_throughput"): 9,
        ("megatron-readme", "train_throughput"): 1,
        ("nemo-24.07", "train_throughput"): 18,
        ("llama3-herd", "train_throughput"): 2,
        ("megatron-bridge-moe", "train_throughput"): 8,
        ("deepseek-v3-report", "train_throughput"): 1,
        ("llm-foundry-mpt", "train_throughput"): 6,
        ("llm-foundry-mpt-h100", "train_throughput"): 15,
        ("trtllm-0.6.1-throughput", "serve_throughput"): 37,
        ("trtllm-0.5-latency", "ttft"): 20,
        ("bloom-inference", "token_latency"): 22,
        ("gpt-fast", "token_latency"): 7,
        ("gpt-fast-mixtral", "token_latency"): 7,
        ("trtllm-0.9-mixtral", "serve_throughput"): 16,
        ("nim-llm-1.8", "token_latency"): 2,
        ("nim-llm-1.8", "ttft"): 2,
        ("vllm-ci-latency", "token_latency"): 2,
    }
    assert len({m.id for m in points}) == len(points)
    assert sorted(m.id for m in points if m.excluded) == []
    # only BLOOM's Python-driven runtimes and the SC'21 ZeRO-3 runs keep a named unmodelled
    # effect; the GQA-unaware decode kernel (TensorRT-LLM) and DeepSpeed's separate int8
    # dequantization are plan fields now
    # the Megatron-Bridge MoE runs carry the MoE layer's kernel efficiency as a named effect;
    # gpt-fast's Mixtral table is the one measured after its expert down-projection was stored
    # with the reduction dimension innermost (48328fb); TensorRT-LLM 0.9's MoE GEMM is an
    # engine behaviour (moe_native_gemm), and only its A100 2048x2048 row, published above the
    # per-GPU weight-read floor, keeps a named effect
    unmodelled = {"bloom-inference", "megatron-sc21-zero3", "llama3-herd", "megatron-bridge-moe"}
    unmodelled |= {"trtllm-0.9-mixtral"}
    # MT-NLG 530B: DeepSpeed's pipeline engine, 23-29% slower than the model's Megatron schedule
    unmodelled |= {"mt-nlg-530b"}
    # llm-foundry on H100 (issue 42): the 2023 stack's bf16 compute, +33% .. +48% everywhere
    unmodelled |= {"llm-foundry-mpt-h100"}
    # DeepSeek-V3: DualPipe and the multi-token-prediction module
    unmodelled |= {"deepseek-v3-report"}
    assert {m.source for m in points if m.unmodelled} == unmodelled
    assert sum(1 for m in points if m.unmodelled) == 22 + 6 + 2 + 8 + 1 + 3 + 1 + 15
    trt = [m for m in points if m.source.startswith("trtllm")]
    assert all(m.plan["gqa_decode_kernel"] is False for m in trt)
    assert {m.id for m in points if m.plan.get("fused_dequant") is False} == {
        m.id for m in points if "dsinf_int8" in m.id
    }
    for m in points:
        assert m.raw["as_published"] and m.source_info["reference"]


def test_held_out_measurements_load_and_stay_out_of_the_fitted_set():
    """``specs/measurements/held-out``: evaluation-only points (issue 43), read only when named
    (``diffcost validate --measurements FILE``), never by the default set that ``diffcost
    calibrate`` fits and the coverage index counts."""
    files = sorted((dc.specs_dir() / "measurements" / "held-out").glob("*.toml"))
    held = load_measurements(files)
    fitted = load_measurements()
    assert {m.source for m in held}.isdisjoint({m.source for m in fitted})
    assert {m.id for m in held}.isdisjoint({m.id for m in fitted})
    counts = collections.Counter((m.source, m.metric) for m in held)
    assert counts == {
        ("inferencebench-vllm-0.21-h100", "ttft"): 1,
        ("inferencebench-vllm-0.21-h100", "token_latency"): 1,
        ("inferencebench-vllm-0.21-h100", "serve_throughput"): 1,
    }
    assert all(m.plan["engine"] == "vllm-0.10" and m.excluded is None for m in held)
    for m in held:
        assert m.raw["as_published"] and m.source_info["reference"] and m.flags


def test_conventions_convert_to_canonical_metrics():
    by_id = {m.id: m for m in load_measurements()}
    # Narayanan eq. (3): 137 TFLOP/s on 32 GPUs, F/(B s) = 96 l h^2 (1 + s/6h + V/16lh)
    m = by_id["megatron_sc21_table1_1.7B"]
    n, h, v, s = 24, 2304, 51200, 2048
    flop_per_token = 96 * n * h * h * (1 + s / (6 * h) + v / (16 * n * h))
    assert m.measured == pytest.approx(137e12 * 32 / flop_per_token)
    # the README's 138 TFLOP/s and 32 s agree through the same formula (within rounding)
    r = by_id["megatron_readme_gpt3_175b_1024xA100"]
    assert r.measured == pytest.approx(1536 * 2048 / 32)
    flop = 96 * 96 * 12288**2 * (1 + 2048 / (6 * 12288) + 51200 / (16 * 96 * 12288))
    assert r.measured * flop / 1024 == pytest.approx(138e12, rel=0.01)
    assert by_id["korthikanti_175B_selective_sp"].measured == pytest.approx(64 * 2048 / 13.75)
    assert by_id["nemo2407_llama3-70b_64gpu_pretrain"].measured == 1533 * 64
    assert by_id["trtllm05_ttft_h100_llama70b_tp4_isl2048"].measured == pytest.approx(0.109)
    # BLOOM: amortized msecs per token x batch = per-sequence time per token
    assert by_id["bloom176b_dsinf_fp16_8xA100_bs8"].measured == pytest.approx(5.7e-3 * 8)


def test_measurement_only_model_shapes_match_nemo_flop_counts():
    """NeMo's model TFLOP/s / tokens/s = 6 N_matrices + 6 V h + 12 L h s per token."""
    by_id = {m.id: m for m in load_measurements()}
    published = {
        "nemo2407_gpt3-5b_64gpu_pretrain": (736, 22521),
        "nemo2407_nemotron-22b_64gpu_pretrain": (554, 4256),
        "nemo2407_nemotron-340b_128gpu_pretrain": (678, 322),
    }
    for pid, (tflops, tokens) in published.items():
        mv = load_spec("model", by_id[pid].model).values
        h, n, s = mv["hidden"], mv["layers"], by_id[pid].plan["seq_len"]
        width = (mv["heads"] + 2 * mv["kv_heads"]) * (h // mv["heads"])
        mlp = (3 if mv["mlp"] == "swiglu" else 2) * h * mv["ffn_hidden"]
        matrices = n * (h * width + h * h + mlp)
        flop = 6 * matrices + 6 * mv["vocab"] * h + 12 * n * h * s
        assert flop == pytest.approx(tflops * 1e12 / tokens, rel=0.02), pid


def test_a_valid_file_loads(tmp_path):
    (m,) = load_measurements([_write(tmp_path, SOURCE + TRAIN_POINT)])
    assert (m.source, m.metric, m.kind, m.chips) == ("src", "train_throughput", "train", 8)
    assert m.measured == pytest.approx(4 * 2048 / 1.42)


# --- bad inputs: one fixture each, pinned to the message ------------------------------------
def test_unknown_point_key(tmp_path):
    bad = TRAIN_POINT.replace("verified = true", "verified = true\nbatchsize = 3")
    text = _problems(tmp_path, SOURCE + bad)
    assert "point[p1].batchsize: unknown key" in text


def test_missing_source_key(tmp_path):
    text = _problems(tmp_path, SOURCE.replace('unreported = "nothing"\n', "") + TRAIN_POINT)
    assert "source.unreported: missing required key" in text


def test_two_measured_values(tmp_path):
    bad = TRAIN_POINT.replace("step_time_s = 1.42", "step_time_s = 1.42\ntokens_per_s_per_chip = 7")
    text = _problems(tmp_path, SOURCE + bad)
    assert "point[p1].measured: needs exactly one measured value, got 2" in text


def test_measured_value_with_a_wrong_unit(tmp_path):
    bad = TRAIN_POINT.replace("step_time_s = 1.42", "step_time_gb = 1.42")
    text = _problems(tmp_path, SOURCE + bad)
    assert (
        "point[p1].measured.step_time_gb: unit of 'step_time_gb' is bytes, but step_time is in s"
    ) in text


def test_flop_rate_needs_its_convention(tmp_path):
    bad = TRAIN_POINT.replace("step_time_s = 1.42", "achieved_per_chip_tflop_per_s = 137")
    text = _problems(tmp_path, SOURCE + bad)
    assert (
        "point[p1].measured.flop_convention: required with (and only with) achieved_per_chip_*"
    ) in text


def test_chips_must_match_the_published_degrees(tmp_path):
    text = _problems(tmp_path, SOURCE + TRAIN_POINT.replace("chips = 8", "chips = 16"))
    assert "point[p1].chips: tp*pp*dp*cp = 8 but chips = 16" in text


def test_missing_published_plan_key(tmp_path):
    text = _problems(tmp_path, SOURCE + TRAIN_POINT.replace('precision = "fp16"\n', ""))
    assert "point[p1].plan.precision: missing required key" in text


def test_unknown_model(tmp_path):
    text = _problems(tmp_path, SOURCE + TRAIN_POINT.replace("megatron-gpt-22b", "gpt-5"))
    assert "point[p1].model: unknown model 'gpt-5'" in text


def test_duplicate_ids(tmp_path):
    text = _problems(tmp_path, SOURCE + TRAIN_POINT + TRAIN_POINT)
    assert "point[1].id: duplicate id 'p1'" in text


def test_name_must_match_the_file(tmp_path):
    path = tmp_path / "other.toml"
    path.write_text(
        'schema_version = 1\nkind = "measurements"\nname = "src"\ndisplay_name = "x"\n'
        + SOURCE
        + TRAIN_POINT
    )
    with pytest.raises(SpecError, match="name: must equal the file name 'other', got 'src'"):
        load_measurements([str(path)])


def test_every_problem_of_every_file_at_once(tmp_path):
    bad1 = _write(
        tmp_path,
        SOURCE
        + TRAIN_POINT.replace("chips = 8", "chips = 9").replace(
            'kind = "train"', 'kind = "training"'
        ),
        "one",
    )
    bad2 = _write(tmp_path, SOURCE.replace('data = "typed in"\n', ""), "two")
    with pytest.raises(SpecError) as err:
        load_measurements([bad1, bad2])
    text = str(err.value)
    assert "one.toml: point[p1].kind: must be one of train, serve; got 'training'" in text
    assert "two.toml: source.data: missing required key" in text
    assert "two.toml: point: missing: at least one [[point]] table" in text


def test_6n_12lhs_convention_converts_model_tflops_to_tokens():
    """Llama 3 405B, 430 model TFLOP/s per GPU on 8,192 GPUs at s = 8,192: tokens/s =
    X chips / (6 N + 12 l h s), N every parameter of the built model."""
    (m,) = [p for p in load_measurements() if p.id == "llama3_405b_8192gpu_tp8_pp16_dp64"]
    model = dc.load_model("llama-3-405b")
    per_token = 6.0 * float(model.num_params()) + 12.0 * 126 * 16384 * 8192
    assert m.measured == pytest.approx(430e12 * 8192 / per_token, rel=1e-9)
    assert 4.0e11 < float(model.num_params()) < 4.1e11
