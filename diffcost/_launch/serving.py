"""vLLM and TensorRT-LLM launch lines: the servers that run a serving plan as diffcost predicts it.

Checked against the ``vllm serve`` parser (vLLM on PyPI, ``EngineArgs.add_cli_args``) and
TensorRT-LLM's ``trtllm-serve`` (``tensorrt_llm/commands/serve.py``, click options):

* **The model argument** is the checkpoint: the model file's Hugging Face id (``hf_id``), the
  folder of a ``config.json`` the model was read from, or a placeholder path to fill in.
* **Weight formats.**  bf16/fp16 run the published checkpoint (``--dtype``).  vLLM quantizes a
  16-bit checkpoint to fp8 when loading it (``--quantization fp8``, dynamic per-tensor scales).
  int8 and int4 weights (weight-only, W8A16 / W4A16 with 16-bit GEMMs, as the model charges
  them) and fp4 weights need a pre-quantized checkpoint (GPTQ/AWQ or compressed-tensors for
  int8/int4, NVFP4 from TensorRT Model Optimizer for fp4): both servers read the format from
  its ``config.json``, so the line names a placeholder checkpoint and says so; TensorRT-LLM
  loads fp8 from a pre-quantized checkpoint too.
* **Weight-only fallbacks.**  A plan whose fp8 or fp4 weights run their GEMMs in 16 bits (the
  chip has no rate for the weights' format: :mod:`diffcost._serve.formats`) is what vLLM runs
  there: its Marlin kernels expand fp8 weights (GPUs without FP8, ``--quantization fp8``) and
  NVFP4 weights (GPUs without FP4) inside the GEMM, and the line says so.  TensorRT-LLM has no
  such path (TensorRT Model Optimizer support matrix: FP8 on "Ada and Later", FP4 weights and
  activations on "Blackwell and Later"), so its line is refused with the reason.
* **Batching as modelled**: ``--max-num-seqs`` is the plan's batch; the chunked-prefill budget
  ``--max-num-batched-tokens`` is the prompt chunk plus one decode token per running sequence
  (vLLM's scheduler serves the running decodes first, then fills the budget with prompt
  chunks); ``--max-model-len`` is prompt plus output.  Replicas are ``--data-parallel-size``.
  A static-batching plan is refused: neither server batches statically.
"""

import json
from typing import Any

from .._serve.behaviours import ENGINE_BEHAVIOURS
from .._serve.formats import weight_only
from .._serve.plan import SERVE_FIELDS, default_compute_format
from .command import Launch, tokens

#: Weight formats a server loads from a published 16-bit checkpoint (``--dtype``).
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
#: Weight formats that need a pre-quantized checkpoint, and how to make one.
PREQUANTIZED = {
    "int8": "an int8 weight-only (W8A16) checkpoint: GPTQ 8-bit or compressed-tensors W8A16",
    "int4": "an int4 weight-only (W4A16) checkpoint: AWQ or GPTQ 4-bit",
    "fp4": "an NVFP4 checkpoint from TensorRT Model Optimizer (Blackwell)",
}


#: Weight formats whose GEMMs run natively on chips that have them, and weight-only in 16 bits
#: (vLLM's Marlin kernels) on chips that do not: what vLLM logs and runs on such a chip.
MARLIN_FALLBACK = {
    "fp8": "vLLM runs fp8 weights weight-only on a chip without FP8 GEMMs (its FP8 Marlin "
    "kernel, W8A16: the weights expanded to {compute} inside the GEMM), as this plan is priced",
    "fp4": "vLLM runs NVFP4 weights weight-only on a chip without FP4 GEMMs (its Marlin "
    "kernel, W4A16: 'Your GPU does not have native support for FP4 computation ... "
    "Weight-only FP4 compression will be used'), as this plan is priced",
}
#: Why TensorRT-LLM does not run those weights on such a chip.
TRTLLM_NEEDS = {
    "fp8": "FP8 GEMMs (Ada or later; TensorRT Model Optimizer support matrix)",
    "fp4": "FP4 weights and activations (Blackwell or later; TensorRT Model Optimizer "
    "support matrix)",
}


def fallback(plan: dict[str, Any]) -> str:
    """The weight format a plan runs weight-only because the chip lacks its GEMM rate (fp8 or
    fp4 weights with 16-bit GEMMs: :func:`diffcost._serve.formats.gemm_format`), else empty."""
    weight = str(plan["weight_format"])
    compute = str(plan.get("compute_format") or default_compute_format(weight))
    emulated = weight in MARLIN_FALLBACK and weight_only(weight, compute)
    return weight if emulated else ""


def checkpoint(
    model_arg: str, name: str, weight_format: str, server: str, compute_format: str | None = None
) -> tuple[str, list[str]]:
    """The model argument for ``weight_format`` and the notes it needs: the checkpoint itself
    for 16-bit weights (and vLLM's load-time fp8), a placeholder path otherwise; with a
    ``compute_format`` the weights expand to (a weight-only fallback), what vLLM runs."""
    plan = {"weight_format": weight_format, "compute_format": compute_format}
    emulated = MARLIN_FALLBACK[weight_format] if fallback(plan) else ""
    notes = [emulated.format(compute=compute_format)] if emulated else []
    if weight_format in DTYPES or (weight_format == "fp8" and server == "vLLM"):
        return model_arg, notes
    how = PREQUANTIZED.get(weight_format, "an fp8 checkpoint from TensorRT Model Optimizer")
    if emulated and weight_format == "fp4":
        how = "an NVFP4 or W4A16_NVFP4 checkpoint from TensorRT Model Optimizer"
    path = f"./{name}-{weight_format}"
    return path, [f"{path}: {how} of {model_arg} (the server reads the format from it)", *notes]


def _compute(plan: dict[str, Any]) -> str:
    """The plan's GEMM format (its weight format's default when the row has none)."""
    weight = str(plan["weight_format"])
    return str(plan.get("compute_format") or default_compute_format(weight))


def _budget(plan: dict[str, Any]) -> int:
    """Tokens per iteration: the prompt chunk plus one decode token per running sequence."""
    return int(plan.get("prefill_chunk", 2048)) + int(plan["batch"])


def _refused(plan: dict[str, Any]) -> str:
    """Why neither server runs the plan as predicted (empty: they do)."""
    if str(plan.get("mode", "continuous")) == "static":
        return "static batching: vLLM and TensorRT-LLM always batch continuously"
    if plan.get("disaggregated"):
        return "disaggregated prefill/decode pools are not emitted (one command per pool)"
    return ""


def switch_flags(server: str, plan: dict[str, Any]) -> list[str]:
    """The flags of the plan's bool fields that are on and declare one for ``server``
    (:attr:`~diffcost._core.options.PlanField.launch`: vLLM ``--enable-expert-parallel``), in
    declaration order."""
    return [
        flag
        for f in SERVE_FIELDS
        if f.kind == "bool" and plan.get(f.name)
        for who, flag in f.launch
        if who == server
    ]


def behaviour_options(server: str, plan: dict[str, Any]) -> list[str]:
    """What ``server`` is told for each engine behaviour (:data:`ENGINE_BEHAVIOURS`, in order),
    as the behaviour declares it (``launch``) for the plan's switch (absent: on, the current
    engines' default); a value in an option (``{batch}``) is the plan's, integers unpadded."""
    values = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in plan.items()}
    out: list[str] = []
    for name, behaviour in ENGINE_BEHAVIOURS.items():
        if server in behaviour.launch:
            state = behaviour.launch[server][0 if plan.get(name) is not False else 1]
            out += [option.format_map(values) for option in state]
    return out


def vllm_launch(plan: dict[str, Any], model_arg: str, name: str, chips_per_node: int) -> Launch:
    """The ``vllm serve`` command of a serving plan (``plan``: the searched row with the
    template's ``input_len``, ``output_len``, ``prefill_chunk``, ``kv_block``, ``mode``,
    ``draft_len`` and the engine behaviours' switches)."""
    fmt = str(plan["weight_format"])
    arg, notes = checkpoint(model_arg, name, fmt, "vLLM", _compute(plan))
    args = tokens(
        ("--tensor-parallel-size", plan["tp"]),
        ("--pipeline-parallel-size", plan["pp"]),
        ("--max-num-seqs", plan["batch"]),
        ("--max-model-len", int(plan["input_len"]) + int(plan["output_len"])),
        ("--max-num-batched-tokens", _budget(plan)),
    )
    if fmt in DTYPES:
        args += tokens(("--dtype", DTYPES[fmt]))
    elif fmt == "fp8":
        args += tokens(("--quantization", "fp8"))
    if str(plan.get("kv_format", "bf16")) == "fp8":
        args += tokens(("--kv-cache-dtype", "fp8"))
    if int(plan.get("kv_block", 16)) != 16:
        args += tokens(("--block-size", plan["kv_block"]))
    args += switch_flags("vllm", plan)
    args += behaviour_options("vllm", plan)
    args += _vllm_replicas(plan, chips_per_node, notes)
    if int(plan.get("draft_len", 0)):
        spec = {"model": "$DRAFT_MODEL", "num_speculative_tokens": int(plan["draft_len"])}
        args += tokens(("--speculative-config", json.dumps(spec)))
        notes.append("replace $DRAFT_MODEL in --speculative-config with the draft checkpoint")
    program = ("vllm", "serve", arg)
    return Launch("vLLM", program, tuple(args), (), tuple(notes), _refused(plan))


def _vllm_replicas(plan: dict[str, Any], chips_per_node: int, notes: list[str]) -> list[str]:
    """Replicas as vLLM data parallelism: ``--data-parallel-size`` on one node; across nodes
    also the replicas per node and the head node's address (one command per node, the others
    ``--headless`` with their ``--data-parallel-start-rank``)."""
    replicas = int(plan.get("replicas", 1))
    if replicas <= 1:
        return []
    out = tokens(("--data-parallel-size", replicas))
    instance = int(plan["tp"]) * int(plan["pp"])
    local = max(1, chips_per_node // instance)
    if replicas > local:
        out += tokens(("--data-parallel-size-local", local), ("--data-parallel-address", "$HEAD"))
        notes.append(
            f"{replicas} replicas, {local} per node: run this on the head node; on node k add "
            f"--headless --data-parallel-start-rank {local}*k"
        )
    return out


def trtllm_launch(plan: dict[str, Any], model_arg: str, name: str) -> Launch:
    """The ``trtllm-serve`` command of one instance (PyTorch backend), with its YAML options
    (KV-cache format, chunked prefill, CUDA graphs) in ``extra.yaml``; replicas are separate
    servers behind a router."""
    fmt = str(plan["weight_format"])
    if fallback(plan):
        reason = (
            f"{fmt} weights with {_compute(plan)} GEMMs (the chip has no {fmt} rate): "
            f"TensorRT-LLM's {fmt} recipes need {TRTLLM_NEEDS[fmt]}"
        )
        return Launch("TensorRT-LLM", (), (), refused=reason)
    arg, notes = checkpoint(model_arg, name, fmt, "TensorRT-LLM")
    tp, pp = int(plan["tp"]), int(plan["pp"])
    args = tokens(
        ("--backend", "pytorch"),
        ("--tp_size", tp),
        ("--pp_size", pp),
        ("--max_batch_size", plan["batch"]),
        ("--max_num_tokens", _budget(plan)),
        ("--max_seq_len", int(plan["input_len"]) + int(plan["output_len"])),
    )
    if plan.get("expert_parallel"):
        args += tokens(("--ep_size", tp))
    args += tokens(("--extra_llm_api_options", "extra.yaml"))
    kv = "fp8" if str(plan.get("kv_format", "bf16")) == "fp8" else "auto"
    yaml = [f"kv_cache_config:\n  dtype: {kv}", "enable_chunked_prefill: true"]
    yaml += behaviour_options("trtllm", plan)
    if int(plan.get("replicas", 1)) > 1:
        notes.append(f"one server per instance: {plan['replicas']} replicas behind a router")
    if int(plan.get("draft_len", 0)):
        return Launch("TensorRT-LLM", (), (), refused="speculative decoding is not emitted")
    files = (("extra.yaml", "\n".join(yaml) + "\n"),)
    program = ("trtllm-serve", arg)
    return Launch("TensorRT-LLM", program, tuple(args), (), tuple(notes), _refused(plan), files)


def serving_launches(
    plan: dict[str, Any], model_arg: str, name: str, chips_per_node: int
) -> list[Launch]:
    """vLLM and TensorRT-LLM commands of a serving plan."""
    return [
        vllm_launch(plan, model_arg, name, chips_per_node),
        trtllm_launch(plan, model_arg, name),
    ]


__all__ = [
    "behaviour_options",
    "checkpoint",
    "fallback",
    "serving_launches",
    "switch_flags",
    "trtllm_launch",
    "vllm_launch",
]
