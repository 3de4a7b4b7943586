"""Launch lines for a found plan: the target frameworks' flags (Megatron-LM for training; vLLM
and TensorRT-LLM for serving), from a plan row of :class:`diffcost.SearchResult`.

Each plan field maps to the framework flag of the same meaning.  These lines are not yet checked
against the frameworks' own argument parsers and memory allocation (Megatron-LM
``arguments.py``, ``vllm serve``, ``trtllm-build``): that is the open launch-flags issue.
"""

from .serve import ServeSearchSpace


def megatron_flags(best: dict) -> str:
    """Megatron-LM launch flags for a training plan (the model's own flags, including a
    mixture of experts' ``--num-experts``, ``--moe-router-topk`` and widths, come from the
    model: :func:`megatron_model_flags`)."""
    flags = [
        f"--tensor-model-parallel-size {best['tp']}",
        f"--pipeline-model-parallel-size {best['pp']}",
        f"--context-parallel-size {best['cp']}",
        f"--micro-batch-size {best['micro_batch']}",
        f"--global-batch-size {best['global_batch']}",
        f"--seq-length {best['seq_len']}",
    ]
    if best.get("ep", 1) > 1:
        flags.append(f"--expert-model-parallel-size {best['ep']}")
    if best.get("expert_tp") is not None and best["expert_tp"] != best["tp"]:
        flags.append(f"--expert-tensor-parallel-size {best['expert_tp']}")
    if best.get("ep_overlap"):
        flags.append("--overlap-moe-expert-parallel-comm")
    if best["virtual_stages"] > 1:
        flags.append(f"--num-virtual-stages-per-pipeline-rank {best['virtual_stages']}")
    if best["sequence_parallel"]:
        flags.append("--sequence-parallel")
    if best["recompute"] == "full":
        flags += [
            "--recompute-granularity full",
            "--recompute-method uniform",
            "--recompute-num-layers 1",
        ]
    elif best["recompute"] == "selective":
        flags.append("--recompute-granularity selective")
    if best["zero"] == 1:
        flags.append("--use-distributed-optimizer")
    elif best["zero"] == 2:
        # The distributed optimizer keeps full gradients and reduces once per step (ZeRO-1);
        # sharded gradients, reduced every micro-batch, are Megatron-FSDP's "optim_grads"
        # (Megatron-LM docs/user-guide/features/megatron_fsdp.md; arguments.py).
        flags.append("--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads")
    elif best["zero"] == 3:
        flags.append("--use-torch-fsdp2")
    precision = best.get("precision", "bf16")
    flags.append("--fp8-format hybrid --bf16" if precision == "fp8" else f"--{precision}")
    flags.append("--use-flash-attn")
    return " \\\n    ".join(flags)


def megatron_dispatcher_flags(best: dict) -> list[str]:
    """The token dispatcher of a MoE plan: Megatron-Core's ``alltoall``, or ``flex`` with
    DeepEP when the plan deduplicates the dispatch per node (``ep_dedup``;
    ``moe_token_dispatcher_type``, ``moe_flex_dispatcher_backend`` in
    ``megatron/core/transformer/transformer_config.py``)."""
    if best.get("ep_dedup"):
        return ["--moe-token-dispatcher-type flex", "--moe-flex-dispatcher-backend deepep"]
    return ["--moe-token-dispatcher-type alltoall"]


def megatron_model_flags(model) -> list[str]:
    """Megatron-LM flags of a mixture of experts (Megatron-Core ``megatron/training/
    arguments.py``: ``--num-experts``, ``--moe-router-topk``, ``--moe-ffn-hidden-size``,
    ``--moe-shared-expert-intermediate-size``, and ``--moe-layer-freq`` as a list with the dense
    blocks first, DeepSeek-V3's ``first_k_dense_replace`` layout: the model keeps only their
    count).  Empty for a dense model."""
    experts = int(model.experts)
    if not experts:
        return []
    flags = [
        f"--num-experts {experts}",
        f"--moe-router-topk {int(model.experts_per_token)}",
        f"--moe-ffn-hidden-size {int(model.expert_ffn_hidden)}",
    ]
    moe, layers = int(model.moe_layers), int(model.layers)
    if moe < layers:
        flags.append(f"--moe-layer-freq '([0]*{layers - moe}+[1]*{moe})'")
    if int(model.shared_ffn_hidden):
        flags.append(f"--moe-shared-expert-intermediate-size {int(model.shared_ffn_hidden)}")
    return flags


def serving_flags(best: dict, model_name: str, space: ServeSearchSpace) -> str:
    """vLLM and TensorRT-LLM launch lines for a serving plan (one instance; run ``replicas``)."""
    max_len = space.input_len + space.output_len
    vllm = [
        f"vllm serve {model_name}",
        f"--tensor-parallel-size {best['tp']}",
        f"--pipeline-parallel-size {best['pp']}",
        f"--max-num-seqs {best['batch']}",
        f"--max-model-len {max_len}",
    ]
    if best["weight_format"] == "fp8":
        vllm.append("--quantization fp8")
    elif best["weight_format"] in ("int8", "int4"):
        vllm.append(
            f"--quantization {'awq' if best['weight_format'] == 'int4' else 'compressed-tensors'}"
        )
    if best["kv_format"] == "fp8":
        vllm.append("--kv-cache-dtype fp8")
    if best.get("expert_parallel"):
        vllm.append("--enable-expert-parallel")  # EP = TP x DP (DP = 1: one instance)
    trt = [
        f"trtllm-build --tp_size {best['tp']} --pp_size {best['pp']}",
        f"--max_batch_size {best['batch']}",
        f"--max_input_len {space.input_len}",
        f"--max_seq_len {max_len}",
    ]
    return " \\\n    ".join(vllm) + f"\n# x {best['replicas']} replicas\n" + " \\\n    ".join(trt)


__all__ = [
    "megatron_dispatcher_flags",
    "megatron_flags",
    "megatron_model_flags",
    "serving_flags",
]
