"""What a framework or a chip refuses: the validity rules of a training plan, as feasibility.

A plan the framework refuses to launch is not a slow plan, it is no plan.  Each rule here has an
exact form (an indicator, for :func:`diffcost._train.problems.train_problems` and the exact
search) and a relaxed form (a violation that is zero exactly at a valid integer plan, for the
relaxed search's penalty), both built on :mod:`diffcost._core.smooth`.

Megatron-LM (NVIDIA/Megatron-LM at commit d98e8a64ddf3, 2026-08-22) refuses:

* ``num_attention_heads % tensor_model_parallel_size != 0`` and ``num_query_groups`` (KV heads)
  neither a multiple nor a divisor of the TP size (``TransformerConfig.__post_init__``,
  ``megatron/core/transformer/transformer_config.py``; TP beyond the KV heads replicates them);
* a number of layers not divisible by the pipeline size, or per stage not divisible by the
  layers per virtual stage (``validate_args``, ``megatron/training/arguments.py``); with an
  uneven split (``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``)
  the layers left after the given first and last stages not divisible by the remaining stages,
  or any stage's layers not divisible by the virtual stages (``get_num_layers_to_build``,
  ``megatron/core/transformer/transformer_block.py``), and an uneven split without pipeline
  parallelism (:func:`pipeline_split_violation`);
* with the interleaved schedule (``virtual_stages > 1``), a micro-batch count that is not a
  multiple of the pipeline size: ``forward_backward_pipelining_with_interleaving`` in
  ``megatron/core/pipeline_parallel/schedules.py`` requires the group of contiguous
  micro-batches per virtual stage (default: the pipeline size ``p``) to lie in ``[p, m]`` and the
  remainder ``m mod p`` to be 0 or at least ``p``, i.e. ``m % p == 0`` (older releases raised
  "number of microbatches is not divisible by pipeline-model-parallel-size when using
  interleaved schedule" directly).

It does not refuse a vocabulary that TP does not divide: it pads it to a multiple of
``make_vocab_size_divisible_by * tp`` (default 128; ``vocab_size_with_padding``,
``megatron/core/tokenizers/utils/build_tokenizer.py``), and the padded rows are computed and
stored like real ones (:func:`padded_vocab`).

FP8 GEMMs need FP8 matrix units (Hopper, Ada, Blackwell, MI300, Gaudi 3); Transformer Engine
refuses FP8 execution below compute capability 8.9 (``check_fp8_support``,
``transformer_engine/pytorch/fp8.py``), so FP8 training on an A100 does not run (:func:`fp8_units`).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._core.smooth import EXACT, Smoothing, clip01, divisibility_violation, is_one, relu
from .._inputs.hardware import Chip, format_index
from .._inputs.model import Model
from .._terms.tp_rules import TP_RULES
from .memory import recompute_weights, stage_layers
from .plan import TrainPlan

#: Megatron-LM ``--make-vocab-size-divisible-by`` default (``arguments.py``): the vocabulary is
#: padded to a multiple of this times the TP size.
VOCAB_MULTIPLE = 128.0

_BF16 = format_index("bf16")
_FP8 = format_index("fp8")


def fp8_units(chip: Chip) -> Array:
    """1.0 if the chip has FP8 matrix units, else 0.0.

    The loader gives a format a chip lacks the peak of its fallback (FP8 -> BF16,
    :data:`diffcost._inputs.hardware.FORMAT_FALLBACK`), so a chip whose FP8 peak is not above
    its BF16 peak has no FP8 speed-up to offer, and on every chip of the catalogue but Gaudi 3
    (FP8 = BF16 = 1835 TFLOP/s, Intel Gaudi 3 white paper) this means it has no FP8 units.
    A property of the chip, constant under the search, so a hard comparison (no plan gradient).
    """
    peaks = chip.peak_flop_per_s
    return jnp.where(peaks[..., _FP8] > peaks[..., _BF16], 1.0, 0.0)


def unsupported_format(chip: Chip, plan: TrainPlan) -> Array:
    """Weight of the plan's precision on formats the chip cannot train in (0 or 1 exact):
    ``w_fp8 * (1 - fp8_units)``."""
    return plan.precision[..., _FP8] * (1.0 - fp8_units(chip))


def padded_vocab(model: Model, plan: TrainPlan, sm: Smoothing) -> Array:
    """Vocabulary rows Megatron-LM computes: ``ceil(V / (128 t)) * 128 t`` (``vocab_size_with_
    padding``; the padding rows are real GEMM columns, embedding rows and logits).

    The vocabulary is an integer; as a differentiable spec value it enters with slope 1 (the
    padding of its nearest integer held fixed).  Relaxed in ``t``: the exact value at the
    integers either side, blended by the smoothstep
    :func:`~diffcost._core.smooth.clip01` of the fractional part, so it is exact at every
    integer ``t``, continuous and C1 in between.
    """

    def exact(t: Array) -> Array:
        # The padding rows of the integer vocabulary, held fixed under a change of V, so that
        # d padded / d V = 1 (the sensitivity of the cost to the real vocabulary) and a tiny
        # perturbation of a V that is already a multiple does not jump to the next multiple.
        v = jnp.round(model.vocab)
        multiple = VOCAB_MULTIPLE * t
        return model.vocab + jax.lax.stop_gradient(jnp.ceil(v / multiple) * multiple - v)

    t = plan.tp
    if not sm.relaxed:
        return exact(t)
    # a relaxed search may visit t < 1: the padding there is that of t = 1 (no zero multiple)
    below = jax.lax.stop_gradient(jnp.maximum(jnp.floor(t), 1.0))
    w = clip01(t - below, sm)
    lower = exact(below)  # a + w (b - a): exactly a where both sides pad alike (monotone)
    return lower + w * (exact(below + 1.0) - lower)


def with_padded_vocab(model: Model, plan: TrainPlan, sm: Smoothing) -> Model:
    """``model`` with its vocabulary padded as Megatron-LM pads it (:func:`padded_vocab`)."""
    return eqx.tree_at(lambda m: m.vocab, model, padded_vocab(model, plan, sm))


def kv_split_violation(model: Model, plan: TrainPlan, sm: Smoothing) -> Array:
    """0 when the KV heads are a multiple or a divisor of ``tp`` (Megatron-LM), else positive:
    ``div(k / t) * div(t / k)`` (either one integer makes the product 0): the ``kv_heads``
    rule of :data:`~diffcost._terms.tp_rules.TP_RULES`."""
    (rule,) = [r for r in TP_RULES if r.key == "kv_heads"]
    return rule.violation(model.kv_heads, plan.tp, sm)


def interleave_violation(plan: TrainPlan, sm: Smoothing) -> Array:
    """0 when the interleaved schedule may run (``v = 1``, or ``m`` a multiple of ``p``), else
    positive: ``[v > 1] div(m / p)``."""
    interleaved = 1.0 - is_one(plan.virtual_stages, sm)
    return interleaved * divisibility_violation(plan.num_micro_batches() / plan.pp, sm)


def pipeline_split_violation(model: Model, plan: TrainPlan, sm: Smoothing) -> Array:
    """0 when Megatron-LM builds the plan's pipeline split, else positive.

    Even split (neither end given): ``div(L / (p v))``, as before.  Uneven
    (``get_num_layers_to_build`` in ``megatron/core/transformer/transformer_block.py`` at
    d98e8a64ddf3): pipeline parallelism (``[p = 1]``); the ``rest = L - f - l`` layers either
    divide over the ``p - [f > 0] - [l > 0]`` remaining stages or, with none left, are 0
    (``|rest|``); no negative rest; every stage's layers divisible by ``v`` (``div(n / v)`` for
    first, middle and last).  Llama 3 405B: 126 layers, ``p = 16``, ``f = l = 7``: rest 112 over
    14 stages, 8 each, valid.
    """
    st = stage_layers(model, plan, sm)
    f_set, l_set = clip01(plan.first_stage_layers, sm), clip01(plan.last_stage_layers, sm)
    even = (1.0 - f_set) * (1.0 - l_set)
    v = plan.virtual_stages
    no_middle = is_one(st.middle_stages + 1.0, sm)
    spread = (1.0 - no_middle) * divisibility_violation(st.middle, sm) + no_middle * (
        relu(st.rest, sm) + relu(-st.rest, sm)
    )
    per_chunk = sum(divisibility_violation(n / v, sm) for n in (st.first, st.middle, st.last))
    uneven = is_one(plan.pp, sm) + spread + relu(-st.rest, sm) + per_chunk
    return even * divisibility_violation(model.layers / (plan.pp * v), sm) + (1.0 - even) * uneven


def pipeline_split_problems(model: Model, plan: TrainPlan) -> list[str]:
    """Why Megatron-LM refuses an exact plan's pipeline split (empty: it builds it); the
    messages :func:`diffcost._train.problems.train_problems` reports."""
    g = float
    L, p, v = g(model.layers), g(plan.pp), g(plan.virtual_stages)
    f, last = g(plan.first_stage_layers), g(plan.last_stage_layers)
    if f == 0 and last == 0:
        if L % (p * v):
            return [
                f"layers ({L:.0f}) is not divisible by pp*virtual_stages ({p * v:.0f}): "
                f"remainder {L % (p * v):.0f}"
            ]
        return []
    if p == 1:
        return ["first_stage_layers / last_stage_layers need pipeline parallelism (pp > 1)"]
    st = stage_layers(model, plan, EXACT)
    rest, stages = g(st.rest), g(st.middle_stages)
    problems = []
    if rest < 0 or (stages == 0 and rest != 0) or (stages > 0 and rest % stages):
        problems.append(
            f"the {rest:.0f} layers left after the first ({f:.0f}) and last ({last:.0f}) stages "
            f"do not divide over the {stages:.0f} remaining pipeline stages"
        )
    for name, n in (("first", st.first), ("middle", st.middle), ("last", st.last)):
        if g(n) % v:
            problems.append(
                f"the {name} stage's {g(n):g} layers are not divisible by virtual_stages ({v:.0f})"
            )
    return problems


def hybrid_shard_violation(plan: TrainPlan, sm: Smoothing) -> Array:
    """0 when the hybrid-sharding group is valid, else positive: ``div(dp / shard_group)``
    (replica groups of equal size; for positive integers this also means ``shard_group <= dp``)
    plus ``w_zero0 * [shard_group < dp]`` (plain data parallelism shards nothing).

    torch FSDP ``HYBRID_SHARD`` builds its 2-D device mesh ``(dp / shard_group, shard_group)``
    and refuses a world size the shard group does not divide (``_init_intra_and_inter_node_
    groups``, ``torch/distributed/fsdp/_init_utils.py``; FSDP2 ``init_device_mesh`` needs the
    mesh product to equal the world size); DeepSpeed MiCS asserts ``world_size %
    mics_shard_size == 0`` (``deepspeed/runtime/zero/mics.py``)."""
    replicas = plan.shard_replicas
    return divisibility_violation(replicas, sm) + plan.zero[..., 0] * (1.0 - is_one(replicas, sm))


def tp_overlap_violation(plan: TrainPlan) -> Array:
    """0 unless TP communication overlap is asked for without sequence parallelism:
    ``tp_comm_overlap * (1 - sequence_parallel)``.  Megatron-LM asserts "Tensor parallel
    communication/GEMM overlap can happen only when sequence parallelism is enabled"
    (``validate_args``, ``megatron/training/arguments.py``; it also turns sequence parallelism
    off when ``tp = 1``, so the overlap needs ``tp > 1``)."""
    return plan.tp_comm_overlap * (1.0 - plan.sequence_parallel)


def expert_parallel_violation(model: Model, plan: TrainPlan, sm: Smoothing) -> Array:
    """Relaxed violation of the expert-parallel rules (0 at a valid exact plan): ``ep`` divides
    the routed experts, ``expert_tp ep`` divides the ``tp cp shard_group`` ranks of a stage
    (Megatron-Core lays the expert grid over them: ``initialize_model_parallel`` in
    ``megatron/core/parallel_state.py`` requires the world size to be a multiple of
    ``expert_tp ep pp``), each expert's width divides over ``expert_tp``, and a dense model has
    ``ep = expert_tp / tp = 1``.  The all-to-all overlap needs ``ep > 1``, interleaving when
    pipelined, and no full recomputation (``TransformerConfig.__post_init__``,
    ``megatron/core/transformer/transformer_config.py``)."""
    dense = 1.0 - clip01(model.experts, sm)
    stage_ranks = plan.tp * plan.cp * plan.shard_group()
    pipelined_plain = (1.0 - is_one(plan.pp, sm)) * is_one(plan.virtual_stages, sm)
    overlap = plan.ep_overlap * (is_one(plan.ep, sm) + pipelined_plain + recompute_weights(plan)[1])
    return overlap + (
        divisibility_violation(model.experts / plan.ep, sm)
        + divisibility_violation(stage_ranks / (plan.ep * plan.expert_tp), sm)
        + divisibility_violation(model.expert_ffn_hidden / plan.expert_tp, sm)
        + dense * (1.0 - is_one(plan.ep, sm))
    )


def cp_split_violation(plan: TrainPlan, sm: Smoothing) -> Array:
    """Relaxed violation of context parallelism's sequence split (0 at a valid exact plan):
    ``seq_len`` divisible by ``2 cp`` when ``cp > 1`` (Megatron-LM ``validate_args``:
    "seq-length should be a multiple of 2 * context-parallel-size if context-parallel-size >
    1"; each rank holds two of the ``2 cp`` chunks, one early and one late, to balance causal
    attention), by ``cp = 1`` trivially."""
    chunks = plan.cp * (2.0 - is_one(plan.cp, sm))
    return divisibility_violation(plan.seq_len / chunks, sm)


def divisibility(model: Model, plan: TrainPlan, sm: Smoothing) -> Float[Array, ""]:
    """Sum of the relaxed divisibility violations (0 at a valid exact plan): heads and ffn by
    ``tp``, KV heads a multiple or divisor of ``tp``, layers by ``pp * v``, the micro-batch count
    an integer and, when interleaved, a multiple of ``pp``, ``seq_len`` by ``2 cp``
    (:func:`cp_split_violation`); the uneven
    pipeline split's rules replace the layer rule when a first or last stage count is given
    (:func:`pipeline_split_violation`); a valid hybrid-sharding group
    (:func:`hybrid_shard_violation`) and TP overlap only with sequence parallelism
    (:func:`tp_overlap_violation`); the expert-parallel rules
    (:func:`expert_parallel_violation`)."""
    first, *others = [r.violation(getattr(model, r.key), plan.tp, sm) for r in TP_RULES]
    for v in others:  # the TP rules (:data:`~diffcost._terms.tp_rules.TP_RULES`)
        first = first + v
    return (
        first
        + pipeline_split_violation(model, plan, sm)
        + divisibility_violation(plan.num_micro_batches(), sm)
        + interleave_violation(plan, sm)
        + cp_split_violation(plan, sm)
        + hybrid_shard_violation(plan, sm)
        + tp_overlap_violation(plan)
        + expert_parallel_violation(model, plan, sm)
    )


__all__ = [
    "VOCAB_MULTIPLE",
    "cp_split_violation",
    "divisibility",
    "expert_parallel_violation",
    "fp8_units",
    "hybrid_shard_violation",
    "interleave_violation",
    "kv_split_violation",
    "padded_vocab",
    "pipeline_split_problems",
    "pipeline_split_violation",
    "tp_overlap_violation",
    "unsupported_format",
    "with_padded_vocab",
]
