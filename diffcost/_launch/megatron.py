"""Megatron-LM launch lines: the command that runs a training plan as diffcost predicts it.

Checked against NVIDIA/Megatron-LM at commit d98e8a64ddf3 (2026-08-22),
``megatron/training/arguments.py`` (``parse_args`` and ``validate_args``):

* **Memory as predicted.**  With ``--bf16`` Megatron keeps fp32 main gradients unless
  ``--grad-reduce-in-bf16`` ("bfloat16 requires gradient accumulation and all-reduce to be done
  in fp32", ``validate_args``), so a plan charged 2-byte gradients emits that flag; with 4-byte
  gradients it does not.  ZeRO-1 is the distributed optimizer (full gradient buffer, sharded
  fp32 master weights and moments); ZeRO-2 and ZeRO-3 are Megatron-FSDP's ``optim_grads`` and
  ``optim_grads_params`` (``--use-megatron-fsdp``, which requires ``--ckpt-format fsdp_dtensor``
  and ``CUDA_DEVICE_MAX_CONNECTIONS`` not 1; its main gradients default to the model's dtype,
  ``--megatron-fsdp-main-grads-dtype auto``).  Torch FSDP2 is not emitted: it refuses pipeline
  and expert parallelism and tied embeddings.
* **Time as predicted.**  The model overlaps the gradient reduction with the backward pass
  (``--overlap-grad-reduce``; with the distributed optimizer also ``--overlap-param-gather``,
  which requires it) and assumes an IO-aware attention kernel (``--attention-backend auto``,
  Transformer Engine's flash or cuDNN fused attention; ``unfused`` otherwise).  Tensor or
  context parallelism without FSDP requires ``CUDA_DEVICE_MAX_CONNECTIONS=1`` before Blackwell.
* **The model as specified**: layers, width, heads and query groups, head size, MLP width and
  activation, norm, positions, biases, untied embeddings, dropout (Megatron's default is 0.1),
  mixture-of-experts and multi-latent-attention shapes, and the vocabulary (``NullTokenizer``
  with ``--vocab-size``: Megatron pads it to a multiple of ``128 tp`` as the model does).

Data and schedule (:class:`RunSettings`) are by default placeholders: ``--mock-data`` and a
short constant learning-rate run, to measure the predicted step; ``diffcost plan train
--data-path --tokenizer --train-iters --lr --min-lr --lr-decay-style --lr-warmup-iters`` gives
the job's own.
"""

import math
from dataclasses import dataclass, replace
from typing import Any

from .._core.errors import Problem
from .._inputs.model import Model
from .._train.plan import TRAIN_FIELDS
from .._train.space import fixed_fields
from .command import Launch, tokens

MEGATRON_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"


_FIELD = {f.name: f for f in TRAIN_FIELDS}


def flag(name: str) -> str:
    """Megatron-LM's flag for a training plan field, as the field declares it
    (:attr:`~diffcost._core.options.PlanField.launch`)."""
    spelled = _FIELD[name].launch_flag("megatron")
    assert spelled is not None, f"{name} declares no Megatron-LM flag"
    return spelled


#: Fields this module places itself (by a rule: only in some plans, or beside other flags); any
#: other field that declares a Megatron-LM flag is emitted by :func:`switch_args`.
_PLACED = ("tp", "pp", "cp", "micro_batch", "global_batch", "seq_len", "virtual_stages")
_PLACED += ("first_stage_layers", "last_stage_layers", "ep", "expert_tp", "optimizer")
_PLACED += ("sequence_parallel", "tp_comm_overlap", "fp8_param_gather", "ep_overlap")
_PLACED += ("overlap_grad_reduce", "flash_attention")


def switch_args(plan: dict[str, Any]) -> list[str]:
    """The Megatron-LM flag of every other field of the plan that declares one, in declaration
    order: a switch (bool field) that is on, or a number or choice that differs from its
    default (the flag and the value).  A new field with a Megatron-LM flag needs no change
    here."""
    out: list[str] = []
    for f in TRAIN_FIELDS:
        spelled = f.launch_flag("megatron")
        value = plan.get(f.name, f.default)
        if f.name in _PLACED or spelled is None or value is None or value == f.default:
            continue
        if f.kind == "bool":
            out += [spelled] if value else []
        else:
            out += tokens((spelled, getattr(value, "value", value)))
    return out


def train_launch_plan(best: dict[str, Any], space: Any) -> dict[str, Any]:
    """A searched training row with the fields every plan of the search shared (the space's
    or the declared default, :func:`~diffcost._train.space.fixed_fields`: optimizer,
    attention kernel, pipeline split, LoRA, gradient bytes, overlap)."""
    return {**fixed_fields(space), **best}


def _replicas(plan: dict[str, Any]) -> int:
    """Hybrid-sharding replicas ``dp / shard_group`` (1: full sharding, the default)."""
    dp = int(plan.get("dp", 1))
    return dp // int(plan.get("shard_group", dp) or dp)


def megatron_refusals(plan: dict[str, Any], model: Model, spec: dict[str, Any]) -> list[str]:
    """Why Megatron-LM's ``pretrain_gpt.py`` cannot run ``plan`` as predicted (empty: it can)."""
    why = []
    if spec.get("architecture", "decoder") != "decoder":
        why.append("diffcost emits GPT (decoder) pretraining lines only")
    if spec.get("position") == "alibi":
        why.append("Megatron-LM has no ALiBi position encoding")
    if spec.get("mlp") in ("relu", "geglu"):
        why.append(f"Megatron-LM has no plain {spec['mlp']} MLP option")
    if str(plan.get("optimizer", "adam")) not in ("adam", "sgd"):
        why.append(f"optimizer {plan['optimizer']!r} is not a Megatron-LM --optimizer setting")
    if int(plan.get("lora_rank", 0)):
        why.append("pretrain_gpt.py trains every weight; LoRA runs in Megatron-Bridge (peft)")
    if _replicas(plan) > 1 and int(plan["zero"]) in (2, 3):
        why.append("hybrid sharding with Megatron-FSDP is not emitted (only ZeRO-1 instances)")
    return why


def model_args(model: Model, spec: dict[str, Any], seq_len: int) -> list[str]:
    """The model's shape flags (dense part; :func:`moe_args` adds the experts)."""
    layers, hidden, heads = int(model.layers), int(model.hidden), int(model.heads)
    kv, head_dim = int(model.kv_heads), int(model.head_dim)
    out = tokens(
        ("--num-layers", layers),
        ("--hidden-size", hidden),
        ("--num-attention-heads", heads),
        ("--ffn-hidden-size", int(model.ffn_hidden)),
        ("--max-position-embeddings", max(int(model.max_seq_len), seq_len)),
    )
    if kv < heads:
        out += tokens("--group-query-attention", ("--num-query-groups", kv))
    if head_dim * heads != hidden and not float(model.latent_attention):
        out += tokens(("--kv-channels", head_dim))
    if spec.get("mlp") == "swiglu":
        out.append("--swiglu")
    if spec.get("norm") == "rmsnorm":
        out += tokens(("--normalization", "RMSNorm"))
    if spec.get("position") == "rope":
        out += tokens(("--position-embedding-type", "rope"))
    if not float(model.tied_embeddings):
        out.append("--untie-embeddings-and-output-weights")
    if not float(model.bias):
        out.append("--disable-bias-linear")
    if not float(model.dropout):
        out += tokens(("--attention-dropout", 0.0), ("--hidden-dropout", 0.0))
    if float(model.latent_attention):
        out += mla_args(model)
    return out


def mla_args(model: Model) -> list[str]:
    """Multi-latent attention (DeepSeek-V2/V3): latent ranks and head sizes
    (``MLATransformerConfig``; ``--qk-head-dim`` excludes the rotary part)."""
    rope = int(model.rope_head_dim)
    out = tokens(
        "--multi-latent-attention",
        ("--kv-lora-rank", int(model.kv_lora_rank)),
        ("--qk-head-dim", int(model.head_dim) - rope),
        ("--qk-pos-emb-head-dim", rope),
        ("--v-head-dim", int(model.v_head_dim)),
    )
    if int(model.q_lora_rank):
        out += tokens(("--q-lora-rank", int(model.q_lora_rank)))
    return out


def moe_args(model: Model, plan: dict[str, Any]) -> list[str]:
    """A mixture of experts' flags (Megatron-Core ``--num-experts``, ``--moe-router-topk``,
    ``--moe-ffn-hidden-size``, ``--moe-shared-expert-intermediate-size``, ``--moe-layer-freq``
    as a list with the dense blocks first, DeepSeek-V3's ``first_k_dense_replace`` layout)
    and the token dispatcher: ``alltoall``, or ``flex`` with DeepEP when the plan deduplicates
    the dispatch per node (``ep_dedup``).  Empty for a dense model."""
    experts = int(model.experts)
    if not experts:
        return []
    out = tokens(
        ("--num-experts", experts),
        ("--moe-router-topk", int(model.experts_per_token)),
        ("--moe-ffn-hidden-size", int(model.expert_ffn_hidden)),
    )
    moe, layers = int(model.moe_layers), int(model.layers)
    if moe < layers:
        out += tokens(("--moe-layer-freq", f"([0]*{layers - moe}+[1]*{moe})"))
    if int(model.shared_ffn_hidden):
        out += tokens(("--moe-shared-expert-intermediate-size", int(model.shared_ffn_hidden)))
    if plan.get("ep_dedup"):
        return out + tokens(
            ("--moe-token-dispatcher-type", "flex"), ("--moe-flex-dispatcher-backend", "deepep")
        )
    return out + tokens(("--moe-token-dispatcher-type", "alltoall"))


def parallel_args(plan: dict[str, Any]) -> list[str]:
    """Parallel degrees, batch, pipeline layout and recomputation."""
    always = ("tp", "pp", "cp", "micro_batch", "global_batch", "seq_len")
    out = tokens(*((flag(k), plan[k]) for k in always))
    if int(plan.get("ep", 1)) > 1:
        out += tokens((flag("ep"), plan["ep"]))
    if plan.get("expert_tp") is not None and plan["expert_tp"] != plan["tp"]:
        out += tokens((flag("expert_tp"), plan["expert_tp"]))
    if plan.get("ep_overlap"):
        out.append(flag("ep_overlap"))
    if int(plan["virtual_stages"]) > 1:
        out += tokens((flag("virtual_stages"), plan["virtual_stages"]))
    for key in ("first_stage_layers", "last_stage_layers"):
        if int(plan.get(key, 0)):
            out += tokens((flag(key), plan[key]))
    if plan["sequence_parallel"]:
        out.append(flag("sequence_parallel"))
    if plan.get("tp_comm_overlap"):
        out.append(flag("tp_comm_overlap"))
    recompute = str(plan["recompute"])
    if recompute == "full":
        out += tokens(
            ("--recompute-granularity", "full"),
            ("--recompute-method", "uniform"),
            ("--recompute-num-layers", 1),
        )
    elif recompute == "selective":
        out += tokens(("--recompute-granularity", "selective"))
    return out


def _fsdp(plan: dict[str, Any]) -> bool:
    return int(plan["zero"]) in (2, 3)


def memory_args(plan: dict[str, Any]) -> list[str]:
    """Data-parallel sharding, gradient dtype, overlap and precision, as the memory and time
    models charge them (module docstring)."""
    zero, precision = int(plan["zero"]), str(plan.get("precision", "bf16"))
    out = tokens((flag("optimizer"), str(plan.get("optimizer", "adam"))))
    if zero == 1:
        out.append("--use-distributed-optimizer")
        replicas = _replicas(plan)
        if replicas > 1:
            out += tokens(("--num-distributed-optimizer-instances", replicas))
    elif _fsdp(plan):
        strategy = "optim_grads" if zero == 2 else "optim_grads_params"
        out += tokens(
            "--use-megatron-fsdp",
            ("--data-parallel-sharding-strategy", strategy),
            ("--ckpt-format", "fsdp_dtensor"),
        )
    if plan.get("overlap_grad_reduce", True):
        out.append(flag("overlap_grad_reduce"))
        if zero >= 1:
            out.append("--overlap-param-gather")
    half = precision in ("bf16", "fp8")
    if half and float(plan.get("grad_bytes_per_param", 2.0)) == 2.0:
        out.append("--grad-reduce-in-bf16")
    if precision == "fp16":
        out.append("--fp16")
    elif half:
        out.append("--bf16")
    if precision == "fp8":
        out += tokens(("--fp8-format", "hybrid"))
        if plan.get("fp8_param_gather"):
            out.append(flag("fp8_param_gather"))
    backend = "auto" if plan.get("flash_attention", True) else "unfused"
    return out + tokens(("--attention-backend", backend))


def env_for(plan: dict[str, Any]) -> list[tuple[str, str | None]]:
    """``CUDA_DEVICE_MAX_CONNECTIONS``: 1 without FSDP (required with tensor or context
    parallelism before Blackwell, and harmless otherwise), unset with Megatron-FSDP (it asserts
    ``!= "1"``); fp32 and tf32 GEMMs are chosen by the environment, not a flag (PyTorch
    ``NVIDIA_TF32_OVERRIDE=0`` forces IEEE fp32; ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1`` allows
    TF32)."""
    env: list[tuple[str, str | None]] = [
        ("CUDA_DEVICE_MAX_CONNECTIONS", None if _fsdp(plan) else "1")
    ]
    precision = str(plan.get("precision", "bf16"))
    if precision == "fp32":
        env.append(("NVIDIA_TF32_OVERRIDE", "0"))
    elif precision == "tf32":
        env.append(("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1"))
    return env


#: Megatron-LM's learning-rate decay styles (``--lr-decay-style`` choices at MEGATRON_COMMIT).
LR_DECAY_STYLES = ("constant", "linear", "cosine", "inverse-square-root", "WSD")


@dataclass(frozen=True)
class RunSettings:
    """The data and schedule of a Megatron-LM run.  The defaults measure the predicted step on
    synthetic data (``--mock-data``, ``NullTokenizer`` with the model's ``--vocab-size``, 100
    iterations at a constant learning rate of 1e-4, no evaluation); give the job's own.

    Attributes:
        data_path: Megatron's indexed-dataset prefix (``--data-path``; the ``.bin``/``.idx``
            pair that ``tools/preprocess_data.py`` writes); ``None``: ``--mock-data``.
        tokenizer: a Hugging Face tokenizer name or folder (``--tokenizer-type
            HuggingFaceTokenizer --tokenizer-model``); ``None``: ``NullTokenizer`` (token ids
            already in the data, the vocabulary from ``--vocab-size``).
        train_iters: optimizer steps (``--train-iters``).
        lr, min_lr: peak and final learning rate (``--lr``, ``--min-lr``).
        lr_decay_style: one of :data:`LR_DECAY_STYLES` (``--lr-decay-style``).
        lr_warmup_iters: linear warm-up steps (``--lr-warmup-iters``).
        eval_iters: evaluation steps per evaluation (``--eval-iters``; 0: none).
    """

    data_path: str | None = None
    tokenizer: str | None = None
    train_iters: int = 100
    lr: float = 1e-4
    min_lr: float = 0.0
    lr_decay_style: str = "constant"
    lr_warmup_iters: int = 0
    eval_iters: int = 0

    def problems(self, where: str = "<arguments>") -> list[Problem]:
        """Every setting Megatron-LM would refuse or that contradicts another, at once."""
        out = []
        if self.train_iters < 1:
            out.append(Problem(where, "train_iters", f"must be at least 1, got {self.train_iters}"))
        if not (self.lr > 0 and math.isfinite(self.lr)):
            out.append(Problem(where, "lr", f"must be a positive number, got {self.lr!r}"))
        if not (0 <= self.min_lr <= max(self.lr, 0)):
            reason = f"must lie between 0 and --lr ({self.lr:g}), got {self.min_lr!r}"
            out.append(Problem(where, "min_lr", reason))
        if self.lr_decay_style not in LR_DECAY_STYLES:
            reason = f"must be one of {', '.join(LR_DECAY_STYLES)}, got {self.lr_decay_style!r}"
            out.append(Problem(where, "lr_decay_style", reason))
        if not 0 <= self.lr_warmup_iters < max(self.train_iters, 1):
            reason = (
                f"must be at least 0 and below --train-iters ({self.train_iters}), "
                f"got {self.lr_warmup_iters}"
            )
            out.append(Problem(where, "lr_warmup_iters", reason))
        if self.eval_iters < 0:
            out.append(Problem(where, "eval_iters", f"must be at least 0, got {self.eval_iters}"))
        for key in ("data_path", "tokenizer"):
            value = getattr(self, key)
            if value is not None and (not value.strip() or any(c.isspace() for c in value)):
                reason = f"must be one path or name without spaces, got {value!r}"
                out.append(Problem(where, key, reason))
        return out

    @property
    def placeholder(self) -> bool:
        """Whether the data or the schedule is still the synthetic benchmark run's."""
        return self.data_path is None or self == replace(
            RunSettings(), data_path=self.data_path, tokenizer=self.tokenizer
        )

    def args(self, vocab: int) -> list[str]:
        """The Megatron-LM options of the data and schedule (``vocab``: the model's vocabulary,
        given to ``NullTokenizer``)."""
        data = ("--mock-data",) if self.data_path is None else (("--data-path", self.data_path),)
        tokenizer = (
            (("--tokenizer-type", "NullTokenizer"), ("--vocab-size", vocab))
            if self.tokenizer is None
            else (
                ("--tokenizer-type", "HuggingFaceTokenizer"),
                ("--tokenizer-model", self.tokenizer),
            )
        )
        warmup = (("--lr-warmup-iters", self.lr_warmup_iters),) if self.lr_warmup_iters else ()
        min_lr = (("--min-lr", f"{self.min_lr:g}"),) if self.min_lr else ()
        return tokens(
            *data,
            *tokenizer,
            ("--train-iters", self.train_iters),
            ("--lr", f"{self.lr:g}"),
            *min_lr,
            ("--lr-decay-style", self.lr_decay_style),
            *warmup,
            ("--eval-iters", self.eval_iters),
        )


def torchrun(plan: dict[str, Any], chips_per_node: int, script: str) -> tuple[tuple, int, int]:
    """``torchrun`` over the plan's ``tp pp cp dp`` GPUs, ``chips_per_node`` a host (the node
    rank and master address left to the scheduler): the program, the GPUs and GPUs per node."""
    chips = int(plan["tp"]) * int(plan["pp"]) * int(plan["cp"]) * int(plan["dp"])
    per_node = max(1, min(chips, chips_per_node))
    program = tokens(
        "torchrun",
        ("--nnodes", max(1, chips // per_node)),
        ("--nproc-per-node", per_node),
        ("--node-rank", "$NODE_RANK"),
        ("--master-addr", "$MASTER_ADDR"),
        ("--master-port", 6000),
        script,
    )
    return tuple(program), chips, per_node


def megatron_launch(
    plan: dict[str, Any],
    model: Model,
    spec: dict[str, Any],
    chips_per_node: int,
    run: RunSettings = RunSettings(),
) -> Launch:
    """The Megatron-LM command of a training plan (``plan``: :func:`train_launch_plan`;
    ``spec``: the model file's values; ``chips_per_node``: GPUs per host for ``torchrun``;
    ``run``: the data and schedule, :class:`RunSettings`)."""
    refused = megatron_refusals(plan, model, spec)
    program, chips, per_node = torchrun(plan, chips_per_node, "pretrain_gpt.py")
    args = [
        *parallel_args(plan),
        *model_args(model, spec, int(plan["seq_len"])),
        *moe_args(model, plan),
        *memory_args(plan),
        *switch_args(plan),
        *run.args(int(model.vocab)),
    ]
    data_note = (
        "--mock-data and the learning-rate flags measure the step; give your data and schedule "
        "(diffcost plan train --data-path, --tokenizer, --train-iters, --lr ...)"
        if run.placeholder
        else f"data {run.data_path}; {run.train_iters} iterations, lr {run.lr:g} "
        f"({run.lr_decay_style}, {run.lr_warmup_iters} warm-up)"
    )
    notes = (
        f"Megatron-LM {MEGATRON_COMMIT[:12]} on {chips} GPUs ({per_node} per node): run on every "
        "node with NODE_RANK and MASTER_ADDR set",
        data_note,
    )
    return Launch(
        "Megatron-LM", program, tuple(args), tuple(env_for(plan)), notes, "; ".join(refused)
    )


def parsed(args: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """``--option value`` tokens as ``{"option": "value"}`` (a bare flag: True; a repeated
    option keeps its last value, as argparse does)."""
    out: dict[str, Any] = {}
    key = None
    for token in args:
        if token.startswith("--"):
            key = token[2:]
            out[key] = True
        elif key is not None:
            out[key] = token if out[key] is True else f"{out[key]} {token}"
    return out


def allocated(line: Launch) -> dict[str, Any]:
    """What Megatron-LM runs for a launch line, as diffcost plan fields: the parallel layout,
    the ZeRO stage its sharding flags amount to and the gradient bytes it allocates
    (``validate_args``: with ``--bf16``, fp32 main gradients unless ``--grad-reduce-in-bf16``;
    fp16 keeps fp16 gradients; fp32 keeps fp32).  The inverse of :func:`megatron_launch`, for
    checking that a line runs the plan that was predicted."""
    a, env = parsed(line.args), dict(line.env)
    strategy = a.get("data-parallel-sharding-strategy", "optim_grads_params")
    zero = (
        {"optim_grads": 2, "optim_grads_params": 3}.get(strategy, 1)
        if a.get("use-megatron-fsdp")
        else 1
        if a.get("use-distributed-optimizer")
        else 0
    )
    if a.get("fp8-format"):
        precision = "fp8"
    elif a.get("bf16") or a.get("fp16"):
        precision = "bf16" if a.get("bf16") else "fp16"
    else:
        precision = "fp32" if env.get("NVIDIA_TF32_OVERRIDE") == "0" else "tf32"
    grad_bytes = 2.0 if precision == "fp16" or a.get("grad-reduce-in-bf16") else 4.0
    recompute = a.get("recompute-granularity", "none")
    given = lambda k: a.get(flag(k)[2:])  # noqa: E731
    always = ("tp", "pp", "cp", "micro_batch", "global_batch", "seq_len")
    return {
        **{k: int(a[flag(k)[2:]]) for k in always},
        "virtual_stages": int(given("virtual_stages") or 1),
        "sequence_parallel": bool(given("sequence_parallel") or False),
        "recompute": recompute,
        "zero": zero,
        "precision": precision,
        "grad_bytes_per_param": grad_bytes,
        "overlap_grad_reduce": bool(given("overlap_grad_reduce") or False),
        "optimizer": given("optimizer") or "adam",
        "flash_attention": a.get("attention-backend", "auto") != "unfused",
        "ep": int(given("ep") or 1),
    }


__all__ = [
    "allocated",
    "parsed",
    "MEGATRON_COMMIT",
    "megatron_launch",
    "megatron_refusals",
    "memory_args",
    "model_args",
    "moe_args",
    "parallel_args",
    "train_launch_plan",
    "RunSettings",
]
