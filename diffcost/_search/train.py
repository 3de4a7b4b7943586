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
    Recompute,
    TrainObjective,
    TrainPrecision,
    ZeroStage,
    coerce,
    values,
)
from .._core.smooth import RELAXED
from .._inputs.hardware import FORMATS, System
from .._inputs.model import Model
from .._inputs.posterior import required_risk
from .._terms.risk import log_sigma, upper_quantile
from .._train.cost import TrainBreakdown, TrainCost
from .._train.plan import TrainPlan, encode_train
from .._train.regimes import zero3_multinode_weight
from .._train.rules import fp8_units
from .._train.space import (
    _FIELD,
    CHOICE_FIELDS,
    DEGREE_AXES,
    DEGREE_FIELDS,
    TrainSearchSpace,
    _device_plans,
    _fixed,
    _grad_bytes,
    _Shape,
    axes_for,
    axis_names,
    choice_values,
    to_plans,
    valid,
)
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


def enumerate_space(model: Model, space: TrainSearchSpace) -> Candidates:
    """Every valid discrete plan (the exhaustive oracle's input)."""
    return enumerate_all(TrainProblem(None, model, space))


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


#: The ceiling of a precision the search was given none for: no MFU reaches it.
_NO_CEILING = 1e3


def plausible(
    precision: jax.Array, mfu: jax.Array, max_mfu: tuple[tuple[str, float], ...]
) -> jax.Array:
    """Whether each plan's predicted MFU is at most the ceiling of its precision
    (``precision``: the plans' one-hot weights over :data:`~diffcost.FORMATS`; ``max_mfu``:
    :attr:`~diffcost._train.space.TrainSearchSpace.max_mfu`); True everywhere without one."""
    if not max_mfu:
        return jnp.ones(jnp.shape(mfu), dtype=bool)
    limit = np.full(len(FORMATS), _NO_CEILING)
    for fmt, ceiling in max_mfu:
        limit[FORMATS.index(fmt)] = ceiling
    return mfu <= precision @ jnp.asarray(limit, dtype=precision.dtype)


@exported_program("train-evaluate")
def _evaluate(cost: TrainCost, plans: TrainPlan, objective: str, risk=None, max_mfu=()):
    """Exact objective, headroom, breakdown and :func:`plausible` of every plan
    (:func:`_per_plan`)."""
    obj, headroom, out = jax.vmap(_per_plan(cost, objective, risk))(plans)
    return obj, headroom, out, plausible(plans.precision, out.mfu, max_mfu)


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
    plans = _device_plans(cols, index, key.space, key.chunk, key.shape.layers)
    obj, headroom, out = jax.vmap(_per_plan(cost, key.space.objective, risk))(plans)
    feasible = ok & (headroom >= 0) & (out.unsupported_format == 0) & jnp.isfinite(obj)
    feasible = feasible & plausible(plans.precision, out.mfu, key.space.max_mfu)
    score = jnp.where(feasible, obj, jnp.inf)
    _, top = jax.lax.top_k(-score, key.k)
    best = jax.tree_util.tree_map(lambda x: x[top], out)
    return jnp.sum(ok), jnp.sum(feasible), top, score[top], best


def risk_of(space: TrainSearchSpace, objective: str | None = None) -> Any:
    """The :class:`~diffcost._inputs.posterior.Risk` a p90 search ranks by (None for the
    other objectives); a SpecError without a chip name or a stored posterior."""
    if (objective or space.objective) != TrainObjective.P90:
        return None
    return required_risk(space.chip, space.calibration, "train_throughput")


def evaluate_exact(system: System, model: Model, c: Candidates, space: TrainSearchSpace):
    """Exact objective, headroom, breakdowns and plausibility (:func:`plausible`) of every
    candidate, in fixed-size chunks."""
    cost = TrainCost(system, model)
    risk = risk_of(space)
    return evaluate_in_buckets(
        lambda rows: _evaluate(
            cost,
            to_plans(rows, space, layers=int(model.layers)),
            space.objective,
            risk,
            space.max_mfu,
        ),
        c,
        _CHUNK,
    )


# --- relaxed search ----------------------------------------------------------------------------
def _layout(space: TrainSearchSpace) -> dict[str, slice]:
    choices = [(f.name, len(choice_values(space, f.name))) for f in CHOICE_FIELDS]
    return layout(len(axis_names(space)), choices)


def relaxed_plan(
    theta: jax.Array, tau: jax.Array, space: TrainSearchSpace, sizes: jax.Array
) -> tuple[TrainPlan, jax.Array]:
    """The relaxed plan encoded by ``theta`` at softmax temperature ``tau``, and its chip count.

    ``sizes = [global_batch, seq_len, chips]`` is traced, so one compilation serves every
    scenario with the same structure (:func:`_structure`).  A choice's softmax weights are
    placed on the field's full list of options (zero weight on options outside the space); a
    bool choice is the softmax blend of its values.  The choice fields are those declared
    ``axis=Choices()`` (:data:`~diffcost._train.space.CHOICE_FIELDS`).
    """
    lay = _layout(space)
    x = theta[lay["x"]]
    deg = {name: 2.0 ** x[i] for i, name in enumerate(axis_names(space))}
    chips = deg["chips"] if len(space.chips) > 1 else sizes[2]
    tp, pp, cp = deg["tp"], deg["pp"], deg["cp"]

    def soft(name: str) -> jax.Array:
        w = jax.nn.softmax(theta[lay[name]] / tau)
        options = choice_values(space, name)
        if _FIELD[name].kind == "bool":
            return jnp.sum(w * jnp.asarray([float(o) for o in options]))
        full = _FIELD[name].options()
        where = jnp.asarray([full.index(getattr(o, "value", o)) for o in options])
        return jnp.zeros(len(full)).at[where].set(w)

    chosen = {f.name: soft(f.name) for f in CHOICE_FIELDS}
    plan = encode_train(
        {
            **{k: jnp.asarray(v) for k, v in _fixed(space).items()},
            **{f.name: deg[f.name] for f in DEGREE_FIELDS},
            "dp": chips / (tp * pp * cp),
            "global_batch": sizes[0],
            "seq_len": sizes[1],
            **chosen,
            "grad_bytes_per_param": _grad_bytes(chosen["precision"]),
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
    at = {name: i for i, name in enumerate(axis_names(space))}
    sq = lambda z: jnp.square(jax.nn.relu(z))  # noqa: E731
    over = jnp.log(out.memory.total_bytes / out.capacity_bytes)
    penalty = 20.0 * jax.nn.relu(over) + 200.0 * sq(over)
    penalty += 10.0 * jnp.sum(sq(lo - x) + sq(x - hi))
    penalty += 10.0 * sq(x[at["tp"]] + x[at["pp"]] + x[at["cp"]] - jnp.log2(chips))
    penalty += 10.0 * sq(jnp.log2(plan.dp * plan.micro_batch / plan.global_batch))
    penalty += 10.0 * sq(x[at["ep"]] - jnp.log2(plan.dp))  # ep ranks come from the dp ones
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
            **{name: 0 for name in _space_bounds()},
        }
    )


def _space_bounds() -> tuple[str, ...]:
    """The space's sizes that bound a degree's candidates (``max_cp``), as the degrees declare
    them: zeroed in the relaxed solver's key (the bounds ``lo, hi`` are traced)."""
    names = {n for a in DEGREE_AXES.values() for n in (*a.upto, a.divides)}
    fields = TrainSearchSpace.__dataclass_fields__
    return tuple(sorted(n for n in names if n in fields and n != "chips"))


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
        obj, headroom, out, ok = evaluate_exact(self.system, self.model, c, self.space)
        runs = np.asarray(out.unsupported_format) == 0  # no format the chip cannot train in
        return Evaluation(obj, np.asarray(headroom >= 0) & runs & np.asarray(ok), out)

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
        return unstack(to_plans(c, self.space, layers=int(self.model.layers)))

    def row(self, plan: TrainPlan) -> dict[str, Any]:
        names = [a.name for a in self.axes] + [c.name for c in self.choices]
        return train_row(plan, names + ["first_stage_layers", "last_stage_layers"])

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
    (:meth:`~diffcost._core.options.PlanField.read`); what
    :func:`~diffcost._train.space.plan_row` writes of the candidate row the plan was built
    from."""
    read = lambda k: _FIELD[k].read(getattr(plan, k))  # noqa: E731
    out = {k: int(round(float(plan.num_chips()))) if k == "chips" else read(k) for k in names}
    return out | {k: read(k) for k in ("dp", "global_batch", "seq_len")}


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
    _, headroom, out, _ = evaluate_exact(system, model, cand, loose)
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
