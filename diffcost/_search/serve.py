"""Serving-plan search: TP, PP, replicas, batch and number formats under latency limits.

Minimise chip-seconds per output token (= maximise output tokens/s per chip), request latency,
or USD per million tokens, subject to memory <= capacity, ``TTFT <= ttft_slo_s`` and
``TPOT <= tpot_slo_s`` and the chip budget; replicas use the chips left, ``chips / (tp * pp)``.
Each format's accuracy cost (user-set, default 0) multiplies the objective by
``1 + accuracy_cost``, so a cheaper format is chosen only when it is worth its accuracy price.
The driver is :func:`diffcost._search.search`: relaxed gradient descent on log2 degrees and
format logits, exact rounding, exact refinement, exhaustive confirmation of infeasibility.
"""

import math
from dataclasses import dataclass
from typing import Any, final

import jax
import jax.numpy as jnp
import numpy as np

from .._core.errors import Problem, SpecError
from .._core.exported import exported_program
from .._core.options import (
    Choices,
    Degrees,
    Format,
    PlanField,
    ServeMode,
    ServeObjective,
    coerce,
    coerce_all,
    searched_choices,
    searched_degrees,
    values,
)
from .._core.smooth import RELAXED
from .._inputs.hardware import FORMATS, System, one_hot_format
from .._inputs.model import Model
from .._inputs.posterior import required_risk
from .._serve.cost import ServeBreakdown, ServeCost
from .._serve.formats import chip_formats, compute_format_on
from .._serve.load import goodput_qps
from .._serve.plan import SERVE_FIELDS, ServePlan, encode_serve, serve_plan
from .._terms.risk import log_sigma, upper_quantile
from .._terms.tp_rules import EXPERT_LAYOUT_RULES
from .core import (
    Axis,
    Candidates,
    Choice,
    Evaluation,
    SearchProblem,
    SearchResult,
    enumerate_all,
    evaluate_in_buckets,
    layout,
    optimise,
    require_price,
    search,
    unstack,
)

SERVE_OBJECTIVES: tuple[str, ...] = values(ServeObjective)
_CHUNK = 16384
_NO_LIMIT = 1e9  # seconds: stands for "no latency limit" inside traced code
_FIELD = {f.name: f for f in SERVE_FIELDS}
#: The fields a serving search varies as degrees, as they declare it (``axis=Degrees()``).
DEGREE_FIELDS = searched_degrees(SERVE_FIELDS)
#: The fields a serving search varies as choices, as they declare it (``axis=Choices()``).
CHOICE_FIELDS = searched_choices(SERVE_FIELDS)


def _degrees(field: PlanField) -> Degrees:
    assert isinstance(field.axis, Degrees), field.name
    return field.axis


def _size(model: Model, space: "ServeSearchSpace", name: str) -> int:
    """The size a degree's declaration names: ``chips`` and the other attributes of the
    search space (``max_batch``), else the model's (``layers``)."""
    return int(getattr(space, name) if hasattr(space, name) else getattr(model, name))


def choice_values(space: "ServeSearchSpace", name: str) -> tuple[Any, ...]:
    """The values the search tries for the choice field ``name`` (the space's, else the
    declaration's, :class:`~diffcost._core.options.Choices`; a bool field's as bools)."""
    field = _FIELD[name]
    assert isinstance(field.axis, Choices), f"{name} is not searched as a choice"
    tried = field.axis.of(field, space)
    return tuple(bool(v) for v in tried) if field.kind == "bool" else tried


def _accuracy_costs(items: Any) -> tuple[tuple[Format, float], ...]:
    """``(format, cost)`` pairs (or a mapping), each format checked, each cost >= 0."""
    pairs = tuple(items.items()) if isinstance(items, dict) else tuple(items)
    problems = []
    for name, cost in pairs:
        ok_cost = not isinstance(cost, bool) and isinstance(cost, (int, float)) and cost >= 0
        if name not in FORMATS or not ok_cost:
            reason = f"expected FORMAT=non-negative number with FORMAT one of {', '.join(FORMATS)}"
            problems.append(
                Problem("<arguments>", "accuracy_cost", f"{reason}; got {name}={cost!r}")
            )
    if problems:
        raise SpecError(problems)
    return tuple((Format(name), float(cost)) for name, cost in pairs)


@dataclass(frozen=True)
class ServeSearchSpace:
    """What may vary in a serving deployment of ``chips`` chips.

    Options are typed (:mod:`diffcost._core.options`): each may be given as a member or its
    plain value, and a value that is not one of the choices raises
    :class:`~diffcost._core.errors.SpecError` naming the key and the choices.
    """

    input_len: int
    output_len: int
    chips: int
    objective: ServeObjective | str = ServeObjective.THROUGHPUT
    ttft_slo_s: float = math.inf
    tpot_slo_s: float = math.inf
    weight_formats: tuple[Format | str, ...] = (Format.BF16,)
    kv_formats: tuple[Format | str, ...] = (Format.BF16,)
    max_batch: int = 1024
    mode: ServeMode | str = ServeMode.CONTINUOUS
    accuracy_cost: tuple[tuple[Format | str, float], ...] = ()
    # Expert layouts tried for a mixture of experts (ServePlan.expert_parallel): whole experts
    # spread over the tp ranks (True) or each split by width (False).
    expert_parallel: tuple[bool, ...] = (False,)
    # The chip and calibration whose posterior the p90 objective reads (its constants' basis
    # and discrepancy regime, :func:`diffcost._inputs.posterior.risk_for`).
    chip: str = ""
    calibration: str = "default"
    # The offered load of the goodput objective: coefficients of variation of the arrival
    # gaps (1: Poisson) and of the prompt lengths; the SLOs are then its p99 limits.
    arrival_cv: float = 1.0
    input_cv: float = 0.0
    # The formats the chip has a GEMM rate for (diffcost._serve.formats.chip_formats): each
    # weight format's GEMMs run in its own format when the chip has it, else weight-only in
    # 16 bits (compute_format_on); a weight format that runs neither way is refused.  Empty: those
    # of ``chip`` when it names a chip, else every format (no rule: a chip-less search).
    compute_formats: tuple[Format | str, ...] = ()

    def __post_init__(self) -> None:
        formats = self.compute_formats or (chip_formats(self.chip) if self.chip else FORMATS)
        typed = {
            "objective": coerce(ServeObjective, self.objective, "objective"),
            "weight_formats": coerce_all(Format, self.weight_formats, "weight_formats"),
            "kv_formats": coerce_all(Format, self.kv_formats, "kv_formats"),
            "mode": coerce(ServeMode, self.mode, "mode"),
            "accuracy_cost": _accuracy_costs(self.accuracy_cost),
            "compute_formats": coerce_all(Format, formats, "compute_formats"),
        }
        for key, value in typed.items():
            object.__setattr__(self, key, value)


def _with_searched(template: ServePlan, searched: dict[str, Any]) -> ServePlan:
    """``template``'s fields with the searched ones replaced (one encoder: :func:`encode_serve`)."""
    fields = {k: getattr(template, k) for k in ServePlan.__dataclass_fields__}
    return encode_serve(fields | searched)


def compute_format_for(weight_format: str, formats: tuple[str, ...] = FORMATS) -> str:
    """The format the GEMMs of ``weight_format`` weights run in on a chip with the rates
    ``formats`` (:func:`~diffcost._serve.formats.compute_format_on`): int8/int4 at bf16 (W8A16,
    W4A16), others in their own format when the chip has it, else weight-only in 16 bits
    (fp4 weights on an H100: W4A16).  A search space never holds a weight format that runs
    neither way (:class:`ServeProblem` refuses it)."""
    gemm = compute_format_on(weight_format, formats)
    assert gemm is not None, f"{weight_format} weights cannot run on a chip with {formats}"
    return gemm


def _format_problems(space: "ServeSearchSpace") -> list[Problem]:
    """Weight formats of the space whose GEMMs the chip runs neither in their own format nor
    weight-only (16 bits or wider, and no rate for them)."""
    formats = tuple(map(str, space.compute_formats))
    bad = [str(w) for w in space.weight_formats if compute_format_on(str(w), formats) is None]
    if not bad:
        return []
    chip = space.chip or "the chip"
    reason = (
        f"{chip} has no rate for {', '.join(bad)} (its formats: {', '.join(formats)}), and "
        "weights of 16 bits or more cannot run weight-only; leave them out"
    )
    return [Problem("<arguments>", "weight_formats", reason)]


@final
class ServeProblem(SearchProblem):
    """The serving search as a :class:`diffcost._search.core.SearchProblem`."""

    def __init__(self, system: System | None, model: Model, space: ServeSearchSpace):
        self.system, self.model, self.space = system, model, space
        self.objective = space.objective
        require_price(system, space.objective)
        serve_risk(space)  # a p90 search without a posterior fails here, before any solving
        bad = _format_problems(space)
        if bad:
            raise SpecError(bad)
        size = lambda name: _size(model, space, name)  # noqa: E731
        self.axes = tuple(Axis(f.name, _degrees(f).of(model, space, size)) for f in DEGREE_FIELDS)
        self.choices = tuple(Choice(f.name, choice_values(space, f.name)) for f in CHOICE_FIELDS)
        self._formats = tuple(map(str, space.compute_formats))

    def coupled(self) -> dict[str, tuple[str, ...]]:
        """The batch an instance holds scales with its size (tp * pp)."""
        return {"batch": ("tp", "pp")}

    def layout(self) -> dict[str, slice]:
        return _layout(self.space)

    def valid(self, c: Candidates) -> np.ndarray:
        """Instances that divide the chips; expert layouts the engine accepts (expert parallel:
        a mixture of experts with ``experts % tp == 0`` and ``tp > 1``, at ``tp = 1`` the same
        plan; tensor-parallel experts: ``expert_ffn_hidden % tp == 0``)."""
        col = c.columns
        ok = (self.space.chips % (col["tp"] * col["pp"]) == 0) & (
            col["tp"] * col["pp"] <= self.space.chips
        )
        ep = col["expert_parallel"].astype(bool)
        if int(self.model.experts) == 0:
            return ok & ~ep
        holds = {  # the expert-layout rules (EXPERT_LAYOUT_RULES), by layout
            r.layout: r.holds(int(getattr(self.model, r.key)), col["tp"])
            for r in EXPERT_LAYOUT_RULES
        }
        # at tp = 1 spreading whole experts is the tensor-parallel plan: searched once
        return ok & np.where(ep, holds[True] & (col["tp"] > 1), holds[False])

    # --- exact evaluation ---------------------------------------------------------------------
    def template(self) -> ServePlan:
        sp = self.space
        return serve_plan(
            input_len=sp.input_len,
            output_len=sp.output_len,
            mode=sp.mode,
            accuracy_cost=dict(sp.accuracy_cost) or None,
            source="search",
        )

    def to_plans(self, c: Candidates) -> ServePlan:
        """Stack candidate rows into one exact :class:`ServePlan` pytree."""
        col = c.columns
        n = len(c)
        f = lambda x: jnp.asarray(np.asarray(x, dtype=np.float64), dtype=jnp.result_type(float))  # noqa: E731
        eye = np.eye(len(FORMATS))
        onehots = lambda names: f(eye[[FORMATS.index(x) for x in names]])  # noqa: E731
        base = jax.tree_util.tree_map(
            lambda x: jnp.broadcast_to(x, (n, *jnp.shape(x))), self.template()
        )
        inst = col["tp"] * col["pp"]
        searched = {a.name: f(col[a.name]) for a in self.axes}
        searched |= {
            c.name: onehots(col[c.name])
            if _FIELD[c.name].kind == "categorical"
            else f(col[c.name].astype(float))
            for c in self.choices
        }
        # the fields the searched ones determine
        searched |= {
            "replicas": f(self.space.chips // inst),
            "compute_format": onehots(
                [compute_format_for(w, self._formats) for w in col["weight_format"]]
            ),
            "prefill_chips": f(inst),
            "decode_chips": f(inst),
        }
        return _with_searched(base, searched)

    def evaluate(self, c: Candidates) -> Evaluation:
        assert self.system is not None, "exact evaluation needs a system"
        cost = ServeCost(self.system, self.model)
        limits = jnp.asarray(
            [min(self.space.ttft_slo_s, _NO_LIMIT), min(self.space.tpot_slo_s, _NO_LIMIT)]
        )
        objective, risk = self.space.objective, serve_risk(self.space)
        load = jnp.asarray([self.space.arrival_cv, self.space.input_cv], dtype=limits.dtype)
        obj, ok, out = evaluate_in_buckets(
            lambda rows: _evaluate(cost, self.to_plans(rows), limits, objective, risk, load),
            c,
            _CHUNK,
        )
        return Evaluation(obj, ok, out)

    # --- relaxed search -----------------------------------------------------------------------
    def solve(self, theta0: np.ndarray, steps: int, lr: float) -> tuple[np.ndarray, np.ndarray]:
        lo = jnp.asarray([math.log2(min(a.values)) for a in self.axes])
        hi = jnp.asarray([math.log2(max(a.values)) for a in self.axes])
        sp = self.space
        sizes = jnp.asarray(
            [sp.chips, min(sp.ttft_slo_s, _NO_LIMIT), min(sp.tpot_slo_s, _NO_LIMIT)], dtype=float
        )
        structure = ServeSearchSpace(
            **{**sp.__dict__, "chips": 0, "ttft_slo_s": 0.0, "tpot_slo_s": 0.0, "max_batch": 0}
        )
        th, loss = _solve(
            self.system,
            self.model,
            self.template(),
            jnp.asarray(theta0),
            lo,
            hi,
            sizes,
            structure,
            steps,
            lr,
        )
        return np.asarray(th), np.asarray(loss)

    def plans(self, c: Candidates) -> list[ServePlan]:
        return unstack(self.to_plans(c))

    def row(self, plan: ServePlan) -> dict[str, Any]:
        """An exact plan's plain values: the searched fields, then the replicas and the GEMM
        format they determine (integers for degrees and counts, formats by name), each read
        as its declaration says (:meth:`~diffcost._core.options.PlanField.read`)."""
        names = [a.name for a in self.axes] + [c.name for c in self.choices]
        names += ["replicas", "compute_format"]
        return {k: _FIELD[k].read(getattr(plan, k)) for k in names}

    def binding(self, outputs: Any, i: int) -> str:
        out: ServeBreakdown = outputs
        g = lambda x: float(np.asarray(x)[i])
        parts = [f"memory headroom {g(out.headroom_bytes) / g(out.capacity_bytes):.0%}"]
        if self.space.objective == ServeObjective.GOODPUT:  # limits are p99s under load
            parts.append(f"one steady batch: TTFT {g(out.ttft_s) * 1e3:.1f} ms")
            parts.append(f"TPOT {g(out.tpot_s) * 1e3:.1f} ms (the limits are p99s under load)")
            return "; ".join(parts)
        for name, value, limit in (
            ("TTFT", g(out.ttft_s), self.space.ttft_slo_s),
            ("TPOT", g(out.tpot_s), self.space.tpot_slo_s),
        ):
            if math.isfinite(limit):
                tag = "binds" if value > 0.9 * limit else "slack"
                parts.append(f"{name} {value * 1e3:.1f} ms of {limit * 1e3:.0f} ms ({tag})")
        parts.append(f"decode {g(out.decode_memory_bound_fraction):.0%} memory-bound")
        return "; ".join(parts)

    def suggest(self) -> list[str]:
        """Numbers for what would make the request feasible."""
        sp = self.space
        loose = ServeProblem(
            self.system,
            self.model,
            ServeSearchSpace(**{**sp.__dict__, "ttft_slo_s": math.inf, "tpot_slo_s": math.inf}),
        )
        cand = enumerate_all(loose)
        if len(cand) == 0:
            return ["no valid tp/pp split of this chip count for the model's heads and layers"]
        ev = loose.evaluate(cand)
        fits, out = ev.feasible, ev.outputs
        lines = []
        if not fits.any():
            need = float(np.min(out.min_chips_for_weights))
            lines.append(
                f"nothing fits in memory: the weights alone need {need:.1f} chips in "
                f"the smallest allowed format; use at least {math.ceil(need)} chips "
                "(more for the KV cache), or a narrower weight format"
            )
            return lines
        ttft = float(np.min(np.where(fits, out.ttft_s, np.inf)))
        tpot = float(np.min(np.where(fits, out.tpot_s, np.inf)))
        if ttft > sp.ttft_slo_s:
            lines.append(
                f"the lowest TTFT any fitting plan reaches is {ttft * 1e3:.1f} ms > "
                f"{sp.ttft_slo_s * 1e3:.0f} ms: relax the limit, shorten the prompt or "
                "add chips"
            )
        if tpot > sp.tpot_slo_s:
            lines.append(
                f"the lowest TPOT any fitting plan reaches is {tpot * 1e3:.2f} ms > "
                f"{sp.tpot_slo_s * 1e3:.1f} ms: relax the limit, use a narrower weight "
                "format or chips with more memory bandwidth"
            )
        return lines or ["the limits can each be met, but not together: relax one of them"]


def serve_risk(space: ServeSearchSpace) -> Any:
    """The :class:`~diffcost._inputs.posterior.Risk` of TPOT a p90 search ranks by (None
    for the other objectives); a SpecError without a chip name or a stored posterior."""
    if space.objective != ServeObjective.P90:
        return None
    return required_risk(space.chip, space.calibration, "token_latency")


def serve_objective(out: ServeBreakdown, objective: str) -> jax.Array:
    """Chip-seconds per output token, request latency (s), USD per million tokens or the TPOT
    (s), times ``1 + accuracy_cost`` (``p90``: the median TPOT in s, which the exact evaluation
    raises to its upper quantile, :func:`_evaluate`)."""
    if objective == "latency":
        base = out.request_latency_s
    elif objective in ("p90", "tpot"):
        base = out.tpot_s
    elif objective == "cost":
        base = out.cost_per_million_tokens_usd
    else:  # throughput; the relaxed proxy of goodput (the exact search enumerates goodput)
        base = 1.0 / out.output_tokens_per_s_per_chip
    return base * (1.0 + out.accuracy_cost)


def _goodput_objective(cost: ServeCost, plan: ServePlan, out: ServeBreakdown, load, limits):
    """Chips per request/s of goodput (``inf`` when no rate meets the limits), times ``1 +
    accuracy_cost``, and the goodput (requests/s): :func:`~diffcost._serve.load.goodput_qps`
    at the p99 ``limits`` with the coefficients of variation ``load``."""
    gp = goodput_qps(cost.system, cost.model, plan, load[0], load[1], limits[0], limits[1])
    chips = plan.replicas * plan.replica_chips()
    obj = jnp.where(gp > 0, chips / jnp.maximum(gp, 1e-30), jnp.inf)
    return obj * (1.0 + out.accuracy_cost), gp


@exported_program("serve-evaluate")
def _evaluate(cost: ServeCost, plans: ServePlan, limits, objective: str, risk=None, load=None):
    """Exact objective and limits of every plan; with ``risk`` (the p90 objective) the TPOT's
    upper quantile ``y exp(Z80 sigma)`` (:mod:`diffcost._analysis.uncertainty`).  The goodput
    objective reads ``limits`` as p99 limits under the load ``load`` (coefficients of
    variation), not as limits of one steady batch."""

    def one(plan):
        out = cost(plan)
        if objective == "goodput":
            obj, gp = _goodput_objective(cost, plan, out, load, limits)
            return obj, (out.headroom_bytes >= 0) & (gp > 0), out
        ok = (out.headroom_bytes >= 0) & (out.ttft_s <= limits[0]) & (out.tpot_s <= limits[1])
        obj = serve_objective(out, objective)
        if risk is not None:
            obj = upper_quantile(obj, log_sigma(cost, plan, "tpot_s", risk, 0.0))
        return obj, ok, out

    return jax.vmap(one)(plans)


def _layout(space: ServeSearchSpace) -> dict[str, slice]:
    """The relaxed variables: one log2 per searched degree (:data:`DEGREE_FIELDS`), then the
    logits of every searched choice (:data:`CHOICE_FIELDS`)."""
    choices = [(f.name, len(choice_values(space, f.name))) for f in CHOICE_FIELDS]
    return layout(len(DEGREE_FIELDS), choices)


def _pick(field: PlanField, weights: jax.Array, options: tuple[Any, ...]) -> Any:
    """A relaxed choice: the blend of its options' one-hot formats, or of 0 and 1."""
    if field.kind == "categorical":
        return sum(weights[i] * one_hot_format(n) for i, n in enumerate(options))
    return sum(weights[i] * float(v) for i, v in enumerate(options))


def relaxed_serve_plan(
    theta, tau, template: ServePlan, space: ServeSearchSpace, chips
) -> ServePlan:
    """The relaxed plan of ``theta`` (log2 of every searched degree: tp, pp, batch; the logits
    of every searched choice: weight and KV formats, expert layout) at temperature ``tau``."""
    searched = {f.name: 2.0 ** theta[i] for i, f in enumerate(DEGREE_FIELDS)}
    lay = _layout(space)
    weights = {f.name: jax.nn.softmax(theta[lay[f.name]] / tau) for f in CHOICE_FIELDS}
    for f in CHOICE_FIELDS:
        searched[f.name] = _pick(f, weights[f.name], choice_values(space, f.name))
    tp, pp = searched["tp"], searched["pp"]
    formats = tuple(map(str, space.compute_formats))
    compute = tuple(compute_format_for(n, formats) for n in choice_values(space, "weight_format"))
    searched |= {  # the fields the searched ones determine
        "replicas": chips / (tp * pp),
        "compute_format": _pick(_FIELD["compute_format"], weights["weight_format"], compute),
        "prefill_chips": tp * pp,
        "decode_chips": tp * pp,
    }
    return _with_searched(template, searched)


def relaxed_serve_penalty(out: ServeBreakdown, theta, lo, hi, sizes) -> jax.Array:
    """Smooth penalties of a relaxed serving plan: memory over capacity, TTFT and TPOT over
    their limits (``sizes = [chips, ttft_slo_s, tpot_slo_s]``), log2 degrees outside
    ``[lo, hi]``, ``tp * pp`` over the chips and the divisibility violation (dimensionless)."""
    sq = lambda z: jnp.square(jax.nn.relu(z))  # noqa: E731
    x = theta[: len(DEGREE_FIELDS)]  # x[0] + x[1]: log2 tp*pp
    pen = 0.0
    for z in (
        jnp.log(out.memory.total_bytes / out.capacity_bytes),
        jnp.log(out.ttft_s / sizes[1]),
        jnp.log(out.tpot_s / sizes[2]),
    ):
        pen += 20.0 * jax.nn.relu(z) + 200.0 * sq(z)
    pen += 10.0 * jnp.sum(sq(lo - x) + sq(x - hi)) + 10.0 * sq(x[0] + x[1] - jnp.log2(sizes[0]))
    return pen + 0.05 * out.divisibility_violation


@exported_program("serve-solve")
def _solve(
    system,
    model,
    template,
    theta0,
    lo,
    hi,
    sizes,
    structure: ServeSearchSpace,
    steps: int,
    lr: float,
):
    def loss(theta, tau):
        plan = relaxed_serve_plan(theta, tau, template, structure, sizes[0])
        out = ServeCost(system, model, RELAXED)(plan)
        pen = relaxed_serve_penalty(out, theta, lo, hi, sizes)
        return jnp.log(serve_objective(out, structure.objective)) + pen

    return optimise(loss, theta0, steps, lr)


def search_serve(system: System, model: Model, space: ServeSearchSpace, **options) -> SearchResult:
    """Best exact serving plan (see :func:`diffcost._search.search` for ``options``)."""
    return search(ServeProblem(system, model, space), **options)
