"""Sweep specifications: what varies (plan, hardware, model fields), checked strictly and
encoded for on-device decoding; the spec file loader.  Evaluation is in :mod:`diffcost._sweep`.
"""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import equinox as eqx
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np

from .._core.errors import Problem, SpecError
from .._core.options import PlanField
from .._inputs import schema as S
from .._inputs.checker import MAX_SI_VALUE, Checker, read_toml
from .._inputs.hardware import FORMATS
from .._inputs.loader import load_model, load_system
from .._inputs.ranges import SYSTEM_CHIPS
from .._serve.cost import ServeBreakdown
from .._serve.formats import compute_format_on, hardware_chip_formats, has_format
from .._serve.plan import SERVE_FIELDS, plan_kwargs, serve_plan
from .._train.cost import TrainBreakdown
from .._train.memory import TrainMemory
from .._train.plan import TRAIN_FIELDS, train_plan

JOBS = ("train", "serve")
NUM, BOOL = "number", "bool"


def _sweep_kind(f: PlanField) -> Any:
    """How the sweep encodes a field: a number, a bool, or the index into its choices."""
    return f.options() if f.kind == "categorical" else BOOL if f.kind == "bool" else NUM


def _sweep_fields(fields: tuple[PlanField, ...], per_format_after: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields:
        out[f.name] = _sweep_kind(f)
        if f.name == per_format_after:  # serving: accuracy_cost_<format>, one number each
            out.update({f"accuracy_cost_{fmt}": NUM for fmt in FORMATS})
    return out


#: Sweepable plan fields of each job, derived from the job's field table.
PLAN_FIELDS = {
    "train": _sweep_fields(TRAIN_FIELDS),
    "serve": _sweep_fields(SERVE_FIELDS, per_format_after="kv_block"),
}
_TABLES_OF = {"train": TRAIN_FIELDS, "serve": SERVE_FIELDS}
_BUILDERS = {"train": train_plan, "serve": serve_plan}
#: Plan fields derived per point when not given (NaN / -1 on the device).
_DERIVED = {f.name for fields in _TABLES_OF.values() for f in fields if f.derived}
_REFS = ("model", "system", "chip", "chips")
#: Encoding of a value not given (a derived plan field, the system's own chip count, the
#: compute format of the weights): never a valid value of those keys (all are positive counts,
#: degrees, booleans or choice indices).  Not NaN: the host arrays sent to every device are
#: checked equal across the processes of ``jax.distributed``, and ``NaN != NaN``.
UNSET = -1.0
#: Keys whose :data:`UNSET` becomes NaN on the device, where NaN means "derive it"
#: (``diffcost._train.plan.encode_train``); the compute format keeps -1 (``< 0``: derive it).
NAN_WHEN_UNSET = frozenset({"chips", *(_DERIVED - {"compute_format"})})
#: Serving sweeps only: the offered load (:mod:`diffcost._serve.load`); giving ``qps`` adds
#: the :data:`LOAD_OUTPUTS` columns (so ``qps`` has no default: :data:`UNSET` is a
#: placeholder never read).  Defaults: Poisson arrivals, prompts of equal length.
LOAD_KEYS = {"qps": UNSET, "arrival_cv": 1.0, "input_cv": 0.0}
LOAD_OUTPUTS: tuple[str, ...] = tuple(
    "load_" + k
    for k in (
        "utilisation",
        "stable",
        "running",
        "kv_occupancy",
        "preemption_risk",
        "wait_s",
        "ttft_mean_s",
        "ttft_p50_s",
        "ttft_p90_s",
        "ttft_p99_s",
        "tpot_s",
        "tpot_p90_s",
        "tpot_p99_s",
    )
)


def _fields_of(cls: type, prefix: str = "") -> list[str]:
    # the breakdown's ``chips`` (chips the plan occupies) is ``chips_used`` here: ``chips`` is
    # the system's chip count, an input
    return [prefix + ("chips_used" if k == "chips" else k) for k in cls.__dataclass_fields__]


TRAIN_OUTPUTS: tuple[str, ...] = tuple(
    [k for k in _fields_of(TrainBreakdown) if k != "memory"]
    + _fields_of(TrainMemory, "memory_")
    + ["tokens_per_s_per_chip", "dp", "global_batch", "fits", "feasible"]
)
_SERVE_MEMORY = (
    "weights_bytes",
    "kv_cache_bytes",
    "kv_block_waste_bytes",
    "activations_bytes",
    "reserved_bytes",
    "total_bytes",
)
SERVE_OUTPUTS: tuple[str, ...] = tuple(
    [k for k in _fields_of(ServeBreakdown) if k != "memory"]
    + ["memory_" + k for k in _SERVE_MEMORY]
    + ["replicas", "fits", "feasible"]
)
OUTPUTS = {"train": TRAIN_OUTPUTS, "serve": SERVE_OUTPUTS + LOAD_OUTPUTS}


@dataclass(frozen=True)
class Sweep:
    """What to evaluate: a base point and axes (see the module docstring for the keys).

    Attributes:
        job: ``"train"`` or ``"serve"``.
        base: fixed values.
        grid: one axis per key (Cartesian product).
        zip: equal-length lists sharing one axis.
        outputs: output columns to keep (default: all of :data:`OUTPUTS` of the job).
        name: for messages; source: the file it came from (for error messages).
        calibration: the calibration (name or path) of every system's efficiency constants,
            and whose posterior gives the interval columns.
    """

    job: str
    base: Mapping[str, Any]
    grid: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    zip: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    outputs: tuple[str, ...] | None = None
    name: str = "sweep"
    source: str = "<sweep>"
    calibration: str = "default"

    def size(self) -> int:
        """Number of points: the product of the grid lengths times the zip length."""
        n = math.prod(len(v) for v in self.grid.values())
        return n * (len(next(iter(self.zip.values()))) if self.zip else 1)


# --- preparation (host) ---------------------------------------------------------------------------
@dataclass(frozen=True)
class _Override:
    column: str
    target: str  # "system" | "model"
    path: tuple[str, ...]
    index: int  # position in a per-format vector, -1 for scalars
    multiply: bool


@dataclass(frozen=True)
class _Structure:
    """Static description of a prepared sweep: the key of its compilation."""

    job: str
    axes: tuple[tuple[int, int, tuple[str, ...]], ...]  # (size, stride, columns)
    overrides: tuple[_Override, ...]
    outputs: tuple[str, ...]
    #: headline outputs given ``_p10`` / ``_p90`` columns (empty: no intervals)
    intervals: tuple[str, ...] = ()


def _override(key: str, problems: list[Problem], where: str) -> _Override | None:
    multiply = key.startswith("scale.")
    parts = key.removeprefix("scale.").split(".")
    target, path = parts[0], parts[1:]
    probe: Any = load_system(chip="h100-sxm") if target == "system" else load_model("llama-2-7b")
    index = -1
    try:
        for i, name in enumerate(path):
            if name == "num_chips":
                raise AttributeError("use 'chips' for the chip count")
            if isinstance(probe, eqx.Module):
                probe = getattr(probe, name)
            elif np.size(probe) == len(FORMATS) and i == len(path) - 1 and name in FORMATS:
                index = FORMATS.index(name)
                probe = probe[index]
            else:
                raise AttributeError(name)
        if not path or isinstance(probe, eqx.Module) or np.size(probe) != 1:
            raise AttributeError("not a number")
    except AttributeError as err:
        reason = str(err) if "'" not in str(err) else f"no field {str(err).split()[-1]}"
        problems.append(
            Problem(
                where,
                key,
                f"no such {target} number ({reason}); e.g. "
                f"'system.chip.memory_bandwidth_bytes_per_s', "
                f"'system.chip.peak_flop_per_s.bf16', 'model.hidden'",
            )
        )
        return None
    path = tuple(p for p in path if p not in FORMATS or index < 0)
    return _Override(key, target, path, index, multiply)


def _is_override(key: str) -> bool:
    return key.split(".")[0] in ("system", "model", "scale") and "." in key


@dataclass
class _Prepared:
    sweep: Sweep
    structure: _Structure
    tables: dict[str, Any]  # systems, models (stacked) and encoded axis columns
    consts: dict[str, Any]  # encoded base values
    host_axes: list[dict[str, list[Any]]]  # original values per axis column
    n: int
    hardware: tuple[tuple[str, str], ...] = ()  # ("system" | "chip", name) per ``_hw`` code


def _encode(job: str, key: str, value: Any, hardware: list, models: list) -> float:
    if value is None:
        return UNSET
    if key == "model":
        return float(models.index(value))
    if key in ("system", "chip"):
        return float(hardware.index((key, value)))
    kind = PLAN_FIELDS[job].get(key, NUM)
    if kind == BOOL:
        return float(bool(value))
    if isinstance(kind, tuple):
        return float(kind.index(value))
    return float(value)


def _check_plans(
    sweep: Sweep, plan_base: dict, columns: dict[str, list], owner: dict, problems: list
) -> None:
    """Every plan value is validated by the plan builder (base values around it); a problem
    is named in the table that gives the value (``base.tp``, ``grid.batch``), once."""
    build = _BUILDERS[sweep.job]
    kw = (lambda d: plan_kwargs(d)) if sweep.job == "serve" else (lambda d: d)
    seen_problems = set(problems)

    def attempt(values: dict, name: Any) -> None:
        try:
            build(**kw(values), source=sweep.source)
            return
        except SpecError as err:
            found = [Problem(p.file, name(p.key), p.reason) for p in err.problems]
        except TypeError as err:
            found = [Problem(sweep.source, name(""), str(err))]
        for p in found:
            if p not in seen_problems:
                seen_problems.add(p)
                problems.append(p)

    in_base = lambda key: f"base.{key}"  # noqa: E731
    attempt(dict(plan_base), in_base)
    base_keys = {p.key for p in problems}
    seen: set = set()
    for key, values in columns.items():
        in_axis = lambda k, key=key: (  # noqa: E731
            f"{owner.get(key, 'grid')}.{k}" if k.split(".")[0] == key else in_base(k)
        )
        for v in values:
            if (key, repr(v)) in seen:
                continue
            seen.add((key, repr(v)))
            before = len(problems)
            attempt({**plan_base, key: v}, in_axis)
            # the base's own problems were reported once, by the base
            problems[before:] = [p for p in problems[before:] if p.key not in base_keys]


def _check_keys(sweep: Sweep, problems: list[Problem]) -> dict[str, str]:
    """Every key known and given once, axes non-empty lists of equal zip length; returns the
    table (base, grid or zip) that owns each key."""
    w, fields = sweep.source, PLAN_FIELDS[sweep.job]
    if sweep.job == "serve":
        fields = {**fields, **dict.fromkeys(LOAD_KEYS, NUM)}
    tables = {"base": dict(sweep.base), "grid": dict(sweep.grid), "zip": dict(sweep.zip)}
    owner: dict[str, str] = {}
    allowed = ", ".join([*_REFS, *fields])
    for tname, table in tables.items():
        for key, value in table.items():
            if key in owner:
                problems.append(Problem(w, f"{tname}.{key}", f"also given in [{owner[key]}]"))
            owner[key] = tname
            if key not in fields and key not in _REFS and not _is_override(key):
                reason = (
                    f"unknown field for a {sweep.job} sweep (allowed: {allowed}, "
                    "system.<path>, model.<field>, scale.<...>)"
                )
                problems.append(Problem(w, f"{tname}.{key}", reason))
            if tname != "base" and (not isinstance(value, (list, tuple)) or not value):
                problems.append(Problem(w, f"{tname}.{key}", "must be a non-empty list"))
    lengths = _zip_lengths(sweep)
    if len(lengths) > 1:
        problems.append(Problem(w, "zip", f"lists must have equal lengths, got {sorted(lengths)}"))
    if "model" not in owner:
        problems.append(Problem(w, "model", "missing: give a model in [base], [grid] or [zip]"))
    if ("system" in owner) + ("chip" in owner) != 1:
        problems.append(Problem(w, "system/chip", "give exactly one of system or chip"))
    for key in sweep.outputs or ():
        if key in LOAD_OUTPUTS and "qps" not in owner:
            problems.append(Problem(w, f"outputs.{key}", "a load output needs qps (requests/s)"))
        elif key not in OUTPUTS[sweep.job]:
            reason = f"unknown output (allowed: {', '.join(OUTPUTS[sweep.job])})"
            problems.append(Problem(w, f"outputs.{key}", reason))
    return owner


def _zip_lengths(sweep: Sweep) -> set[int]:
    return {len(v) for v in sweep.zip.values() if isinstance(v, (list, tuple))}


def _axis_columns(sweep: Sweep) -> list[dict[str, list[Any]]]:
    """The well-formed axes (so that every problem is reported in one go): one per grid key,
    one for all the zip keys."""
    listed = lambda v: isinstance(v, (list, tuple)) and len(v) > 0  # noqa: E731
    axis_cols = [{k: list(v)} for k, v in sweep.grid.items() if listed(v)]
    if sweep.zip and len(_zip_lengths(sweep)) == 1:
        axis_cols.append({k: list(v) for k, v in sweep.zip.items() if listed(v)})
    return axis_cols


def _load_refs(sweep: Sweep, owner: dict, all_cols: dict, problems: list[Problem]):
    """The distinct hardware and models the sweep names, loaded; a bad reference is a problem
    of the sweep file (its key named), not of the command line."""
    hw_key = "system" if "system" in owner else "chip"
    pick = lambda k: [sweep.base[k]] if k in sweep.base else all_cols.get(k, [])  # noqa: E731
    hardware = list(
        dict.fromkeys((hw_key, n) for n in pick(hw_key) if _ref_ok(sweep, hw_key, n, problems))
    )
    models = list(dict.fromkeys(n for n in pick("model") if _ref_ok(sweep, "model", n, problems)))
    systems, loaded_models = [], []
    for kind, name in hardware:
        try:
            systems.append(load_system(**{kind: name}, calibration=sweep.calibration))
        except SpecError as err:
            problems += [_in_sweep(sweep, p) for p in err.problems]
    for name in models:
        try:
            loaded_models.append(load_model(name))
        except SpecError as err:
            problems += [_in_sweep(sweep, p) for p in err.problems]
    return hardware, models, systems, loaded_models


def _ref_ok(sweep: Sweep, key: str, name: Any, problems: list[Problem]) -> bool:
    """A model, system or chip reference must be a name or a path (a non-empty string)."""
    if isinstance(name, str) and name:
        return True
    reason = f"must be a built-in name or a file path, got {name!r}"
    problems.append(Problem(sweep.source, key, reason))
    return False


def _in_sweep(sweep: Sweep, problem: Problem) -> Problem:
    """A reference problem raised as an argument problem, named in the sweep file."""
    if problem.file in ("<arguments>", "<flags>"):
        return Problem(sweep.source, problem.key, problem.reason)
    return problem


def _check_numbers(
    sweep: Sweep, all_cols: dict, owner: dict[str, str], problems: list[Problem]
) -> None:
    """Chip counts are positive integers within a system's plausible range (1..1e7,
    :data:`~diffcost._inputs.ranges.SYSTEM_CHIPS`, as a scenario's); a scale factor a
    positive number (0 makes the hardware or model number zero: a zero bandwidth or FLOP/s is
    an infinite time, not a chip); an absolute override a finite non-negative number; the
    load's coefficients of variation finite non-negative numbers and the arrival rate
    positive; every number within the spec loader's bound.  Each problem named ``table.key``
    (``grid.chips``)."""
    w = sweep.source
    named = lambda key: f"{owner.get(key, 'base')}.{key}"  # noqa: E731
    for key, values in [*((k, [v]) for k, v in sweep.base.items()), *all_cols.items()]:
        checks = key == "chips" or _is_override(key) or (key in LOAD_KEYS and sweep.job == "serve")
        for v in values if checks else ():
            reason = _number_problem(key, v)
            if reason is not None:
                problems.append(Problem(w, named(key), reason))


def _number_problem(key: str, v: Any) -> str | None:
    """Why ``v`` is not a value of sweep key ``key`` (:func:`_check_numbers`), or ``None``."""
    if key == "chips":
        ok = not isinstance(v, bool) and isinstance(v, int) and v >= 1
        if not ok:
            return f"must be a positive integer, got {v!r}"
        return SYSTEM_CHIPS.outside(v) if v > SYSTEM_CHIPS.hi else None
    number = not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)
    positive = key == "qps" or key.startswith("scale.")
    if not number or v < 0 or (positive and v == 0):
        kind = "positive" if positive else "non-negative"
        why = ""
        if key.startswith("scale.") and number and v == 0:
            why = ": a scale of 0 makes the number zero (a zero bandwidth or FLOP/s is an "
            why += "infinite time, a zero size holds nothing); scale by a number > 0"
        return f"must be a {kind} number, got {v!r}{why}"
    if v > MAX_SI_VALUE:
        return (
            f"{v:g} is beyond any physical input (at most {MAX_SI_VALUE:.0e} in SI units; "
            "larger values overflow float32, in which the model computes)"
        )
    return None


def _default(job: str, key: str) -> Any:
    """The value of a plan field no table sets: its field-table default (``None`` when it is
    derived per point; accuracy costs are 0)."""
    if key in _DERIVED:
        return None
    if key.startswith("accuracy_cost_"):
        return 0.0
    return next(f.default for f in _TABLES_OF[job] if f.name == key)


_INTERNAL = {"model": "_model", "system": "_hw", "chip": "_hw"}


def _encode_axes(axis_cols: list[dict[str, list[Any]]], enc, dtype):
    """Encoded columns of every axis and the (size, stride, names) of each (mixed radix, the
    last axis fastest)."""
    columns, axes, stride = {}, [], 1
    for axis in reversed(axis_cols):
        size = len(next(iter(axis.values())))
        names = tuple(_INTERNAL.get(k, k) for k in axis)
        for k, v in axis.items():
            columns[_INTERNAL.get(k, k)] = jnp.asarray([enc(k, x) for x in v], dtype)
        axes.append((size, stride, names))
        stride *= size
    axes.reverse()
    return columns, tuple(axes), stride


def _checked(sweep: Sweep) -> tuple[list[Problem], dict[str, str], list, tuple]:
    """Every problem of a sweep of a known job (keys, overrides, plans, references, numbers),
    the table owning each key, the overrides and the loaded references (:func:`_load_refs`)."""
    w, fields = sweep.source, PLAN_FIELDS[sweep.job]
    problems: list[Problem] = []
    owner = _check_keys(sweep, problems)
    overrides = [o for k in owner if _is_override(k) and (o := _override(k, problems, w))]
    axis_cols = _axis_columns(sweep)
    all_cols = {k: v for axis in axis_cols for k, v in axis.items()}
    plan_base = {k: v for k, v in sweep.base.items() if k in fields}
    plan_cols = {k: v for k, v in all_cols.items() if k in fields}
    _check_plans(sweep, plan_base, plan_cols, owner, problems)
    refs = _load_refs(sweep, owner, all_cols, problems)
    _check_numbers(sweep, all_cols, owner, problems)
    return problems, owner, overrides, refs


def hardware_formats(hardware: Sequence[tuple[str, str]]) -> np.ndarray:
    """What each hardware entry's chip runs, as the sweep reads it per point: row ``h``, column
    ``f`` (:data:`FORMATS`) is the index of the format the GEMMs of weights in format ``f`` run
    in on that chip (:func:`~diffcost._serve.formats.compute_format_on`: the weights' own, or
    weight-only in 16 bits for narrower weights the chip has no rate for; -1: none runs), and
    column ``len(FORMATS) + f`` is 1 when the chip has a rate for ``f`` as a GEMM format
    (:func:`~diffcost._serve.formats.has_format`), for an explicit ``compute_format``.  The same
    rule as ``diffcost serve`` and ``plan serve`` (issue 44: no format priced at a rate the chip
    lacks)."""
    rows = []
    for kind, name in hardware:
        _, formats = hardware_chip_formats(kind, name)
        runs = [compute_format_on(f, formats) for f in FORMATS]
        rows.append(
            [FORMATS.index(c) if c is not None else -1 for c in runs]
            + [1 if has_format(f, formats) else 0 for f in FORMATS]
        )
    return np.asarray(rows, dtype=np.float32)


def _unique(problems: list[Problem]) -> list[Problem]:
    """Each problem once, in order."""
    return list(dict.fromkeys(problems))


def prepare(sweep: Sweep) -> _Prepared:
    """Check a sweep (every problem at once) and encode it for the device."""
    w = sweep.source
    if sweep.job not in JOBS:
        raise SpecError([Problem(w, "job", f"must be one of {', '.join(JOBS)}, got {sweep.job!r}")])
    problems, owner, overrides, refs = _checked(sweep)
    if problems:
        raise SpecError(_unique(problems))
    fields = PLAN_FIELDS[sweep.job]
    axis_cols = _axis_columns(sweep)
    hardware, models, systems, loaded_models = refs

    dtype = jnp.result_type(float)
    enc = lambda k, v: _encode(sweep.job, k, v, hardware, models)  # noqa: E731
    consts = {k: enc(k, v) for k, v in sweep.base.items()}
    consts |= {k: enc(k, _default(sweep.job, k)) for k in fields if k not in owner}
    consts.setdefault("chips", UNSET)
    if sweep.job == "serve" and "qps" in owner:
        consts |= {k: v for k, v in LOAD_KEYS.items() if k not in owner}
    consts = {_INTERNAL.get(k, k): jnp.asarray(v, dtype) for k, v in consts.items()}
    columns, axes, n = _encode_axes(axis_cols, enc, dtype)
    stack = lambda trees: jtu.tree_map(lambda *x: jnp.stack(x), *trees)  # noqa: E731
    loaded = sweep.job == "serve" and "qps" in owner
    default = {"train": TRAIN_OUTPUTS, "serve": SERVE_OUTPUTS + LOAD_OUTPUTS * loaded}
    outputs = tuple(sweep.outputs or default[sweep.job])
    structure = _Structure(sweep.job, axes, tuple(overrides), outputs)
    tabs = {"systems": stack(systems), "models": stack(loaded_models), "columns": columns}
    if sweep.job == "serve":
        tabs["formats"] = jnp.asarray(hardware_formats(hardware))
    return _Prepared(sweep, structure, tabs, consts, axis_cols, n, tuple(hardware))


# --- one point (device) ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepFile:
    """A sweep file: the sweep, its display name and where to write results."""

    sweep: Sweep
    display_name: str
    csv: Path | None = None
    parquet: Path | None = None
    plots: Path | None = None


def _calibration_of(value: str | None, path: Path) -> str:
    """A sweep file's calibration: a built-in name as written, a file relative to the sweep."""
    if value is None:
        return "default"
    if value.endswith(".toml") and not Path(value).is_absolute():
        return str(path.parent / value)
    return value


def load_sweep(path: str | Path) -> SweepFile:
    """Read and check a sweep file (``specs/SCHEMA.md``, "Sweep"): its keys by the one checker
    of every spec kind (:data:`diffcost._inputs.schema.KINDS` ``["sweep"]``), then every plan,
    hardware and model value of its axes (:func:`prepare`); all problems at once."""
    path = Path(path)
    ck = Checker(str(path))
    data = read_toml(path)
    values, _ = ck.document(data, S.KINDS["sweep"], stem=path.stem)
    for table in ("grid", "zip"):
        axes = data.get(table, {})
        for key, axis in axes.items() if isinstance(axes, dict) else ():
            if not isinstance(axis, list) or not axis:
                ck.add(f"{table}.{key}", f"must be a non-empty list of values, got {axis!r}")
    tables = {t: data.get(t, {}) for t in ("base", "grid", "zip")}
    if values.get("job") in JOBS and all(isinstance(t, dict) for t in tables.values()):
        # the body's problems with the header's, all at once (an axis the header refused
        # as empty is not reported twice)
        listed = lambda t: {k: v for k, v in t.items() if isinstance(v, list) and v}  # noqa: E731
        body = Sweep(
            job=values["job"],
            base=tables["base"],
            grid=listed(tables["grid"]),
            zip=listed(tables["zip"]),
            outputs=tuple(values["outputs"]) if values.get("outputs") else None,
            source=str(path),
            calibration=_calibration_of(values.get("calibration"), path),
        )
        ck.problems += _checked(body)[0]
    if ck.problems:
        raise SpecError(_unique(ck.problems))
    name = values["name"]
    sweep = Sweep(  # [base], [grid] and [zip] are the job's keys, checked above
        job=values["job"],
        base=data["base"],
        grid=data.get("grid", {}),
        zip=data.get("zip", {}),
        outputs=tuple(values["outputs"]) if values.get("outputs") else None,
        name=name,
        source=str(path),
        calibration=_calibration_of(values.get("calibration"), path),
    )
    out = values.get("output", {})
    where = lambda k: Path(out[k]) if k in out else None  # relative to the working directory
    return SweepFile(
        sweep, str(values["display_name"]), where("csv"), where("parquet"), where("plots")
    )
