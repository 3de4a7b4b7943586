"""One optimizer step of a transformer on a cluster: time, memory, utilisation, energy, cost.

``TrainCost(system, model)(plan)`` is the single jittable entry point.  The step is the 1F1B
pipeline schedule of Narayanan et al. (SC'21 §2.2):

    step = (m + bubble) * (t_fwd + t_bwd + t_recompute + t_p2p)   per micro-batch per stage
           + exposed data-parallel reduction + exposed ZeRO-3 gathers + optimizer update

with ``bubble = (p - 1)/v`` once every stage has work (``m >= p``) and more when it has not
(:func:`pipeline_bubble`);

where each per-micro-batch stage time sums roofline GEMM times (shape-dependent efficiency),
memory-bound elementwise kernels, kernel launches, and tensor-parallel all-reduces (2 per layer
forward, 2 backward, 2 more when the forward is recomputed; Shoeybi et al. 2019, §3).  Backward
GEMMs cost twice the forward ones (input and weight gradients); a fused attention's backward
recomputes its scores (:data:`FUSED_ATTENTION_BACKWARD_RATIO`) at a lower rate
(:data:`FUSED_ATTENTION_BACKWARD_RATE`), and the memory-bound kernels' backward streams its own
tensors (:func:`layer_backward_stream_bytes`).

Each term is a named function (:func:`layer_forward`, :func:`stage_times`,
:func:`data_parallel_s`, :func:`optimizer_s`, :func:`step_flop`) over the per-layer terms of
:mod:`diffcost._terms` that the serving pass composes too.

MFU counts model FLOP (no recomputation) and HFU hardware FLOP (with it), both against the dense
bf16 peak, as in PaLM (Chowdhery et al. 2022, App. B) and Korthikanti et al. (2022, App. A).
"""

from typing import NamedTuple

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._core.shared import evaluation, once
from .._core.smooth import EXACT, Smoothing, clip01, is_one, relu, smax, smin, step
from .._inputs.hardware import BYTES_PER_ELEMENT, FORMATS, System, format_index
from .._inputs.model import Model
from .._terms.attention import (
    ATTENTION_TILE_ROWS,
    attention_gemms,
    causal_skip,
    fused_attention_s,
    fused_prefill_efficiency,
    gemm_attention_s,
)
from .._terms.collectives import Ring
from .._terms.comm import (
    all_gather_s,
    all_reduce_s,
    all_to_all_s,
    exposed_s,
    local_members,
    point_to_point_s,
    spans_domains,
    tp_all_reduce_s,
)
from .._terms.energy import activity_energy_j
from .._terms.gemm import GemmFormat, stream_time_s
from .._terms.kernels import (
    KERNELS_PER_LAYER_FORWARD,
    elementwise_elements,
    launch_s,
    permute_elements_per_token,
    quantize_bytes,
)
from .._terms.layer import ExpertSplit, GemmOp, layer_gemm_s, layer_gemms, logits_gemm
from .._terms.memory_levels import placed_system
from .._terms.moe import eager_expert_dispatch_s, remote_dispatch_bytes
from .._terms.power import sustained, sustained_energy
from .._terms.reliability import checkpoint_interval_s, expected_max_normal, goodput_fraction
from .memory import (
    TrainMemory,
    adapter_params_per_layer,
    layer_activation_bytes,
    lora_on,
    params_per_chip,
    recompute_weights,
    stage_layers,
    train_memory,
    trainable_params_per_chip,
)
from .plan import TrainPlan
from .rules import divisibility, unsupported_format, with_padded_vocab

# numpy: importing diffcost must not start the XLA backend (jax.distributed comes first)
_ELEMENT_BYTES = np.asarray([BYTES_PER_ELEMENT[f] for f in FORMATS])
_BF16 = format_index("bf16")
_FP8 = format_index("fp8")
_FP8_BYTES = BYTES_PER_ELEMENT["fp8"]

#: Backward seconds of a fused (flash) attention kernel per forward second: its backward runs
#: five matrix products where the forward runs two (it recomputes ``S = Q K^T`` from the saved
#: log-sum-exp, then ``dV = P^T dO``, ``dP = dO V^T``, ``dQ = dS K``, ``dK = dS^T Q``: Dao,
#: "FlashAttention-2", arXiv:2307.08691, Algorithm 2, whose benchmarks count the backward as
#: 2.5 times the forward FLOP), against the two gradient products per forward product of an
#: unfused attention or a weight GEMM.  A FLOP count, not a fit.
FUSED_ATTENTION_BACKWARD_RATIO = 2.5
#: FLOP rate of a fused attention backward kernel over its forward's (dimensionless): the
#: backward's five products share one pass with an fp32 ``dQ`` accumulation across key tiles and
#: more shared-memory traffic per FLOP (Dao 2023, §3.1.2 and §4.1: up to 73% of the A100 peak
#: forward, 63% backward, 0.86).  Measured: cuDNN 9.19 on H200, Llama 3.1 405B heads, bf16,
#: causal, ``bwd_tflops / fwd_tflops`` (the benchmark counts the backward as 2.5 forwards) =
#: 541/644, 579/673, 581/688 at 8k, 16k, 32k tokens = 0.84, 0.86, 0.84 (NVIDIA/cudnn-frontend
#: @ 3929da2ef4c1dba1bb8acb68727b9134f26f40c0, benchmark/sdpa_benchmark_training/results/
#: h200_919_only_cudnn/llama3.1_20260227_034703.csv): backward time 2.9-3.0 forwards.
FUSED_ATTENTION_BACKWARD_RATE = 0.85
#: 16-bit elements per token and hidden unit the backward of a layer's norms and residual adds
#: reads or writes: each norm's backward reads its input and output gradient and writes its
#: input gradient (``3 h``, two norms), and where the residual stream forks into a block and its
#: skip connection the two gradients are summed (read ``2 h``, write ``h``, two forks): ``12 h``
#: against the forward's ``10 h`` (:func:`~diffcost._terms.kernels.elementwise_elements`;
#: PyTorch autograd accumulates a tensor's gradients from its uses, and Transformer Engine's
#: ``layernorm_bwd`` / ``rmsnorm_bwd`` read ``x``, ``dy`` and write ``dx``).  An operation count.
BACKWARD_ELEMENTWISE_PER_HIDDEN = 12.0
#: Bytes per logit the vocabulary-parallel cross entropy moves forward: the 16-bit logits cast
#: to fp32 (read 2, write 4), the row maximum (read 4), the maximum subtracted in place (read
#: 4, write 4), ``exp`` in place (4 + 4), the row sum (4) and the division into the softmax
#: kept for the backward (4 + 4): Megatron-Core ``VocabParallelCrossEntropy``
#: (``megatron/core/tensor_parallel/cross_entropy.py``: ``calculate_logits_max``,
#: ``calculate_predicted_logits``, ``calculate_cross_entropy_loss``).  An operation count.
XENT_FORWARD_BYTES_PER_LOGIT = 38.0
#: Bytes per logit of its backward: the softmax scaled by the loss gradient in place (read 4,
#: write 4; the one-hot subtraction touches one logit per token) and cast back to 16 bits for
#: the output layer's gradient GEMMs (read 4, write 2): ``calculate_gradients`` in the same file.
XENT_BACKWARD_BYTES_PER_LOGIT = 14.0


class LayerForward(NamedTuple):
    """Seconds of one layer's forward for one micro-batch on one chip, by term."""

    gemm_s: Array  # the four weight GEMMs
    attention_s: Array  # attention core (QK^T, AV)
    memory_s: Array  # memory-bound kernels: elementwise, unfused softmax, fp8 casts
    launch_s: Array  # kernel launches and eager per-expert GEMM calls
    score_elements: Array  # elements of the unfused score tensors (0 with flash attention)

    def total_s(self) -> Array:
        """``gemm + attention + memory + launch``."""
        return self.gemm_s + self.attention_s + self.memory_s + self.launch_s


class StageTimes(NamedTuple):
    """Seconds per micro-batch on the worst pipeline stage, by term (see :func:`stage_times`)."""

    forward_s: Array
    backward_s: Array
    recompute_s: Array
    tp_comm_s: Array
    cp_comm_s: Array
    p2p_s: Array
    ep_comm_s: Array

    def per_micro_s(self) -> Array:
        """Their sum: one micro-batch through the stage."""
        return (
            self.forward_s
            + self.backward_s
            + self.recompute_s
            + self.tp_comm_s
            + self.cp_comm_s
            + self.p2p_s
            + self.ep_comm_s
        )


@once
def tokens_per_chip(plan: TrainPlan) -> Array:
    """Tokens of one micro-batch on one chip: ``micro_batch * seq_len / cp``."""
    return plan.micro_batch * plan.seq_len / plan.cp


@once
def replicated_fraction(plan: TrainPlan) -> Array:
    """Fraction of the hidden state a TP rank holds: ``1 / t`` with sequence parallelism, else 1."""
    return plan.sequence_parallel / plan.tp + (1.0 - plan.sequence_parallel)


@once
def gemm_format(system: System, plan: TrainPlan) -> GemmFormat:
    """Format of the weight GEMMs: the peak FLOP/s (:meth:`~diffcost.Efficiency.
    achievable_peaks`) and element bytes of the plan's precision (a mixture when relaxed),
    every operand in that format, and its energy per FLOP for the power limit
    (:mod:`diffcost._terms.power`)."""
    peaks = system.efficiency.achievable_peaks(system.chip.peak_flop_per_s)
    peak = jnp.sum(plan.precision * peaks)
    return GemmFormat(
        peak,
        jnp.sum(plan.precision * jnp.asarray(_ELEMENT_BYTES, plan.precision.dtype)),
        flop_j=jnp.sum(plan.precision * system.chip.energy.flop_j),
    )


@once
def bf16_format(system: System) -> GemmFormat:
    """Format of the bf16 GEMMs (attention, adapters): bf16 peak, 2 bytes, bf16 energy."""
    chip = system.chip
    return GemmFormat(chip.peak_flop_per_s[_BF16], 2.0, flop_j=chip.energy.flop_j[_BF16])


@once
def attention_ops(system: System, model: Model, plan: TrainPlan) -> tuple[GemmOp, GemmOp]:
    """The attention GEMMs of one layer and micro-batch on one chip: ``QK^T`` and ``AV`` of
    ``s / cp`` queries over ``s`` keys, per local head and sequence, in bf16 (2 bytes, bf16
    peak; flash attention keeps 16-bit operands even in FP8 training)."""
    fmt = bf16_format(system)
    heads_local = model.heads / plan.tp * plan.micro_batch
    q_len, e, e_v = plan.seq_len / plan.cp, model.head_dim, model.v_head_dim
    return attention_gemms(q_len, plan.seq_len, e, heads_local, fmt, e_v)


@once
def layer_forward(system: System, model: Model, plan: TrainPlan, sm: Smoothing) -> LayerForward:
    """Forward of one layer, one micro-batch, one chip (seconds by term).

    GEMMs: :func:`~diffcost._terms.layer.layer_gemm_s`; attention core:
    :func:`attention_core_s`; memory-bound kernels stream
    ``2 (elementwise + scores) + casts`` bytes: the elementwise kernels
    (:func:`~diffcost._terms.kernels.elementwise_elements`), unfused softmax and dropout over
    the score matrix (read + write, plus the mask: ``(1 - flash)(3 + 2 dropout) heads s_q s``)
    and, for FP8 GEMMs, the bf16-to-fp8 casts of each GEMM input (read 2 bytes, write 1;
    Transformer Engine; the backward's casts: :func:`layer_backward_stream_bytes`).  Launches:
    the layer's kernels plus, for an expert layer run eagerly, its local experts' per-call
    dispatch (:func:`~diffcost._terms.moe.eager_expert_dispatch_s`).
    """
    t = plan.tp
    tokens = tokens_per_chip(plan)
    split = expert_split(plan, tokens, sm)
    t_gemm = layer_gemm_s(tokens, model, t, gemm_format(system, plan), system, sm, split)
    t_attn = attention_core_s(system, model, plan, sm)
    scores = score_elements(model, plan)
    t_elem = stream_time_s(layer_stream_bytes(model, plan), system)
    local_experts = model.experts / plan.ep
    t_calls = eager_expert_dispatch_s(local_experts, model.moe_fraction(), plan.moe_graphed)
    return LayerForward(t_gemm, t_attn, t_elem, launch_s(0.0, system) + t_calls, scores)


@once
def attention_core_s(system: System, model: Model, plan: TrainPlan, sm: Smoothing) -> Array:
    """Forward seconds of one layer's attention core, one micro-batch, one chip.

    ``flash * fused + (1 - flash) * unfused``: a fused (flash) kernel computes the kept part of
    the score matrix (:func:`~diffcost._terms.attention.causal_skip`) at
    :func:`~diffcost._terms.attention.fused_prefill_efficiency` of its ``heads_local s_q / 128``
    query tiles over the mean attended keys, against Q, K, V and O streamed once
    (:func:`~diffcost._terms.attention.fused_attention_s`, in bf16 with its power limit); an
    unfused one runs the whole ``QK^T`` and ``AV`` as batched GEMMs
    (:func:`~diffcost._terms.attention.gemm_attention_s`).
    """
    ops = attention_ops(system, model, plan)
    flash = plan.flash_attention
    unfused = gemm_attention_s(ops, causal_skip(model, 0.0, plan.seq_len, sm), system, sm)
    kept = causal_skip(model, 1.0, plan.seq_len, sm)
    flop = kept * (ops[0].flop() + ops[1].flop())
    heads = model.heads / plan.tp * plan.micro_batch
    s_q, s = plan.seq_len / plan.cp, plan.seq_len
    e = model.head_dim
    chip = system.chip
    peak, flop_j = chip.peak_flop_per_s[_BF16], chip.energy.flop_j[_BF16]
    held = sustained(system, peak, flop_j, sm)
    tiles = heads * s_q / ATTENTION_TILE_ROWS
    eff = fused_prefill_efficiency(tiles, kept * s, e, s_q, s, held, sm)
    fused = fused_attention_s(flop, flash_attention_bytes(model, plan), eff, peak, system, sm)
    return flash * fused + (1.0 - flash) * unfused


def flash_attention_bytes(model: Model, plan: TrainPlan) -> Array:
    """Bytes a fused attention kernel streams per layer and micro-batch on one chip: Q and O of
    the ``s / cp`` local queries and K and V of the ``s`` keys, 2 bytes each, per local head:
    ``2 heads_local (s_q + s)(e + e_v)``."""
    heads = model.heads / plan.tp * plan.micro_batch
    s_q, s = plan.seq_len / plan.cp, plan.seq_len
    return 2.0 * heads * (s_q + s) * (model.head_dim + model.v_head_dim)


@once
def score_elements(model: Model, plan: TrainPlan) -> Array:
    """Elements unfused softmax and dropout read and write over one layer's score matrices on
    one chip: ``(1 - flash)(3 + 2 dropout) heads_local s_q s``."""
    heads_local = model.heads / plan.tp * plan.micro_batch
    s_q, s = plan.seq_len / plan.cp, plan.seq_len
    return (1.0 - plan.flash_attention) * (3.0 + 2.0 * model.dropout) * heads_local * s_q * s


@once
def layer_stream_bytes(model: Model, plan: TrainPlan) -> Array:
    """Bytes of one layer forward's memory-bound kernels on one chip (:func:`layer_forward`):
    ``2 (elementwise + scores) + casts``."""
    tokens = tokens_per_chip(plan)
    ew = elementwise_elements(tokens, model, plan.tp, replicated_fraction(plan))
    return 2.0 * (ew + score_elements(model, plan)) + fp8_cast_bytes(model, plan)


@once
def fp8_cast_bytes(model: Model, plan: TrainPlan) -> Array:
    """Bytes of one layer forward's fp8 input casts on one chip
    (:func:`~diffcost._terms.kernels.quantize_bytes`; 0 outside fp8 training)."""
    tokens = tokens_per_chip(plan)
    return quantize_bytes(tokens, model, plan.tp, plan.precision[_FP8], _FP8_BYTES)


@once
def layer_backward_stream_bytes(model: Model, plan: TrainPlan) -> Array:
    """Bytes of one layer backward's memory-bound kernels on one chip, counted from the kernels
    rather than as twice the forward's (:func:`layer_stream_bytes`).

    ``2 (T (12 h r + (2 n_mat - 1) f / t + phi 2 (1 + k) h) + scores) + 2 casts``: the norms'
    and residual forks' ``12 h r`` (:data:`BACKWARD_ELEMENTWISE_PER_HIDDEN`); the MLP
    activation's backward reads its ``n_mat - 1`` inputs and the output gradient and writes the
    ``n_mat - 1`` input gradients (GeLU: read ``2 f``, write ``f``; SwiGLU: read ``3 f``, write
    ``2 f``: ``(2 n_mat - 1) f / t``); a MoE block's permutation backward moves what its forward
    did; an unfused softmax's backward reads ``P`` and ``dP`` and writes ``dS`` and a dropout's
    reads the gradient and its mask and writes one, the forward's ``(3 + 2 dropout)`` elements
    per score (:func:`score_elements`; Megatron-LM ``scaled_upper_triang_masked_softmax``
    backward: ``grad_input = output * (grad_output - sum(output * grad_output))``); fp8 casts of
    each GEMM's output gradient and of the transposed inputs its weight gradient reads, twice
    the forward's casts as before (Transformer Engine).
    """
    tokens = tokens_per_chip(plan)
    h, f = model.hidden, model.active_ffn_hidden()
    per_token = (
        BACKWARD_ELEMENTWISE_PER_HIDDEN * h * replicated_fraction(plan)
        + (2.0 * model.mlp_matrices - 1.0) * f / plan.tp
        + permute_elements_per_token(model)
    )
    scores = score_elements(model, plan)
    return 2.0 * (tokens * per_token + scores) + 2.0 * fp8_cast_bytes(model, plan)


def tp_comm_layer_s(
    t_ar: Array, gemm_s: Array, plan: TrainPlan, system: System, sm: Smoothing
) -> Array:
    """Seconds of tensor-parallel communication one layer adds per micro-batch.

    Without overlap, ``(4 + 2 full) t_ar``: two all-reduces (with sequence parallelism, an
    all-gather before and a reduce-scatter after each sharded block) forward, two backward, two
    more for a recomputed forward (Shoeybi et al. 2019 §3; Korthikanti et al. 2022 §4.2.2).

    With ``tp_comm_overlap`` (Megatron-LM ``--tp-comm-overlap``, which asserts sequence
    parallelism in ``megatron/training/arguments.py``; Transformer Engine userbuffers,
    ``initialize_ub`` in ``transformer_engine/pytorch/module/base.py``; Wang et al., "Overlap
    Communication with Dependent Computation via Decomposition", ASPLOS 2023) each half
    collective ``c = t_ar / 2`` is split into ``t`` chunks pipelined with the GEMM ``g`` that
    consumes or produces it: the first chunk is exposed, the rest hides under the GEMM,
    ``c/t + (1 - 1/t) exposed(c, g)``.  Each layer pass pairs its four half collectives with its
    four weight GEMMs (``g = gemm / 4`` forward and recompute, ``2 gemm / 4`` backward: data and
    weight gradients).
    """
    t, w = plan.tp, plan.tp_comm_overlap
    c = 0.5 * t_ar
    g = 0.25 * gemm_s

    def pass_s(window: Array) -> Array:
        return 4.0 * (c / t + (1.0 - 1.0 / t) * exposed_s(c, window, system, sm))

    w_full = recompute_weights(plan)[1]
    forward = pass_s(g)  # the recomputed forward's is the same: computed once
    overlapped = forward + pass_s(2.0 * g) + w_full * forward
    return (1.0 - w) * (4.0 + 2.0 * w_full) * t_ar + w * overlapped


@once
def expert_split(plan: TrainPlan, tokens: Array, sm: Smoothing) -> ExpertSplit:
    """The expert layout of a MoE block on one chip (:class:`~diffcost._terms.layer.
    ExpertSplit`): ``ep`` ranks, each expert split over ``expert_tp``, and the distinct tokens
    the expert grid routes, ``G = ep T min(1, r expert_tp)`` (a rank holds ``T r`` tokens,
    ``r = 1 / t`` with sequence parallelism; an expert-TP group of ranks with the same tokens
    routes them once)."""
    distinct = tokens * smin(replicated_fraction(plan) * plan.expert_tp, 1.0, sm)
    return ExpertSplit(ep=plan.ep, expert_tp=plan.expert_tp, group_tokens=distinct * plan.ep)


def expert_all_to_all_layer_s(
    system: System, model: Model, plan: TrainPlan, window_s: Array, sm: Smoothing
) -> Array:
    """Seconds of expert-parallel token exchange one layer adds per micro-batch.

    ``phi (4 + 2 full) a2a``: each MoE block's forward dispatches its tokens to their experts
    and combines the results (two all-to-alls), the backward sends the gradients both ways
    (two more), a recomputed forward repeats the first two (Lepikhin et al., "GShard", ICLR
    2021 §2.2; Megatron-Core ``MoEAlltoAllTokenDispatcher`` runs them on the compute stream).
    Each moves the ``k`` 16-bit copies of the rank's tokens, ``2 T r k h`` bytes (``r = 1 / t``
    with sequence parallelism: a TP rank dispatches its sequence shard), over the ``ep`` ranks
    ``expert_tp`` apart (Megatron-Core's expert grid, order tp-ep-dp;
    :func:`~diffcost._terms.comm.all_to_all_s`); with ``ep_dedup`` a token leaves its node once
    per remote node (:func:`~diffcost._terms.moe.remote_dispatch_bytes`).  With ``ep_overlap``
    each all-to-all runs under a quarter of another micro-batch's layer forward and backward
    (``window_s``), exposed by :func:`~diffcost._terms.comm.exposed_s`.  Zero when ``ep = 1``
    or the model is dense.
    """
    tokens = tokens_per_chip(plan)
    token_bytes = 2.0 * tokens * replicated_fraction(plan) * model.hidden
    k, ep, stride = model.experts_per_token, plan.ep, plan.expert_tp
    local = local_members(ep, stride, system, sm)
    naive = token_bytes * k * (ep - local) / ep
    dedup = remote_dispatch_bytes(token_bytes, k, ep, local)
    remote = plan.ep_dedup * dedup + (1.0 - plan.ep_dedup) * naive
    a2a = all_to_all_s(token_bytes * k, ep, stride, system, sm, remote)
    w = plan.ep_overlap
    per = (1.0 - w) * a2a + w * exposed_s(a2a, 0.25 * window_s, system, sm)
    return model.moe_fraction() * (4.0 + 2.0 * recompute_weights(plan)[1]) * per


@once
def adapter_forward_s(
    system: System, model: Model, plan: TrainPlan, tokens: Array, sm: Smoothing
) -> Array:
    """Forward seconds of one layer's LoRA adapters (0 in full training).

    Each adapted ``T x k x n`` layer GEMM (:func:`~diffcost._terms.layer.layer_gemms`, local
    TP shapes) adds two skinny GEMMs, ``T x k x r`` (down, ``A``) and ``T x r x n`` (up, ``B``),
    ``2 T r (k + n)`` FLOP (Hu et al. 2021 §4.1), charged at their own shape-dependent
    efficiency by the GEMM roofline, in bf16: NeMo's ``ParallelLinearAdapter`` uses Megatron
    ``ColumnParallelLinear``/``RowParallelLinear``, not Transformer Engine fp8 layers
    (``nemo/collections/nlp/modules/common/megatron/adapters/parallel_adapters.py``).  The
    adapters' own TP collectives on ``T x r`` tensors are not charged.
    """
    fmt = bf16_format(system)
    r = smax(plan.lora_rank, 1.0, sm, integer=True)  # shape guard; weighted by lora_on below
    total = jnp.asarray(0.0)
    for i, op in enumerate(layer_gemms(tokens, model, plan.tp, fmt)):
        down = GemmOp(op.m, r, op.k, fmt).time_s(system, sm)
        up = GemmOp(op.m, op.n, r, fmt).time_s(system, sm)
        total = total + plan.lora_matrices[..., i] * (down + up)
    return lora_on(plan, sm) * total


@once
def critical_stage(
    model: Model, plan: TrainPlan, per_layer_s: Array, output_s: Array, sm: Smoothing
) -> tuple[Array, Array]:
    """``(layers, output)`` of the slowest pipeline stage: its transformer layers and 1 if it is
    the last (output layer + loss), 0 else.

    Every stage runs the same per-micro-batch schedule, so the step is set by the slowest
    (Narayanan et al. SC'21 §2.2): ``max(n_first a, n_middle a, n_last a + b)`` with ``a`` the
    per-layer and ``b`` the output-layer seconds (:func:`~diffcost._train.memory.stage_layers`).
    The last stage is the slowest when ``n_last + b/a >= max(n_first, n_middle)``: ``w =
    step(n_last + b/a - n_head)``.  The even split (``n = L/p`` everywhere, ``b >= 0``) gives
    ``(L/p, 1)`` exactly, as before uneven splits existed; the embedding lookup of the first
    stage (a ``T x h`` gather, far below one layer) is not charged.
    """
    st = stage_layers(model, plan, sm)
    f_set, l_set = clip01(plan.first_stage_layers, sm), clip01(plan.last_stage_layers, sm)
    even = (1.0 - f_set) * (1.0 - l_set)
    n_head = even * st.middle + (1.0 - even) * smax(st.first, st.middle, sm, integer=True)
    w_last = step(st.last + output_s / per_layer_s - n_head, sm)
    w = even + (1.0 - even) * w_last
    return w * st.last + (1.0 - w) * n_head, w


@once
def stage_times(system: System, model: Model, plan: TrainPlan, sm: Smoothing) -> StageTimes:
    """Per-micro-batch seconds on the slowest stage (:func:`critical_stage`): its layers plus,
    on the last stage, the output layer.

    Forward ``n t_layer + t_logits + t_xent`` (the cross entropy's passes over the fp32
    logits, :data:`XENT_FORWARD_BYTES_PER_LOGIT`); backward twice the forward (input and weight
    gradients) but a fused attention's :data:`FUSED_ATTENTION_BACKWARD_RATIO` forward FLOP at
    :data:`FUSED_ATTENTION_BACKWARD_RATE` of its forward rate, the memory-bound kernels' own
    streams (:func:`layer_backward_stream_bytes`) and the cross entropy's own passes
    (:data:`XENT_BACKWARD_BYTES_PER_LOGIT`), less the
    weight-gradient GEMMs of frozen weights under LoRA (``t_gemm`` per layer and ``t_logits``:
    activation gradients only, Hu et al. 2021 §4.2) plus twice the adapters' forward
    (:func:`adapter_forward_s`); recomputation
    ``full * (t_layer + 2 t_allreduce) + selective * (t_attn + unfused scores)`` per layer; per
    layer ``4 + 2 full`` TP all-reduces (Shoeybi et al. 2019, §3) and three exposed CP K/V passes
    (forward gather, backward gather + reduce-scatter, hidden under attention); ``2 v`` pipeline
    hand-offs (Narayanan et al. SC'21).
    """
    t, p, c = plan.tp, plan.pp, plan.cp
    layer = layer_forward(system, model, plan, sm)
    tokens = tokens_per_chip(plan)
    fmt = gemm_format(system, plan)
    t_tp_ar = tp_all_reduce_s(tokens, model.hidden, t, system, sm)
    # K and V (bf16) of the local KV heads; TP beyond kv_heads replicates heads (Megatron).
    kv_dims = model.head_dim + model.v_head_dim
    kv_bytes = 2.0 * tokens * kv_dims * smax(model.kv_heads / t, 1.0, sm)
    t_cp = all_gather_s(kv_bytes * c, c, t, system, sm)  # K,V ring pass
    t_cp_exposed = exposed_s(t_cp, layer.attention_s, system, sm)
    w_sel, w_full = recompute_weights(plan)
    lora = lora_on(plan, sm)
    t_adapter = adapter_forward_s(system, model, plan, tokens, sm)
    t_layer = layer.total_s() + t_adapter
    # fused attention recomputes its scores in the backward, at a lower rate
    fused_bwd = FUSED_ATTENTION_BACKWARD_RATIO / FUSED_ATTENTION_BACKWARD_RATE
    flash_extra = (fused_bwd - 2.0) * plan.flash_attention * layer.attention_s
    # memory-bound kernels: their own backward streams, not twice the forward's
    t_mem_bwd = stream_time_s(layer_backward_stream_bytes(model, plan), system)
    memory_extra = t_mem_bwd - 2.0 * layer.memory_s
    t_layer_bwd = 2.0 * t_layer - lora * layer.gemm_s + flash_extra + memory_extra
    t_recompute_layer = w_full * (t_layer + 2.0 * t_tp_ar) + w_sel * (
        layer.attention_s + stream_time_s(2.0 * layer.score_elements, system)
    )
    t_logits_fwd = logits_gemm(tokens, model, t, fmt).time_s(system, sm)
    logits = tokens * model.vocab / t
    t_xent = stream_time_s(XENT_FORWARD_BYTES_PER_LOGIT * logits, system)
    t_xent_bwd = stream_time_s(XENT_BACKWARD_BYTES_PER_LOGIT * logits, system)
    t_out = t_logits_fwd + t_xent
    t_out_bwd = (2.0 - lora) * t_logits_fwd + t_xent_bwd
    t_tp_layer = tp_comm_layer_s(t_tp_ar, layer.gemm_s, plan, system, sm)
    t_ep_layer = expert_all_to_all_layer_s(system, model, plan, t_layer + t_layer_bwd, sm)
    t_comm_layer = t_tp_layer + 3.0 * t_cp_exposed + t_ep_layer
    per_layer = t_layer + t_layer_bwd + t_recompute_layer + t_comm_layer
    n, out = critical_stage(model, plan, per_layer, t_out + t_out_bwd, sm)
    has_pp = 1.0 - is_one(p, sm)
    p2p_bytes = 2.0 * tokens * model.hidden * replicated_fraction(plan)
    t_p2p = (
        has_pp
        * 2.0
        * plan.virtual_stages
        * point_to_point_s(p2p_bytes, t * c * plan.dp, system, sm)
    )
    return StageTimes(
        forward_s=n * t_layer + out * t_out,
        backward_s=n * t_layer_bwd + out * t_out_bwd,
        recompute_s=n * t_recompute_layer,
        tp_comm_s=n * t_tp_layer,
        cp_comm_s=n * (3.0 * t_cp_exposed),
        p2p_s=t_p2p,
        ep_comm_s=n * t_ep_layer,
    )


@once
def gathered_weight_bytes(plan: TrainPlan) -> Array:
    """Bytes per parameter of a ZeRO weight all-gather: the stored weight bytes, or 1 byte with
    fp8 parameter gathers in fp8 training (Megatron-LM ``--fp8-param-gather``: "keep the compute
    param in fp8 and perform the param all-gather in fp8", ``megatron/training/arguments.py``;
    Transformer Engine ``fp8_model_init`` / ``Float8Tensor`` parameters), halving the
    distributed-optimizer and ZeRO-3 gather bytes of bf16 weights:
    ``w (1 - f) + 1 f`` with ``f = fp8_param_gather * w_fp8``."""
    f = plan.fp8_param_gather * plan.precision[..., _FP8]
    return plan.weight_bytes_per_param * (1.0 - f) + _FP8_BYTES * f


@once
def data_parallel_s(
    system: System, model: Model, plan: TrainPlan, stage: StageTimes, sm: Smoothing
) -> Array:
    """Exposed seconds per step of gradient reduction (ZeRO 0-2) or ZeRO-3 traffic.

    Gradients are reduced over the ``dp * cp`` ranks holding the same weights (``t`` apart),
    each collective overlapped with one micro-batch's backward and recomputation when
    ``overlap_grad_reduce``:

    * ZeRO 0-1 (DDP, Megatron-LM's distributed optimizer) accumulate full gradients locally and
      reduce once per step: one all-reduce (reduce-scatter + all-gather of the updated weights).
    * ZeRO-2 keeps only a gradient shard, so it cannot accumulate locally: DeepSpeed reduces
      (reduce-scatters) the gradient buckets in every micro-batch's backward ("ZeRO stage >= 2
      communicates during non gradient accumulation boundaries as well",
      ``DeepSpeedEngine.allreduce_gradients`` in ``deepspeed/runtime/engine.py`` ->
      ``overlapping_partition_gradients_reduce_epilogue`` / ``reduce_ipg_grads`` in
      ``deepspeed/runtime/zero/stage_1_and_2.py``, DeepSpeed edaa722, 2026-08-22): the
      ZeRO-1 step's reduction plus ``m - 1`` more reduce-scatters.  Each hides only under its
      own micro-batch's backward: with ``overlap_comm`` the epilogue of every backward waits
      for the reduction (``independent_gradient_partition_epilogue`` synchronizes the device).
    * ZeRO-3 gathers weights for forward and backward and reduce-scatters gradients every
      micro-batch, one unit at a time, prefetched one unit ahead (:func:`zero3_s`).

    The weight all-gathers after the update move :func:`gathered_weight_bytes` per updated
    (trainable) parameter (1 with fp8 gathers); LoRA's frozen base weights are not re-gathered.

    Hybrid sharding (``shard_group < dp``: torch FSDP ``HYBRID_SHARD``, MiCS, Megatron-LM
    ``--num-distributed-optimizer-instances``) shards the state over the ``S = shard_group * cp``
    ranks of a group and keeps ``R = dp / shard_group`` replicas: ZeRO 1-3 reduce-scatter (and
    gather) inside a group and all-reduce the gradient shard ``G / S`` across the ``R`` replicas
    (``t S`` apart) once per step (Zhang et al., "MiCS", VLDB 2022, §3.3: hierarchical
    communication; PyTorch ``HYBRID_SHARD``: reduce-scatter within, all-reduce across).  With
    ``R = 1`` the reduction is the flat one: ``2 RS_S + AR_R = AR_dp``.  ZeRO-0 (DDP) keeps one
    flat all-reduce.
    """
    trainable = trainable_params_per_chip(model, plan, sm)  # frozen weights are never updated
    grad_bytes = trainable * plan.grad_bytes_per_param
    dpc, t = plan.dp * plan.cp, plan.tp
    shard = plan.shard_ranks()
    overlap = plan.overlap_grad_reduce
    window = stage.backward_s + stage.recompute_s

    t_dp = all_reduce_s(grad_bytes, dpc, t, system, sm)  # = reduce-scatter + all-gather
    t_rs = all_gather_s(grad_bytes, shard, t, system, sm)  # a reduce-scatter moves the same
    t_ag = all_gather_s(trainable * gathered_weight_bytes(plan), shard, t, system, sm)
    t_rep = all_reduce_s(grad_bytes / shard, plan.shard_replicas, t * shard, system, sm)
    t_hybrid = t_rs + t_ag + t_rep  # = t_dp without replicas and fp8 gathers

    def exposed(comm_s: Array) -> Array:
        return (1.0 - overlap) * comm_s + overlap * exposed_s(comm_s, window, system, sm)

    e_dp, e_hybrid, e_rs, e_rep = (exposed(x) for x in (t_dp, t_hybrid, t_rs, t_rep))
    m = plan.num_micro_batches()
    t_z2_exposed = e_hybrid + (m - 1.0) * e_rs
    z = plan.zero
    t_z3_exposed = zero3_s(system, model, plan, stage, sm) + e_rep
    return z[0] * e_dp + z[1] * e_hybrid + z[2] * t_z2_exposed + z[3] * t_z3_exposed


@once
def zero3_s(
    system: System, model: Model, plan: TrainPlan, stage: StageTimes, sm: Smoothing
) -> Array:
    """Seconds per step ZeRO-3 / FSDP communication adds to the compute: unit by unit.

    The runtime gathers and frees the weights one unit at a time, ``u = L / p`` units per stage
    (one transformer block: FSDP's auto-wrap unit and Megatron-FSDP's, Zhao et al., "PyTorch
    FSDP", VLDB 2023, §3.2.1; DeepSpeed fetches per sub-module up to
    ``stage3_prefetch_bucket_size``), in every micro-batch (gradient accumulation repeats them:
    the shards are re-gathered after each reshard).  Each unit's collectives are
    ``all_gather(w P / u)`` (forward, and again in backward) and ``reduce_scatter(g P / u)``
    (backward), collectives over the ``shard_group * cp`` ranks ``t`` apart
    (:func:`sharded_gather_s`: the system's collective, NCCL's rings over the node's rails, as
    PyTorch FSDP runs them; with ``deepspeed_zero3`` across nodes one flat ring, ``(n - 1)/n``
    of each GPU's bytes through its own NIC, as DeepSpeed's 2021 runs measured).

    Prefetch is one unit ahead (FSDP ``forward_prefetch`` / ``BACKWARD_PRE``, rate-limited to
    two units in flight, §3.3.2-3.3.3): unit ``k + 1``'s collectives run under unit ``k``'s
    compute, so a phase of ``u`` units with per-unit communication ``c`` and compute ``w`` takes
    ``c + (u - 1) max(c, w) + w``; the first gather (and in backward the last reduce-scatter)
    has nothing to hide under.  Added time per micro-batch, with the contention of
    :func:`~diffcost._terms.comm.exposed_s` on the overlapped part:

        forward:  g + (u - 1) exposed(g, f / u)
        backward: (g + r) + (u - 1) exposed(g + r, (b + rc) / u)

    (``f, b, rc`` the stage's forward, backward and recomputation per micro-batch; gathers and
    reduce-scatters of a unit share the same links, so their times add).  Per step: ``m`` times
    their sum.  When ``g > f/u`` the step is communication-bound and no longer shrinks with
    more data-parallel ranks at a fixed global batch (Narayanan et al. SC'21 §5.2).
    """
    params = params_per_chip(model, plan, sm)
    units = model.layers / plan.pp
    shard, t = plan.shard_ranks(), plan.tp
    flat = plan.deepspeed_zero3
    g = sharded_gather_s(params * gathered_weight_bytes(plan) / units, shard, t, system, sm, flat)
    r = sharded_gather_s(params * plan.grad_bytes_per_param / units, shard, t, system, sm, flat)
    fwd = g + (units - 1.0) * exposed_s(g, stage.forward_s / units, system, sm)
    bwd_window = (stage.backward_s + stage.recompute_s) / units
    bwd = (g + r) + (units - 1.0) * exposed_s(g + r, bwd_window, system, sm)
    return plan.num_micro_batches() * (fwd + bwd)


#: The flat ring of ZeRO-3 collectives across nodes (one instance: its bytes-independent cost is
#: shared by the gathers and reduce-scatters of an evaluation, :mod:`diffcost._core.shared`).
_FLAT_RING = Ring()


def sharded_gather_s(
    shard_bytes: ArrayLike,
    ranks: ArrayLike,
    stride: ArrayLike,
    system: System,
    sm: Smoothing,
    flat: ArrayLike,
) -> Array:
    """Seconds of one ZeRO-3 all-gather or reduce-scatter of a full buffer of ``shard_bytes``
    over ``ranks`` ranks ``stride`` apart, as the sharding runtime runs it (``flat``: 1 for
    DeepSpeed ZeRO-3 as measured in 2021, 0 for PyTorch FSDP; a plan's ``deepspeed_zero3``).

    PyTorch FSDP (and Megatron-FSDP) call NCCL's all-gather and reduce-scatter on the whole
    shard group: the system's collective (:func:`~diffcost._terms.comm.all_gather_s`), whose
    rings across nodes run over all of the node's NICs (the rails), ``1/l`` of the bytes per
    NIC.  Measured with llm-foundry's FSDP ``FULL_SHARD`` (MosaicML's benchmark table,
    ``specs/measurements/llm-foundry-mpt.toml``, ``llm-foundry-mpt-h100.toml``): MPT-70B on 32
    and 64 A100 over 8x 200 Gb/s per node, predicted +5.5% and +1.1% over the rails (a flat
    ring: -43% and -5%); MPT-13B on H100 at micro-batch 2 keeps its tokens/s per GPU within 1%
    from 8 to 64 GPUs (4,792 .. 4,800), which a flat ring through each GPU's own 400 Gb/s NIC
    (``3 x 2 P`` bytes per micro-batch: 77 GB in a 0.86 s step, 90 GB/s per GPU) cannot carry
    (predicted -52% .. -55% with it); over the rails the H100 runs' errors across nodes equal
    the single-node ones (+33% .. +48%: the H100's bf16 compute, not the sharding).

    DeepSpeed ZeRO-3 as run in the SC'21 comparison (Narayanan et al., Table 2;
    ``specs/measurements/megatron-sc21-zero3.toml``; DeepSpeed v0.3.12+, whose
    ``deepspeed/runtime/zero/partition_parameters.py`` ``_allgather_param`` and
    ``_reduce_scatter_gradient`` issue one ``torch.distributed`` collective per parameter over
    the whole data-parallel group) keeps a constant step as the GPU count doubles at a fixed
    batch (174.6B: 66.7 s at 768 and 1,536 GPUs; 529.6B: 180 s and 184 s at 1,120 and 2,240),
    each GPU moving its ``3 x 2 P`` bytes at 16-17 GB/s, one 200 Gb/s NIC at ~65% of line
    rate; the rails would carry an eighth of that (``benchmarks/zero3_flat_ring.py``: +48% ..
    +322% with the rails, +8% .. +37% with the flat ring over the six runs).  Across domains it
    is charged one flat ring (:class:`~diffcost._terms.collectives.Ring`): every GPU moves
    ``(n - 1)/n`` of its bytes through its own NIC.  Why DeepSpeed's collectives did not use
    the rails is not identified.  The weight of the flat ring is ``flat *``
    :func:`~diffcost._terms.collectives.spans_domains`, exactly 0 or 1 at integer plans.
    """
    crosses = spans_domains(ranks, stride, system, sm) * flat
    inside = all_gather_s(shard_bytes, ranks, stride, system, sm)
    flat_s = _FLAT_RING.all_gather_s(shard_bytes, ranks, stride, system, sm)
    return crosses * flat_s + (1.0 - crosses) * inside


@once
def optimizer_bytes(model: Model, plan: TrainPlan, sm: Smoothing) -> Array:
    """Bytes one chip's optimizer update streams: ``trainable * shard * (2 w + g + 2 o)``
    (read and write weights and optimizer state, read gradients; ``trainable`` the adapters
    only under LoRA; ``shard`` the ZeRO fraction held, ``1 / (shard_group cp)``), plus for FP8
    the per-step fp8 weight copies (read 2 bytes, write 1 per weight; Transformer Engine caches
    them across micro-batches)."""
    params = params_per_chip(model, plan, sm)
    z = plan.zero
    shard = z[0] + (z[1] + z[2] + z[3]) / plan.shard_ranks()
    opt_bytes = (
        trainable_params_per_chip(model, plan, sm)
        * shard
        * (
            2.0 * plan.weight_bytes_per_param
            + plan.grad_bytes_per_param
            + 2.0 * plan.optimizer_bytes_per_param
        )
    )
    return opt_bytes + plan.precision[_FP8] * 3.0 * params


@once
def optimizer_s(system: System, model: Model, plan: TrainPlan, sm: Smoothing) -> Array:
    """Seconds of the optimizer update: a stream of :func:`optimizer_bytes` over the local
    shard of the model state."""
    return stream_time_s(optimizer_bytes(model, plan, sm), system)


@once
def pipeline_bubble(plan: TrainPlan, sm: Smoothing) -> Array:
    """Idle time of the pipeline per step, in units of one micro-batch's stage time.

    Interleaved 1F1B (Narayanan et al. SC'21 §2.2.2) runs ``v p`` model chunks, each taking
    ``1/v`` of a stage's micro-batch time.  Chunk ``k`` of micro-batch ``i`` can run on device
    ``d`` no earlier than chunk-slot ``k p + d + i``; with ``m >= p`` (``m`` a multiple of ``p``)
    the devices are busy from warm-up on and the schedule spans ``v m + p - 1`` chunk-slots,
    the paper's bubble ``(p - 1)/v``.  With ``m < p`` a device has run its ``m`` micro-batches of
    chunk ``k`` before the first returns for chunk ``k + 1`` (``p`` slots later), so every round
    waits: the schedule spans ``v p + m - 1`` slots, i.e. ``p + (m - 1)/v`` micro-batch times,
    a bubble of ``(p - m) + (m - 1)/v >= 1``.  Both in one formula, exact at every integer plan:

        bubble = (p - 1)/v + (1 - 1/v) * max(p - m, 0)

    (``v = 1``: ``p - 1``, the 1F1B/GPipe bubble for any ``m``; Huang et al. 2019).
    """
    p, v = plan.pp, plan.virtual_stages
    starved = relu(p - plan.num_micro_batches(), sm)  # integer-valued at exact plans
    return (p - 1.0) / v + (1.0 - 1.0 / v) * starved


@once
def step_flop(model: Model, plan: TrainPlan) -> tuple[Array, Array]:
    """``(model FLOP, hardware FLOP)`` of one step: ``3 * forward`` (PaLM App. B), plus the
    recomputed layer forward (full) or attention core (selective) (Korthikanti et al. App. A)
    and, with a fused attention kernel, the scores its backward recomputes
    (``(FUSED_ATTENTION_BACKWARD_RATIO - 2)`` attention cores).

    Under LoRA (exact indicator ``lora_rank >= 1``) the frozen weights' gradient GEMMs are not
    computed: ``3 fwd - (fwd - attention core)`` plus ``3`` times the adapters' forward
    ``2 tokens L r sum(k + n)`` (full, unsharded shapes: :func:`adapter_params_per_layer` at
    ``t = 1``).
    """
    gb, s = plan.global_batch, plan.seq_len
    fwd = model.forward_flop(gb, s)
    attn_core = model.layers * model.layer_attention_flop(gb, s)
    lora = clip01(plan.lora_rank, EXACT)
    whole = eqx.tree_at(lambda q: q.tp, plan, jnp.ones_like(plan.tp))
    adapters = 2.0 * gb * s * model.layers * adapter_params_per_layer(model, whole)
    model_flop = 3.0 * fwd - lora * (fwd - attn_core) + lora * 3.0 * adapters
    layer_fwd = fwd - model.logits_flop(gb * s) + lora * adapters
    w_sel, w_full = recompute_weights(plan)
    w_attn = w_sel + _flash_recompute(plan)
    return model_flop, model_flop + w_full * layer_fwd + w_attn * attn_core


def _flash_recompute(plan: TrainPlan) -> Array:
    """Attention cores a fused kernel's backward recomputes per layer forward:
    ``(FUSED_ATTENTION_BACKWARD_RATIO - 2) flash``."""
    return (FUSED_ATTENTION_BACKWARD_RATIO - 2.0) * plan.flash_attention


@once
def step_flop_by_format(model: Model, plan: TrainPlan) -> Array:
    """Hardware FLOP of one step by format (:data:`FORMATS`), summed over chips: the attention
    core (``3 + full + selective`` passes of :meth:`~diffcost._inputs.model.Model.
    layer_attention_flop`, plus a fused kernel's recomputed scores) in bf16 (flash attention
    keeps 16-bit operands), the rest of
    :func:`step_flop`'s hardware FLOP in the plan's GEMM format (``plan.precision``)."""
    _, hardware = step_flop(model, plan)
    attn_core = model.layers * model.layer_attention_flop(plan.global_batch, plan.seq_len)
    w_sel, w_full = recompute_weights(plan)
    attn = attn_core * (3.0 + w_sel + w_full + _flash_recompute(plan))
    bf16 = jnp.zeros(len(FORMATS)).at[_BF16].set(1.0)
    return (hardware - attn) * plan.precision + attn * bf16


@once
def step_memory_bytes(model: Model, plan: TrainPlan, sm: Smoothing) -> Array:
    """Bytes one chip reads or writes in its main memory per step (an activity count for
    energy, not a time: caches and fusion that a kernel's roofline ignores are not modelled).

    Per micro-batch: the held weights ``P w`` read by the forward, the data-gradient GEMMs
    and a recomputed forward (``2 + full`` times; the weight-gradient GEMMs read activations),
    the gradient accumulators read and written (``2 P_train g``); per layer the saved
    activations written forward and read backward (``2 A``,
    :func:`~diffcost._train.memory.layer_activation_bytes`) and the memory-bound kernels'
    streams of :func:`layer_forward` (``1 + full`` times) and of the backward
    (:func:`layer_backward_stream_bytes`); the
    cross entropy's passes over the fp32 logits (``(38 + 14) T V / t`` bytes,
    :data:`XENT_FORWARD_BYTES_PER_LOGIT`, on the last of ``p`` stages).  Per step:
    the optimizer's stream (:func:`optimizer_bytes`).  Weight-GEMM activation operands beyond
    the saved activations are not counted (the same tensors, re-read from cache).
    """
    tokens = tokens_per_chip(plan)
    w_full = recompute_weights(plan)[1]
    weights = params_per_chip(model, plan, sm) * plan.weight_bytes_per_param * (2.0 + w_full)
    grads = 2.0 * trainable_params_per_chip(model, plan, sm) * plan.grad_bytes_per_param
    streams = (1.0 + w_full) * layer_stream_bytes(model, plan)
    streams = streams + layer_backward_stream_bytes(model, plan)
    per_layer = 2.0 * layer_activation_bytes(model, plan) + streams
    xent = XENT_FORWARD_BYTES_PER_LOGIT + XENT_BACKWARD_BYTES_PER_LOGIT
    logits = xent * tokens * model.vocab / plan.tp / plan.pp
    per_micro = weights + grads + model.layers / plan.pp * per_layer + logits
    return plan.num_micro_batches() * per_micro + optimizer_bytes(model, plan, sm)


def _ring(n: Array) -> Array:
    """Share of a buffer each of ``n`` ranks sends in one ring pass: ``(n - 1) / n``."""
    return (n - 1.0) / n


@once
def step_link_bytes(model: Model, plan: TrainPlan, sm: Smoothing) -> Array:
    """Bytes one chip sends over links per step (ring collectives send ``(n - 1)/n`` of the
    buffer per pass; Thakur, Rabenseifner, Gropp, IJHPCA 2005).

    Per micro-batch: ``(4 + 2 full)`` TP all-reduces per layer of ``2 T h`` bytes (``2 (t -
    1)/t`` each), ``3`` CP K/V ring passes per layer, ``2 v`` pipeline hand-offs of ``2 T h r``
    bytes; per step the data-parallel gradient all-reduce (``2 G (n - 1)/n``, ZeRO 0-1),
    ZeRO-2's extra reduce-scatter per micro-batch and ZeRO-3's two gathers and a
    reduce-scatter per micro-batch.  Expert all-to-alls are not counted.
    """
    tokens, t, c = tokens_per_chip(plan), plan.tp, plan.cp
    w_full, layers = recompute_weights(plan)[1], model.layers / plan.pp
    tp = layers * (4.0 + 2.0 * w_full) * 2.0 * _ring(t) * 2.0 * tokens * model.hidden
    kv = 2.0 * tokens * (model.head_dim + model.v_head_dim) * smax(model.kv_heads / t, 1.0, sm)
    cp = layers * 3.0 * kv * (c - 1.0)
    has_pp = 1.0 - is_one(plan.pp, sm)
    pp = (
        has_pp * 2.0 * plan.virtual_stages * 2.0 * tokens * model.hidden * replicated_fraction(plan)
    )
    m, shard = plan.num_micro_batches(), plan.shard_ranks()
    grad = trainable_params_per_chip(model, plan, sm) * plan.grad_bytes_per_param
    params = params_per_chip(model, plan, sm)
    z = plan.zero
    dp = 2.0 * _ring(plan.dp * c) * grad * (z[0] + z[1] + z[2])
    dp += z[2] * (m - 1.0) * _ring(shard) * grad
    dp += z[3] * m * _ring(shard) * (2.0 * params * gathered_weight_bytes(plan) + grad)
    return m * (tp + cp + pp) + dp


#: Tensor-parallel all-reduces per transformer layer per micro-batch: 2 forward (after attention
#: and after the MLP) and 2 backward (Shoeybi et al., Megatron-LM, arXiv:1909.08053, Fig. 4).
TP_SYNCS_PER_LAYER = 4.0


@once
def jitter_s(system: System, model: Model, plan: TrainPlan) -> Array:
    """Expected wait for the last rank at the step's synchronising collectives, seconds.

    ``sigma * (m * 4 L / pp * g(tp) + g(chips))``: every tensor-parallel all-reduce of the
    critical stage (``TP_SYNCS_PER_LAYER`` per layer, ``L / pp`` layers, ``m`` micro-batches)
    waits for the last of its ``tp`` ranks, and the step's end (gradient reduction, optimizer,
    next step's pipeline start) waits once for the last of all chips; bucketed gradient
    reductions overlapped with the backward pass do not add waits of their own (only the
    last bucket is on the critical path).  ``g`` is :func:`expected_max_normal`, ``sigma``
    the system's ``collective_jitter_s`` (Hoefler et al., SC'10).  Pipeline sends (pairs)
    and context/expert-parallel collectives are not counted.
    """
    sigma = system.reliability.collective_jitter_s
    syncs = plan.num_micro_batches() * TP_SYNCS_PER_LAYER * model.layers / plan.pp
    # both groups' expected maxima in one evaluation (elementwise: each as its own call)
    g_tp, g_all = expected_max_normal(jnp.stack([plan.tp, plan.num_chips()]))
    return sigma * (syncs * g_tp + g_all)


class Goodput(NamedTuple):
    """Checkpoint/restart outcome of a training job (:func:`goodput`)."""

    checkpoint_s: Array  # one checkpoint write, s
    interval_s: Array  # Young's optimal checkpoint interval, s (0: no failures)
    fraction: Array  # share of wall time that advances training


def goodput(system: System, plan: TrainPlan, mem: TrainMemory, sm: Smoothing) -> Goodput:
    """Young/Daly goodput of the job, interrupted at ``chips * failures_per_chip_s``
    (:mod:`diffcost._terms.reliability`).

    Each chip writes, at the system's per-chip checkpoint bandwidth, its optimizer state and
    its ``1 / (dp cp)`` share of the weights its data-parallel replicas hold alike (under
    ZeRO-3 its own shard): Megatron-Core's fully parallel save
    (``FullyParallelSaveStrategyWrapper``, ``megatron/core/dist_checkpointing``).
    """
    rel = system.reliability
    z3 = plan.zero[3]
    weights = mem.weights_bytes * ((1.0 - z3) / (plan.dp * plan.cp) + z3)
    delta = (weights + mem.optimizer_bytes) / rel.checkpoint_bandwidth_bytes_per_s
    lam = plan.num_chips() * rel.failures_per_chip_s
    return Goodput(
        checkpoint_s=delta,
        interval_s=checkpoint_interval_s(delta, lam),
        fraction=goodput_fraction(delta, rel.restart_s, lam, sm),
    )


def step_energy_j(
    system: System, model: Model, built: Model, plan: TrainPlan, step_s: Array, sm: Smoothing
) -> Array:
    """Energy of one step, J: :func:`~diffcost._terms.energy.activity_energy_j` of the step's
    FLOP by format (at the sustained clock's J/FLOP,
    :func:`~diffcost._terms.power.sustained_energy`), memory and link bytes on every chip, plus
    the system's node overhead (``built``: the model with its padded vocabulary, as the step
    runs it)."""
    chip, chips = system.chip, plan.num_chips()
    return activity_energy_j(
        sustained_energy(system, sm),
        chip.tdp_w,
        time_s=step_s,
        chips=chips,
        flop_by_format=step_flop_by_format(model, plan),
        memory_bytes=chips * step_memory_bytes(built, plan, sm),
        link_bytes=chips * step_link_bytes(built, plan, sm),
        sm=sm,
        overhead_w=system.overhead_w(chips),
    )


class TrainBreakdown(eqx.Module):
    """Prediction for one optimizer step (SI units; every field a float array)."""

    step_time_s: Float[Array, ""]
    compute_time_s: Float[Array, ""]
    recompute_time_s: Float[Array, ""]
    tp_comm_time_s: Float[Array, ""]
    cp_comm_time_s: Float[Array, ""]
    ep_comm_time_s: Float[Array, ""]
    pp_bubble_time_s: Float[Array, ""]
    pp_p2p_time_s: Float[Array, ""]
    dp_comm_time_s: Float[Array, ""]
    optimizer_time_s: Float[Array, ""]
    tokens_per_s: Float[Array, ""]
    model_flop: Float[Array, ""]
    hardware_flop: Float[Array, ""]
    model_flop_per_s_per_chip: Float[Array, ""]
    mfu: Float[Array, ""]
    hfu: Float[Array, ""]
    memory: TrainMemory
    capacity_bytes: Float[Array, ""]
    headroom_bytes: Float[Array, ""]
    chips: Float[Array, ""]
    micro_batches: Float[Array, ""]
    divisibility_violation: Float[Array, ""]
    unsupported_format: Float[Array, ""]  # precision weight on a format the chip cannot train in
    energy_j: Float[Array, ""]
    cost_usd: Float[Array, ""]
    jitter_time_s: Float[Array, ""]  # waits for the last rank, included in step_time_s
    checkpoint_time_s: Float[Array, ""]  # one checkpoint write
    checkpoint_interval_s: Float[Array, ""]  # Young's optimal interval (0: no failures)
    goodput_fraction: Float[Array, ""]  # wall time that advances training
    goodput_tokens_per_s: Float[Array, ""]  # tokens_per_s * goodput_fraction

    def fits(self) -> Array:
        """1.0 if the step fits in memory, else 0.0."""
        return jnp.where(self.headroom_bytes >= 0.0, 1.0, 0.0)


class TrainCost(eqx.Module):
    """Training-step cost model of ``model`` on ``system``; call it on a :class:`TrainPlan`.

    ``smoothing`` (static) selects the exact model (default) or its smooth relaxation.

    Times and memory are those of the model Megatron-LM builds, with the vocabulary padded to a
    multiple of ``128 tp`` (:func:`~diffcost._train.rules.padded_vocab`); the model FLOP of MFU
    count the real vocabulary (padding rows are work, not model).
    """

    system: System
    model: Model
    smoothing: Smoothing = eqx.field(static=True, default=EXACT)

    def __call__(self, plan: TrainPlan) -> TrainBreakdown:
        with evaluation():  # each shared term traced once (diffcost._core.shared)
            return self._evaluate(plan)

    def _evaluate(self, plan: TrainPlan) -> TrainBreakdown:
        model, sm = self.model, self.smoothing
        built = with_padded_vocab(model, plan, sm)
        mem = train_memory(built, plan, self.system, sm)
        # weights, gradients, optimizer states and activations placed over the memory levels
        sys = placed_system(self.system, mem.total_bytes - mem.reserved_bytes, sm)
        chip = sys.chip
        m = plan.num_micro_batches()
        stage = stage_times(sys, built, plan, sm)
        per_micro = stage.per_micro_s()
        bubble = pipeline_bubble(plan, sm)
        t_dp_total = data_parallel_s(sys, built, plan, stage, sm)
        t_opt = optimizer_s(sys, built, plan, sm)
        t_jitter = jitter_s(sys, built, plan)
        step = (m + bubble) * per_micro + t_dp_total + t_opt + t_jitter
        model_flop, hardware_flop = step_flop(model, plan)
        chips = plan.num_chips()
        bf16_peak = chip.peak_flop_per_s[_BF16]
        good = goodput(sys, plan, mem, sm)
        return TrainBreakdown(
            step_time_s=step,
            compute_time_s=m * (stage.forward_s + stage.backward_s),
            recompute_time_s=m * stage.recompute_s,
            tp_comm_time_s=m * stage.tp_comm_s,
            cp_comm_time_s=m * stage.cp_comm_s,
            ep_comm_time_s=m * stage.ep_comm_s,
            pp_bubble_time_s=bubble * per_micro,
            pp_p2p_time_s=m * stage.p2p_s,
            dp_comm_time_s=t_dp_total,
            optimizer_time_s=t_opt,
            tokens_per_s=plan.global_batch * plan.seq_len / step,
            model_flop=model_flop,
            hardware_flop=hardware_flop,
            model_flop_per_s_per_chip=model_flop / (step * chips),
            # seconds of work at peak over the step: dividing by the product instead would
            # square ~1e19 FLOP/s-seconds in the JVP and overflow float32 (zero/NaN gradients)
            mfu=model_flop / (chips * bf16_peak) / step,
            hfu=hardware_flop / (chips * bf16_peak) / step,
            memory=mem,
            capacity_bytes=chip.memory_capacity_bytes,
            headroom_bytes=chip.memory_capacity_bytes - mem.total_bytes,
            chips=chips,
            micro_batches=m,
            divisibility_violation=divisibility(model, plan, sm),
            unsupported_format=unsupported_format(chip, plan),
            energy_j=step_energy_j(sys, model, built, plan, step, sm),
            cost_usd=chips * sys.price_usd_per_chip_hour * step / 3600.0,
            jitter_time_s=t_jitter,
            checkpoint_time_s=good.checkpoint_s,
            checkpoint_interval_s=good.interval_s,
            goodput_fraction=good.fraction,
            goodput_tokens_per_s=good.fraction * plan.global_batch * plan.seq_len / step,
        )


__all__ = [
    "BACKWARD_ELEMENTWISE_PER_HIDDEN",
    "FUSED_ATTENTION_BACKWARD_RATE",
    "FUSED_ATTENTION_BACKWARD_RATIO",
    "KERNELS_PER_LAYER_FORWARD",
    "TP_SYNCS_PER_LAYER",
    "XENT_BACKWARD_BYTES_PER_LOGIT",
    "XENT_FORWARD_BYTES_PER_LOGIT",
    "Goodput",
    "goodput",
    "jitter_s",
    "step_energy_j",
    "LayerForward",
    "StageTimes",
    "TrainBreakdown",
    "TrainCost",
    "data_parallel_s",
    "divisibility",
    "layer_forward",
    "optimizer_bytes",
    "optimizer_s",
    "pipeline_bubble",
    "sharded_gather_s",
    "stage_times",
    "step_flop",
    "step_flop_by_format",
    "step_link_bytes",
    "step_memory_bytes",
    "gathered_weight_bytes",
    "layer_backward_stream_bytes",
    "tp_comm_layer_s",
    "zero3_s",
]
