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

The behaviours of the serving engine (:mod:`diffcost._serve.behaviours`, which declares their
fields) change the bytes moved or the launches paid, so they are plan
fields (like ``TrainPlan.flash_attention``) whose defaults come from a named engine profile
(:mod:`diffcost._serve.engine`, ``engine=`` of :func:`serve_plan`, default
:data:`~diffcost._serve.engine.DEFAULT_ENGINE`); a value given explicitly wins:

* ``gqa_decode_kernel``: decode attention reads the K/V of a KV head once for its whole group of
  query heads (TensorRT-LLM XQA, FlashInfer, vLLM's GQA-aware kernels); false for kernels that
  read it once per query head (TensorRT-LLM <= 0.9 masked MHA on GQA models);
* ``fused_dequant``: weight-only formats are expanded to the compute format inside the GEMM
  (TensorRT-LLM weight-only GEMMs, Marlin, AWQ kernels); false when a separate kernel first
  writes a 16-bit copy of each weight matrix (DeepSpeed-Inference 2022 int8);
* ``cuda_graphs``: decode-only steps replay a captured CUDA graph, one host launch per step
  instead of one per kernel (vLLM, SGLang, TensorRT-LLM 1.x); false for engines that launch
  every kernel from the host (TensorRT-LLM 0.5/0.6 tables, DeepSpeed-Inference 2022).
"""

import difflib
import inspect
import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._core.errors import Problem, SpecError
from .._core.options import (
    Choices,
    Degrees,
    Format,
    PlanField,
    ServeMode,
    check_fields,
    one_hot,
    values,
)
from .._core.shared import once
from .._inputs import schema as S
from .._inputs.hardware import FORMATS, host_float, strong_float
from .._terms.tp_rules import tp_allowed
from .behaviours import BEHAVIOUR_FIELDS, ENGINE_BEHAVIOURS
from .engine import DEFAULT_ENGINE, ENGINE_PLAN_FIELDS, load_engine

#: Serving modes, in the order of ``ServePlan.mode``.  Disaggregation is a separate flag.
MODES: tuple[str, ...] = values(ServeMode)

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
        <behaviour>: one switch per engine behaviour, named and ordered as
            :data:`~diffcost._serve.behaviours.ENGINE_BEHAVIOURS` (``gqa_decode_kernel``,
            ``fused_dequant``, ``cuda_graphs``): 1 on, 0 off; declared by the behaviour's class
            (its ``field``), not here.
        expert_parallel: 1 if a mixture of experts' routed experts are spread whole over the
            instance's ``tp`` ranks (``E / tp`` experts each, at full width: vLLM
            ``--enable-expert-parallel``, SGLang ``--ep-size``), 0 if every expert is split by
            width over them like the dense MLP (tensor-parallel experts, the engines' default).

    Every field may carry leading batch dimensions (``*batch``): stacked plans for ``vmap``
    (sweeps, searches, validation) are built with the same constructor.
    """

    tp: Float[Array, "*batch"]
    pp: Float[Array, "*batch"]
    replicas: Float[Array, "*batch"]
    batch: Float[Array, "*batch"]
    input_len: Float[Array, "*batch"]
    output_len: Float[Array, "*batch"]
    weight_format: Float[Array, "*batch 8"]
    compute_format: Float[Array, "*batch 8"]
    kv_format: Float[Array, "*batch 8"]
    mode: Float[Array, "*batch 2"]
    prefill_chunk: Float[Array, "*batch"]
    draft_len: Float[Array, "*batch"]
    acceptance: Float[Array, "*batch"]
    draft_params_fraction: Float[Array, "*batch"]
    disaggregated: Float[Array, "*batch"]
    prefill_chips: Float[Array, "*batch"]
    decode_chips: Float[Array, "*batch"]
    kv_block: Float[Array, "*batch"]
    accuracy_cost: Float[Array, "*batch 8"]
    # One leaf per engine behaviour, in registry order (each is declared by its class).
    __annotations__.update(dict.fromkeys(ENGINE_BEHAVIOURS, Float[Array, "*batch"]))
    expert_parallel: Float[Array, "*batch"]

    if TYPE_CHECKING:  # the behaviours' leaves, which a type checker cannot list

        def __getattr__(self, name: str) -> Array: ...

    @once
    def instance_chips(self) -> Array:
        """Chips of one model instance: ``tp * pp``."""
        return self.tp * self.pp

    @once
    def replica_chips(self) -> Array:
        """Chips of one replica: ``tp * pp`` colocated, ``prefill + decode`` disaggregated."""
        d = self.disaggregated
        return (1.0 - d) * self.tp * self.pp + d * (self.prefill_chips + self.decode_chips)

    @once
    def num_chips(self) -> Array:
        """Chips of the whole deployment: ``replicas * replica_chips``."""
        return self.replicas * self.replica_chips()


def _is_int(value: object, minimum: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= minimum


def _is_number(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float))


_fmt = lambda name, default, doc, **kw: PlanField(  # noqa: E731
    name, "categorical", default, doc, choices=Format, **kw
)
_flag = lambda name, doc, **kw: PlanField(  # noqa: E731
    name, "bool", True if name != "disaggregated" else False, doc, **kw
)


def default_batch_grid() -> Array:
    """Batches 1..256, then 64 geometric steps to 16384 (rounded): what ``at_slo`` searches."""
    dense = jnp.arange(1.0, 257.0)
    sparse = jnp.round(jnp.geomspace(264.0, 16384.0, 64))
    return jnp.concatenate([dense, sparse])


def _batches(top: int) -> list[float]:
    """The batches a serving search tries up to ``top``: :func:`default_batch_grid` and the
    powers of two engines are often set to."""
    grid = set(np.asarray(default_batch_grid()).tolist()) | {2.0**k for k in range(15)}
    return sorted(float(b) for b in grid if b <= top)


def _tp_ok(model: Any, space: Any, tp: int) -> bool:
    del space
    return tp_allowed(model, tp)


def _pp_ok(model: Any, space: Any, pp: int) -> bool:
    del space
    return int(model.layers) % pp == 0


def _vllm(flag: str, trtllm: str = "") -> tuple[tuple[str, str], ...]:
    """A field's vLLM (and TensorRT-LLM ``trtllm-serve``) flag, as :attr:`PlanField.launch`
    holds it."""
    return (("vllm", flag),) + ((("trtllm", trtllm),) if trtllm else ())


#: Every field of :func:`serve_plan`, in keyword order (``accuracy_cost`` is a per-format table,
#: written ``accuracy_cost_<format>`` in scenario and sweep files, see :func:`plan_kwargs`).
SERVE_FIELDS: tuple[PlanField, ...] = (
    PlanField(
        "tp",
        "degree",
        1,
        "tensor-parallel degree of one instance",
        launch=_vllm("--tensor-parallel-size", "--tp_size"),
        axis=Degrees(divides="chips", keep=_tp_ok),
    ),
    PlanField(
        "pp",
        "degree",
        1,
        "pipeline-parallel degree of one instance",
        launch=_vllm("--pipeline-parallel-size", "--pp_size"),
        axis=Degrees(divides="chips", keep=_pp_ok),
    ),
    PlanField(
        "replicas",
        "count",
        1,
        "copies of the deployment",
        derived=True,
        help="Replicas (default: chips / chips per replica).",
        launch=_vllm("--data-parallel-size"),
    ),
    PlanField(
        "batch",
        "count",
        1,
        "concurrent sequences per instance",
        unit="sequences",
        launch=_vllm("--max-num-seqs", "--max_batch_size"),
        axis=Degrees(upto=("max_batch",), grid=_batches),
    ),
    PlanField("input_len", "count", 1024, "prompt tokens per request", unit="tokens"),
    PlanField("output_len", "count", 256, "generated tokens per request", unit="tokens"),
    _fmt(
        "weight_format",
        "bf16",
        "format weights are stored and streamed in",
        help="Weights: bf16|fp16|fp8|int8|int4|fp4|...",
        short="w",
        axis=Choices(listed_as="weight_formats"),
    ),
    PlanField(
        "compute_format",
        "categorical",
        None,
        "GEMM format (default: the weight format; bf16 for weight-only int8/int4)",
        choices=Format,
        derived=True,
        help="GEMM/activation format (default: the weight format; bf16 for int8/int4 weight-only).",
        short="compute",
    ),
    _fmt(
        "kv_format",
        "bf16",
        "KV-cache element format",
        help="KV-cache format (default bf16).",
        short="kv",
        axis=Choices(listed_as="kv_formats"),
    ),
    PlanField("mode", "categorical", "continuous", "batching mode", choices=ServeMode),
    PlanField(
        "prefill_chunk",
        "count",
        2048,
        "prompt tokens per iteration (chunked prefill)",
        unit="tokens",
        help="Prompt tokens per iteration (continuous).",
    ),
    PlanField(
        "draft_len",
        "count",
        0,
        "draft tokens per verify step (0: none)",
        minimum=0,
        unit="tokens",
        help="Speculative decoding: drafted tokens per step.",
    ),
    PlanField(
        "acceptance",
        "number",
        0.7,
        "acceptance probability of a draft token",
        check=lambda x: 0.0 <= x <= 1.0,
        reason="must be a probability in [0, 1], got {value!r}",
        help="Speculative decoding: acceptance rate.",
    ),
    PlanField(
        "draft_params_fraction",
        "number",
        0.0,
        "draft model size / target size",
        check=lambda x: 0.0 <= x < 1.0,
        reason="must lie in [0, 1), got {value!r}",
        flag="--draft-fraction",
    ),
    _flag(
        "disaggregated",
        "separate prefill and decode pools",
        flag="--disaggregated/--colocated",
    ),
    PlanField(
        "prefill_chips",
        "count",
        None,
        "prefill pool chips (default tp*pp)",
        derived=True,
        help="Prefill pool chips per replica.",
    ),
    PlanField(
        "decode_chips",
        "count",
        None,
        "decode pool chips (default tp*pp)",
        derived=True,
        help="Decode pool chips per replica.",
    ),
    PlanField(
        "kv_block",
        "count",
        16,
        "tokens per paged-KV block (vLLM default 16)",
        unit="tokens",
        help="Tokens per paged-KV block (1: contiguous).",
        launch=_vllm("--block-size"),
    ),
    *BEHAVIOUR_FIELDS,  # the engine behaviours' switches (diffcost._serve.behaviours)
    PlanField(
        "expert_parallel",
        "bool",
        False,
        "routed experts spread whole over the tp ranks (EP = tp)",
        flag="--expert-parallel/--tensor-parallel-experts",
        help="Mixture of experts: spread whole experts over the tp ranks (vLLM "
        "--enable-expert-parallel), or split every expert by width (default).",
        launch=_vllm("--enable-expert-parallel"),
        axis=Choices(),
    ),
)
_FIELD = {f.name: f for f in SERVE_FIELDS}


def _cross_problems(v: dict, source: str) -> list[Problem]:
    """Rules between fields: a draft model needs a size; pools hold whole instances."""
    problems: list[Problem] = []
    fraction, draft = v["draft_params_fraction"], v["draft_len"]
    fraction_ok = _is_number(fraction) and 0.0 <= fraction < 1.0
    if fraction_ok and _is_int(draft, 1) and fraction == 0.0:
        reason = (
            "must be > 0 when draft_len > 0 (the draft model's size "
            "as a fraction of the target's parameters)"
        )
        problems.append(Problem(source, "draft_params_fraction", reason))
    tp, pp = v["tp"], v["pp"]
    instance = tp * pp if _is_int(tp, 1) and _is_int(pp, 1) else None
    for key in ("prefill_chips", "decode_chips"):
        value = v[key]
        if instance is not None and _is_int(value, 1) and value % instance:
            reason = f"must be a multiple of tp*pp = {instance} (whole instances), got {value}"
            problems.append(Problem(source, key, reason))
    return problems


def _cost_problems(costs: dict, source: str) -> list[Problem]:
    problems = []
    for fmt, value in costs.items():
        if fmt not in FORMATS:
            reason = f"unknown format (allowed: {', '.join(FORMATS)})"
            problems.append(Problem(source, f"accuracy_cost.{fmt}", reason))
        elif not _is_number(value) or value < 0:
            reason = f"must be a non-negative number, got {value!r}"
            problems.append(Problem(source, f"accuracy_cost.{fmt}", reason))
    return problems


#: The order problems are reported in: integers, formats and mode, numbers, flags, pools.
_REPORT_ORDER = (
    *("tp", "pp", "replicas", "batch", "input_len", "output_len", "prefill_chunk", "kv_block"),
    *("draft_len", "weight_format", "compute_format", "kv_format", "mode", "acceptance"),
    *("draft_params_fraction", "disaggregated"),
    *(f.name for f in BEHAVIOUR_FIELDS),
    "expert_parallel",
    *("prefill_chips", "decode_chips"),
)


def _order(problems: list[Problem]) -> list[Problem]:
    """Problems in :data:`_REPORT_ORDER` (a cross-field rule is reported with its field), then
    those of fields it does not list, in declaration order (a new field needs no entry)."""
    listed = {k: i for i, k in enumerate(_REPORT_ORDER)}
    order = {k: len(listed) + i for i, k in enumerate(_FIELD)} | listed
    return sorted(problems, key=lambda p: order[p.key])


def engine_values(given: Mapping[str, Any], engine: str | None, source: str) -> dict[str, Any]:
    """Values of the engine-owned plan fields (:data:`ENGINE_PLAN_FIELDS`) that ``given``
    leaves ``None``: the profile's, else the field default (``kv_block`` 16).

    Raises:
        SpecError: an unknown engine, named as ``source: engine``.
    """
    if engine is not None and not (isinstance(engine, str) and engine):
        raise SpecError([Problem(source, "engine", f"must be an engine name, got {engine!r}")])
    try:
        profile = load_engine(DEFAULT_ENGINE if engine is None else engine, where=source)
    except SpecError as err:
        raise SpecError([Problem(p.file, "engine", p.reason) for p in err.problems]) from None
    defaults = {f: _FIELD[f].default for f in ENGINE_PLAN_FIELDS} | profile.plan_defaults()
    return {f: defaults[f] for f in ENGINE_PLAN_FIELDS if given.get(f) is None}


def default_compute_format(weight_format: str) -> str:
    """Weight-only int8/int4 run their GEMMs at bf16 (W8A16, W4A16); others in their format
    (an unknown weight format, reported elsewhere, defaults to bf16)."""
    if weight_format not in FORMATS:
        return "bf16"
    return _WEIGHT_ONLY_DEFAULT_COMPUTE.get(weight_format, weight_format)


def encode_serve(v: Mapping[str, ArrayLike]) -> "ServePlan":
    """The plan of field values ``v`` (numbers; ``weight_format``, ``compute_format``,
    ``kv_format`` and ``accuracy_cost`` as vectors over :data:`FORMATS`, ``mode`` over
    :data:`MODES`).  Works on scalars, stacked rows and traced values alike."""
    return ServePlan(**{k: jnp.asarray(v[k]) for k in ServePlan.__dataclass_fields__})


# The validating boundary of the library: it reports every ill-typed or out-of-range value
# as a SpecError (file, key, reason) itself, so the runtime type-check hook of the tests must not
# pre-empt that message with its own.
@typing.no_type_check
def serve_plan(
    *,
    tp: int = 1,
    pp: int = 1,
    replicas: int = 1,
    batch: int = 1,
    input_len: int = 1024,
    output_len: int = 256,
    weight_format: Format | str = "bf16",
    compute_format: Format | str | None = None,
    kv_format: Format | str = "bf16",
    mode: ServeMode | str = "continuous",
    prefill_chunk: int = 2048,
    draft_len: int = 0,
    acceptance: float = 0.7,
    draft_params_fraction: float = 0.0,
    disaggregated: bool = False,
    prefill_chips: int | None = None,
    decode_chips: int | None = None,
    kv_block: int | None = None,
    accuracy_cost: dict[str, float] | None = None,
    expert_parallel: bool = False,
    engine: str | None = None,
    source: str = "plan",
    **switches: bool | None,
) -> ServePlan:
    """Build an exact (integer, one-hot) serving plan, checking every field at once (the
    checks of :data:`SERVE_FIELDS` and the rules between fields).

    ``compute_format`` defaults to the weight format, except bf16 for the weight-only int8 and
    int4 formats (W8A16, W4A16).  ``prefill_chips`` and ``decode_chips`` default to one
    instance (``tp * pp``) each.  ``switches``: one keyword per engine behaviour
    (:data:`~diffcost._serve.behaviours.ENGINE_BEHAVIOURS`, e.g. ``cuda_graphs=False``); they and
    ``kv_block`` default to the profile of ``engine`` (a built-in name of ``specs/engines/`` or
    a file; default :data:`~diffcost._serve.engine.DEFAULT_ENGINE`; ``kv_block`` 16 without one).

    Raises:
        SpecError: listing every invalid field, named as ``source: field``.
    """
    args = dict(locals()) | dict.fromkeys(ENGINE_BEHAVIOURS) | switches
    unknown = [_unknown_keyword(k, source) for k in switches if k not in ENGINE_BEHAVIOURS]
    given = {k: args[k] for k in _FIELD}
    given.update(engine_values(given, engine, source))
    if compute_format is None:
        given["compute_format"] = default_compute_format(weight_format)
    costs = dict(accuracy_cost or {})
    problems = check_fields(SERVE_FIELDS, given, source) + _cross_problems(given, source)
    problems = _order(problems) + _cost_problems(costs, source) + unknown
    if problems:
        raise SpecError(problems)
    instance = tp * pp
    one = lambda names, value: one_hot(names.index(value), len(names))  # noqa: E731
    encoded = {
        k: one(_FIELD[k].options(), _FIELD[k].plain(v))
        if _FIELD[k].kind == "categorical"
        else strong_float(float(instance if v is None else v))
        for k, v in given.items()
    }
    encoded["accuracy_cost"] = host_float([float(costs.get(fmt, 0.0)) for fmt in FORMATS])
    return encode_serve(encoded)


def _unknown_keyword(key: str, source: str) -> Problem:
    close = difflib.get_close_matches(key, [*_FIELD, "accuracy_cost", "engine"], n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return Problem(source, key, f"unknown serve_plan field{hint}")


def _keyword(name: str) -> inspect.Parameter:
    """A behaviour switch as the keyword :func:`serve_plan` takes (``None``: the engine's)."""
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=bool | None
    )


# serve_plan's signature lists each behaviour's switch where ServePlan holds it (they arrive as
# ``**switches``, checked against the registry): introspection sees one keyword per field.
_params = list(inspect.signature(serve_plan).parameters.values())
_at = [p.name for p in _params].index("expert_parallel")
serve_plan.__signature__ = inspect.Signature(  # pyright: ignore[reportFunctionMemberAccess]
    [*_params[:_at], *map(_keyword, ENGINE_BEHAVIOURS), *_params[_at:-1]],
    return_annotation=ServePlan,
)

#: ``[plan]`` table of a ``kind = "serve"`` scenario (keys of :func:`serve_plan`; the accuracy
#: cost of a format is written ``accuracy_cost_<format>``).
SERVE_PLAN: dict[str, S.Field] = {}
for _name, _spec in S.plan_table(SERVE_FIELDS).items():
    SERVE_PLAN[_name] = _spec
    if _name == "kv_block":
        SERVE_PLAN.update(
            {f"accuracy_cost_{fmt}": S.Field("number", positive=False) for fmt in FORMATS}
        )
SERVE_PLAN["engine"] = S.Field("str", doc="serving engine profile (specs/engines/)")


def plan_kwargs(values: dict[str, Any]) -> dict[str, Any]:
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


__all__ = [
    "MODES",
    "SERVE_FIELDS",
    "SERVE_PLAN",
    "ServePlan",
    "default_batch_grid",
    "default_compute_format",
    "encode_serve",
    "engine_values",
    "plan_kwargs",
    "serve_plan",
]
