"""Predict every published measurement under load and summarise the errors (issue 13).

Each point of ``specs/measurements/load`` runs through :func:`diffcost.under_load` at its
published arrival rate (an open loop), or, for a closed loop of ``concurrency`` clients (a
concurrency benchmark), through :class:`diffcost.ServeCost` in continuous mode with ``batch``
= the clients (:func:`diffcost._serve.modes.continuous_mode`: TTFT and TPOT means), on its own
system, model and plan, with the calibration's constants and its engine's iteration under
load (:func:`policy_of`: prefill-only iterations and the host share from the engine profile,
the point's ``mixed_prefill`` where its server's settings differ).
No point is fitted, so each error, ``predicted / measured - 1``, is out of sample (the
leave-one-source-out error and the in-sample error are the same number).  TPOT p50 is
compared with the predicted mean TPOT (the model's TPOT spread is normal, so its mean is its
median).  Summaries per measured key: the median and 90th percentile of |error| and the median
signed error, overall and per source (:func:`diffcost._analysis.validate._stats`).

A point whose rate is a goodput at published p99 limits (an MLPerf Inference Server or
Interactive result: the submitter raises ``target_qps`` until the p99 TTFT or TPOT limit binds,
and a run is valid only within them; mlcommons/inference ``loadgen``, "Server" scenario rules)
reports the latencies of a server tuned to its own limits.  Its latencies are predicted at the
model's goodput at those limits (``latency_qps``), not at the published rate: near saturation
the mean latencies move as ``1 / (1 - utilisation)``, so at the published rate a capacity error
of 10% becomes a latency error of 2-5x, which the ``goodput_qps`` row already reports.  On the
nine MLPerf points TPOT mean falls from 56% median |error| at the published rate to 9% at the
model's goodput (``benchmarks/latency_at_limits.py``).
"""

from typing import Any

import equinox as eqx
import jax.numpy as jnp

from .._inputs.load_measurements import LOAD_METRICS, LoadMeasurement
from .._inputs.loader import load_model, load_system
from .._serve.cost import ServeBreakdown, ServeCost
from .._serve.engine import DEFAULT_ENGINE, load_engine
from .._serve.load import LoadBreakdown, goodput_qps_jit, under_load, workload
from .._serve.plan import plan_kwargs, serve_plan
from .._serve.scheduling import IterationPolicy, iteration_policy, profile_policy
from .plans import load_load_measurements
from .validate import _stats

#: Measured key -> the :class:`~diffcost._serve.load.LoadBreakdown` field that predicts it.
PREDICTOR = {
    "ttft_mean_s": "ttft_mean_s",
    "ttft_p50_s": "ttft_p50_s",
    "ttft_p99_s": "ttft_p99_s",
    "tpot_mean_s": "tpot_s",
    "tpot_p50_s": "tpot_s",
    "tpot_p99_s": "tpot_p99_s",
}


#: Measured key of a closed-loop point -> the :class:`~diffcost.ServeBreakdown` field.
CLOSED_PREDICTOR = {"ttft_mean_s": "ttft_s", "tpot_mean_s": "tpot_s"}


@eqx.filter_jit
def _predict(system, model, plan, load, policy=None) -> LoadBreakdown:
    return under_load(system, model, plan, load, policy=policy)


def policy_of(m: LoadMeasurement) -> IterationPolicy:
    """The iteration of the point's engine under load (:mod:`diffcost._serve.scheduling`):
    whether it mixes prompts with decodes (the point's ``mixed_prefill`` where its server's
    settings say, else the profile's) and its host share, from the engine profile."""
    policy = profile_policy(load_engine(m.plan.get("engine", DEFAULT_ENGINE), m.id))
    if m.mixed_prefill is None:
        return policy
    return iteration_policy(m.mixed_prefill, float(policy.host_share))


@eqx.filter_jit
def _predict_closed(system, model, plan) -> ServeBreakdown:
    return ServeCost(system, model)(plan)


def closed(m: LoadMeasurement) -> bool:
    """Whether a point is a closed loop of clients (``[point.load] concurrency``)."""
    return "concurrency" in m.load


def _inputs(m: LoadMeasurement, calibration: str):
    """System, model, plan and workload (None for a closed loop) of a point."""
    hardware = {"system": m.system} if m.system else {"chip": m.chip}
    system = load_system(**hardware, chips=m.chips, calibration=calibration)
    plan = serve_plan(**plan_kwargs(m.plan), source=m.id)
    load = None if closed(m) else workload(m.load["qps"], m.load["arrival_cv"], m.load["input_cv"])
    return system, load_model(m.model), plan, load


def predict_point(
    m: LoadMeasurement, calibration: str = "default"
) -> LoadBreakdown | ServeBreakdown:
    """The model's prediction of one point at its published load: the open loop's
    :class:`~diffcost.LoadBreakdown`, or a closed loop's :class:`~diffcost.ServeBreakdown`."""
    system, model, plan, load = _inputs(m, calibration)
    if load is None:
        return _predict_closed(system, model, plan)
    return _predict(system, model, plan, load, policy_of(m))


def validate_load(
    points: list[LoadMeasurement] | None = None, calibration: str = "default"
) -> dict[str, Any]:
    """Rows (one per measured value of every predicted point) and their summary."""
    points = load_load_measurements() if points is None else points
    rows: list[dict[str, Any]] = []
    for m in points:
        if m.excluded:
            continue
        system, model, plan, load = _inputs(m, calibration)
        measured = {k: m.measured[k] for k in LOAD_METRICS if k in m.measured}
        if load is None:  # a closed loop: the continuous mode at batch = clients
            got = _predict_closed(system, model, plan)
            predicted = {k: float(getattr(got, CLOSED_PREDICTOR[k])) for k in measured}
            state = {"concurrency": m.load["concurrency"], "utilisation": None, "stable": True}
        else:
            rate, goodput = m.load["qps"], None
            if m.limits is not None:  # the rate is a goodput at these limits
                cvs = (load.arrival_cv, load.input_cv)
                limits = tuple(jnp.asarray(x) for x in m.limits)
                goodput = float(goodput_qps_jit(system, model, plan, *cvs, *limits))
                rate = goodput  # the latencies of a server at its own limits (module docstring)
                load = workload(goodput, m.load["arrival_cv"], m.load["input_cv"])
            out = _predict(system, model, plan, load, policy_of(m))
            predicted = {k: float(getattr(out, PREDICTOR[k])) for k in measured}
            if goodput is not None:
                measured["goodput_qps"] = m.load["qps"]
                predicted["goodput_qps"] = goodput
            state = {
                "qps": m.load["qps"],
                "latency_qps": rate,
                "utilisation": float(out.utilisation),
                "stable": bool(out.stable),
            }
        common = {
            "id": m.id,
            "source": m.source,
            **state,
            "unmodelled": m.unmodelled,
            "flags": list(m.flags),
        }
        for key, value in measured.items():
            unmodelled = m.unmodelled if key != "goodput_qps" else None
            rows.append(
                common
                | {
                    "metric": key,
                    "measured": value,
                    "predicted": predicted[key],
                    "error": predicted[key] / value - 1.0,
                    "unmodelled": unmodelled,
                }
            )
    return {"rows": rows, "summary": summarise(rows)}


#: Every compared key: the measured percentiles, then the goodput at published limits.
KEYS = (*LOAD_METRICS, "goodput_qps")


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per compared key: the statistics of the errors, overall, over the points without a
    known unmodelled effect, and per source."""
    out: dict[str, Any] = {}
    for key in KEYS:
        sel = [r for r in rows if r["metric"] == key]
        if not sel:
            continue
        modelled = [r["error"] for r in sel if not r["unmodelled"]]
        by = {
            s: _stats([r["error"] for r in sel if r["source"] == s])
            for s in sorted({r["source"] for r in sel})
        }
        out[key] = {
            "all": _stats([r["error"] for r in sel]),
            "modelled": _stats(modelled) if modelled else None,
            "by_source": by,
        }
    return out


def error_table(result: dict[str, Any]) -> list[str]:
    """Plain-text lines: one per point and key, then the summary."""
    lines = [f"{'point':46s} {'key':12s} {'measured':>10s} {'predicted':>10s} {'error':>7s}"]
    for r in result["rows"]:
        unit, scale = ("/s", 1.0) if r["metric"] == "goodput_qps" else ("ms", 1e3)
        mark = " (unmodelled)" if r["unmodelled"] else ""
        lines.append(
            f"{r['id'][:46]:46s} {r['metric']:12s} {scale * r['measured']:8.1f}{unit} "
            f"{scale * r['predicted']:8.1f}{unit} {100 * r['error']:+6.0f}%{mark}"
        )
    for key, s in result["summary"].items():
        for label, st in (("all", s["all"]), ("modelled", s["modelled"])):
            if st is None or (label == "modelled" and st["n"] == s["all"]["n"]):
                continue
            lines.append(
                f"{key} ({label}): n={st['n']}, median |err| {100 * st['median_abs_error']:.0f}%, "
                f"p90 |err| {100 * st['p90_abs_error']:.0f}%, median err "
                f"{100 * st['median_error']:+.0f}%"
            )
    unmodelled = sorted({r["unmodelled"] for r in result["rows"] if r["unmodelled"]})
    lines += [f"unmodelled: {u}" for u in unmodelled]
    return lines


__all__ = [
    "CLOSED_PREDICTOR",
    "KEYS",
    "PREDICTOR",
    "closed",
    "error_table",
    "policy_of",
    "predict_point",
    "summarise",
    "validate_load",
]
