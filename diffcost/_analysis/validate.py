"""Predict every published measurement and summarise the errors.

Each point of ``specs/measurements`` runs through the exact cost model on its own system and
model.  Serving points are fully specified by their sources.  A training point may leave some
plan fields unreported (micro-batch, virtual pipeline stages, recomputation, ZeRO stage,
sequence parallelism); the **rule** fills them the same way for every point, never tuned per
point: the fastest exact plan that fits in memory among all plans that keep every published
value (degrees, batch, sequence, precision, flash attention, gradient overlap) — the exhaustive
oracle of :mod:`diffcost._train_search` restricted to the published constraints.  When no such
plan fits, the fastest one is used and the point is flagged "does not fit".

All training candidates of all points are evaluated in one ``vmap`` (one compilation), all
serving points in another; the systems and models are stacked per row, so efficiency constants
may differ per row (per chip family) and are differentiable (:mod:`diffcost._calibrate`).

Errors are ``predicted / measured - 1`` of the canonical metric of
:mod:`diffcost._measurements`; summaries report the median and the 90th percentile (linear
interpolation, ``numpy.percentile``) of the absolute error, per source and overall.
"""

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._core.discrete import Candidates
from .._core.errors import Problem, SpecError
from .._inputs.hardware import Efficiency, System
from .._inputs.loader import load_model, load_spec, load_system, specs_dir
from .._inputs.measurements import CHOSEN_BY_RULE, METRICS, Measurement
from .._inputs.model import Model
from .._serve.cost import ServeCost
from .._serve.plan import ServePlan, plan_kwargs, serve_plan
from .._train.cost import TrainCost
from .._train.plan import RECOMPUTE, ZERO_STAGES, TrainPlan
from .._train.space import TrainSearchSpace, axes_for, plan_row, to_plans, valid
from .plans import load_measurements

MAX_MICRO_BATCH = 16
MAX_VIRTUAL_STAGES = 8


def _stack(trees: list[Any]) -> Any:
    return jax.tree_util.tree_map(lambda *x: jnp.stack(x), *trees)


def _repeat(tree: Any, n: int) -> Any:
    return jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (n, *jnp.shape(x))), tree)


def _concat(trees: list[Any]) -> Any:
    return jax.tree_util.tree_map(lambda *x: jnp.concatenate(x), *trees)


def chip_name(m: Measurement) -> str:
    """Name of the chip a point runs on (the key of calibration overrides)."""
    if m.chip is not None:
        return load_spec("chip", m.chip).info.name
    assert m.system is not None  # a point names exactly one of chip and system
    return str(load_spec("system", m.system).values["chip"])


# --- the rule: the candidate plans of a training point --------------------------------------
def train_space(m: Measurement, model: Model) -> tuple[TrainSearchSpace, Candidates]:
    """The plans the rule chooses among: every published value fixed, the rest free."""
    p = m.plan
    given = lambda key, pool: (p[key],) if key in p else pool  # noqa: E731
    space = TrainSearchSpace(
        global_batch=p["global_batch"],
        seq_len=p["seq_len"],
        chips=(m.chips,),
        recompute=given("recompute", RECOMPUTE),
        zero=given("zero", ZERO_STAGES),
        precision=(p["precision"],),
        sequence_parallel=given("sequence_parallel", (False, True)),
        max_cp=p["cp"],
        max_micro_batch=MAX_MICRO_BATCH,
        max_virtual_stages=max(MAX_VIRTUAL_STAGES, p.get("virtual_stages", 1)),
        optimizer=p.get("optimizer", "adam"),
        flash_attention=p["flash_attention"],
        first_stage_layers=p.get("first_stage_layers", 0),
        last_stage_layers=p.get("last_stage_layers", 0),
        lora_rank=p.get("lora_rank", 0),
        lora_targets=p.get("lora_targets", "attention_qkv"),
        expert_tp=p.get("expert_tp", 0),
        ep_dedup=p.get("ep_dedup", False),
        ep_overlap=p.get("ep_overlap", False),
        moe_graphed=p.get("moe_graphed", False),
        deepspeed_zero3=p.get("deepspeed_zero3", False),
    )
    axes, choices = axes_for(model, space)
    per: dict[str, Sequence[Any]] = {
        "tp": [float(p["tp"])],
        "pp": [float(p["pp"])],
        "cp": [float(p["cp"])],
        "chips": [float(m.chips)],
    }
    for key in ("micro_batch", "virtual_stages", "ep"):
        if key in p:
            per[key] = [float(p[key])]
    cand = Candidates.product(axes, choices, per)
    return space, cand.take(np.nonzero(valid(cand, model, space))[0])


def _serve_plan(m: Measurement) -> ServePlan:
    kwargs: dict[str, Any] = plan_kwargs(m.plan)
    return serve_plan(**kwargs, source=m.id)


# --- prepared, stacked evaluation sets ------------------------------------------------------
class TrainSet(NamedTuple):
    """Every candidate plan of every training point, stacked (leading axis = rows)."""

    systems: System
    models: Model
    plans: TrainPlan
    row_point: np.ndarray  # training point (0..n-1) of each row
    rows: list[dict[str, Any]]  # plain plan of each row


class ServeSet(NamedTuple):
    """Every serving point, stacked."""

    systems: System
    models: Model
    plans: ServePlan


@dataclass
class Prepared:
    """The points to predict, their chip names and stacked evaluation sets."""

    points: list[Measurement]  # predicted points: training ones first, then serving
    excluded: list[Measurement]
    chips: list[str]
    train: TrainSet | None
    serve: ServeSet | None

    @property
    def n_train(self) -> int:
        return sum(1 for m in self.points if m.kind == "train")


def prepare(points: list[Measurement] | None = None, calibration: str = "default") -> Prepared:
    """Load systems and models and build the candidate plans (no cost evaluation yet)."""
    points = load_measurements() if points is None else points
    keep = [m for m in points if m.excluded is None]
    train = [m for m in keep if m.kind == "train"]
    serve = [m for m in keep if m.kind == "serve"]
    sys_ = lambda m: load_system(m.system, chip=m.chip, chips=m.chips, calibration=calibration)  # noqa: E731
    tset = None
    if train:
        parts_s, parts_m, parts_p, row_point, rows = [], [], [], [], []
        for i, m in enumerate(train):
            model = load_model(m.model)
            space, cand = train_space(m, model)
            n = len(cand)
            if n == 0:
                raise SpecError(
                    [
                        Problem(
                            m.path,
                            f"point[{m.id}].plan",
                            "no plan keeps every published value (check that the "
                            "global batch divides by dp and the layers by pp)",
                        )
                    ]
                )
            plans = to_plans(cand, space, layers=int(model.layers))
            overlap = jnp.full((n,), float(m.plan["overlap_grad_reduce"]))
            plans = eqx.tree_at(lambda pl: pl.overlap_grad_reduce, plans, overlap)
            parts_p.append(plans)
            parts_s.append(_repeat(sys_(m), n))
            parts_m.append(_repeat(model, n))
            row_point += [i] * n
            rows += [plan_row(cand.row(j), space, int(model.layers)) for j in range(n)]
        tset = TrainSet(
            _concat(parts_s), _concat(parts_m), _concat(parts_p), np.asarray(row_point), rows
        )
    sset = None
    if serve:
        plans = [_serve_plan(m) for m in serve]
        sset = ServeSet(
            _stack([sys_(m) for m in serve]),
            _stack([load_model(m.model) for m in serve]),
            _stack(plans),
        )
    pts = train + serve
    return Prepared(
        pts, [m for m in points if m.excluded is not None], [chip_name(m) for m in pts], tset, sset
    )


def with_efficiency(systems: System, eff: Efficiency) -> System:
    """Stacked systems with their efficiency constants replaced (row by row)."""
    return eqx.tree_at(lambda s: s.efficiency, systems, eff)


class TrainRows(NamedTuple):
    step_time_s: jax.Array
    tokens_per_s: jax.Array
    headroom_bytes: jax.Array
    mfu: jax.Array
    hfu: jax.Array


class ServeRows(NamedTuple):
    ttft_s: jax.Array
    request_latency_s: jax.Array
    output_tokens_per_s_per_chip: jax.Array
    headroom_bytes: jax.Array


def train_rows(systems: System, models: Model, plans: TrainPlan) -> TrainRows:
    """Exact training prediction of every row (pure; vmapped)."""

    def one(s, m, p):
        out = TrainCost(s, m)(p)
        return TrainRows(out.step_time_s, out.tokens_per_s, out.headroom_bytes, out.mfu, out.hfu)

    return jax.vmap(one)(systems, models, plans)


def serve_rows(systems: System, models: Model, plans: ServePlan) -> ServeRows:
    """Exact serving prediction of every point (pure; vmapped)."""

    def one(s, m, p):
        out = ServeCost(s, m)(p)
        return ServeRows(
            out.ttft_s, out.request_latency_s, out.output_tokens_per_s_per_chip, out.headroom_bytes
        )

    return jax.vmap(one)(systems, models, plans)


_train_rows = eqx.filter_jit(train_rows)
_serve_rows = eqx.filter_jit(serve_rows)


def choose(
    step_time_s: np.ndarray, headroom: np.ndarray, row_point: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """The rule: per point, the row with the least step time among those that fit (else among
    all).  Returns the chosen row of each point and whether it fits."""
    chosen = np.zeros(n, dtype=int)
    fits = np.zeros(n, dtype=bool)
    for i in range(n):
        idx = np.nonzero(row_point == i)[0]
        ok = idx[headroom[idx] >= 0]
        pool = ok if len(ok) else idx
        chosen[i] = pool[np.argmin(step_time_s[pool])]
        fits[i] = len(ok) > 0
    return chosen, fits


def serve_metric(m: Measurement, rows: ServeRows, j: int) -> float:
    """Predicted value of a serving point's metric from its row ``j``."""
    if m.metric == "serve_throughput":
        return float(rows.output_tokens_per_s_per_chip[j])
    if m.metric == "ttft":
        return float(rows.ttft_s[j])
    return float(rows.request_latency_s[j]) / m.plan["output_len"]


# --- validation ------------------------------------------------------------------------------
@dataclass
class Validation:
    """Predictions of every point and their error summaries."""

    rows: list[dict[str, Any]]
    excluded: list[dict[str, str]]
    summary: dict[str, Any]


def summarise(rows: list[dict[str, Any]], key: str = "error") -> dict[str, Any]:
    """Per metric: n, median and 90th percentile of |error| (and the median signed error),
    over all points, over the points without a known unmodelled effect, and per source."""
    out: dict[str, Any] = {}
    for metric in METRICS:
        sel = [r for r in rows if r["metric"] == metric and r.get(key) is not None]
        if not sel:
            continue
        modelled = [r[key] for r in sel if not r.get("unmodelled")]
        out[metric] = {
            "all": _stats([r[key] for r in sel]),
            "modelled": _stats(modelled) if modelled else None,
            "by_source": {},
        }
        for source in sorted({r["source"] for r in sel}):
            errs = [r[key] for r in sel if r["source"] == source]
            out[metric]["by_source"][source] = _stats(errs)
    return out


def _stats(errors: list[float]) -> dict[str, float]:
    e = np.asarray(errors, dtype=float)
    a = np.abs(e)
    return {
        "n": int(len(e)),
        "median_abs_error": float(np.median(a)),
        "p90_abs_error": float(np.percentile(a, 90)),
        "median_error": float(np.median(e)),
    }


def validate(
    points: list[Measurement] | None = None,
    calibration: str = "default",
    prepared: Prepared | None = None,
) -> Validation:
    """Predict every (non-excluded) point with ``calibration`` and summarise the errors."""
    prep = prepare(points, calibration) if prepared is None else prepared
    rows: list[dict[str, Any]] = []
    n_train = prep.n_train
    if prep.train is not None:
        ts = prep.train
        out = jax.tree_util.tree_map(np.asarray, _train_rows(ts.systems, ts.models, ts.plans))
        chosen, fits = choose(out.step_time_s, out.headroom_bytes, ts.row_point, n_train)
        for i, m in enumerate(prep.points[:n_train]):
            j = chosen[i]
            plan = {**m.plan, **{k: ts.rows[j][k] for k in CHOSEN_BY_RULE}}
            rows.append(
                _row(
                    m,
                    float(out.tokens_per_s[j]),
                    plan,
                    bool(fits[i]),
                    mfu=float(out.mfu[j]),
                    hfu=float(out.hfu[j]),
                    chosen=[k for k in CHOSEN_BY_RULE if k not in m.plan],
                )
            )
    if prep.serve is not None:
        ss = prep.serve
        out = jax.tree_util.tree_map(np.asarray, _serve_rows(ss.systems, ss.models, ss.plans))
        for j, m in enumerate(prep.points[n_train:]):
            rows.append(
                _row(m, serve_metric(m, out, j), dict(m.plan), bool(out.headroom_bytes[j] >= 0))
            )
    _check_finite(rows, prep.points)
    excluded = [{"id": m.id, "source": m.source, "reason": m.excluded or ""} for m in prep.excluded]
    return Validation(rows, excluded, summarise(rows))


def _check_finite(rows: list[dict[str, Any]], points: list[Measurement]) -> None:
    """A point whose prediction is NaN or infinite is an input problem of its measurement
    file (its plan values combine beyond what the float32 model represents), never a row."""
    problems = [
        Problem(
            str(m.path),
            f"point[{m.id}]",
            f"the prediction is not finite ({row['predicted']}): check its plan values "
            "(sequence length, batch) against the model",
        )
        for row, m in zip(rows, points, strict=True)
        if not math.isfinite(row["predicted"])
    ]
    if problems:
        raise SpecError(problems)


def _row(
    m: Measurement,
    predicted: float,
    plan: dict[str, Any],
    fits: bool,
    *,
    mfu: float | None = None,
    hfu: float | None = None,
    chosen: list[str] | None = None,
) -> dict[str, Any]:
    row = {
        "id": m.id,
        "source": m.source,
        "kind": m.kind,
        "metric": m.metric,
        "measured": m.measured,
        "predicted": predicted,
        "error": predicted / m.measured - 1.0,
        "model": m.model,
        "system": m.system,
        "chip": m.chip,
        "chips": m.chips,
        "plan": plan,
        "chosen_by_rule": chosen or [],
        "fits": fits,
        "verified": m.verified,
        "flags": list(m.flags),
        "as_published": m.raw.get("as_published", ""),
        "unmodelled": m.unmodelled,
    }
    if mfu is not None:
        scale = m.measured / predicted
        row.update(predicted_mfu=mfu, measured_mfu=mfu * scale, predicted_hfu=hfu)
    return row


def scenario_toml(row: dict[str, Any], m: Measurement) -> str:
    """A point (with the rule's choices) as a scenario file ``diffcost train|serve`` runs."""
    q = lambda v: str(v).lower() if isinstance(v, bool) else json.dumps(v)  # noqa: E731
    model = Path(m.model)
    builtin = specs_dir() / "models" / model.name
    is_builtin = builtin.is_file() and builtin.resolve() == model.resolve()
    model_ref = model.stem if is_builtin else str(model)
    ref = f"system = {q(m.system)}" if m.system else f"chip = {q(m.chip)}"
    lines = [
        "schema_version = 1",
        f"kind = {q(m.kind)}",
        f"name = {q(m.id)}",
        f"display_name = {q(f'{m.id} ({m.source})')}",
        f"model = {q(model_ref)}",
        ref,
        f"chips = {m.chips}",
        "",
        "[plan]",
    ]
    lines += [f"{k} = {q(v)}" for k, v in row["plan"].items()]
    chosen = ", ".join(row["chosen_by_rule"]) or "nothing"
    reference = " ".join(m.source_info.get("reference", "").split())
    text = (
        f"Measurement {m.id} of specs/measurements/{Path(m.path).name} ({reference}). "
        f"Chosen by the validation rule (the fastest exact plan that fits under the "
        f"published constraints): {chosen}."
    )
    lines += ["", "[source]", f"scenario = {q(text)}"]
    return "\n".join(lines) + "\n"


__all__ = [
    "Prepared",
    "Validation",
    "choose",
    "prepare",
    "serve_rows",
    "summarise",
    "train_rows",
    "train_space",
    "validate",
    "with_efficiency",
]
