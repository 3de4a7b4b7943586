"""Published serving measurements under load: ``specs/measurements/load/*.toml``, read strictly.

One file per source.  Each ``[[point]]`` is a serving deployment (model, system or chip, chip
count and the *published* plan, ``[point.plan]`` as in :mod:`diffcost._inputs.measurements`),
the load it was offered (``[point.load]``: requests/s to the whole deployment, the
coefficients of variation of the arrival gaps and of the prompt lengths) and the measured
latency percentiles (``[point.measured]``: any of TTFT mean / p50 / p99 and TPOT mean / p50 /
p99, each with a time unit).  None of these points is fitted: :mod:`diffcost._analysis.
validate_load` predicts each with :func:`diffcost.under_load`, so every error is out of
sample.  Every problem of every file is reported at once (:class:`SpecError`).
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from . import schema as S
from .checker import Checker
from .measurements import _check_plan, _plan, _references, measurements_dir, read_points
from .plan_tables import PlanTables

#: Measured keys (SI) in the order they are reported.
LOAD_METRICS = (
    "ttft_mean_s",
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_mean_s",
    "tpot_p50_s",
    "tpot_p99_s",
)


@dataclass(frozen=True)
class LoadMeasurement:
    """One published point under load (seconds for every measured value).

    Attributes:
        id: identifier (unique over all load files); source: the file's name.
        model: resolved model file; system / chip: built-in name or path; chips: count.
        plan: the published serving plan; load: ``qps``, ``arrival_cv``, ``input_cv``.
        measured: measured key (:data:`LOAD_METRICS`) -> seconds; as_published: the source's
            words.
        excluded: why the point is carried but not predicted (None: predicted).
        unmodelled: an effect of the deployment the model lacks (None: none known): its
            errors are reported apart from the others'.
        mixed_prefill: whether the server mixed prompt chunks with decodes, where its
            settings differ from its engine profile's default (None: the profile's).
        limits: the p99 TTFT and TPOT limits (s) the published rate was validated under (None:
            none): the rate is then a measured goodput.
    """

    id: str
    source: str
    model: str
    system: str | None
    chip: str | None
    chips: int
    plan: dict[str, Any]
    load: dict[str, float]
    measured: dict[str, float]
    as_published: str
    verified: bool
    flags: tuple[str, ...] = ()
    notes: str | None = None
    excluded: str | None = None
    unmodelled: str | None = None
    limits: tuple[float, float] | None = None
    mixed_prefill: bool | None = None
    path: str = ""
    source_info: dict[str, str] = field(default_factory=dict)


def load_measurements_dir() -> Path:
    """Built-in files: ``specs/measurements/load``."""
    return measurements_dir() / "load"


def read_load_measurements(
    plans: PlanTables, paths: Sequence[str | Path] | None = None
) -> list[LoadMeasurement]:
    """Every point of the given files (default: every built-in one), in file order, each
    ``[point.plan]`` checked with the serving table of ``plans``
    (:func:`diffcost._analysis.plans.load_load_measurements` passes it).

    Raises:
        SpecError: every problem of every file at once (file, key, reason).
    """
    files = sorted(load_measurements_dir().glob("*.toml")) if paths is None else list(paths)
    return read_points([Path(f) for f in files], "load-measurements", partial(_point, plans))


_TABLES = ("plan", "load", "measured")
#: Measured keys of a closed-loop point (its model gives means only), with their units.
CLOSED_LOOP_KEYS = tuple(f"{k}_{u}" for k in ("ttft_mean", "tpot_mean") for u in ("s", "ms", "us"))


def _point(
    plans: PlanTables, ck: Checker, path: Path, source: str, i: int, raw: Any, info: dict[str, str]
) -> LoadMeasurement | None:
    """One ``[[point]]``: checked, its references resolved."""
    if not isinstance(raw, dict):
        ck.add(f"point[{i}]", "must be a table")
        return None
    before = len(ck.problems)
    pid = raw.get("id")
    pre = f"point[{pid}]." if isinstance(pid, str) and pid else f"point[{i}]."
    v = ck.table({k: x for k, x in raw.items() if k not in _TABLES}, S.LOAD_POINT, pre)
    model_path = _references(ck, path, pre, v)
    plan = _plan(ck, pre, plans, "serve", raw)
    load = _load(ck, pre, raw, plan)
    measured = ck.table(raw.get("measured", {}), S.LOAD_MEASURED, pre + "measured.")
    values = {k: float(x) for k, x in measured.items() if k in LOAD_METRICS}
    if not values:
        ck.add(pre + "measured", f"needs at least one of {', '.join(LOAD_METRICS)} (with a unit)")
    if len(ck.problems) > before or model_path is None:
        return None
    _check_plan(ck, pre, plans, "serve", plan, v["chips"])
    if len(ck.problems) > before:
        return None
    return LoadMeasurement(
        id=v["id"],
        source=source,
        model=model_path,
        system=v.get("system"),
        chip=v.get("chip"),
        chips=v["chips"],
        plan=plan,
        load=load,
        measured=values,
        as_published=measured.get("as_published", ""),
        verified=v["verified"],
        flags=tuple(v.get("flags", ())),
        notes=v.get("notes"),
        excluded=v.get("excluded"),
        unmodelled=v.get("unmodelled"),
        limits=(load["ttft_p99_limit_s"], load["tpot_p99_limit_s"])
        if "ttft_p99_limit_s" in load
        else None,
        mixed_prefill=v.get("mixed_prefill"),
        path=str(path),
        source_info=info,
    )


def _load(
    ck: Checker, pre: str, raw: dict[str, Any], plan: dict[str, Any] | None
) -> dict[str, float]:
    """``[point.load]``: an open loop (a positive rate ``qps``, non-negative coefficients of
    variation, both limits or neither) or a closed loop (``concurrency`` clients, the plan's
    ``batch``; means only: the continuous mode's TTFT and TPOT, no percentiles, limits or
    arrival process)."""
    if "load" not in raw:
        ck.add(pre + "load", "missing [point.load] table (qps or concurrency)")
    load = ck.table(raw.get("load", {}), S.LOAD, pre + "load.")
    if ("qps" in load) == ("concurrency" in load) and "load" in raw:
        ck.add(pre + "load", "give qps (an open loop) or concurrency (a closed loop), not both")
    if ("ttft_p99_limit_s" in load) != ("tpot_p99_limit_s" in load):
        ck.add(pre + "load", "give both ttft_p99_limit and tpot_p99_limit (a goodput), or neither")
    if "concurrency" in load:
        for key in ("arrival_cv", "ttft_p99_limit_s", "tpot_p99_limit_s"):
            if key in load:
                name = key.removesuffix("_s")
                ck.add(pre + f"load.{name}", "not for a closed loop (concurrency): remove it")
        percentiles = [k for k in raw.get("measured", {}) if k not in CLOSED_LOOP_KEYS]
        for key in percentiles:
            if key != "as_published":
                ck.add(
                    pre + f"measured.{key}",
                    "a closed loop (concurrency) is compared by its means only: "
                    "ttft_mean, tpot_mean",
                )
        if plan is not None and plan.get("batch") != load["concurrency"]:
            ck.add(
                pre + "plan.batch",
                f"must equal load.concurrency ({load['concurrency']}): a closed loop of c "
                "clients runs c sequences",
            )
        return {"input_cv": 0.0} | {k: float(x) for k, x in load.items()}
    return {"arrival_cv": 1.0, "input_cv": 0.0} | {k: float(x) for k, x in load.items()}


__all__ = ["LOAD_METRICS", "LoadMeasurement", "load_measurements_dir", "read_load_measurements"]
