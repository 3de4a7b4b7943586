"""Serving plans: parallel layout, batch, request shape, number formats and serving mode.

Like :class:`diffcost.TrainPlan`, every field is a float leaf so a plan can be relaxed for
gradient search and stacked for ``vmap``; categorical choices (formats, mode) are weight vectors
whose one-hot limit is the exact choice (:func:`diffcost._smooth.mix`).  :func:`serve_plan`
builds an exact plan from plain Python values and reports every invalid field at once.

Quantization is described by three formats over :data:`diffcost.FORMATS`:

* ``weight_format``: how weights are stored and streamed (bytes per parameter);
* ``compute_format``: the tensor-core format of the matrix multiplications (which dense peak
  applies) and of the activations they read and write.  Weight-only schemes are a narrow weight
  format with a 16-bit compute format: W8A16 = (int8, bf16), W4A16 = (int4, bf16); W8A8 =
  (int8, int8); FP8 = (fp8, fp8);
* ``kv_format``: the element size of the KV cache.

Two kernel choices of the serving engine change the bytes moved, so they are plan fields (like
``TrainPlan.flash_attention``), true for current engines:

* ``gqa_decode_kernel``: decode attention reads the K/V of a KV head once for its whole group of
  query heads (TensorRT-LLM XQA, FlashInfer, vLLM's GQA-aware kernels); false for kernels that
  read it once per query head (TensorRT-LLM <= 0.9 masked MHA on GQA models);
* ``fused_dequant``: weight-only formats are expanded to the compute format inside the GEMM
  (TensorRT-LLM weight-only GEMMs, Marlin, AWQ kernels); false when a separate kernel first
  writes a 16-bit copy of each weight matrix (DeepSpeed-Inference 2022 int8).
"""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._core.errors import Problem, SpecError
from .._inputs import schema as S
from .._inputs.hardware import FORMATS, one_hot_format

#: Serving modes, in the order of ``ServePlan.mode``.  Disaggregation is a separate flag.
MODES: tuple[str, ...] = ("static", "continuous")

#: Weight-only formats run their GEMMs at 16-bit when no compute format is given.
_WEIGHT_ONLY_DEFAULT_COMPUTE = {"int8": "bf16", "int4": "bf16"}


class ServePlan(eqx.Module):
    """How one model is served on the chips (all fields float arrays).

    Attributes:
        tp, pp: tensor- and pipeline-parallel degrees of one model instance.
        replicas: independent copies of the whole deployment (data parallelism).
        batch: concurrent sequences per instance (static: the batch; continuous: running
            sequences; disaggregated: sequences per decode instance).
        input_len, output_len: prompt and generated tokens per request.
        weight_format, compute_format, kv_format: weights over :data:`diffcost.FORMATS`.
        mode: weights over :data:`MODES` (static, continuous in-flight batching).
        prefill_chunk: prompt tokens per iteration (chunked prefill budget), continuous mode.
        draft_len: tokens proposed by the draft model per verify step (0: no speculation).
        acceptance: per-token acceptance probability of a draft token, in [0, 1].
        draft_params_fraction: draft model size as a fraction of the target's parameters.
        disaggregated: 1 for separate prefill and decode pools, 0 for colocated serving.
        prefill_chips, decode_chips: chips of each pool per replica (multiples of tp*pp).
        kv_block: tokens per paged-KV block (1: contiguous cache, no rounding waste).
        accuracy_cost: user-set cost per use of a format (weights, compute or KV cache),
            over :data:`diffcost.FORMATS`; reported, never optimized away silently.
        gqa_decode_kernel: 1 if decode attention reads each KV head once per group, 0 if once
            per query head (see the module docstring).
        fused_dequant: 1 if weight-only formats are dequantized inside the GEMM, 0 if a
            separate kernel writes a compute-format copy first.
    """

    tp: Float[Array, ""]
    pp: Float[Array, ""]
    replicas: Float[Array, ""]
    batch: Float[Array, ""]
    input_len: Float[Array, ""]
    output_len: Float[Array, ""]
    weight_format: Float[Array, "8"]
    compute_format: Float[Array, "8"]
    kv_format: Float[Array, "8"]
    mode: Float[Array, "2"]
    prefill_chunk: Float[Array, ""]
    draft_len: Float[Array, ""]
    acceptance: Float[Array, ""]
    draft_params_fraction: Float[Array, ""]
    disaggregated: Float[Array, ""]
    prefill_chips: Float[Array, ""]
    decode_chips: Float[Array, ""]
    kv_block: Float[Array, ""]
    accuracy_cost: Float[Array, "8"]
    gqa_decode_kernel: Float[Array, ""]
    fused_dequant: Float[Array, ""]

    def instance_chips(self) -> Array:
        """Chips of one model instance: ``tp * pp``."""
        return self.tp * self.pp

    def replica_chips(self) -> Array:
        """Chips of one replica: ``tp * pp`` colocated, ``prefill + decode`` disaggregated."""
        d = self.disaggregated
        return (1.0 - d) * self.tp * self.pp + d * (self.prefill_chips + self.decode_chips)

    def num_chips(self) -> Array:
        """Chips of the whole deployment: ``replicas * replica_chips``."""
        return self.replicas * self.replica_chips()


def _is_int(value: object, minimum: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= minimum


def _is_number(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float))


def serve_plan(
    *,
    tp: int = 1,
    pp: int = 1,
    replicas: int = 1,
    batch: int = 1,
    input_len: int = 1024,
    output_len: int = 256,
    weight_format: str = "bf16",
    compute_format: str | None = None,
    kv_format: str = "bf16",
    mode: str = "continuous",
    prefill_chunk: int = 2048,
    draft_len: int = 0,
    acceptance: float = 0.7,
    draft_params_fraction: float = 0.0,
    disaggregated: bool = False,
    prefill_chips: int | None = None,
    decode_chips: int | None = None,
    kv_block: int = 16,
    accuracy_cost: dict[str, float] | None = None,
    gqa_decode_kernel: bool = True,
    fused_dequant: bool = True,
    source: str = "plan",
) -> ServePlan:
    """Build an exact (integer, one-hot) serving plan, checking every field at once.

    ``compute_format`` defaults to the weight format, except bf16 for the weight-only int8 and
    int4 formats (W8A16, W4A16).  ``prefill_chips`` and ``decode_chips`` default to one
    instance (``tp * pp``) each.  ``kv_block`` 16 is vLLM's default block size.

    Raises:
        SpecError: listing every invalid field, named as ``source: field``.
    """
    problems: list[Problem] = []
    add = lambda key, reason: problems.append(Problem(source, key, reason))
    ints = dict(
        tp=tp,
        pp=pp,
        replicas=replicas,
        batch=batch,
        input_len=input_len,
        output_len=output_len,
        prefill_chunk=prefill_chunk,
        kv_block=kv_block,
    )
    for key, value in ints.items():
        if not _is_int(value, 1):
            add(key, f"must be a positive integer, got {value!r}")
    if not _is_int(draft_len, 0):
        add("draft_len", f"must be a non-negative integer, got {draft_len!r}")
    if compute_format is None:
        known = weight_format in FORMATS
        default = _WEIGHT_ONLY_DEFAULT_COMPUTE.get(weight_format, weight_format)
        compute_format = default if known else "bf16"
    for key, value in (
        ("weight_format", weight_format),
        ("compute_format", compute_format),
        ("kv_format", kv_format),
    ):
        if value not in FORMATS:
            add(key, f"must be one of {', '.join(FORMATS)}; got {value!r}")
    if mode not in MODES:
        add("mode", f"must be one of {', '.join(MODES)}; got {mode!r}")
    if not (_is_number(acceptance) and 0.0 <= acceptance <= 1.0):
        add("acceptance", f"must be a probability in [0, 1], got {acceptance!r}")
    if not (_is_number(draft_params_fraction) and 0.0 <= draft_params_fraction < 1.0):
        add("draft_params_fraction", f"must lie in [0, 1), got {draft_params_fraction!r}")
    elif _is_int(draft_len, 1) and draft_params_fraction == 0.0:
        add(
            "draft_params_fraction",
            "must be > 0 when draft_len > 0 (the draft model's size "
            "as a fraction of the target's parameters)",
        )
    for key, value in (
        ("disaggregated", disaggregated),
        ("gqa_decode_kernel", gqa_decode_kernel),
        ("fused_dequant", fused_dequant),
    ):
        if not isinstance(value, bool):
            add(key, f"must be true or false, got {value!r}")
    instance = tp * pp if _is_int(tp, 1) and _is_int(pp, 1) else None
    pools = {"prefill_chips": prefill_chips, "decode_chips": decode_chips}
    for key, value in pools.items():
        if value is None:
            continue
        if not _is_int(value, 1):
            add(key, f"must be a positive integer, got {value!r}")
        elif instance is not None and value % instance:
            add(key, f"must be a multiple of tp*pp = {instance} (whole instances), got {value}")
    costs = dict(accuracy_cost or {})
    for fmt, value in costs.items():
        if fmt not in FORMATS:
            add(f"accuracy_cost.{fmt}", f"unknown format (allowed: {', '.join(FORMATS)})")
        elif not _is_number(value) or value < 0:
            add(f"accuracy_cost.{fmt}", f"must be a non-negative number, got {value!r}")
    if problems:
        raise SpecError(problems)

    f = lambda x: jnp.asarray(float(x))
    cost_vector = jnp.asarray([float(costs.get(fmt, 0.0)) for fmt in FORMATS])
    return ServePlan(
        tp=f(tp),
        pp=f(pp),
        replicas=f(replicas),
        batch=f(batch),
        input_len=f(input_len),
        output_len=f(output_len),
        weight_format=one_hot_format(weight_format),
        compute_format=one_hot_format(compute_format),  # type: ignore[arg-type]
        kv_format=one_hot_format(kv_format),
        mode=jnp.zeros(len(MODES)).at[MODES.index(mode)].set(1.0),
        prefill_chunk=f(prefill_chunk),
        draft_len=f(draft_len),
        acceptance=f(acceptance),
        draft_params_fraction=f(draft_params_fraction),
        disaggregated=f(disaggregated),
        prefill_chips=f(instance if prefill_chips is None else prefill_chips),
        decode_chips=f(instance if decode_chips is None else decode_chips),
        kv_block=f(kv_block),
        accuracy_cost=cost_vector,
        gqa_decode_kernel=f(gqa_decode_kernel),
        fused_dequant=f(fused_dequant),
    )


#: ``[plan]`` table of a ``kind = "serve"`` scenario (keys of :func:`serve_plan`; the accuracy
#: cost of a format is written ``accuracy_cost_<format>``).
SERVE_PLAN: dict[str, S.Field] = {
    "tp": S.Field("count"),
    "pp": S.Field("count"),
    "replicas": S.Field("count"),
    "batch": S.Field("count"),
    "input_len": S.Field("count"),
    "output_len": S.Field("count"),
    "weight_format": S.Field("enum", choices=FORMATS),
    "compute_format": S.Field("enum", choices=FORMATS),
    "kv_format": S.Field("enum", choices=FORMATS),
    "mode": S.Field("enum", choices=MODES),
    "prefill_chunk": S.Field("count"),
    "draft_len": S.Field("count", positive=False),
    "acceptance": S.Field("number", positive=False),
    "draft_params_fraction": S.Field("number", positive=False),
    "disaggregated": S.Field("bool"),
    "prefill_chips": S.Field("count"),
    "decode_chips": S.Field("count"),
    "kv_block": S.Field("count"),
    **{f"accuracy_cost_{fmt}": S.Field("number", positive=False) for fmt in FORMATS},
    "gqa_decode_kernel": S.Field("bool"),
    "fused_dequant": S.Field("bool"),
}


def plan_kwargs(values: dict[str, object]) -> dict[str, object]:
    """Scenario ``[plan]`` values -> :func:`serve_plan` keyword arguments."""
    out = {k: v for k, v in values.items() if not k.startswith("accuracy_cost_")}
    costs = {
        k.removeprefix("accuracy_cost_"): v
        for k, v in values.items()
        if k.startswith("accuracy_cost_")
    }
    if costs:
        out["accuracy_cost"] = costs
    return out


__all__ = ["MODES", "SERVE_PLAN", "ServePlan", "plan_kwargs", "serve_plan"]
