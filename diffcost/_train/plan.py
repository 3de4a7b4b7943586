"""Training plans: parallel degrees, batch and memory-saving choices, as relaxable arrays.

Integer degrees are float leaves so a plan can be relaxed (continuous) for gradient search and
stacked for ``vmap``; categorical choices are weight vectors whose one-hot limit is the exact
choice (:func:`diffcost._core.smooth.mix`).

One field table, :data:`TRAIN_FIELDS`, describes every field a user sets; the constructor's
checks (:func:`train_plan`), the scenario schema (:data:`TRAIN_PLAN`), the sweep's encoding and
the search's JSON rows derive from it, and one encoder (:func:`encode_train`) turns field values
(numbers and choice weights) into a :class:`TrainPlan` for the constructor, the sweep (on the
device) and the search (exact and relaxed).

Adding a field: its :class:`~diffcost._core.options.PlanField` in :data:`TRAIN_FIELDS`
(domain, default, help, ``launch=_mg(megatron_flag, bridge_key)``, ``axis=Degrees(...)`` or
``axis=Choices()`` when searched) and its typed attribute on :class:`TrainPlan` (a number the
plan stores under the field's name), then the cost term that reads it and its test.  The
keyword of :func:`train_plan`, the scenario key, the command-line option, the sweep and search
columns, the value every search plan shares (:func:`diffcost._train.space.fixed_fields`) and
the Megatron-LM / Megatron-Bridge launch flags (emitted when the value differs from the
default) follow from the declaration.  A degree bounded by a new search-space size (``upto=
("max_x",)``) also needs that attribute on :class:`~diffcost._train.space.TrainSearchSpace`.
"""

import difflib
import enum
import inspect
import typing
from collections.abc import Mapping
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._core.errors import Problem, SpecError
from .._core.options import (
    Choices,
    Degrees,
    Optimizer,
    PlanField,
    Recompute,
    TrainPrecision,
    ZeroStage,
    check_fields,
    one_hot,
    values,
)
from .._core.shared import once
from .._inputs import schema as S
from .._inputs.hardware import FORMATS, host_float, strong_float
from .._terms.tp_rules import TP_RULES

RECOMPUTE: tuple[str, ...] = values(Recompute)
ZERO_STAGES: tuple[int, ...] = values(ZeroStage)
#: GEMM formats training supports (:class:`diffcost._core.options.TrainPrecision`).
TRAINING_PRECISIONS: tuple[str, ...] = values(TrainPrecision)

#: Optimizer state bytes per parameter kept besides bf16 weights and gradients.
#: Adam with fp32 master weights: master 4 + m 4 + v 4 = 12; without master: 8;
#: SGD with momentum: master 4 + momentum 4 = 8; without master: 4; Adam keeping 16-bit master
#: remainders: 2 + 4 + 4 = 10; Adam with bf16 moments and no master: 2 + 2 = 4.
OPTIMIZER_BYTES: dict[str, float] = {
    Optimizer.ADAM.value: 12.0,
    Optimizer.ADAM_NO_MASTER.value: 8.0,
    Optimizer.SGD.value: 8.0,
    Optimizer.SGD_NO_MASTER.value: 4.0,
    Optimizer.ADAM_PARAM_REMAINDERS.value: 10.0,  # remainders 2 + m 4 + v 4
    Optimizer.ADAM_BF16.value: 4.0,  # m 2 + v 2
}

#: Bytes per stored weight by training precision: 4 for fp32/tf32 (the weights are fp32), 2 for
#: 16-bit and fp8 mixed precision (bf16 weights; fp8 casts per GEMM, Transformer Engine).
WEIGHT_BYTES: dict[str, float] = {
    p.value: 4.0 if p in ("fp32", "tf32") else 2.0 for p in TrainPrecision
}

_positive = lambda x: x > 0  # noqa: E731


def _mg(flag: str, bridge: str = "") -> tuple[tuple[str, str], ...]:
    """A field's Megatron-LM flag (``--`` + ``flag``) and Megatron-Bridge recipe key
    (``bridge``, a ``KEY=VALUE`` override), as :attr:`PlanField.launch` holds them."""
    return (("megatron", "--" + flag),) + ((("bridge", bridge),) if bridge else ())


class LoraTarget(enum.StrEnum):
    """Matrices of each layer that carry LoRA adapters, by NeMo's ``target_modules`` names
    (``PEFT_MODULE_MAP`` and ``get_target_modules`` in ``nemo/collections/nlp/parts/
    peft_config.py``, NVIDIA/NeMo): the fused QKV projection only (NeMo's default), the
    attention block (QKV + output projection), the MLP (fc1 + fc2), or all four."""

    QKV = "attention_qkv"
    ATTENTION = "attention"
    MLP = "mlp"
    ALL = "all"


#: Adapted layer GEMMs per target, in the order of
#: :func:`diffcost._terms.layer.layer_gemms` (QKV, attention output, MLP in, MLP out).
LORA_MATRICES: dict[str, tuple[float, float, float, float]] = {
    LoraTarget.QKV.value: (1.0, 0.0, 0.0, 0.0),
    LoraTarget.ATTENTION.value: (1.0, 1.0, 0.0, 0.0),
    LoraTarget.MLP.value: (0.0, 0.0, 1.0, 1.0),
    LoraTarget.ALL.value: (1.0, 1.0, 1.0, 1.0),
}


def _tp_one_way(model: Any, space: Any, tp: int) -> bool:
    """The TP rules that hold for every larger model integer's divisor (heads and MLP width
    divisible by ``tp``): they choose the candidate degrees; the two-way ones are masked
    (:func:`diffcost._train.space.valid`)."""
    return all(r.holds(int(getattr(model, r.key)), tp) for r in TP_RULES if not r.either_way)


def balanced_split(layers: Any, pp: Any, xp: Any = np) -> tuple[Any, Any]:
    """``(first, last)`` transformer layers of the first and last pipeline stages when ``pp``
    does not divide ``layers``; ``(0, 0)`` (the even split) when it does.

    Every middle stage holds ``m = ceil(L / p)`` layers and the first and last share the rest,
    ``s = L - m (p - 2)``, the last the smaller half (``first = ceil(s / 2)``, ``last =
    floor(s / 2)``): the end stages also hold the embedding and the output layer with its loss,
    so fewer transformer layers there balance the stages (BLOOM 176B: 70 layers on 12 stages as
    5 + 10 x 6 + 5, Megatron-DeepSpeed's ``partition_method type:transformer|embedding``;
    BigScience, "BLOOM", arXiv:2211.05100, §3.4; Llama 3 405B: 126 layers on 16 stages as
    7 + 14 x 8 + 7, Megatron-Core's ``--decoder-first/last-pipeline-num-layers``).  Valid
    (:func:`balanced_split_ok`) when ``last >= 1`` and ``first <= m``.  ``xp``: numpy or
    ``jax.numpy`` (traced columns)."""
    layers, pp = xp.asarray(layers, dtype=float), xp.asarray(pp, dtype=float)
    even = xp.mod(layers, pp) == 0
    middle = xp.ceil(layers / pp)
    ends = layers - middle * xp.maximum(pp - 2.0, 0.0)
    first, last = xp.ceil(ends / 2.0), xp.floor(ends / 2.0)
    return xp.where(even, 0.0, first), xp.where(even, 0.0, last)


def balanced_split_ok(layers: Any, pp: Any, v: Any = 1, xp: Any = np) -> Any:
    """Whether :func:`balanced_split` exists for ``pp`` stages (``pp > 1``, it does not divide
    the layers, at least one layer on the last stage, no more on the first than on a middle
    one) with every stage's layers divisible by the ``v`` virtual stages."""
    layers, pp = xp.asarray(layers, dtype=float), xp.asarray(pp, dtype=float)
    first, last = balanced_split(layers, pp, xp)
    middle = xp.ceil(layers / pp)
    ok = (pp > 1) & (xp.mod(layers, pp) != 0) & (last >= 1) & (first <= middle)
    ok &= xp.where(pp > 2, xp.mod(middle, v) == 0, True)
    return ok & (xp.mod(first, v) == 0) & (xp.mod(last, v) == 0)


def _pp_split(model: Any, space: Any, pp: int) -> bool:
    """An even pipeline split needs ``pp`` to divide the layers, else the search places the
    :func:`balanced_split`, for a ``pp`` that divides one of the space's chip counts (no other
    leaves an integer data-parallel degree: the axis stays as short as before for a model whose
    layers divide); an uneven one the user gives (first or last stage layers) is checked
    jointly (:func:`diffcost._train.space.valid`)."""
    uneven = space.first_stage_layers > 0 or space.last_stage_layers > 0
    layers = int(model.layers)
    if uneven or layers % pp == 0:
        return True
    fits = any(int(c) % pp == 0 for c in space.chips)
    return fits and bool(balanced_split_ok(layers, pp))


def _cp_chunks(model: Any, space: Any, cp: int) -> bool:
    """Context parallelism ``cp > 1`` needs the sequence divisible by ``2 cp`` (Megatron-LM
    splits it into ``2 cp`` chunks for load balance: ``validate_args``,
    :mod:`diffcost._train.rules`)."""
    return cp == 1 or space.seq_len % (2 * cp) == 0


def _ep_dense(model: Any, space: Any, ep: int) -> bool:
    """Expert parallelism divides the routed experts; a dense model has ``ep = 1``."""
    return int(model.experts) > 0 or ep == 1


#: Every field of :func:`train_plan`, in keyword order.
TRAIN_FIELDS: tuple[PlanField, ...] = (
    PlanField(
        "tp",
        "degree",
        1,
        "tensor-parallel degree",
        launch=_mg("tensor-model-parallel-size", "model.tensor_model_parallel_size"),
        axis=Degrees(keep=_tp_one_way),
    ),
    PlanField(
        "pp",
        "degree",
        1,
        "pipeline-parallel degree",
        launch=_mg("pipeline-model-parallel-size", "model.pipeline_model_parallel_size"),
        axis=Degrees(upto=("layers", "chips"), keep=_pp_split),
    ),
    PlanField(
        "dp",
        "degree",
        1,
        "data-parallel degree",
        derived=True,
        help="Data-parallel degree (default: chips / (tp*pp*cp)).",
    ),
    PlanField(
        "cp",
        "degree",
        1,
        "context-parallel degree",
        launch=_mg("context-parallel-size", "model.context_parallel_size"),
        axis=Degrees(upto=("max_cp", "chips"), powers_of_two=True, keep=_cp_chunks),
    ),
    PlanField(
        "micro_batch",
        "count",
        1,
        "sequences per micro-batch per data-parallel rank",
        unit="sequences",
        help="Sequences per micro-batch.",
        short="mb",
        launch=_mg("micro-batch-size", "train.micro_batch_size"),
        axis=Degrees(upto=("max_micro_batch",), divides="global_batch"),
    ),
    PlanField(
        "global_batch",
        "count",
        None,
        "sequences per step (default dp * micro_batch)",
        derived=True,
        unit="sequences",
        help="Sequences per optimizer step.",
        launch=_mg("global-batch-size", "train.global_batch_size"),
    ),
    PlanField(
        "seq_len",
        "count",
        2048,
        "tokens per sequence",
        unit="tokens",
        launch=_mg("seq-length", "dataset.seq_length"),
    ),
    PlanField(
        "virtual_stages",
        "count",
        1,
        "model chunks per pipeline rank (interleaved 1F1B)",
        help="Interleaved pipeline chunks per rank.",
        short="v",
        launch=_mg(
            "num-virtual-stages-per-pipeline-rank", "model.virtual_pipeline_model_parallel_size"
        ),
        # each model chunk holds at least one layer: more chunks than layers cannot exist
        axis=Degrees(upto=("max_virtual_stages", "layers")),
    ),
    PlanField(
        "sequence_parallel",
        "bool",
        None,
        "shard norm/dropout over TP (default tp > 1)",
        derived=True,
        help="Shard norm/dropout activations over TP.",
        short="sp",
        axis=Choices(),
        launch=_mg("sequence-parallel", "model.sequence_parallel"),
    ),
    PlanField(
        "flash_attention",
        "bool",
        True,
        "fused attention kernel (no s^2 scores)",
        help="Fused attention kernel.",
    ),
    PlanField(
        "overlap_grad_reduce",
        "bool",
        True,
        "overlap the DP gradient reduction",
        flag=None,
        launch=_mg("overlap-grad-reduce", "ddp.overlap_grad_reduce"),
    ),
    PlanField(
        "recompute",
        "categorical",
        "selective",
        "recomputation",
        choices=Recompute,
        short="recomp",
        axis=Choices(),
    ),
    PlanField(
        "zero",
        "categorical",
        1,
        "ZeRO stage, 0..3",
        choices=ZeroStage,
        axis=Choices(),
        help="ZeRO stage 0-3 (3 = FSDP).",
    ),
    PlanField(
        "precision",
        "categorical",
        "bf16",
        "GEMM format",
        choices=TrainPrecision,
        axis=Choices(),
        help="GEMM precision: bf16 | fp16 | fp8 | tf32 | fp32.",
        short="prec",
    ),
    PlanField(
        "optimizer",
        "categorical",
        "adam",
        "optimizer state",
        choices=Optimizer,
        launch=_mg("optimizer"),
    ),
    PlanField(
        "grad_bytes_per_param",
        "number",
        2.0,
        "gradient bytes per parameter",
        check=_positive,
        reason="must be a positive number",
        unit="bytes",
        flag=None,
    ),
    # Uneven pipeline split and parameter-efficient fine-tuning (issue 17 item 6).
    PlanField(
        "first_stage_layers",
        "count",
        0,
        "transformer layers on the first pipeline stage (0: even split)",
        minimum=0,
        unit="layers",
        help="Layers on the first pipeline stage (0: even split).",
        launch=_mg("decoder-first-pipeline-num-layers"),
    ),
    PlanField(
        "last_stage_layers",
        "count",
        0,
        "transformer layers on the last pipeline stage (0: even split)",
        minimum=0,
        unit="layers",
        help="Layers on the last pipeline stage (0: even split).",
        launch=_mg("decoder-last-pipeline-num-layers"),
    ),
    PlanField(
        "lora_rank",
        "count",
        0,
        "LoRA adapter rank (0: every weight trained)",
        minimum=0,
        help="LoRA rank (0: full training).",
    ),
    PlanField(
        "lora_targets",
        "categorical",
        "attention_qkv",
        "matrices with LoRA adapters (NeMo target_modules)",
        choices=LoraTarget,
        help="LoRA targets: attention_qkv | attention | mlp | all.",
    ),
    # --- hybrid sharding (issue 17 item 1) ---
    PlanField(
        "shard_group",
        "degree",
        None,
        "ranks sharding the ZeRO state, HSDP / MiCS (default dp: full sharding)",
        derived=True,
        help="Ranks sharding the ZeRO state (HSDP; default dp: full sharding).",
    ),
    PlanField(
        "tp_comm_overlap",
        "bool",
        False,
        "pipeline TP all-gathers/reduce-scatters with the GEMMs (needs SP)",
        help="Pipeline TP collectives with the GEMMs (Megatron --tp-comm-overlap; needs SP).",
        launch=_mg("tp-comm-overlap"),
    ),
    PlanField(
        "fp8_param_gather",
        "bool",
        False,
        "all-gather fp8 weights (fp8 training)",
        help="All-gather weights in fp8 (fp8 training; Megatron --fp8-param-gather).",
        launch=_mg("fp8-param-gather"),
    ),
    PlanField(
        "deepspeed_zero3",
        "bool",
        False,
        "ZeRO-3 run by DeepSpeed (2021): gathers across nodes through each GPU's own NIC",
        help="ZeRO-3 as DeepSpeed ran it in 2021 (SC'21 Table 2): its gathers and "
        "reduce-scatters across nodes through each GPU's own NIC, not over the node's rails "
        "(default: PyTorch FSDP / Megatron-FSDP, NCCL's rings over every NIC).",
    ),
    PlanField(
        "ep",
        "degree",
        1,
        "expert-parallel degree: routed experts spread over ep ranks of a stage",
        help="Expert-parallel degree: routed experts over ep ranks of a stage (Megatron EP).",
        launch=_mg("expert-model-parallel-size", "model.expert_model_parallel_size"),
        axis=Degrees(divides="experts", keep=_ep_dense),
    ),
    PlanField(
        "expert_tp",
        "degree",
        None,
        "expert width split (default tp)",
        derived=True,
        help="Ranks each expert's width is split over (default tp).",
        launch=_mg("expert-tensor-parallel-size", "model.expert_tensor_parallel_size"),
    ),
    PlanField(
        "ep_overlap",
        "bool",
        False,
        "hide the expert all-to-all under another micro-batch",
        help="Hide the expert all-to-all under another micro-batch (Megatron "
        "--overlap-moe-expert-parallel-comm).",
        launch=_mg("overlap-moe-expert-parallel-comm"),
    ),
    PlanField(
        "ep_dedup",
        "bool",
        False,
        "send a token once per remote node (DeepEP, HybridEP)",
        help="Send a token once per remote node (DeepEP / HybridEP flex dispatcher).",
    ),
    PlanField(
        "moe_graphed",
        "bool",
        False,
        "expert layer captured in a CUDA graph with static per-rank expert buffers",
        help="Expert layer captured in a CUDA graph with static per-rank capacity (Megatron "
        "--cuda-graph-impl full_iteration, --moe-expert-rank-capacity-factor): no eager "
        "per-expert GEMM dispatch.",
    ),
)
_FIELD = {f.name: f for f in TRAIN_FIELDS}

#: ``[plan]`` table of a ``kind = "train"`` scenario, derived from :data:`TRAIN_FIELDS`.
TRAIN_PLAN: dict[str, S.Field] = S.plan_table(TRAIN_FIELDS)


class TrainPlan(eqx.Module):
    """How one training step is laid out on the chips.

    Attributes:
        tp, pp, dp, cp: tensor, pipeline, data and context parallel degrees.
        micro_batch: sequences per micro-batch per data-parallel rank.
        global_batch: sequences per optimizer step (all data-parallel ranks).
        seq_len: tokens per sequence.
        virtual_stages: model chunks per pipeline rank (interleaved 1F1B when > 1).
        sequence_parallel: 1 to shard norms/dropout activations over the TP group (Korthikanti).
        flash_attention: 1 for a fused attention kernel (no s^2 score matrix stored or moved).
        overlap_grad_reduce: 1 to overlap the data-parallel gradient reduction with backward.
        recompute: weights over :data:`RECOMPUTE` (none, selective, full).
        zero: weights over ZeRO stages 0..3 (sharding over data parallelism; stage 3 = FSDP).
        precision: weights over :data:`diffcost.FORMATS` for matrix multiplications.
        weight_bytes_per_param, grad_bytes_per_param, optimizer_bytes_per_param: bytes.
        first_stage_layers, last_stage_layers: transformer layers on the first / last pipeline
            stage, 0 for the even split (Megatron-LM ``--decoder-first-pipeline-num-layers``,
            ``--decoder-last-pipeline-num-layers``); the other layers divide over the rest.
        lora_rank: LoRA adapter rank ``r``; 0 trains every weight, ``r >= 1`` freezes every base
            weight and trains rank-``r`` adapters (Hu et al. 2021, arXiv:2106.09685).
        lora_matrices: 1 for each layer GEMM (QKV, output, MLP in, MLP out) with an adapter
            (the plan's :class:`LoraTarget`, mixed when relaxed).
        shard_replicas: copies of the ZeRO state, ``dp / shard_group`` (hybrid sharding: torch
            FSDP ``HYBRID_SHARD``, MiCS; the replicas all-reduce gradients once per step); 1
            (the default) is full sharding.  Stored as the replica count so that a plan whose
            ``dp`` is changed (a sweep, a relaxed search) stays fully sharded.
        tp_comm_overlap: 1 to split the sequence-parallel all-gathers and reduce-scatters into
            ``tp`` chunks pipelined with the GEMMs (Megatron-LM ``--tp-comm-overlap``,
            Transformer Engine userbuffers).
        fp8_param_gather: 1 to all-gather the weights in fp8 (Megatron-LM
            ``--fp8-param-gather``; applies to fp8 training only).
        deepspeed_zero3: 1 for ZeRO-3 as DeepSpeed ran it in 2021 (its collectives across
            nodes through each GPU's own NIC, :func:`~diffcost._train.cost.sharded_gather_s`);
            0 (the default) for PyTorch FSDP and Megatron-FSDP (NCCL's rings over the node's
            rails).
        ep: expert-parallel degree: each routed expert lives on one of ``ep`` ranks of a
            pipeline stage (Megatron-Core ``--expert-model-parallel-size``); 1 for a dense
            model.
        expert_tp: ranks each expert's width is split over (Megatron-Core
            ``--expert-tensor-parallel-size``, default the attention's ``tp``).  MoE parallel
            folding lays the ``expert_tp x ep`` expert grid over the ``tp cp dp`` ranks of a
            stage, each expert kept by ``tp cp dp / (expert_tp ep)`` copies (Liu et al., "MoE
            Parallel Folding", arXiv:2504.14960; ``megatron/core/parallel_state.py``).
        ep_overlap: 1 to hide each expert all-to-all under another micro-batch's computation
            (Megatron-Core ``--overlap-moe-expert-parallel-comm``; DeepSeek-V3's DualPipe,
            arXiv:2412.19437 §3.2.1).
        ep_dedup: 1 to send a token once to each remote node holding any of its experts and
            fan it out over the scale-up links there (Megatron-Core ``--moe-token-dispatcher-type
            flex`` with DeepEP or HybridEP; DeepSeek-V3 §3.2.2).
        moe_graphed: 1 when the expert layer runs inside a captured CUDA graph with static
            per-rank expert buffers (Megatron-Core ``--cuda-graph-impl full_iteration`` with
            ``--moe-expert-rank-capacity-factor`` and paged stashing), 0 (the default, as
            Megatron-Core's) when its local experts' GEMMs are dispatched eagerly one by one
            after the dropless dispatch's host synchronisation
            (:func:`~diffcost._terms.moe.eager_expert_dispatch_s`).

    Every field may carry leading batch dimensions (``*batch``): stacked plans for ``vmap``
    (sweeps, searches, validation) are built with the same constructor.
    """

    tp: Float[Array, "*batch"]
    pp: Float[Array, "*batch"]
    dp: Float[Array, "*batch"]
    cp: Float[Array, "*batch"]
    micro_batch: Float[Array, "*batch"]
    global_batch: Float[Array, "*batch"]
    seq_len: Float[Array, "*batch"]
    virtual_stages: Float[Array, "*batch"]
    sequence_parallel: Float[Array, "*batch"]
    flash_attention: Float[Array, "*batch"]
    overlap_grad_reduce: Float[Array, "*batch"]
    recompute: Float[Array, "*batch 3"]
    zero: Float[Array, "*batch 4"]
    precision: Float[Array, "*batch 8"]
    weight_bytes_per_param: Float[Array, "*batch"]
    grad_bytes_per_param: Float[Array, "*batch"]
    optimizer_bytes_per_param: Float[Array, "*batch"]
    first_stage_layers: Float[Array, "*batch"]
    last_stage_layers: Float[Array, "*batch"]
    lora_rank: Float[Array, "*batch"]
    lora_matrices: Float[Array, "*batch 4"]
    shard_replicas: Float[Array, "*batch"]
    tp_comm_overlap: Float[Array, "*batch"]
    fp8_param_gather: Float[Array, "*batch"]
    deepspeed_zero3: Float[Array, "*batch"]
    ep: Float[Array, "*batch"]
    expert_tp: Float[Array, "*batch"]
    ep_overlap: Float[Array, "*batch"]
    ep_dedup: Float[Array, "*batch"]
    moe_graphed: Float[Array, "*batch"]

    @once
    def num_micro_batches(self) -> Array:
        """Micro-batches per step per pipeline: ``global_batch / (dp * micro_batch)``."""
        return self.global_batch / (self.dp * self.micro_batch)

    @once
    def shard_group(self) -> Array:
        """Data-parallel ranks that shard one copy of the ZeRO state: ``dp / shard_replicas``."""
        return self.dp / self.shard_replicas

    @once
    def shard_ranks(self) -> Array:
        """Ranks one copy of the ZeRO state is sharded over: ``shard_group * cp`` (CP ranks
        hold the same weights and shard with the data-parallel ones)."""
        return self.shard_group() * self.cp

    @once
    def expert_shard_fraction(self) -> Array:
        """Fraction of a chip's routed-expert ZeRO state it keeps: ``expert_tp ep / (tp
        shard_ranks)``, the ``tp cp shard_group / (expert_tp ep)`` copies of an expert shard
        its state (Megatron-Core's expert data-parallel group; the rules make ``expert_tp ep``
        divide ``tp cp shard_group``)."""
        return self.expert_tp * self.ep / (self.tp * self.shard_ranks())

    @once
    def num_chips(self) -> Array:
        """Chips the plan occupies: ``tp * pp * dp * cp``."""
        return self.tp * self.pp * self.dp * self.cp


def encode_train(v: Mapping[str, ArrayLike], xp: Any = jnp) -> "TrainPlan":
    """The plan of field values ``v`` (numbers; categoricals as weight vectors over their
    choices, one-hot when exact).  Works on scalars, stacked rows and traced values alike.

    Derived per-choice numbers are weighted sums, exact at one-hot weights: the stored weight
    bytes of the precision (:data:`WEIGHT_BYTES`), the optimizer state bytes
    (:data:`OPTIMIZER_BYTES`) and the adapted matrices of the LoRA targets
    (:data:`LORA_MATRICES`).  The precision weights are placed on :data:`FORMATS` (the
    training precisions are its first entries).  ``shard_group`` absent or NaN means ``dp``
    (full sharding).  ``xp``: ``numpy`` computes a plan of host values on the host and
    places each leaf on the device once (:func:`~diffcost._inputs.hardware.host_float`: no
    small programs compiled per process), ``jax.numpy`` (default) works on traced values.
    """
    a = lambda k: xp.asarray(v[k])  # noqa: E731
    tp = a("tp")
    prec = a("precision")
    pad = [(0, 0)] * (prec.ndim - 1) + [(0, len(FORMATS) - len(TRAINING_PRECISIONS))]
    weights = xp.asarray([WEIGHT_BYTES[p] for p in TrainPrecision], prec.dtype)
    opt = a("optimizer")
    opt_bytes = xp.asarray([OPTIMIZER_BYTES[o] for o in Optimizer], opt.dtype)
    targets = a("lora_targets")
    matrices = xp.asarray([LORA_MATRICES[t] for t in LoraTarget], targets.dtype)

    def value(f: PlanField) -> Any:
        """A field's value as given (broadcast to ``tp``'s shape), else its declared default:
        a field that holds its own number needs no line here."""
        if f.name not in v and f.default is not None and f.kind != "categorical":
            return xp.full_like(tp, float(f.default))
        x = a(f.name)
        return x if f.kind == "categorical" or x.shape == tp.shape else x * xp.ones_like(tp)

    fields = dict(
        precision=xp.pad(prec, pad),
        weight_bytes_per_param=xp.sum(prec * weights, axis=-1),
        optimizer_bytes_per_param=xp.sum(opt * opt_bytes, axis=-1),
        lora_matrices=targets @ matrices,
        shard_replicas=_shard_replicas(v, xp),
        expert_tp=_expert_tp(v, xp),
    )
    fields |= {
        f.name: value(f) for f in TRAIN_FIELDS if f.name in _ATTRIBUTES and f.name not in fields
    }
    if xp is not jnp:  # host values: each placed on the device once
        fields = {k: host_float(x) for k, x in fields.items()}
    return TrainPlan(**fields)


#: The plan's attributes (a field of :data:`TRAIN_FIELDS` of the same name is stored as given).
_ATTRIBUTES = frozenset(TrainPlan.__dataclass_fields__)


def _expert_tp(v: Mapping[str, ArrayLike], xp: Any) -> ArrayLike:
    """Expert tensor parallelism: ``tp`` when ``expert_tp`` is absent or NaN."""
    tp = xp.asarray(v["tp"])
    if v.get("expert_tp") is None:
        return tp
    etp = xp.asarray(v["expert_tp"]) * xp.ones_like(tp)
    return xp.where(xp.isnan(etp), tp, etp)


def _shard_replicas(v: Mapping[str, ArrayLike], xp: Any) -> ArrayLike:
    """Copies of the ZeRO state, ``dp / shard_group``: 1 (full sharding) when ``shard_group``
    is absent or NaN."""
    dp = xp.asarray(v["dp"])
    if v.get("shard_group") is None:
        return xp.ones_like(dp)
    sg = xp.asarray(v["shard_group"])
    return xp.where(xp.isnan(sg), 1.0, dp / xp.where(xp.isnan(sg), 1.0, sg))


def _with_defaults(given: dict[str, Any]) -> dict[str, Any]:
    """The derived fields left unset (None) filled in: ``global_batch = dp * micro_batch``,
    ``sequence_parallel = tp > 1``, ``shard_group = dp``, ``expert_tp = tp``."""
    defaults = {
        "global_batch": given["dp"] * given["micro_batch"],
        "sequence_parallel": given["tp"] > 1,
        "shard_group": given["dp"],
        "expert_tp": given["tp"],
    }
    return {**given, **{k: d for k, d in defaults.items() if given.get(k) is None}}


def choice_weights(name: str, value: object) -> Float[Array, " k"]:
    """One-hot weights of a categorical field's value (a member or its plain value)."""
    f = _FIELD[name]
    return one_hot(f.options().index(f.plain(value)), len(f.options()))


# The validating boundary of the library: it reports every ill-typed or out-of-range value
# as a SpecError (file, key, reason) itself, so the runtime type-check hook of the tests must not
# pre-empt that message with its own.
@typing.no_type_check
def train_plan(*, source: str = "plan", **fields: Any) -> TrainPlan:
    """Build an exact (integer, one-hot) training plan, checking every field at once.

    The keywords are the fields of :data:`TRAIN_FIELDS` (``tp``, ``pp``, ``dp``, ``cp``,
    ``micro_batch``, ``recompute``, ``zero``, ``precision``, ...), each with its declared
    default and check; the signature lists them with their defaults
    (``inspect.signature(train_plan)``).  ``global_batch`` defaults to ``dp * micro_batch``
    (no gradient accumulation); ``sequence_parallel`` defaults to on when ``tp > 1``
    (Megatron-LM/NeMo default); ``shard_group`` to ``dp`` (full sharding); ``expert_tp`` to
    ``tp``.

    Raises:
        SpecError: listing every invalid or unknown field, named as ``source: field``.
    """
    problems: list[Problem] = [_unknown(k, source) for k in fields if k not in _FIELD]
    given = {f.name: fields.get(f.name, f.default) for f in TRAIN_FIELDS}
    problems += check_fields(TRAIN_FIELDS, given, source, listing="tuple")
    if problems:
        raise SpecError(problems)
    values_ = _with_defaults(given)
    encoded = {
        k: choice_weights(k, v) if _FIELD[k].kind == "categorical" else strong_float(float(v))
        for k, v in values_.items()
    }
    return encode_train(encoded, np)


def _unknown(name: str, source: str) -> Problem:
    """The problem of a keyword that names no training plan field (the closest suggested)."""
    close = difflib.get_close_matches(name, list(_FIELD), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return Problem(source, name, f"not a training plan field{hint}")


def _signature() -> inspect.Signature:
    """:func:`train_plan`'s keywords as :data:`TRAIN_FIELDS` declares them (``help()``,
    editors): each field's default and value type."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    params = [
        inspect.Parameter(
            f.name,
            keyword,
            default=f.default,
            annotation=f.cli_type() if f.default is not None else f.cli_type() | None,
        )
        for f in TRAIN_FIELDS
    ]
    params.append(inspect.Parameter("source", keyword, default="plan", annotation=str))
    return inspect.Signature(params, return_annotation=TrainPlan)


train_plan.__signature__ = _signature()  # type: ignore[attr-defined]


__all__ = [
    "FORMATS",
    "LORA_MATRICES",
    "OPTIMIZER_BYTES",
    "RECOMPUTE",
    "TRAINING_PRECISIONS",
    "TRAIN_FIELDS",
    "TRAIN_PLAN",
    "WEIGHT_BYTES",
    "ZERO_STAGES",
    "LoraTarget",
    "TrainPlan",
    "encode_train",
    "train_plan",
]
