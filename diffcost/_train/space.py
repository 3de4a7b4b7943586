"""The discrete space of training plans: what may vary (:class:`TrainSearchSpace`), the axes
and choices of its candidate grid, Megatron-LM's validity rules on a grid's rows, and the rows
decoded to exact :class:`~diffcost._train.plan.TrainPlan` pytrees.  The search
(:mod:`diffcost._search.train`) and the validation rule (:mod:`diffcost._analysis.validate`)
both enumerate it.
"""

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._core.discrete import Axis, Candidates, Choice
from .._core.errors import Problem, SpecError
from .._core.options import (
    Choices,
    Degrees,
    Optimizer,
    Recompute,
    TrainObjective,
    TrainPrecision,
    ZeroStage,
    coerce,
    coerce_all,
    plain_value,
    searched_choices,
    searched_degrees,
    values,
)
from .._inputs.model import Model
from .._terms.tp_rules import TP_RULES
from .plan import (
    TRAIN_FIELDS,
    LoraTarget,
    TrainPlan,
    balanced_split,
    balanced_split_ok,
    encode_train,
)

#: Gradient bytes per parameter by training precision (``fp32, tf32, bf16, fp16, fp8``): the
#: 16-bit formats reduce 16-bit gradients (Megatron-LM ``--grad-reduce-in-bf16``, which the
#: launch line emits, :mod:`diffcost._launch.megatron`); fp32/tf32 keep fp32 gradients.
GRAD_BYTES = np.asarray([4.0, 4.0, 2.0, 2.0, 2.0])
_FIELD = {f.name: f for f in TRAIN_FIELDS}
#: The fields a training search varies as choices, as they declare it (``axis=Choices()``).
CHOICE_FIELDS = searched_choices(TRAIN_FIELDS)
#: The fields a training search varies as degrees, as they declare it (``axis=Degrees()``).
DEGREE_FIELDS = searched_degrees(TRAIN_FIELDS)
#: Each searched degree's declared axis, by name.
DEGREE_AXES = {f.name: f.axis for f in DEGREE_FIELDS if isinstance(f.axis, Degrees)}
_CHIPS_AT = 5


def choice_values(space: "TrainSearchSpace", name: str) -> tuple[Any, ...]:
    """The values the search tries for the choice field ``name`` (the space's, else the
    declaration's, :class:`~diffcost._core.options.Choices`)."""
    axis = _FIELD[name].axis
    assert isinstance(axis, Choices), f"{name} is not searched as a choice"
    return axis.of(_FIELD[name], space)


@dataclass(frozen=True)
class TrainSearchSpace:
    """What may vary.  ``chips`` lists the chip counts to consider (default: the system's).

    Options are typed (:mod:`diffcost._core.options`): each may be given as a member or its
    plain value, and a value that is not one of the choices raises
    :class:`~diffcost._core.errors.SpecError` naming the key and the choices.
    """

    global_batch: int
    seq_len: int
    chips: tuple[int, ...]
    recompute: tuple[Recompute | str, ...] = tuple(Recompute)
    zero: tuple[ZeroStage | int, ...] = tuple(ZeroStage)
    precision: tuple[TrainPrecision | str, ...] = (TrainPrecision.BF16,)
    sequence_parallel: tuple[bool, ...] = (False, True)
    max_cp: int = 1
    max_micro_batch: int = 16
    max_virtual_stages: int = 8
    optimizer: Optimizer | str = Optimizer.ADAM
    flash_attention: bool = True
    objective: TrainObjective | str = TrainObjective.TIME
    # The chip and calibration whose posterior the p90 objective reads (its constants' basis
    # and discrepancy regime, :func:`diffcost._inputs.posterior.risk_for`).
    chip: str = ""
    calibration: str = "default"
    # Discrete-only, fixed for the whole search (never relaxed or enumerated): the pipeline
    # split's first/last stage layers (0 = even) and LoRA (rank 0 = full training), given by
    # the user as in :func:`diffcost.train_plan`.
    first_stage_layers: int = 0
    last_stage_layers: int = 0
    lora_rank: int = 0
    lora_targets: LoraTarget | str = LoraTarget.QKV
    # The expert layer's layout, fixed likewise: each expert's width split (0 = the plan's tp,
    # Megatron-Core's default), the deduplicated dispatch, the all-to-all overlap and a CUDA
    # graph over the expert layer.
    expert_tp: int = 0
    ep_dedup: bool = False
    ep_overlap: bool = False
    moe_graphed: bool = False
    # The sharding runtime, fixed likewise: ZeRO-3 as DeepSpeed ran it in 2021 (its collectives
    # across nodes through each GPU's own NIC) instead of PyTorch FSDP's (the rails).
    deepspeed_zero3: bool = False
    # Plausibility ceilings (issue 42): ``(precision, MFU)`` pairs; a plan of that precision
    # whose predicted MFU is above its ceiling is not feasible for this search.  The command
    # line fills them with the best published MFU of the chip and precision
    # (:func:`diffcost._analysis.coverage.mfu_ceilings`), so that a plan no measurement stands
    # behind is reported, not returned as the best; empty: no ceiling.
    max_mfu: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        typed = {
            "recompute": coerce_all(Recompute, self.recompute, "recompute"),
            "zero": coerce_all(ZeroStage, self.zero, "zero"),
            "precision": coerce_all(TrainPrecision, self.precision, "precision"),
            "optimizer": coerce(Optimizer, self.optimizer, "optimizer"),
            "objective": coerce(TrainObjective, self.objective, "objective"),
            "lora_targets": coerce(LoraTarget, self.lora_targets, "lora_targets"),
        }
        for key, value in typed.items():
            object.__setattr__(self, key, value)
        bad = [
            (f, m) for f, m in self.max_mfu if f not in values(TrainPrecision) or not 0.0 < m <= 1.0
        ]
        if bad:
            raise SpecError(
                [
                    Problem(
                        "<arguments>",
                        "max_mfu",
                        f"{bad}: each ceiling is (training precision, MFU in (0, 1]); "
                        f"precisions: {', '.join(values(TrainPrecision))}",
                    )
                ]
            )


def _size(model: Model, space: "TrainSearchSpace", name: str) -> int:
    """The size a degree's declaration names (:class:`~diffcost._core.options.Degrees`):
    ``chips`` the space's largest chip count, else the space's attribute, else the model's."""
    if name == "chips":
        return max(space.chips)
    if hasattr(space, name):
        return int(getattr(space, name))
    return int(getattr(model, name))


def axis_names(space: "TrainSearchSpace") -> tuple[str, ...]:
    """The degree axes' names, in column order: the declared degrees
    (:data:`DEGREE_FIELDS`) with the chip count after the first five (where the relaxed
    variables have held it since expert parallelism joined)."""
    names = [f.name for f in DEGREE_FIELDS]
    return (*names[:_CHIPS_AT], "chips", *names[_CHIPS_AT:])


def axes_for(model: Model, space: TrainSearchSpace) -> tuple[list[Axis], list[Choice]]:
    """The discrete space: allowed values of every degree, as each declares them
    (``axis=Degrees(...)``), of the chip count and of every choice."""
    chips = Axis("chips", tuple(float(c) for c in sorted(space.chips)))
    size = lambda name: _size(model, space, name)  # noqa: E731
    degrees = {k: Axis(k, axis.of(model, space, size)) for k, axis in DEGREE_AXES.items()}
    axes = [chips if n == "chips" else degrees[n] for n in axis_names(space)]
    choices = [Choice(f.name, choice_values(space, f.name)) for f in CHOICE_FIELDS]
    return axes, choices


@dataclass(frozen=True)
class _Shape:
    """The model integers the validity rules read (static inside ``jit``)."""

    layers: int
    kv_heads: int
    expert_ffn_hidden: int

    @staticmethod
    def of(model: Model) -> "_Shape":
        return _Shape(int(model.layers), int(model.kv_heads), int(model.expert_ffn_hidden))


def valid(
    c: Candidates | dict[str, Any], model: Model | _Shape, space: TrainSearchSpace, xp: Any = np
) -> Any:
    """Joint validity, the rules of :func:`diffcost.train_problems`: integer dp, divisibility,
    KV heads a multiple or divisor of tp, interleaving only with pp > 1 and a micro-batch count
    that pp divides (Megatron-LM, :mod:`diffcost._train.rules`), SP only with tp > 1, ``ep``
    dividing dp and each expert's width divisible by tp (Megatron-Core).  ``xp``: numpy, or
    ``jax.numpy`` inside the on-device enumeration (``c`` then the traced columns)."""
    shape = model if isinstance(model, _Shape) else _Shape.of(model)
    col = c.columns if isinstance(c, Candidates) else c
    dp = col["chips"] / (col["tp"] * col["pp"] * col["cp"])
    layers = shape.layers
    ok = (dp >= 1) & (xp.abs(dp - xp.round(dp)) < 1e-6)
    dpi = xp.maximum(xp.round(dp), 1)
    ok &= space.global_batch % (dpi * col["micro_batch"]) == 0
    ok &= _split_ok(layers, col["pp"], col["virtual_stages"], space, xp)
    ok &= (col["pp"] > 1) | (col["virtual_stages"] == 1)
    micro_batches = xp.floor(space.global_batch / (dpi * col["micro_batch"]))
    ok &= (col["virtual_stages"] == 1) | (micro_batches % col["pp"] == 0)
    for rule in TP_RULES:  # the two-way rules (one-way ones chose the candidate degrees)
        if rule.either_way:
            ok &= rule.holds(getattr(shape, rule.key), col["tp"])
    ok &= (col["tp"] > 1) | (col["sequence_parallel"] == 0)
    ok &= _expert_grid_ok(col, dpi, shape, space)
    return ok


def _expert_grid_ok(col: Any, dpi: Any, shape: "_Shape", space: TrainSearchSpace) -> Any:
    """Megatron-Core's expert grid: with each expert split over the layer's ``tp`` (the
    default), ``ep`` divides ``dp`` and ``tp`` the expert width; with ``expert_tp`` given,
    ``expert_tp ep`` divides the ``tp cp dp`` ranks of a stage that MoE parallel folding
    lays the grid over (Liu et al., arXiv:2504.14960; ``megatron/core/parallel_state.py``:
    ``expert_tensor_model_pipeline_parallel_size`` must divide the world) and ``expert_tp``
    the expert width."""
    if space.expert_tp <= 0:
        return (dpi % col["ep"] == 0) & (shape.expert_ffn_hidden % col["tp"] == 0)
    stage_ranks = col["tp"] * col["cp"] * dpi
    return (stage_ranks % (space.expert_tp * col["ep"]) == 0) & (
        shape.expert_ffn_hidden % space.expert_tp == 0
    )


def _split_ok(layers: int, pp: Any, v: Any, space: TrainSearchSpace, xp: Any = np) -> Any:
    """Megatron-LM's pipeline split (:func:`diffcost._train.rules.pipeline_split_violation`):
    ``L % (p v) == 0`` when even; uneven: ``p > 1``, the rest ``L - f - l`` divides over the
    remaining stages (or is 0 with none left), every stage's layers divisible by ``v``."""
    if not _uneven(space):  # even, or the balanced split where pp does not divide the layers
        return (layers % (pp * v) == 0) | balanced_split_ok(layers, pp, v, xp)
    f, last = space.first_stage_layers, space.last_stage_layers
    stages = pp - (f > 0) - (last > 0)
    rest = layers - f - last
    middle = xp.where(stages > 0, rest / xp.maximum(stages, 1), 0.0)
    ok = (pp > 1) & (rest >= 0) & xp.where(stages > 0, rest % xp.maximum(stages, 1) == 0, rest == 0)
    first_n = f if f > 0 else middle
    last_n = last if last > 0 else middle
    for n in (first_n, middle, last_n):
        ok &= xp.mod(n, v) == 0
    return ok


def _one_hots(name: str, chosen: Any, n: int) -> np.ndarray:
    """One-hot rows over a categorical field's choices (``chosen``: one value or one per row)."""
    options = _FIELD[name].options()
    picks = np.broadcast_to(np.asarray(chosen, dtype=object), (n,))
    return np.eye(len(options))[[options.index(_FIELD[name].plain(v)) for v in picks]]


def fixed_fields(space: Any) -> dict[str, Any]:
    """The plain value of every training field a search keeps the same for all its plans, as
    the fields declare it: the space's attribute of the field's name (``optimizer``,
    ``flash_attention``, the pipeline split, LoRA, ``global_batch``), else the field's default
    (``overlap_grad_reduce``, a switch that is off).  Not in it: the searched fields (declared
    with an ``axis``) and those derived per plan (``dp``, ``shard_group``, ``expert_tp``:
    ``derived=True``) unless the space gives them (a value that is not 0).  An uneven split is
    a user's choice of a layout the even split cannot express (126 layers on 16 stages), and
    LoRA changes what is trained, not how: neither is searched."""
    out = {}
    for f in TRAIN_FIELDS:
        if f.axis is not None:
            continue
        if hasattr(space, f.name) and (getattr(space, f.name) or not f.derived):
            out[f.name] = plain_value(_FIELD, f.name, getattr(space, f.name))
        elif not f.derived and f.default is not None:
            out[f.name] = f.default
    return out


def _fixed(space: TrainSearchSpace) -> dict[str, np.ndarray]:
    """:func:`fixed_fields` encoded: numbers as float arrays, choices as one-hot rows."""
    return {
        k: _one_hots(k, v, 1)[0] if _FIELD[k].kind == "categorical" else np.asarray(float(v))
        for k, v in fixed_fields(space).items()
    }


def _uneven(space: TrainSearchSpace) -> bool:
    return space.first_stage_layers > 0 or space.last_stage_layers > 0


def _grad_bytes(precision: Any) -> Any:
    """Gradient bytes of precision weights (numpy or JAX rows): :data:`GRAD_BYTES` in their
    dtype."""
    return precision @ np.asarray(GRAD_BYTES, dtype=precision.dtype)


def _plan_fields(
    col: Any, space: TrainSearchSpace, onehot: Any, full: Any, layers: int | None, xp: Any = np
) -> dict[str, Any]:
    """A plan's fields from candidate columns (shared by the host table and the on-device
    enumeration): ``onehot(name)`` gives a choice's one-hot rows, ``full(value)`` a constant
    column; without a split the user gave, each row's pipeline split is the even one or, where
    ``pp`` does not divide the model's ``layers``, :func:`~diffcost._train.plan.balanced_split`."""
    chosen = {
        f.name: onehot(f.name) if f.kind == "categorical" else col[f.name] * 1.0
        for f in CHOICE_FIELDS
    }
    split = {}
    if layers is not None and not _uneven(space):
        first, last = balanced_split(layers, col["pp"], xp)
        split = {"first_stage_layers": first, "last_stage_layers": last}
    return {
        **{k: full(v) for k, v in _fixed(space).items()},
        **split,
        **{f.name: col[f.name] for f in DEGREE_FIELDS},
        "dp": col["chips"] / (col["tp"] * col["pp"] * col["cp"]),
        **chosen,
        "grad_bytes_per_param": _grad_bytes(chosen["precision"]),
    }


def _plain_column(name: str, values: Any) -> Any:
    """A choice column as its field's plain values: integers for an integer enumeration (the
    ZeRO stage; candidate columns hold floats)."""
    options = _FIELD[name].options()
    if options and isinstance(options[0], int) and not isinstance(options[0], bool):
        return np.asarray([int(v) for v in values], dtype=object)
    return values


def to_plans(
    c: Candidates, space: TrainSearchSpace, dtype=None, layers: int | None = None
) -> TrainPlan:
    """Stack candidate rows into one exact :class:`TrainPlan` pytree (leading axis = rows);
    with the model's ``layers``, each row's pipeline split (:func:`_plan_fields`)."""
    col = c.columns
    n = len(c)
    dtype = dtype or jnp.result_type(float)
    f = lambda x: jnp.asarray(np.asarray(x, dtype=np.float64), dtype=dtype)  # noqa: E731
    chosen: dict[str, Any] = {f.name: _plain_column(f.name, col[f.name]) for f in CHOICE_FIELDS}
    onehot = lambda name: _one_hots(name, chosen[name], n)  # noqa: E731
    full = lambda v: np.broadcast_to(v, (n, *np.shape(v)))  # noqa: E731
    fields = _plan_fields(col, space, onehot, full, layers)
    return encode_train({k: f(v) for k, v in fields.items()})


def _device_plans(
    cols: dict, index: dict, space: TrainSearchSpace, n: int, layers: int | None = None
) -> TrainPlan:
    """:func:`to_plans` inside ``jit``, from :func:`device_columns` (choices by option index)."""

    def onehot(name: str) -> jax.Array:
        options = choice_values(space, name)
        table = _one_hots(name, _plain_column(name, options), len(options))
        return jnp.asarray(table, jnp.result_type(float))[index[name]]

    full = lambda v: jnp.broadcast_to(jnp.asarray(v, jnp.result_type(float)), (n, *np.shape(v)))  # noqa: E731
    return encode_train(_plan_fields(cols, space, onehot, full, layers, jnp))


def plan_row(row: dict, space: TrainSearchSpace, layers: int | None = None) -> dict:
    """A candidate row as plain plan values (ints where integer); with the model's ``layers``,
    the :func:`~diffcost._train.plan.balanced_split` where ``pp`` does not divide them and the
    space gives no split."""
    out = {k: plain_value(_FIELD, k, v) for k, v in row.items()}
    if layers is not None and not _uneven(space) and layers % int(out["pp"]):
        first, last = balanced_split(layers, out["pp"])
        out["first_stage_layers"], out["last_stage_layers"] = int(first), int(last)
    out["dp"] = out["chips"] // (out["tp"] * out["pp"] * out["cp"])
    out["global_batch"], out["seq_len"] = space.global_batch, space.seq_len
    return out


__all__ = [
    "CHOICE_FIELDS",
    "DEGREE_AXES",
    "DEGREE_FIELDS",
    "GRAD_BYTES",
    "choice_values",
    "fixed_fields",
    "TrainSearchSpace",
    "axes_for",
    "axis_names",
    "plan_row",
    "to_plans",
    "valid",
]
