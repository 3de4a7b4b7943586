"""Training memory per chip: weights, gradients, optimizer state, activations, runtime reserve.

Model state follows ZeRO (Rajbhandari et al., SC'20, §5): stage 1 shards the optimizer state over
the data-parallel group, stage 2 also the gradients, stage 3 (FSDP) also the weights.

ZeRO-3 (FSDP) also holds, besides its shard, the full weights it has gathered for the unit it
computes and the unit it prefetches, and the full gradient of the unit whose backward just ran
until that gradient is reduce-scattered (:func:`zero3_gather_params`); they are counted in the
weights and gradients.

FP8 training also keeps Transformer Engine's fp8 copies of the GEMM weights for the whole step
(:func:`fp8_weight_cache_bytes`), counted in the weights.

Activations follow Korthikanti et al. (arXiv:2205.05198) §4, Table 2, generalised from GPT's
``h, 4h, MHA`` to grouped-query attention, any MLP width and matrix count, no dropout and fused
(flash) attention.  Per layer and micro-batch, with ``T`` tokens on the chip:

* replicated over TP unless sequence parallel (then divided by ``t``): two norm inputs, QKV and
  MLP inputs (2 bytes each), two dropout masks (1 byte each) -> ``(8 + 2 dropout) T h``;
* sharded over TP: Q, K, V (``2 T (a + 2k) e``), attention output (``2 T a e``), MLP
  intermediates (``2 T n_mat f``) -> ``24 T h / t`` for GPT;
* attention scores without flash attention: softmax output (2 bytes), dropout mask (1) and
  output (2) -> ``(2 + 3 dropout) a s_q s b / t``; flash attention keeps only a 4-byte
  log-sum-exp per row.

With GPT shapes and dropout this is exactly Table 2: ``sbh(34 + 5as/h)`` unparallelised,
``sbh(10 + 24/t + 5as/(ht))`` with TP, ``sbh/t (34 + 5as/h)`` with TP+SP, ``sbh(10 + 24/t)``
with selective recomputation, ``34 sbh/t`` with both, and ``2 sbh`` with full recomputation.
"""

from typing import NamedTuple

import equinox as eqx
import jax.numpy as jnp
import jax.tree_util as jtu
from jaxtyping import Array, Float

from .._core.shared import once
from .._core.smooth import Smoothing, clip01, is_one, smax, smin, step
from .._inputs.hardware import BYTES_PER_ELEMENT, System, format_index
from .._inputs.model import Model
from .._inputs.reserve import runtime_reserve_bytes
from .plan import TrainPlan

_FP8_BYTES = BYTES_PER_ELEMENT["fp8"]


class TrainMemory(eqx.Module):
    """Bytes per chip on the most loaded pipeline stage (the first, or with an uneven split
    the second when it is heavier: :func:`train_memory`)."""

    weights_bytes: Float[Array, ""]
    gradients_bytes: Float[Array, ""]
    optimizer_bytes: Float[Array, ""]
    activations_bytes: Float[Array, ""]
    reserved_bytes: Float[Array, ""]
    total_bytes: Float[Array, ""]


class StageLayers(NamedTuple):
    """Transformer layers per pipeline stage (see :func:`stage_layers`)."""

    first: Array
    middle: Array  # on each of the middle stages (0 when there are none)
    last: Array
    middle_stages: Array
    rest: Array  # layers the middle stages share: ``L - first - last`` (given ones only)


def stage_layers(model: Model, plan: TrainPlan, sm: Smoothing) -> StageLayers:
    """Layers on the first, middle and last pipeline stages (:func:`_stage_layers` of
    ``model.layers``: once per evaluation whichever copy of the model asks, the padded-vocabulary
    one or the user's)."""
    return _stage_layers(model.layers, plan, sm)


@once
def _stage_layers(layers: Array, plan: TrainPlan, sm: Smoothing) -> StageLayers:
    """Layers on the first, middle and last pipeline stages, of ``layers`` in all.

    Megatron-LM (``get_num_layers_to_build``, ``megatron/core/transformer/transformer_block.py``
    at d98e8a64ddf3): a given first (last) stage count is taken off, the remaining layers divide
    evenly over the remaining stages: ``middle = (L - f - l) / (p - [f > 0] - [l > 0])``; an
    unset first or last stage holds ``middle`` layers.  With neither set every stage holds
    ``L / p`` (the even split).  Llama 3 405B on 16 stages: ``f = l = 7``, ``middle = 8``.
    """
    f_set = clip01(plan.first_stage_layers, sm)  # exact 1 for a given count, 0 for none
    l_set = clip01(plan.last_stage_layers, sm)
    stages = plan.pp - f_set - l_set
    rest = layers - f_set * plan.first_stage_layers - l_set * plan.last_stage_layers
    # no middle stage (p = 2 with both ends given): divide by 1, the rules require rest = 0;
    # the even split keeps its plain L / p (the relaxed search's landscape, for any p)
    even = (1.0 - f_set) * (1.0 - l_set)
    uneven_middle = rest / (stages + is_one(stages + 1.0, sm))
    middle = even * layers / plan.pp + (1.0 - even) * uneven_middle
    first = f_set * plan.first_stage_layers + (1.0 - f_set) * middle
    last = l_set * plan.last_stage_layers + (1.0 - l_set) * middle
    return StageLayers(first, middle, last, stages, rest)


@once
def recompute_weights(plan: TrainPlan) -> tuple[Array, Array]:
    """``(selective, full)``: the weights of selective and full recomputation in
    ``plan.recompute``, each read once per evaluation (the step's terms all ask for them)."""
    return plan.recompute[1], plan.recompute[2]


@once
def layers_on_stage(model: Model, plan: TrainPlan, sm: Smoothing, stage: int) -> Array:
    """Layers on pipeline stage ``stage``: 0 the first; 1 the second, a middle stage or, with
    no middle stage (``p = 2`` uneven), the last (:func:`stage_layers`)."""
    st = stage_layers(model, plan, sm)
    if stage == 0:
        return st.first
    no_middle = is_one(st.middle_stages + 1.0, sm)
    return (1.0 - no_middle) * st.middle + no_middle * st.last


@once
def lora_on(plan: TrainPlan, sm: Smoothing) -> Array:
    """1 for LoRA fine-tuning (``lora_rank >= 1``: base weights frozen), 0 for full training."""
    return clip01(plan.lora_rank, sm)


@once
def adapter_params_per_layer(model: Model, plan: TrainPlan) -> Array:
    """LoRA adapter parameters of one layer on one chip: ``r (k + n)`` per adapted ``k x n``
    layer GEMM (``A: k x r``, ``B: r x n``; Hu et al. 2021 §4.1), with the local (TP-shard)
    ``k`` and ``n`` of :func:`~diffcost._terms.layer.layer_gemms`."""
    h, t = model.hidden, plan.tp
    f_in = (model.mlp_matrices - 1.0) * model.ffn_hidden
    sides = jnp.stack(
        [
            h + model.attention_width() / t,
            model.heads * model.v_head_dim / t + h,
            h + f_in / t,
            model.ffn_hidden / t + h,
        ]
    )
    return plan.lora_rank * jnp.sum(plan.lora_matrices * sides, axis=-1)


@once
def trainable_params_per_chip(
    model: Model, plan: TrainPlan, sm: Smoothing, stage: int = 0
) -> Array:
    """Parameters per chip that get gradients and optimizer state: all held ones in full
    training, only the adapters of the stage's layers under LoRA, whose base weights are
    frozen (Hu et al. 2021 §4.2; NeMo PEFT freezes the base model)."""
    lora = lora_on(plan, sm)
    adapters = layers_on_stage(model, plan, sm, stage) * adapter_params_per_layer(model, plan)
    return (1.0 - lora) * params_per_chip(model, plan, sm, stage) + lora * adapters


@once
def params_per_chip(model: Model, plan: TrainPlan, sm: Smoothing, stage: int = 0) -> Array:
    """Parameters held by one chip of pipeline stage ``stage`` (0 the first, 1 the second;
    before ZeRO sharding).

    First stage: ``n * (matrices_and_biases / t + norms) + embeddings / t`` (``n`` its layers,
    :func:`layers_on_stage`, ``L / p`` when even) where the stage also holds the
    output projection (untied) or its tied copy when ``p = 1`` (Megatron keeps a word-embedding
    copy on both first and last stage).  Learned positions are not TP-sharded.  Second stage:
    its layers, plus the output matrix (or tied copy) and final norm when it is the last
    (``p = 2``).  A mixture of experts adds its local routed experts
    (:func:`expert_params_per_chip`).
    """
    t, p = plan.tp, plan.pp
    n = layers_on_stage(model, plan, sm, stage)
    sharded = model.layer_matrix_params() + model.layer_bias_params()
    layers = n * (sharded / t + model.layer_norm_params()) + expert_params_per_chip(
        model, plan, sm, stage
    )
    word = model.vocab * model.hidden / t
    if stage == 1:
        return layers + is_one(p - 1.0, sm) * (word + model.norm_params * model.hidden)
    positions = model.learned_positions * model.max_seq_len * model.hidden
    # p == 1: the single stage also holds the untied output matrix and the final norm.
    output = is_one(p, sm) * (
        (1.0 - model.tied_embeddings) * word + model.norm_params * model.hidden
    )
    return layers + word + positions + output


@once
def expert_params_per_chip(model: Model, plan: TrainPlan, sm: Smoothing, stage: int = 0) -> Array:
    """Routed-expert parameters one chip of stage ``stage`` holds (before ZeRO sharding):
    ``n * experts_per_layer / (expert_tp ep)``: each of the ``ep`` expert-parallel ranks holds
    ``E / ep`` experts, each split over ``expert_tp`` ranks (Megatron-Core).  0 for a dense
    model."""
    n = layers_on_stage(model, plan, sm, stage)
    return n * model.layer_expert_params() / (plan.expert_tp * plan.ep)


@once
def zero3_gather_params(model: Model, plan: TrainPlan, sm: Smoothing) -> Array:
    """Parameters per chip in one ZeRO-3 / FSDP gather unit (this TP rank's part).

    ZeRO-3 holds, beyond its shard, the full weights of the unit being computed and of the one
    prefetched, and the full gradient of the unit just differentiated, alive until its
    reduce-scatter: ``2 unit`` weights and ``unit`` gradients at peak (backward), charged in
    :func:`train_memory`.  A unit is one transformer layer (the auto-wrap policy of FSDP and
    Megatron-FSDP), or the word embedding when that is larger:
    ``unit = max(layer / t + norms, V h / t)``.  Zhao et al., "PyTorch FSDP", VLDB 2023,
    §3.3.1-3.3.2 and §4.3: backward and forward prefetch issue the next unit's all-gather while
    the current one computes, and the rate limiter (``limit_all_gathers``) keeps at most two
    units gathered; DeepSpeed bounds the same buffers by ``stage3_max_live_parameters`` (1e9
    parameters) and ``stage3_prefetch_bucket_size`` (DeepSpeed ZeRO config docs).
    """
    sharded = model.layer_matrix_params() + model.layer_bias_params()
    experts = model.layer_expert_params() / (plan.ep * plan.expert_tp)  # gathered too
    layer = sharded / plan.tp + experts + model.layer_norm_params()
    return smax(layer, model.vocab * model.hidden / plan.tp, sm)


@once
def fp8_weight_cache_bytes(model: Model, plan: TrainPlan, sm: Smoothing, stage: int = 0) -> Array:
    """Bytes per chip of the fp8 weight copies FP8 training keeps for the step.

    Transformer Engine casts each GEMM weight to fp8 on the first micro-batch of a step and reuses
    the cast for the others (``get_weight_workspace(cache_name="weight")`` whenever Megatron-core
    passes ``is_first_microbatch``, i.e. unless ``disable_parameter_transpose_cache``;
    transformer_engine/pytorch/module/linear.py and base.py, megatron/core/extensions/
    transformer_engine.py ``TELinear.forward``).  On Hopper an fp8 GEMM needs both a row-wise
    copy (forward) and a column-wise, transposed one (data gradient): 2 x 1 byte per matrix
    weight.  The embedding and output layer are not TE GEMMs and stay 16-bit:
    ``cache = fp8 * 2 * n * layer_matrices / t`` (``n`` the layers of ``stage``, ``L/p`` even).

    Under ZeRO-3 TE keeps the cache sharded like the weights (``fsdp_group``: the workspace is
    scattered after use and gathered with its unit), plus the two gathered units
    (:func:`zero3_gather_params`): ``2 * (stage * shard + 2 * layer_matrices / t)``.
    This is the cast the optimizer-time term already charges once per step
    (:func:`~diffcost._train.cost.optimizer_s`).
    """
    fp8 = plan.precision[format_index("fp8")]
    experts = model.layer_expert_params() / (plan.ep * plan.expert_tp)
    layer = model.layer_matrix_params() / plan.tp + experts
    held_stage = layers_on_stage(model, plan, sm, stage) * layer
    z3 = plan.zero[3]
    shard = 1.0 / plan.shard_ranks()
    held = (1.0 - z3) * held_stage + z3 * (held_stage * shard + 2.0 * layer)
    return fp8 * 2.0 * _FP8_BYTES * held


@once
def layer_activation_bytes(model: Model, plan: TrainPlan) -> Array:
    """Activation bytes one layer stores for one micro-batch without recomputation."""
    t = plan.tp
    s_local = plan.seq_len / plan.cp
    tokens = plan.micro_batch * s_local
    rep = plan.sequence_parallel / t + (1.0 - plan.sequence_parallel)
    replicated = (8.0 + 2.0 * model.dropout) * model.hidden * rep
    sharded = (
        2.0 * model.attention_width()
        + 2.0 * model.heads * model.v_head_dim
        + 2.0 * model.mlp_matrices * model.active_ffn_hidden()
    ) / t
    # FP8 training (Transformer Engine) saves the inputs of the four GEMMs in fp8: 1 byte
    # instead of 2 for the QKV and MLP inputs, the projection input and the MLP-out input.
    fp8 = plan.precision[format_index("fp8")]
    fp8_saving = fp8 * (
        2.0 * model.hidden * rep + (model.heads * model.v_head_dim + model.active_ffn_hidden()) / t
    )
    return tokens * (replicated + sharded - fp8_saving) + attention_score_bytes(model, plan)


@once
def attention_score_bytes(model: Model, plan: TrainPlan) -> Array:
    """Score-matrix bytes per layer and micro-batch: ``(2 + 3 dropout) a s_q s b / t`` unfused,
    a 4-byte log-sum-exp per query row with flash attention."""
    rows = model.heads * plan.micro_batch * plan.seq_len / plan.cp / plan.tp
    unfused = (2.0 + 3.0 * model.dropout) * rows * plan.seq_len
    return plan.flash_attention * 4.0 * rows + (1.0 - plan.flash_attention) * unfused


@once
def layer_activation_bytes_by_recompute(model: Model, plan: TrainPlan) -> Array:
    """Stored bytes per layer and micro-batch for (none, selective, full) recomputation.

    Selective drops the score matrix (recomputed); full keeps only the layer input ``2 T h``
    (sharded over TP with sequence parallelism).
    """
    full_store = layer_activation_bytes(model, plan)
    scores = attention_score_bytes(model, plan)
    tokens = plan.micro_batch * plan.seq_len / plan.cp
    rep = plan.sequence_parallel / plan.tp + (1.0 - plan.sequence_parallel)
    layer_input = 2.0 * tokens * model.hidden * rep
    return jnp.stack([full_store, full_store - scores, layer_input])


@once
def micro_batches_in_flight(plan: TrainPlan, sm: Smoothing, stage: int = 0) -> Array:
    """Micro-batches whose activations pipeline stage ``stage`` holds at peak (1F1B schedule).

    ``min((p - stage) * (1 + [v > 1] (p - 1)/(p v)), m)``: stage ``k`` runs ``p - k`` warm-up
    forwards before its first backward (Narayanan et al. SC'21 §2.2.1), times Korthikanti's
    interleaving factor when ``v > 1`` (applied to the second stage too, an approximation);
    never more than the ``m`` micro-batches of the step.

    Relaxed, the minimum is taken of both sides times ``p v``: ``(p - stage) (p v + [v > 1]
    (p - 1))`` and ``m p v`` are integers at integer plans, where the integer blend is exact (the
    in-flight count itself is not an integer: 2.5 for ``p = v = 2``).
    """
    p, v = plan.pp, plan.virtual_stages
    interleaved = 1.0 - is_one(v, sm)
    m = plan.num_micro_batches()
    if not sm.relaxed:
        factor = 1.0 + interleaved * (p - 1.0) / (p * v)
        return smin((p - stage) * factor, m, sm, integer=True)
    pv = p * v
    warm = (p - stage) * (pv + interleaved * (p - 1.0))
    return smin(warm, m * pv, sm, integer=True) / pv


@once
def activation_bytes(model: Model, plan: TrainPlan, sm: Smoothing, stage: int = 0) -> Array:
    """Peak activation bytes on pipeline stage ``stage`` (0 the first, 1 the second).

    ``n * in_flight * per_layer(recompute)`` (``n`` the stage's layers, ``L/p`` even) plus: on
    the first stage the embedding dropout mask for every micro-batch in flight; with full
    recomputation, one layer's full activations (the working set while recomputing); and on the
    last stage (the first when ``p = 1``, the second when ``p = 2``) the final norm, output-layer
    input and fp32 logits ``4 T h + 4 T V / t`` (Korthikanti §4.2.3).
    """
    shared = _activation_terms(model, plan)
    in_flight = micro_batches_in_flight(plan, sm, stage)
    stored = layers_on_stage(model, plan, sm, stage) * in_flight * shared.per_layer
    if stage == 0:  # the embedding's dropout mask, first stage only
        stored = stored + shared.embedding_dropout * in_flight
    output = is_one(plan.pp - stage, sm) * shared.output
    return stored + shared.working_set + output


class _ActivationTerms(NamedTuple):
    """The stage-independent parts of :func:`activation_bytes` (bytes)."""

    per_layer: Array  # one layer's stored activations, by the recompute policy
    embedding_dropout: Array  # the embedding dropout mask of one micro-batch
    working_set: Array  # one layer's full activations while recomputing (full recompute)
    output: Array  # final norm, output-layer input and fp32 logits of one micro-batch


@once
def _activation_terms(model: Model, plan: TrainPlan) -> _ActivationTerms:
    """:class:`_ActivationTerms`, once per evaluation (both stages of :func:`train_memory`)."""
    per_layer = jnp.sum(plan.recompute * layer_activation_bytes_by_recompute(model, plan))
    tokens = plan.micro_batch * plan.seq_len / plan.cp
    rep = plan.sequence_parallel / plan.tp + (1.0 - plan.sequence_parallel)
    return _ActivationTerms(
        per_layer=per_layer,
        embedding_dropout=model.dropout * tokens * model.hidden * rep,
        working_set=recompute_weights(plan)[1] * layer_activation_bytes(model, plan),
        output=4.0 * tokens * model.hidden * rep + 4.0 * tokens * model.vocab / plan.tp,
    )


class _ZeroFactors(NamedTuple):
    """The stage-independent factors of :func:`stage_memory` (ZeRO stages mixed by
    ``plan.zero``, ``s = 1 / shard_ranks``)."""

    lora: Array  # 1 with the base frozen (LoRA), else 0
    frozen_off: Array  # 1 - lora
    z3: Array  # ZeRO-3's weight
    weights_held: Array  # z0 + z1 + z2 + z3 s
    grads_held: Array  # z0 + z1 + (z2 + z3) s
    optimizer_held: Array  # z0 + (z1 + z2 + z3) s
    gathered_weights: Array  # 2 z3 gathered params x weight bytes
    gathered_grads: Array  # (1 - lora) z3 gathered params x grad bytes
    expert_extra: Array  # expert shard fraction - s
    expert_grads_held: Array  # z2 + z3
    expert_optimizer_held: Array  # z1 + z2 + z3


@once
def _zero_factors(model: Model, plan: TrainPlan, sm: Smoothing) -> _ZeroFactors:
    """:class:`_ZeroFactors`, once per evaluation (both stages of :func:`train_memory`)."""
    lora = lora_on(plan, sm)
    z0, z1, z2, z3 = (plan.zero[i] for i in range(4))  # each read once
    shard = 1.0 / plan.shard_ranks()
    unit = z3 * zero3_gather_params(model, plan, sm)  # ZeRO-3: gathered, unsharded buffers
    frozen_off = 1.0 - lora
    return _ZeroFactors(
        lora=lora,
        frozen_off=frozen_off,
        z3=z3,
        weights_held=z0 + z1 + z2 + z3 * shard,
        grads_held=z0 + z1 + (z2 + z3) * shard,
        optimizer_held=z0 + (z1 + z2 + z3) * shard,
        gathered_weights=2.0 * unit * plan.weight_bytes_per_param,
        gathered_grads=frozen_off * unit * plan.grad_bytes_per_param,
        expert_extra=plan.expert_shard_fraction() - shard,
        expert_grads_held=z2 + z3,
        expert_optimizer_held=z1 + z2 + z3,
    )


@once
def stage_memory(
    model: Model, plan: TrainPlan, system: System, sm: Smoothing, stage: int = 0
) -> TrainMemory:
    """Per-chip memory of pipeline stage ``stage`` (bytes), ZeRO stages mixed by ``plan.zero``;
    the runtime reserve is :func:`~diffcost._inputs.reserve.runtime_reserve_bytes` (the same as
    serving's).

    ZeRO shards over the data-parallel group including context-parallel ranks (``dp * cp``),
    with hybrid sharding over one shard group of it (``shard_group * cp``, HSDP / MiCS):
    CP ranks hold the same weights and reduce their gradients together (Megatron-LM's
    distributed optimizer uses the same ``dp x cp`` group).  ZeRO-3's weights and gradients
    include its gathered buffers (:func:`zero3_gather_params`); the weights include, for FP8,
    the fp8 copies of the GEMM weights (:func:`fp8_weight_cache_bytes`).  Gradients and
    optimizer state cover the trainable parameters only (:func:`trainable_params_per_chip`:
    the LoRA adapters when the base is frozen), whose weights are held besides the base ones.
    Routed experts shard over their ``tp cp dp / (expert_tp ep)`` copies (:meth:`TrainPlan.
    expert_shard_fraction`): their sharded state is charged at that fraction, not ``shard``.
    """
    params = params_per_chip(model, plan, sm, stage)
    trained = trainable_params_per_chip(model, plan, sm, stage)
    f = _zero_factors(model, plan, sm)
    adapters = f.lora * trained
    weights = (params + adapters) * plan.weight_bytes_per_param * f.weights_held
    weights += f.gathered_weights
    weights += fp8_weight_cache_bytes(model, plan, sm, stage)
    grads = trained * plan.grad_bytes_per_param * f.grads_held
    grads += f.gathered_grads
    optimizer = trained * plan.optimizer_bytes_per_param * f.optimizer_held
    # routed experts shard over their expert data-parallel copies only
    experts = expert_params_per_chip(model, plan, sm, stage)
    extra = experts * f.expert_extra
    trained_extra = f.frozen_off * extra
    weights += extra * plan.weight_bytes_per_param * f.z3
    grads += trained_extra * plan.grad_bytes_per_param * f.expert_grads_held
    optimizer += trained_extra * plan.optimizer_bytes_per_param * f.expert_optimizer_held
    activations = activation_bytes(model, plan, sm, stage)
    reserved = runtime_reserve_bytes(system)
    total = weights + grads + optimizer + activations + reserved
    return TrainMemory(weights, grads, optimizer, activations, reserved, total)


@once
def train_memory(model: Model, plan: TrainPlan, system: System, sm: Smoothing) -> TrainMemory:
    """Per-chip memory of the most loaded pipeline stage (:func:`stage_memory`).

    Under 1F1B stage ``k`` holds ``p - k`` micro-batches in flight, so with an even split the
    first stage (most in flight, plus the embedding) is charged, as before.  With an uneven split
    and a lighter first stage (Llama 3 405B: 7 layers x 16 in flight against 8 x 15 on the
    second) the second stage can be heavier: the heavier of the two,
    ``uneven * step(total_2 - total_1)`` (exact; ``p >= 2``).  Later middle stages hold the
    second's layers and fewer micro-batches.  Not modelled: a last stage given more layers than
    the middle ones outweighing both (it holds one micro-batch, plus the fp32 logits), and in
    the even split a last stage outweighing the first through its logits when ``m`` is small.
    """
    first = stage_memory(model, plan, system, sm, 0)
    second = stage_memory(model, plan, system, sm, 1)
    even = (1.0 - clip01(plan.first_stage_layers, sm)) * (1.0 - clip01(plan.last_stage_layers, sm))
    uneven = (1.0 - is_one(plan.pp, sm)) * (1.0 - even)
    w = uneven * step(second.total_bytes - first.total_bytes - 1.0, sm)
    return jtu.tree_map(lambda a, b: (1.0 - w) * a + w * b, first, second)


__all__ = [
    "StageLayers",
    "TrainMemory",
    "adapter_params_per_layer",
    "layers_on_stage",
    "lora_on",
    "recompute_weights",
    "stage_layers",
    "stage_memory",
    "trainable_params_per_chip",
    "expert_params_per_chip",
    "fp8_weight_cache_bytes",
    "params_per_chip",
    "train_memory",
    "zero3_gather_params",
]
