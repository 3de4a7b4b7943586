"""Training plans: parallel degrees, batch and memory-saving choices, as relaxable arrays.

Integer degrees are float leaves so a plan can be relaxed (continuous) for gradient search and
stacked for ``vmap``; categorical choices are weight vectors whose one-hot limit is the exact
choice (:func:`diffcost._smooth.mix`).  :func:`train_plan` builds an exact plan from plain
Python values and validates it.
"""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._core.errors import Problem, SpecError
from .._inputs.hardware import FORMATS, one_hot_format

RECOMPUTE: tuple[str, ...] = ("none", "selective", "full")
ZERO_STAGES: tuple[int, ...] = (0, 1, 2, 3)

#: Optimizer state bytes per parameter kept besides bf16 weights and gradients.
#: Adam with fp32 master weights: master 4 + m 4 + v 4 = 12; without master: 8;
#: SGD with momentum: master 4 + momentum 4 = 8; without master: 4.
OPTIMIZER_BYTES: dict[str, float] = {
    "adam": 12.0,
    "adam_no_master": 8.0,
    "sgd": 8.0,
    "sgd_no_master": 4.0,
}

TRAINING_PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8")


def one_hot(index: int, size: int) -> Float[Array, " k"]:
    """One-hot weight vector."""
    return jnp.zeros(size).at[index].set(1.0)


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
    """

    tp: Float[Array, ""]
    pp: Float[Array, ""]
    dp: Float[Array, ""]
    cp: Float[Array, ""]
    micro_batch: Float[Array, ""]
    global_batch: Float[Array, ""]
    seq_len: Float[Array, ""]
    virtual_stages: Float[Array, ""]
    sequence_parallel: Float[Array, ""]
    flash_attention: Float[Array, ""]
    overlap_grad_reduce: Float[Array, ""]
    recompute: Float[Array, "3"]
    zero: Float[Array, "4"]
    precision: Float[Array, "8"]
    weight_bytes_per_param: Float[Array, ""]
    grad_bytes_per_param: Float[Array, ""]
    optimizer_bytes_per_param: Float[Array, ""]

    def num_micro_batches(self) -> Array:
        """Micro-batches per step per pipeline: ``global_batch / (dp * micro_batch)``."""
        return self.global_batch / (self.dp * self.micro_batch)

    def num_chips(self) -> Array:
        """Chips the plan occupies: ``tp * pp * dp * cp``."""
        return self.tp * self.pp * self.dp * self.cp


def train_plan(
    *,
    tp: int = 1,
    pp: int = 1,
    dp: int = 1,
    cp: int = 1,
    micro_batch: int = 1,
    global_batch: int | None = None,
    seq_len: int = 2048,
    virtual_stages: int = 1,
    sequence_parallel: bool | None = None,
    flash_attention: bool = True,
    overlap_grad_reduce: bool = True,
    recompute: str = "selective",
    zero: int = 1,
    precision: str = "bf16",
    optimizer: str = "adam",
    grad_bytes_per_param: float = 2.0,
    source: str = "plan",
) -> TrainPlan:
    """Build an exact (integer, one-hot) training plan, checking every field at once.

    ``global_batch`` defaults to ``dp * micro_batch`` (no gradient accumulation);
    ``sequence_parallel`` defaults to on when ``tp > 1`` (Megatron-LM/NeMo default).

    Raises:
        SpecError: listing every invalid field, named as ``source: field``.
    """
    problems: list[Problem] = []
    ints = dict(tp=tp, pp=pp, dp=dp, cp=cp, micro_batch=micro_batch, seq_len=seq_len)
    ints["virtual_stages"] = virtual_stages
    if global_batch is not None:
        ints["global_batch"] = global_batch
    for key, value in ints.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(Problem(source, key, f"must be a positive integer, got {value!r}"))
    if recompute not in RECOMPUTE:
        problems.append(
            Problem(source, "recompute", f"must be one of {RECOMPUTE}, got {recompute!r}")
        )
    if zero not in ZERO_STAGES:
        problems.append(Problem(source, "zero", f"must be one of {ZERO_STAGES}, got {zero!r}"))
    if precision not in TRAINING_PRECISIONS:
        problems.append(
            Problem(source, "precision", f"must be one of {TRAINING_PRECISIONS}, got {precision!r}")
        )
    if optimizer not in OPTIMIZER_BYTES:
        problems.append(
            Problem(
                source, "optimizer", f"must be one of {tuple(OPTIMIZER_BYTES)}, got {optimizer!r}"
            )
        )
    if not (isinstance(grad_bytes_per_param, (int, float)) and grad_bytes_per_param > 0):
        problems.append(Problem(source, "grad_bytes_per_param", "must be a positive number"))
    if problems:
        raise SpecError(problems)

    if global_batch is None:
        global_batch = dp * micro_batch
    if sequence_parallel is None:
        sequence_parallel = tp > 1
    f = lambda x: jnp.asarray(float(x))
    weight_bytes = 4.0 if precision in ("fp32", "tf32") else 2.0
    return TrainPlan(
        tp=f(tp),
        pp=f(pp),
        dp=f(dp),
        cp=f(cp),
        micro_batch=f(micro_batch),
        global_batch=f(global_batch),
        seq_len=f(seq_len),
        virtual_stages=f(virtual_stages),
        sequence_parallel=f(sequence_parallel),
        flash_attention=f(flash_attention),
        overlap_grad_reduce=f(overlap_grad_reduce),
        recompute=one_hot(RECOMPUTE.index(recompute), len(RECOMPUTE)),
        zero=one_hot(zero, len(ZERO_STAGES)),
        precision=one_hot_format(precision),
        weight_bytes_per_param=f(weight_bytes),
        grad_bytes_per_param=f(grad_bytes_per_param),
        optimizer_bytes_per_param=f(OPTIMIZER_BYTES[optimizer]),
    )


__all__ = ["FORMATS", "RECOMPUTE", "ZERO_STAGES", "OPTIMIZER_BYTES", "TrainPlan", "train_plan"]
