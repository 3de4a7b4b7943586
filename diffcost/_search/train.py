"""Automatic parallelism search for training: relaxed gradient descent, verified exactly.

Search variables (Narayanan et al. SC'21 §3 for the space): tensor, pipeline and context
parallel degrees, micro-batch, virtual pipeline stages, recomputation, ZeRO stage, sequence
parallelism and (optionally) precision and chip count; the data-parallel degree closes the
product ``tp * pp * cp * dp = chips``, so the relaxed degrees live on a simplex of log2 values.
Constraints: memory <= capacity (a hinge on ``log(used / capacity)``), divisibility (heads and
ffn by tp, KV heads a multiple or divisor of tp, layers by pp * v, global batch by dp *
micro-batch, micro-batch count by pp when interleaved, sequence by cp) and a precision the chip
has units for (:mod:`diffcost._train.rules`), enforced exactly when the relaxed optimum is
rounded.
"""

import math
from dataclasses import dataclass
from typing import Any, final

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._core.exported import exported_program
from .._core.options import (
    Optimizer,
    Recompute,
    TrainObjective,
    TrainPrecision,
    ZeroStage,
    coerce,
    coerce_all,
    plain_value,
    values,
)
from .._core.smooth import RELAXED
from .._inputs.hardware import System
from .._inputs.model import Model
from .._terms.tp_rules import TP_RULES
from .._train.cost import TrainBreakdown, TrainCost
from .._train.plan import TRAIN_FIELDS, LoraTarget, TrainPlan, encode_train
from .._train.rules import fp8_units
from .core import (
    Axis,
    Candidates,
    Choice,
    Evaluation,
    Scan,
    SearchProblem,
    SearchResult,
    device_columns,
    enumerate_all,
    evaluate_in_buckets,
    layout,
    optimise,
    require_price,
    search,
    unstack,
)

OBJECTIVES: tuple[str, ...] = values(TrainObjective)
_CHUNK = 16384
#: Gradient bytes per parameter by training precision (``fp32, tf32, bf16, fp16, fp8``): the
#: 16-bit formats reduce 16-bit gradients (Megatron-LM ``--grad-reduce-in-bf16``, which the
#: launch line emits, :mod:`diffcost._launch.megatron`); fp32/tf32 keep fp32 gradients.
GRAD_BYTES = np.asarray([4.0, 4.0, 2.0, 2.0, 2.0])
_FIELD = {f.name: f for f in TRAIN_FIELDS}


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
    # and discrepancy regime, :func:`diffcost._analysis.uncertainty.risk_for`).
    chip: str = ""
    calibration: str = "default"
    # Discrete-only, fixed for the whole search (never relaxed or enumerated): the pipeline
    # split's first/last stage layers (0 = even) and LoRA (rank 0 = full training), given by
    # the user as in :func:`diffcost.train_plan`.
    first_stage_layers: int = 0
    last_stage_layers: int = 0
    lora_rank: int = 0
    lora_targets: LoraTarget | str = LoraTarget.QKV

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


def _tp_one_way(model: Model, tp: int) -> bool:
    """The TP rules that hold for every larger model integer's divisor (heads and MLP width
    divisible by ``tp``): they choose the candidate degrees; the others are masked
    (:func:`valid`)."""
    return all(r.holds(int(getattr(model, r.key)), tp) for r in TP_RULES if not r.either_way)


def _divisors(n: int, limit: int) -> tuple[float, ...]:
    return tuple(float(d) for d in range(1, min(n, limit) + 1) if n % d == 0)


def axes_for(model: Model, space: TrainSearchSpace) -> tuple[list[Axis], list[Choice]]:
    """The discrete space: allowed values of every degree and categorical.  Context
    parallelism ``cp > 1`` needs the sequence divisible by ``2 cp`` (Megatron-LM splits it into
    ``2 cp`` chunks for load balance: ``validate_args``, :mod:`diffcost._train.rules`)."""
    layers = int(model.layers)
    n_max = max(space.chips)
    cps = tuple(
        float(2**k)
        for k in range(0, int(math.log2(max(space.max_cp, 1))) + 1)
        if (k == 0 or space.seq_len % 2 ** (k + 1) == 0) and 2**k <= n_max
    )
    axes = [
        # the TP rules (:data:`~diffcost._terms.tp_rules.TP_RULES`): one-way ones here
        Axis("tp", tuple(float(t) for t in range(1, n_max + 1) if _tp_one_way(model, t))),
        Axis(
            "pp",
            tuple(float(p) for p in range(1, min(layers, n_max) + 1))
            if _uneven(space)
            else _divisors(layers, n_max),
        ),
        Axis("cp", cps),
        Axis("micro_batch", _divisors(space.global_batch, space.max_micro_batch)),
        # each model chunk holds at least one layer: more chunks than layers cannot exist
        Axis(
            "virtual_stages",
            tuple(float(v) for v in range(1, min(space.max_virtual_stages, layers) + 1)),
        ),
        Axis("chips", tuple(float(c) for c in sorted(space.chips))),
        # expert parallelism: a divisor of the routed experts (1 for a dense model)
        Axis("ep", _divisors(int(model.experts), n_max) if int(model.experts) else (1.0,)),
    ]
    choices = [
        Choice("recompute", tuple(space.recompute)),
        Choice("zero", tuple(space.zero)),
        Choice("precision", tuple(space.precision)),
        Choice("sequence_parallel", tuple(space.sequence_parallel)),
    ]
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
    ok &= (dpi % col["ep"] == 0) & (shape.expert_ffn_hidden % col["tp"] == 0)
    return ok


def _split_ok(layers: int, pp: Any, v: Any, space: TrainSearchSpace, xp: Any = np) -> Any:
    """Megatron-LM's pipeline split (:func:`diffcost._train.rules.pipeline_split_violation`):
    ``L % (p v) == 0`` when even; uneven: ``p > 1``, the rest ``L - f - l`` divides over the
    remaining stages (or is 0 with none left), every stage's layers divisible by ``v``."""
    if not _uneven(space):
        return layers % (pp * v) == 0
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


def enumerate_space(model: Model, space: TrainSearchSpace) -> Candidates:
    """Every valid discrete plan (the exhaustive oracle's input)."""
    return enumerate_all(TrainProblem(None, model, space))


def _one_hots(name: str, chosen: Any, n: int) -> np.ndarray:
    """One-hot rows over a categorical field's choices (``chosen``: one value or one per row)."""
    options = _FIELD[name].options()
    picks = np.broadcast_to(np.asarray(chosen, dtype=object), (n,))
    return np.eye(len(options))[[options.index(_FIELD[name].plain(v)) for v in picks]]


def _fixed(space: TrainSearchSpace) -> dict[str, np.ndarray]:
    """The fields a search keeps fixed (discrete-only): the pipeline split and LoRA, as the
    space gives them.  An uneven split is a user's choice of a layout the even split cannot
    express (126 layers on 16 stages), and LoRA changes what is trained, not how."""
    return {
        "first_stage_layers": np.asarray(float(space.first_stage_layers)),
        "last_stage_layers": np.asarray(float(space.last_stage_layers)),
        "lora_rank": np.asarray(float(space.lora_rank)),
        "lora_targets": _one_hots("lora_targets", space.lora_targets, 1)[0],
    }


def _uneven(space: TrainSearchSpace) -> bool:
    return space.first_stage_layers > 0 or space.last_stage_layers > 0


def _grad_bytes(precision: Any) -> Any:
    """Gradient bytes of precision weights (numpy or JAX rows): :data:`GRAD_BYTES` in their
    dtype."""
    return precision @ np.asarray(GRAD_BYTES, dtype=precision.dtype)


def _plan_fields(col: Any, space: TrainSearchSpace, onehot: Any, full: Any) -> dict[str, Any]:
    """A plan's fields from candidate columns (shared by the host table and the on-device
    enumeration): ``onehot(name)`` gives a choice's one-hot rows, ``full(value)`` a constant
    column."""
    return {
        "tp": col["tp"],
        "pp": col["pp"],
        "cp": col["cp"],
        "dp": col["chips"] / (col["tp"] * col["pp"] * col["cp"]),
        "ep": col["ep"],
        "micro_batch": col["micro_batch"],
        "global_batch": full(space.global_batch),
        "seq_len": full(space.seq_len),
        "virtual_stages": col["virtual_stages"],
        "sequence_parallel": col["sequence_parallel"] * 1.0,
        "flash_attention": full(float(space.flash_attention)),
        "overlap_grad_reduce": full(1.0),
        "recompute": onehot("recompute"),
        "zero": onehot("zero"),
        "precision": onehot("precision"),
        "grad_bytes_per_param": _grad_bytes(onehot("precision")),
        "optimizer": onehot("optimizer"),
        **{k: full(v) for k, v in _fixed(space).items()},
    }


def to_plans(c: Candidates, space: TrainSearchSpace, dtype=None) -> TrainPlan:
    """Stack candidate rows into one exact :class:`TrainPlan` pytree (leading axis = rows)."""
    col = c.columns
    n = len(c)
    dtype = dtype or jnp.result_type(float)
    f = lambda x: jnp.asarray(np.asarray(x, dtype=np.float64), dtype=dtype)  # noqa: E731
    chosen = {k: col[k] for k in ("recompute", "precision")}
    chosen |= {"zero": col["zero"].astype(int), "optimizer": space.optimizer}
    onehot = lambda name: _one_hots(name, chosen[name], n)  # noqa: E731
    full = lambda v: np.broadcast_to(v, (n, *np.shape(v)))  # noqa: E731
    return encode_train({k: f(v) for k, v in _plan_fields(col, space, onehot, full).items()})


def _device_plans(cols: dict, index: dict, space: TrainSearchSpace, n: int) -> TrainPlan:
    """:func:`to_plans` inside ``jit``, from :func:`device_columns` (choices by option index)."""

    def onehot(name: str) -> jax.Array:
        if name == "optimizer":
            return full(_one_hots(name, space.optimizer, 1)[0])
        options = getattr(space, name)
        table = _one_hots(name, [int(o) if name == "zero" else o for o in options], len(options))
        return jnp.asarray(table, jnp.result_type(float))[index[name]]

    full = lambda v: jnp.broadcast_to(jnp.asarray(v, jnp.result_type(float)), (n, *np.shape(v)))  # noqa: E731
    return encode_train(_plan_fields(cols, space, onehot, full))


def objective_of(out: TrainBreakdown, objective: TrainObjective | str) -> jax.Array:
    """Seconds per step, USD per token, or joules per token (``p90``: the median seconds per
    step, which the exact evaluation raises to its upper quantile, :func:`_evaluate`)."""
    objective = coerce(TrainObjective, objective, "objective")
    tokens = out.tokens_per_s * out.step_time_s
    if objective is TrainObjective.COST:
        return out.cost_usd / tokens
    if objective is TrainObjective.ENERGY:
        return out.energy_j / tokens
    return out.step_time_s


def _per_plan(cost: TrainCost, objective: str, risk: Any):
    """The exact objective, headroom and breakdown of one plan; with ``risk`` (the p90
    objective) the step time's upper quantile ``y exp(Z80 sigma)``
    (:mod:`diffcost._analysis.uncertainty`: the constants' posterior and the discrepancy of the
    plan's regime, ZeRO-3 across nodes or not)."""
    from .._analysis.uncertainty import log_sigma, upper_quantile, zero3_multinode_weight

    def one(plan):
        system = eqx.tree_at(lambda s: s.num_chips, cost.system, plan.num_chips())
        one_cost = TrainCost(system, cost.model)
        out = one_cost(plan)
        obj = objective_of(out, objective)
        if risk is not None:
            w = zero3_multinode_weight(plan, system)
            obj = upper_quantile(obj, log_sigma(one_cost, plan, "step_time_s", risk, w))
        return obj, out.headroom_bytes, out

    return one


@exported_program("train-evaluate")
def _evaluate(cost: TrainCost, plans: TrainPlan, objective: str, risk=None):
    """Exact objective, headroom and breakdown of every plan (:func:`_per_plan`)."""
    return jax.vmap(_per_plan(cost, objective, risk))(plans)


@dataclass(frozen=True)
class _ScanKey:
    """The static part of an on-device enumeration (the key of its compilation)."""

    axes: tuple[Axis, ...]
    choices: tuple[Choice, ...]
    shape: _Shape
    space: TrainSearchSpace
    chunk: int
    k: int


@exported_program("train-scan")
def _scan(cost: TrainCost, start: jax.Array, risk: Any, key: _ScanKey):
    """Flat plans ``start .. start + chunk`` decoded, checked and evaluated exactly; returns the
    valid and feasible counts and the ``k`` best (index, objective, breakdown)."""
    flat = start + jnp.arange(key.chunk, dtype=start.dtype)
    cols, index = device_columns(key.axes, key.choices, flat)
    total = Candidates.size_of(key.axes, key.choices)
    ok = valid(cols, key.shape, key.space, jnp) & (flat < total)
    plans = _device_plans(cols, index, key.space, key.chunk)
    obj, headroom, out = jax.vmap(_per_plan(cost, key.space.objective, risk))(plans)
    feasible = ok & (headroom >= 0) & (out.unsupported_format == 0) & jnp.isfinite(obj)
    score = jnp.where(feasible, obj, jnp.inf)
    _, top = jax.lax.top_k(-score, key.k)
    best = jax.tree_util.tree_map(lambda x: x[top], out)
    return jnp.sum(ok), jnp.sum(feasible), top, score[top], best


def risk_of(space: TrainSearchSpace, objective: str | None = None) -> Any:
    """The :class:`~diffcost._analysis.uncertainty.Risk` a p90 search ranks by (None for the
    other objectives); a SpecError without a chip name or a stored posterior."""
    if (objective or space.objective) != TrainObjective.P90:
        return None
    from .._analysis.uncertainty import required_risk

    return required_risk(space.chip, space.calibration, "train_throughput")


def evaluate_exact(system: System, model: Model, c: Candidates, space: TrainSearchSpace):
    """Exact objective, headroom and breakdowns of every candidate, in fixed-size chunks."""
    cost = TrainCost(system, model)
    risk = risk_of(space)
    return evaluate_in_buckets(
        lambda rows: _evaluate(cost, to_plans(rows, space), space.objective, risk), c, _CHUNK
    )


# --- relaxed search ----------------------------------------------------------------------------
def _layout(space: TrainSearchSpace) -> dict[str, slice]:
    names = ("recompute", "zero", "precision", "sequence_parallel")
    return layout(7, [(name, len(getattr(space, name))) for name in names])


def relaxed_plan(
    theta: jax.Array, tau: jax.Array, space: TrainSearchSpace, sizes: jax.Array
) -> tuple[TrainPlan, jax.Array]:
    """The relaxed plan encoded by ``theta`` at softmax temperature ``tau``, and its chip count.

    ``sizes = [global_batch, seq_len, chips]`` is traced, so one compilation serves every
    scenario with the same structure (:func:`_structure`).  A choice's softmax weights are
    placed on the field's full list of options (zero weight on options outside the space).
    """
    lay = _layout(space)
    x = theta[lay["x"]]
    tp, pp, cp, mb, v = (2.0 ** x[i] for i in range(5))
    chips = 2.0 ** x[5] if len(space.chips) > 1 else sizes[2]
    ep = 2.0 ** x[6]

    def soft(name: str) -> jax.Array:
        w = jax.nn.softmax(theta[lay[name]] / tau)
        full = _FIELD[name].options()
        where = jnp.asarray([full.index(getattr(o, "value", o)) for o in getattr(space, name)])
        return jnp.zeros(len(full)).at[where].set(w)

    sp_w = jax.nn.softmax(theta[lay["sequence_parallel"]] / tau)
    sp = jnp.sum(sp_w * jnp.asarray([float(s) for s in space.sequence_parallel]))
    plan = encode_train(
        {
            "tp": tp,
            "pp": pp,
            "cp": cp,
            "dp": chips / (tp * pp * cp),
            "ep": ep,
            "micro_batch": mb,
            "global_batch": sizes[0],
            "seq_len": sizes[1],
            "virtual_stages": v,
            "sequence_parallel": sp,
            "flash_attention": jnp.asarray(float(space.flash_attention)),
            "overlap_grad_reduce": jnp.asarray(1.0),
            "recompute": soft("recompute"),
            "zero": soft("zero"),
            "precision": soft("precision"),
            "grad_bytes_per_param": _grad_bytes(soft("precision")),
            "optimizer": jnp.asarray(_one_hots("optimizer", space.optimizer, 1)[0]),
            **{k: jnp.asarray(v) for k, v in _fixed(space).items()},
        }
    )
    return plan, chips


def relaxed_loss(theta, tau, system: System, model: Model, space: TrainSearchSpace, lo, hi, sizes):
    """``log(objective)`` plus smooth penalties for memory, bounds, dp >= 1 and m >= 1."""
    return relaxed_loss_and_out(theta, tau, system, model, space, lo, hi, sizes)[0]


def relaxed_loss_and_out(
    theta, tau, system: System, model: Model, space: TrainSearchSpace, lo, hi, sizes
):
    """:func:`relaxed_loss` and the relaxed :class:`TrainBreakdown` it was computed from."""
    plan, chips = relaxed_plan(theta, tau, space, sizes)
    sys_ = eqx.tree_at(lambda s: s.num_chips, system, chips)
    out = TrainCost(sys_, model, RELAXED)(plan)
    x = theta[_layout(space)["x"]]
    sq = lambda z: jnp.square(jax.nn.relu(z))  # noqa: E731
    over = jnp.log(out.memory.total_bytes / out.capacity_bytes)
    penalty = 20.0 * jax.nn.relu(over) + 200.0 * sq(over)
    penalty += 10.0 * jnp.sum(sq(lo - x) + sq(x - hi))
    penalty += 10.0 * sq(x[0] + x[1] + x[2] - jnp.log2(chips))
    penalty += 10.0 * sq(jnp.log2(plan.dp * plan.micro_batch / plan.global_batch))
    penalty += 10.0 * sq(x[6] - jnp.log2(plan.dp))  # ep ranks come from the dp ones
    penalty += 0.05 * out.divisibility_violation
    penalty += 10.0 * out.unsupported_format  # a refusal, not a cost: as strong as memory
    return jnp.log(objective_of(out, space.objective)) + penalty, out


def _structure(space: TrainSearchSpace) -> TrainSearchSpace:
    """The static part of a space (sizes zeroed): the key of the relaxed solver's compilation."""
    chips = (0,) if len(space.chips) == 1 else tuple(range(len(space.chips)))
    return TrainSearchSpace(
        **{
            **space.__dict__,
            "global_batch": 0,
            "seq_len": 0,
            "chips": chips,
            "max_cp": 0,
            "max_micro_batch": 0,
            "max_virtual_stages": 0,
        }
    )


@exported_program("train-solve")
def _solve(
    system, model, theta0, lo, hi, sizes, structure: TrainSearchSpace, steps: int, lr: float
):
    loss = lambda th, tau: relaxed_loss(th, tau, system, model, structure, lo, hi, sizes)
    return optimise(loss, theta0, steps, lr)


@final
class TrainProblem(SearchProblem):
    """The training search as a :class:`diffcost._search.core.SearchProblem`."""

    def __init__(self, system: System | None, model: Model, space: TrainSearchSpace):
        self.system, self.model, self.space = system, model, space
        self.objective = space.objective
        require_price(system, space.objective)
        self.risk = risk_of(space)  # a p90 search without a posterior fails here, first
        axes, choices = axes_for(model, space)
        self.axes, self.choices = tuple(axes), tuple(choices)

    def repair(self, c: Candidates) -> Candidates:
        """Nearest valid plan of each row: the largest allowed ``virtual_stages`` that divides
        the layers per stage (1 without pipelining or when ``pp`` does not divide the
        micro-batch count), no sequence parallelism at ``tp = 1``."""
        col = c.columns
        layers = int(self.model.layers)
        v = col["virtual_stages"].copy()
        for i in np.nonzero(layers % (col["pp"] * v) != 0)[0]:
            per_stage = layers / col["pp"][i]
            ok = [x for x in range(int(v[i]), 0, -1) if per_stage % x == 0]
            v[i] = float(ok[0]) if ok else 1.0
        sp = np.where(col["tp"] == 1, False, col["sequence_parallel"])
        # Megatron-LM interleaves only when pp divides the micro-batch count: else plain 1F1B.
        dp = np.maximum(np.round(col["chips"] / (col["tp"] * col["pp"] * col["cp"])), 1.0)
        m = self.space.global_batch / (dp * col["micro_batch"])
        v = np.where((col["pp"] == 1) | (m % col["pp"] != 0), 1.0, v)
        c = c.with_column("virtual_stages", v)
        return c.with_column("sequence_parallel", sp)

    def coupled(self) -> dict[str, tuple[str, ...]]:
        """Fewer model-parallel ranks leave more data-parallel ranks: the micro-batch that keeps
        the micro-batch count scales with ``tp * pp * cp``."""
        return {"micro_batch": ("tp", "pp", "cp")}

    def layout(self) -> dict[str, slice]:
        return _layout(self.space)

    def valid(self, c: Candidates) -> np.ndarray:
        return valid(c, self.model, self.space)

    def scan(self, start: int, chunk: int, k: int) -> Scan:
        assert self.system is not None
        key = _ScanKey(self.axes, self.choices, _Shape.of(self.model), self.space, chunk, k)
        return Scan(*_scan(TrainCost(self.system, self.model), jnp.int32(start), self.risk, key))

    def evaluate(self, c: Candidates) -> Evaluation:
        assert self.system is not None
        obj, headroom, out = evaluate_exact(self.system, self.model, c, self.space)
        runs = np.asarray(out.unsupported_format) == 0  # no format the chip cannot train in
        return Evaluation(obj, np.asarray(headroom >= 0) & runs, out)

    def solve(self, theta0: np.ndarray, steps: int, lr: float) -> tuple[np.ndarray, np.ndarray]:
        lo = jnp.asarray([math.log2(min(a.values)) for a in self.axes])
        hi = jnp.asarray([math.log2(max(a.values)) for a in self.axes])
        sp = self.space
        sizes = jnp.asarray([sp.global_batch, sp.seq_len, max(sp.chips)], dtype=float)
        th, loss = _solve(
            self.system, self.model, jnp.asarray(theta0), lo, hi, sizes, _structure(sp), steps, lr
        )
        return np.asarray(th), np.asarray(loss)

    def plans(self, c: Candidates) -> list[TrainPlan]:
        return unstack(to_plans(c, self.space))

    def row(self, plan: TrainPlan) -> dict[str, Any]:
        return train_row(plan, [a.name for a in self.axes] + [c.name for c in self.choices])

    def binding(self, outputs: Any, i: int) -> str:
        return binding(outputs, i)

    def suggest(self) -> list[str]:
        assert self.system is not None
        return suggest(self.system, self.model, self.space)


def search_train(
    system: System,
    model: Model,
    space: TrainSearchSpace,
    **options,
) -> SearchResult:
    """Best exact training plan (see :func:`diffcost._search.core.search` for ``options``)."""
    return search(TrainProblem(system, model, space), **options)


def train_row(plan: TrainPlan, names: list[str]) -> dict[str, Any]:
    """An exact plan's plain values of the fields ``names`` (``chips``: the plan's chip count)
    and then ``dp``, ``global_batch`` and ``seq_len``, each read as its declaration says
    (:meth:`~diffcost._core.options.PlanField.read`); what :func:`plan_row` writes of the
    candidate row the plan was built from."""
    read = lambda k: _FIELD[k].read(getattr(plan, k))  # noqa: E731
    out = {k: int(round(float(plan.num_chips()))) if k == "chips" else read(k) for k in names}
    return out | {k: read(k) for k in ("dp", "global_batch", "seq_len")}


def plan_row(row: dict, space: TrainSearchSpace) -> dict:
    """A candidate row as plain plan values (ints where integer)."""
    out = {k: plain_value(_FIELD, k, v) for k, v in row.items()}
    out["dp"] = out["chips"] // (out["tp"] * out["pp"] * out["cp"])
    out["global_batch"], out["seq_len"] = space.global_batch, space.seq_len
    return out


def binding(out, i: int) -> str:
    """Which constraint or cost term shapes the optimum."""
    cap = float(out.capacity_bytes[i])
    head = float(out.headroom_bytes[i]) / cap
    step = float(out.step_time_s[i])
    terms = {
        "compute": float(out.compute_time_s[i] + out.recompute_time_s[i]),
        "tensor-parallel communication": float(out.tp_comm_time_s[i]),
        "pipeline bubble": float(out.pp_bubble_time_s[i] + out.pp_p2p_time_s[i]),
        "data-parallel communication": float(out.dp_comm_time_s[i]),
        "context-parallel communication": float(out.cp_comm_time_s[i]),
        "expert-parallel all-to-all": float(out.ep_comm_time_s[i]),
    }
    top = max(terms, key=lambda name: terms[name])
    mem = (
        f"memory capacity binds ({head:.0%} headroom)"
        if head < 0.10
        else f"memory does not bind ({head:.0%} headroom)"
    )
    return f"{mem}; largest time term: {top} ({terms[top] / step:.0%} of the step)"


def suggest(system: System, model: Model, space: TrainSearchSpace) -> list[str]:
    """What would make an infeasible request feasible, with numbers."""
    if float(fp8_units(system.chip)) == 0.0 and set(space.precision) <= {TrainPrecision.FP8}:
        return ["this chip has no FP8 matrix units: allow bf16 (--precision bf16)"]
    loose = TrainSearchSpace(
        **{
            **space.__dict__,
            "zero": (ZeroStage.WEIGHTS,),
            "recompute": (Recompute.FULL,),
            "objective": TrainObjective.TIME,
        }
    )
    cand = enumerate_space(model, loose)
    if len(cand) == 0:
        return [
            "no valid degree combination: check that the chip count has divisors matching "
            "the model's heads and layers"
        ]
    _, headroom, out = evaluate_exact(system, model, cand, loose)
    i = int(np.argmax(headroom))
    need, cap = float(out.memory.total_bytes[i]), float(out.capacity_bytes[i])
    fixed = float(out.memory.reserved_bytes[i])
    chips = max(space.chips)
    scale = (need - fixed) / max(cap - fixed, 1.0)
    more = 2 ** math.ceil(math.log2(max(chips * scale, chips + 1)))
    return [
        f"the most memory-frugal plan (ZeRO-3, full recomputation) needs {need / 1e9:.1f} GB per "
        f"chip against {cap / 1e9:.1f} GB: over by {(need - cap) / 1e9:.1f} GB",
        f"use about {more} chips or more (model state shrinks with the chip count under ZeRO-3)",
        "or shorten the sequence / global batch, or use chips with more memory",
    ]
