"""Launch lines run what was predicted: Megatron-LM, vLLM and TensorRT-LLM commands of found plans.

The memory promise: re-reading a Megatron-LM line with Megatron's own semantics
(:func:`diffcost._launch.megatron.allocated`) gives back the plan the search charged, so the
job fits as the framework really allocates it.  The parsers themselves are checked in
``tests/test_launch_parsers.py``.
"""

import json

import pytest

import diffcost as dc
from diffcost import TrainCost, TrainSearchSpace, load_spec, search_train
from diffcost.testing import (
    TRAIN_FIELDS,
    Launch,
    RunSettings,
    allocated,
    bridge_launch,
    megatron_launch,
    parsed,
    serving_launches,
    train_launch_plan,
    with_memory_check,
)

_FIELDS = {f.name for f in TRAIN_FIELDS}


def _line(model: str, row: dict, space=None, per_node: int = 8) -> Launch:
    space = space or TrainSearchSpace(global_batch=row["global_batch"], seq_len=4096, chips=(8,))
    spec = load_spec("model", model).values
    return megatron_launch(train_launch_plan(row, space), dc.load_model(model), spec, per_node)


_ROW = dict(tp=8, pp=4, cp=1, dp=2, micro_batch=1, global_batch=512, seq_len=4096)
_ROW |= dict(virtual_stages=2, sequence_parallel=True, recompute="full", zero=1)
_ROW |= dict(precision="bf16")


def test_megatron_line_layout_model_and_run_flags():
    line = _line("llama-3-70b", _ROW)
    a = parsed(line.args)
    assert a["tensor-model-parallel-size"] == "8" and a["pipeline-model-parallel-size"] == "4"
    assert a["num-virtual-stages-per-pipeline-rank"] == "2" and a["sequence-parallel"] is True
    assert a["recompute-granularity"] == "full" and a["recompute-method"] == "uniform"
    # the model's shape, as Megatron builds it (Llama 3 70B)
    assert (
        a["num-layers"] == "80" and a["hidden-size"] == "8192" and a["ffn-hidden-size"] == "28672"
    )
    assert a["num-query-groups"] == "8" and a["group-query-attention"] is True
    assert a["normalization"] == "RMSNorm" and a["swiglu"] is True
    assert a["position-embedding-type"] == "rope" and a["disable-bias-linear"] is True
    assert a["untie-embeddings-and-output-weights"] is True
    assert a["attention-dropout"] == "0.0" and a["hidden-dropout"] == "0.0"
    assert a["vocab-size"] == "128256" and a["tokenizer-type"] == "NullTokenizer"
    # flags that do not exist or that nothing reads are gone
    assert not {"fp32", "tf32", "use-flash-attn"} & set(a)
    assert a["attention-backend"] == "auto"
    # 64 GPUs on 8 nodes of 8; TP needs one CUDA connection before Blackwell
    assert line.program[:5] == ("torchrun", "--nnodes", "8", "--nproc-per-node", "8")
    assert ("CUDA_DEVICE_MAX_CONNECTIONS", "1") in line.env
    assert line.text().count("torchrun") == 1 and not line.refused


@pytest.mark.parametrize(
    ("zero", "want", "absent"),
    [
        (0, ["--overlap-grad-reduce"], ["--use-distributed-optimizer", "--use-megatron-fsdp"]),
        (1, ["--use-distributed-optimizer", "--overlap-param-gather"], ["--use-megatron-fsdp"]),
        (2, ["--use-megatron-fsdp", "optim_grads", "fsdp_dtensor"], ["optim_grads_params"]),
        (3, ["--use-megatron-fsdp", "optim_grads_params"], ["--use-distributed-optimizer"]),
    ],
)
def test_zero_stage_maps_to_megatron_sharding(zero, want, absent):
    """ZeRO-1 is the distributed optimizer (full gradient buffer); ZeRO-2/3 are Megatron-FSDP's
    ``optim_grads`` / ``optim_grads_params``, which assert CUDA_DEVICE_MAX_CONNECTIONS != 1."""
    line = _line("llama-3-70b", {**_ROW, "zero": zero})
    for token in want:
        assert token in line.args
    for token in absent:
        assert token not in line.args
    fsdp = zero >= 2
    assert dict(line.env)["CUDA_DEVICE_MAX_CONNECTIONS"] == (None if fsdp else "1")
    if fsdp:
        assert line.text().startswith("# ") and "env -u CUDA_DEVICE_MAX_CONNECTIONS" in line.text()
    assert allocated(line)["zero"] == zero


def test_gradient_bytes_follow_megatron_dtype_rules():
    """bf16 keeps fp32 main gradients unless --grad-reduce-in-bf16: a plan charged 2-byte
    gradients emits it, one charged 4 bytes does not; fp8 trains on bf16 weights."""
    two = _line("llama-3-8b", {**_ROW, "tp": 1, "pp": 1, "virtual_stages": 1})
    assert "--grad-reduce-in-bf16" in two.args and allocated(two)["grad_bytes_per_param"] == 2
    row4 = {**_ROW, "tp": 1, "pp": 1, "virtual_stages": 1, "grad_bytes_per_param": 4.0}
    four = _line("llama-3-8b", row4)
    assert "--grad-reduce-in-bf16" not in four.args
    assert allocated(four)["grad_bytes_per_param"] == 4
    fp8 = _line("llama-3-8b", {**_ROW, "precision": "fp8"})
    assert {"--bf16", "--fp8-format", "hybrid"} <= set(fp8.args)
    fp32 = _line("llama-3-8b", {**_ROW, "precision": "fp32"})
    assert not {"--bf16", "--fp16", "--grad-reduce-in-bf16"} & set(fp32.args)
    assert ("NVIDIA_TF32_OVERRIDE", "0") in fp32.env and allocated(fp32)["precision"] == "fp32"


def test_moe_and_latent_attention_flags():
    mix = parsed(_line("mixtral-8x7b", {**_ROW, "ep": 8, "tp": 1}).args)
    assert mix["num-experts"] == "8" and mix["moe-router-topk"] == "2"
    assert mix["expert-model-parallel-size"] == "8" and mix["moe-token-dispatcher-type"]
    ds = parsed(_line("deepseek-v3", {**_ROW, "ep": 8}).args)
    assert ds["multi-latent-attention"] is True and ds["kv-lora-rank"] == "512"
    assert ds["qk-head-dim"] == "128" and ds["qk-pos-emb-head-dim"] == "64"
    assert ds["moe-layer-freq"] == "([0]*3+[1]*58)"


@pytest.mark.parametrize(
    ("model", "change", "reason"),
    [
        ("bloom-176b", {}, "ALiBi"),
        ("llama-3-8b", {"optimizer": "adam_bf16"}, "optimizer"),
        ("llama-3-8b", {"lora_rank": 16}, "LoRA"),
        ("bert-large", {}, "decoder"),
    ],
)
def test_megatron_refuses_what_it_cannot_run(model, change, reason):
    line = _line(model, {**_ROW, "tp": 1, "pp": 1, "virtual_stages": 1, **change})
    assert reason in line.refused
    assert line.text().startswith("# Megatron-LM cannot run this plan as predicted")
    assert "torchrun" not in line.text()


_CASES = [
    pytest.param("llama-3-70b", "dgx-h100", 64, 512, ("bf16", "fp8"), marks=pytest.mark.slow),
    ("llama-2-7b", "dgx-a100", 8, 32, ("fp32", "bf16")),
    pytest.param("llama-3-8b", "dgx-h100", 8, 64, ("bf16",), marks=pytest.mark.slow),
    pytest.param("mixtral-8x7b", "dgx-a100", 16, 128, ("bf16",), marks=pytest.mark.slow),
]


@pytest.mark.parametrize(("model", "system", "chips", "batch", "precision"), _CASES)
def test_searched_plans_allocate_what_was_predicted(model, system, chips, batch, precision):
    """Each searched plan's line, re-read with Megatron's semantics, is the plan the search
    charged: the same exact memory, within capacity (the issue's 148 GB vs 80 GB failure)."""
    sys_, m = dc.load_system(system, chips=chips), dc.load_model(model)
    space = TrainSearchSpace(global_batch=batch, seq_len=4096, chips=(chips,), precision=precision)
    result = search_train(sys_, m, space, exhaustive=True)
    result.keep(4)
    spec = load_spec("model", model).values
    rows = result.rows()
    for row, want in zip(rows, result.breakdowns, strict=True):
        line = megatron_launch(train_launch_plan(row, space), m, spec, 8)
        assert not line.refused, line.refused
        back = allocated(line)
        for key in ("tp", "pp", "cp", "micro_batch", "zero", "precision", "recompute"):
            assert back[key] == row[key], key
        fields = {k: v for k, v in back.items() if k in _FIELDS}
        plan = dc.train_plan(dp=row["dp"], **fields)
        out = TrainCost(sys_, m)(plan)
        got = float(out.memory.total_bytes)
        assert got == pytest.approx(float(want.memory.total_bytes), rel=1e-6)
        assert got <= float(out.capacity_bytes)


def _serve_row(**change) -> dict:
    row = dict(tp=4, pp=1, batch=64, weight_format="bf16", kv_format="fp8", replicas=2)
    return row | dict(input_len=1024, output_len=256, prefill_chunk=2048, kv_block=16) | change


def test_vllm_line_batching_replicas_and_formats():
    vllm, trt = serving_launches(_serve_row(), "meta-llama/Meta-Llama-3-8B", "llama-3-8b", 8)
    a = parsed(vllm.args)
    assert vllm.program == ("vllm", "serve", "meta-llama/Meta-Llama-3-8B")
    assert a["tensor-parallel-size"] == "4" and a["data-parallel-size"] == "2"
    assert a["max-num-seqs"] == "64" and a["max-model-len"] == "1280"
    assert a["max-num-batched-tokens"] == str(2048 + 64) and a["kv-cache-dtype"] == "fp8"
    assert a["dtype"] == "bfloat16" and "quantization" not in a
    t = parsed(trt.args)
    assert trt.program == ("trtllm-serve", "meta-llama/Meta-Llama-3-8B")
    assert t["tp_size"] == "4" and t["max_batch_size"] == "64" and t["backend"] == "pytorch"
    assert "dtype: fp8" in dict(trt.files)["extra.yaml"] and "trtllm-build" not in trt.text()


def test_vllm_quantized_formats_name_a_prequantized_checkpoint():
    fp8 = serving_launches(_serve_row(weight_format="fp8"), "org/m", "m", 8)[0]
    assert parsed(fp8.args)["quantization"] == "fp8" and fp8.program[2] == "org/m"
    for fmt in ("int4", "int8", "fp4"):
        vllm, trt = serving_launches(_serve_row(weight_format=fmt), "org/m", "m", 8)
        assert vllm.program[2] == f"./m-{fmt}" and trt.program[1] == f"./m-{fmt}"
        assert "quantization" not in parsed(vllm.args)
        assert any("org/m" in n and "checkpoint" in n for n in vllm.notes)


def test_vllm_multi_node_replicas_speculation_and_refusals():
    big = serving_launches(_serve_row(tp=8, replicas=4), "org/m", "m", 8)[0]
    a = parsed(big.args)
    assert a["data-parallel-size"] == "4" and a["data-parallel-size-local"] == "1"
    spec = serving_launches(_serve_row(draft_len=4), "org/m", "m", 8)[0]
    config = json.loads(parsed(spec.args)["speculative-config"])
    assert config["num_speculative_tokens"] == 4
    static = serving_launches(_serve_row(mode="static"), "org/m", "m", 8)
    assert all("static" in x.refused for x in static)
    ep = serving_launches(_serve_row(expert_parallel=True), "org/m", "m", 8)
    assert "--enable-expert-parallel" in ep[0].args and parsed(ep[1].args)["ep_size"] == "4"


def test_bridge_overrides_and_recipe():
    """Megatron-Bridge: ``run_recipe.py --model STEM`` and ``KEY=VALUE`` overrides of the
    layout, batch, recomputation, sharding and mixed-precision preset."""
    space = TrainSearchSpace(global_batch=512, seq_len=4096, chips=(64,))
    spec = load_spec("model", "llama-3-70b").values
    model = dc.load_model("llama-3-70b")
    line = bridge_launch(train_launch_plan(_ROW, space), "llama-3-70b", model, spec, 8)
    assert not line.refused and line.program[-1] == "scripts/training/run_recipe.py"
    a = parsed(line.args[:6])
    assert a == {"model": "llama3_70b", "mode": "pretrain", "dataset": "mock"}
    for token in (
        "model.tensor_model_parallel_size=8",
        "model.virtual_pipeline_model_parallel_size=2",
        "model.recompute_granularity=full",
        "ddp.use_distributed_optimizer=true",
        "mixed_precision=bf16_mixed",
        "train.global_batch_size=512",
    ):
        assert token in line.args
    assert "\n    model.tensor_model_parallel_size=8 \\" in line.text()  # one override a line
    fsdp = bridge_launch(
        train_launch_plan({**_ROW, "zero": 3}, space), "llama-3-70b", model, spec, 8
    )
    assert "ddp.data_parallel_sharding_strategy=optim_grads_params" in fsdp.args
    gpt3 = bridge_launch(train_launch_plan(_ROW, space), "gpt3-175b", model, spec, 8)
    assert "no Megatron-Bridge pretraining recipe" in gpt3.refused


def test_bridge_line_is_refused_when_its_fp32_gradients_do_not_fit():
    """Bridge's bf16 preset keeps fp32 gradients: Llama 3 8B, ZeRO-1 on 8 H100, micro-batch 1
    needs 69.9 GB as charged (2-byte gradients) but 85.9 GB in a Bridge run (> 85.5 GB)."""
    system, model = dc.load_system("dgx-h100", chips=8), dc.load_model("llama-3-8b")
    spec = load_spec("model", "llama-3-8b").values
    row = dict(_ROW, tp=1, pp=1, dp=8, virtual_stages=1, sequence_parallel=False)
    row |= dict(global_batch=64, recompute="none", chips=8)
    space = TrainSearchSpace(global_batch=64, seq_len=4096, chips=(8,))
    plan = train_launch_plan(row, space)
    out = with_memory_check(bridge_launch(plan, "llama-3-8b", model, spec, 8), plan, system, model)
    assert "4-byte gradients" in out.refused and "85.9 GB per GPU > 85.5 GB" in out.refused
    assert not megatron_launch(plan, model, spec, 8).refused  # Megatron-LM: bf16 gradients
    # ZeRO-2 shards the gradients: the same job at micro-batch 2 still fits with 4 bytes
    z2 = {**plan, "zero": 2, "micro_batch": 2}
    roomy = with_memory_check(bridge_launch(z2, "llama-3-8b", model, spec, 8), z2, system, model)
    assert not roomy.refused and "predicted 78.3 GB of 85.5 GB" in roomy.notes[-1]


def test_the_run_settings_replace_the_synthetic_benchmark_run():
    """Issue 44: data, tokenizer, iterations and the learning-rate schedule are options; the
    line then carries them instead of --mock-data, NullTokenizer and 100 constant-lr steps, and
    every option exists in Megatron-LM's argument table with the right arity and choices."""
    from test_launch_parsers import _table, problems

    space = TrainSearchSpace(global_batch=512, seq_len=4096, chips=(64,))
    spec = load_spec("model", "llama-3-70b").values
    run = RunSettings(
        data_path="/data/text_document",
        tokenizer="meta-llama/Meta-Llama-3-70B",
        train_iters=5000,
        lr=3e-4,
        min_lr=3e-5,
        lr_decay_style="cosine",
        lr_warmup_iters=200,
    )
    line = megatron_launch(
        train_launch_plan(_ROW, space), dc.load_model("llama-3-70b"), spec, 8, run
    )
    a = parsed(line.args)
    assert a["data-path"] == "/data/text_document" and "mock-data" not in a
    assert a["tokenizer-type"] == "HuggingFaceTokenizer"
    assert a["tokenizer-model"] == "meta-llama/Meta-Llama-3-70B" and "vocab-size" not in a
    assert (a["train-iters"], a["lr"], a["min-lr"]) == ("5000", "0.0003", "3e-05")
    assert a["lr-decay-style"] == "cosine" and a["lr-warmup-iters"] == "200"
    assert problems(line.args, _table("megatron")["flags"]) == []
    assert any("5000 iterations" in n for n in line.notes)
    placeholder = _line("llama-3-70b", _ROW)
    assert any("--mock-data" in n for n in placeholder.notes)


def test_contradicting_run_settings_are_refused_all_at_once():
    bad = RunSettings(train_iters=10, lr=0.0, min_lr=1.0, lr_decay_style="cos", lr_warmup_iters=10)
    keys = {p.key for p in bad.problems()}
    assert keys == {"lr", "min_lr", "lr_decay_style", "lr_warmup_iters"}
    assert RunSettings().problems() == []
    assert RunSettings(data_path="two words").problems()[0].key == "data_path"
