"""Published measurements as validation scenarios: ``specs/measurements/*.toml``, read strictly.

One file per source (paper, README, vendor table).  Each ``[[point]]`` is a scenario the cost
models can run (model, system, chip count and the *published* plan) plus one measured number
in the source's own convention.  The loader converts that number to one of four canonical
metrics, each compared as ``predicted / measured - 1``:

* ``train_throughput``: tokens/s of the whole job, from ``step_time_s`` (``B s / t``),
  ``tokens_per_s_per_chip`` (``x chips``) or ``achieved_per_chip_tflop_per_s`` with
  ``flop_convention = "narayanan-eq3"`` (``X chips / (96 l h^2 (1 + s/6h + V/16lh))``) or
  ``"6n-12lhs"`` (``X chips / (6 N + 12 l h s)``);
* ``serve_throughput``: output tokens/s per chip, from ``output_tokens_per_s_per_chip``;
* ``ttft``: seconds to the first token, from ``ttft_ms`` (any time unit);
* ``token_latency``: seconds per output token of one sequence (batch wall time / output
  length), from ``amortized_time_per_token_ms`` (amortized over the batch: ``x batch``).

Narayanan et al. (SC'21, eq. 3) count the recomputed forward pass, so their "achieved
TFLOP/s" is hardware-FLOP-like; converting with their own formula recovers the measured
tokens/s exactly.  Every problem of every file is reported at once (:class:`SpecError`).
See ``specs/SCHEMA.md`` ("Measurements") for the format.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from .._core.errors import Problem, SpecError
from . import schema as S
from .checker import Checker, read_toml, specs_dir
from .loader import load_model, load_spec, resolve
from .plan_tables import PlanTables

METRICS: tuple[str, ...] = ("train_throughput", "serve_throughput", "ttft", "token_latency")
METRIC_LABELS = {
    "train_throughput": "training throughput (tokens/s; same error as MFU)",
    "serve_throughput": "serving throughput (output tokens/s/chip)",
    "ttft": "time to first token (s)",
    "token_latency": "per-token latency (s)",
}
FLOP_CONVENTIONS = S.FLOP_CONVENTIONS
#: measured key (SI) -> metric
_METRIC_OF = {
    "step_time_s": "train_throughput",
    "tokens_per_s_per_chip": "train_throughput",
    "achieved_per_chip_flop_per_s": "train_throughput",
    "output_tokens_per_s_per_chip": "serve_throughput",
    "ttft_s": "ttft",
    "amortized_time_per_token_s": "token_latency",
}
#: plan keys a point must publish; the others of a training plan are chosen by the rule
#: (:mod:`diffcost._validate`) when absent.
REQUIRED_PLAN = S.POINT_PLAN_REQUIRED
#: training plan keys the rule may choose when a source leaves them unreported
CHOSEN_BY_RULE = ("micro_batch", "virtual_stages", "recompute", "zero", "sequence_parallel")


@dataclass(frozen=True)
class Measurement:
    """One published point, ready to predict.

    Attributes:
        id: identifier (unique over all files; the YAML id it was transcribed from).
        source: name of the file it comes from (the unit of leave-one-source-out).
        kind: "train" or "serve".
        metric: one of :data:`METRICS`.
        measured: the measured value in the metric's canonical SI form.
        model: resolved model file; system / chip: built-in name or path; chips: count.
        plan: the published plan values (a training point omits what the rule chooses).
        raw: the ``[point.measured]`` values in SI (key -> value) and ``as_published``.
        excluded: why the point is carried but not predicted (None: predicted).
        unmodelled: a named effect of the point's software stack that the cost model lacks
            (None: none known).  The point is predicted and reported like every other, but the
            calibration does not fit to it, so that a missing effect does not bend the
            physical constants of every other point.
        workload: "pretraining" or "fine-tuning" (a training point; the schema's ``workload``).
    """

    id: str
    source: str
    kind: str
    metric: str
    measured: float
    model: str
    system: str | None
    chip: str | None
    chips: int
    plan: dict[str, Any]
    raw: dict[str, Any]
    verified: bool
    flags: tuple[str, ...] = ()
    notes: str | None = None
    excluded: str | None = None
    unmodelled: str | None = None
    path: str = ""
    source_info: dict[str, str] = field(default_factory=dict)
    workload: str = "pretraining"

    @property
    def hardware(self) -> str:
        """System or chip name."""
        return self.system or self.chip or ""


def measurements_dir() -> Path:
    """Built-in measurement files: ``specs/measurements``."""
    return specs_dir() / "measurements"


def read_measurements(
    plans: PlanTables, paths: Sequence[str | Path] | None = None
) -> list[Measurement]:
    """Every point of the given measurement files (default: all built-in ones), in file order,
    each ``[point.plan]`` checked with the table of its kind in ``plans``
    (:func:`diffcost._analysis.plans.load_measurements` passes both jobs').

    Raises:
        SpecError: every problem of every file at once (file, key, reason).
    """
    files = sorted(measurements_dir().glob("*.toml")) if paths is None else [Path(p) for p in paths]
    if not files:
        raise SpecError([Problem(str(measurements_dir()), "", "no measurement files")])
    return read_points(files, "measurements", partial(_point, plans))


def read_points(files: Sequence[Path], kind: str, parse: Callable[..., Any]) -> list[Any]:
    """The ``[[point]]`` tables of measurement files of spec kind ``kind``, each made a point by
    ``parse(checker, path, source name, index, raw table, source info)`` (None when it has
    problems, which it adds to the checker), in file order; ids unique across all files.

    Raises:
        SpecError: every problem of every file at once (file, key, reason).
    """
    problems: list[Problem] = []
    points: list[Any] = []
    seen: dict[str, str] = {}
    for path in map(Path, files):
        try:
            got = _read_file(path, kind, parse)
        except SpecError as err:
            problems += err.problems
            continue
        for m in got:
            if m.id in seen:
                problems.append(
                    Problem(str(path), f"point {m.id}", f"duplicate id (also in {seen[m.id]})")
                )
            seen[m.id] = str(path)
        points += got
    if problems:
        raise SpecError(problems)
    return points


def _read_file(path: Path, kind: str, parse: Callable[..., Any]) -> list[Any]:
    data = read_toml(path)
    ck = Checker(str(path))
    top, source = ck.document(data, S.KINDS[kind], stem=path.stem)
    raw_points = data.get("point")
    if not isinstance(raw_points, list) or not raw_points:
        ck.add("point", "missing: at least one [[point]] table")
        raw_points = []
    name = top.get("name", path.stem)
    out = []
    ids: set[str] = set()
    for i, raw in enumerate(raw_points):
        m = parse(ck, path, name, i, raw, source)
        if m is not None:
            if m.id in ids:
                ck.add(f"point[{i}].id", f"duplicate id {m.id!r}")
            ids.add(m.id)
            out.append(m)
    ck.raise_if_any()
    return out


def _point(
    plans: PlanTables,
    ck: Checker,
    path: Path,
    source: str,
    i: int,
    raw: Any,
    source_info: dict[str, str],
) -> Measurement | None:
    """One ``[[point]]``: checked, its references resolved, its value made canonical."""
    if not isinstance(raw, dict):
        ck.add(f"point[{i}]", "must be a table")
        return None
    before = len(ck.problems)
    pid = raw.get("id")
    pre = f"point[{pid}]." if isinstance(pid, str) and pid else f"point[{i}]."
    v = ck.table({k: x for k, x in raw.items() if k not in _POINT_TABLES}, S.POINT, pre)
    model_path = _references(ck, path, pre, v)
    kind = v.get("kind")
    if kind is None:
        return None
    plan = _plan(ck, pre, plans, kind, raw)
    measured, key = _measured(ck, pre, kind, raw)
    if len(ck.problems) > before or model_path is None:
        return None
    _check_plan(ck, pre, plans, kind, plan, v["chips"])
    if len(ck.problems) > before or key is None:
        return None
    return Measurement(
        id=v["id"],
        source=source,
        kind=kind,
        metric=_METRIC_OF[key],
        measured=float(_canonical(key, measured, plan, v["chips"], model_path)),
        model=model_path,
        system=v.get("system"),
        chip=v.get("chip"),
        chips=v["chips"],
        plan=plan,
        raw=measured,
        verified=v["verified"],
        flags=tuple(v.get("flags", ())),
        notes=v.get("notes"),
        excluded=v.get("excluded"),
        unmodelled=v.get("unmodelled"),
        path=str(path),
        source_info=source_info,
        workload=v.get("workload", "pretraining"),
    )


_POINT_TABLES = ("plan", "measured")


def _references(ck: Checker, path: Path, pre: str, v: dict[str, Any]) -> str | None:
    """Resolve the point's model, system or chip; the model's file (None: not resolved)."""
    if ("system" in v) == ("chip" in v):
        ck.add(pre + "system/chip", "give exactly one of system or chip")
    model_path = None
    if "model" in v:
        model_path = _resolve_ref(ck, path, "model", v["model"], pre)
    for ref in ("system", "chip"):
        if ref in v:
            _resolve_ref(ck, path, ref, v[ref], pre)
    return model_path


def _plan(
    ck: Checker, pre: str, plans: PlanTables, kind: str, raw: dict[str, Any]
) -> dict[str, Any]:
    """The published plan: every key known, the keys every source must publish present."""
    plan_schema = plans["train" if kind == "train" else "serve"].fields
    plan = ck.table(raw.get("plan", {}), plan_schema, pre + "plan.")
    if "plan" not in raw:
        ck.add(pre + "plan", "missing [point.plan] table")
    for key in REQUIRED_PLAN[kind]:
        if key not in plan and isinstance(raw.get("plan"), dict) and key not in raw["plan"]:
            ck.add(
                pre + f"plan.{key}",
                "missing required key (publish it, or say in [source] which convention fixes it)",
            )
    return plan


def _measured(
    ck: Checker, pre: str, kind: str, raw: dict[str, Any]
) -> tuple[dict[str, Any], str | None]:
    """The measured values (SI) and the key of the one measured value (None: not exactly one)."""
    measured = ck.table(raw.get("measured", {}), S.MEASURED[kind], pre + "measured.")
    if "measured" not in raw:
        ck.add(pre + "measured", "missing [point.measured] table")
    values = [k for k in measured if k in _METRIC_OF]
    if isinstance(raw.get("measured"), dict) and len(values) != 1:
        allowed = [k for k in S.MEASURED[kind] if k not in ("as_published", "flop_convention")]
        ck.add(
            pre + "measured",
            f"needs exactly one measured value, got {len(values)} "
            f"(allowed for {kind}: {', '.join(allowed)}, with a unit where it has one)",
        )
    if ("achieved_per_chip_flop_per_s" in measured) != ("flop_convention" in measured):
        ck.add(
            pre + "measured.flop_convention",
            "required with (and only with) achieved_per_chip_*: say how the source counts FLOPs",
        )
    return measured, values[0] if len(values) == 1 else None


def _resolve_ref(ck: Checker, path: Path, kind: str, ref: str, pre: str) -> str | None:
    """Built-in name, or a path relative to the measurement file."""
    candidate = path.parent / ref
    if Path(ref).suffix in (".toml", ".json"):
        if not candidate.is_file():
            ck.add(pre + kind, f"{kind} file not found: {candidate}")
            return None
        ref = str(candidate)
    try:
        resolved = str(resolve(kind, ref, where=str(path)))
        if kind == "model":
            load_spec("model", resolved)
        return resolved
    except SpecError as err:
        ck.problems += [
            Problem(str(path), pre + kind, p.reason if p.file == str(path) else str(p))
            for p in err.problems
        ]
        return None


def _check_plan(
    ck: Checker, pre: str, plans: PlanTables, kind: str, plan: dict[str, Any], chips: int
) -> None:
    """The published plan must build and use exactly the published chips."""
    try:
        used, what = plans["train" if kind == "train" else "serve"].check(plan, pre + "plan")
    except SpecError as err:
        ck.problems += [Problem(ck.path, f"{p.file}.{p.key}", p.reason) for p in err.problems]
        return
    if used != chips:
        ck.add(pre + "chips", f"{what} = {used} but chips = {chips}")


def _flop_per_token(convention: str, model_path: str, plan: dict[str, Any]) -> float:
    """FLOP per trained token of a source's convention (:data:`FLOP_CONVENTIONS`).

    ``narayanan-eq3``: ``96 l h^2 (1 + s/6h + V/16lh)`` (Narayanan et al. SC'21 eq. 3, with the
    recomputed forward pass).  ``6n-12lhs``: ``6 N + 12 l h s`` with ``N`` every parameter
    (model FLOPs with the full attention matrix, no recomputation: PaLM's MFU, Chowdhery et al.
    2022 app. B, as NeMo's performance summary and torchtitan's ``get_num_flop_per_token``
    count it)."""
    mv = load_spec("model", model_path).values
    n, h, vocab, s = mv["layers"], mv["hidden"], mv["vocab"], plan["seq_len"]
    if convention == "narayanan-eq3":
        return 96.0 * n * h * h * (1.0 + s / (6.0 * h) + vocab / (16.0 * n * h))
    params = float(load_model(model_path).num_params())
    return 6.0 * params + 12.0 * n * h * s


def _canonical(
    key: str, measured: dict[str, Any], plan: dict[str, Any], chips: int, model_path: str
) -> float:
    x = measured[key]
    if key == "step_time_s":
        return plan["global_batch"] * plan["seq_len"] / x
    if key == "tokens_per_s_per_chip":
        return x * chips
    if key == "achieved_per_chip_flop_per_s":
        return x * chips / _flop_per_token(measured["flop_convention"], model_path, plan)
    if key == "amortized_time_per_token_s":
        return x * plan["batch"]
    return x  # output_tokens_per_s_per_chip, ttft_s


__all__ = ["METRICS", "METRIC_LABELS", "Measurement", "measurements_dir", "read_measurements"]
