"""Scenario + command-line flags -> system, model and exact plan, for one training or serving job.

Shared by ``diffcost train|serve`` and ``diffcost sensitivity train|serve`` so that both read
the same inputs the same way.
"""

from pathlib import Path
from typing import Any, NamedTuple

from .._analysis.plans import collective_problem
from .._core.errors import Problem, SpecError
from .._inputs.hardware import System
from .._inputs.loader import load_model, load_spec, load_system
from .._inputs.model import Model
from .._serve.formats import (
    compute_format_on,
    format_note,
    format_problems,
    hardware_chip_formats,
    weight_only,
)
from .._serve.plan import SERVE_FIELDS, ServePlan, default_compute_format, serve_plan
from .._terms.collectives import with_collective
from .._train.plan import TRAIN_FIELDS, TrainPlan, train_plan
from ._common import merge_inputs

DEFAULT_SCENARIO = {"train": "default-train", "serve": "default-serve"}


class Job(NamedTuple):
    """The inputs of one prediction."""

    system: System
    model: Model
    plan: TrainPlan | ServePlan
    #: The plan's values as given (scenario, then flags, then defaults filled in here).
    values: dict[str, Any]
    #: ``model``, ``system``, ``chip``, ``chips`` as resolved from the scenario and flags.
    refs: dict[str, Any]
    #: The scenario file the plan came from (``None``: flags only).
    scenario: str | None = None
    #: The calibration file or name the efficiency constants came from.
    calibration: str = "default"
    #: The collective algorithm given by ``--collective`` (``None``: the system's default).
    collective: str | None = None

    def inputs(self) -> str:
        """The files and names this job read, for a message: ``scenario X, model Y, chip Z``."""
        named = {"scenario": self.scenario, **self.refs, "calibration": self.calibration}
        keys = ("scenario", "model", "system", "chip", "calibration")
        return ", ".join(f"{k} {named[k]}" for k in keys if named.get(k))

    def hardware_name(self, display_name: str) -> str:
        """The system's name for a table title, with the collective algorithm when one was
        chosen (``DGX H100, tree collectives``)."""
        if self.collective is None:
            return display_name
        return f"{display_name}, {self.collective} collectives"

    @property
    def chips(self) -> int:
        """Chips in the system."""
        return int(self.system.num_chips)


def _degrees_ok(values: dict[str, Any], keys: tuple[str, ...]) -> bool:
    """Whether every degree among ``keys`` that is given is a positive integer (the others are
    the plan builder's to refuse, all at once, before any default is derived from them)."""
    return all(
        isinstance(values.get(k, 1), int)
        and not isinstance(values.get(k, 1), bool)
        and values.get(k, 1) > 0
        for k in keys
    )


def _train_defaults(values: dict[str, Any], chips: int | None, model_ref: str | None) -> None:
    """``dp`` fills the system (``chips / (tp*pp*cp)``; left to the plan's default when the
    chip count or a degree is invalid: those are reported instead); ``seq_len`` is the model's
    context length capped at 2048 (``model_ref`` ``None``: the model is reported instead)."""
    if "dp" not in values and chips is not None and _degrees_ok(values, ("tp", "pp", "cp")):
        others = values.get("tp", 1) * values.get("pp", 1) * values.get("cp", 1)
        values["dp"] = max(1, chips // others)
    if "seq_len" not in values and model_ref is not None:
        values["seq_len"] = min(int(load_spec("model", model_ref).values["max_seq_len"]), 2048)


def _serve_defaults(values: dict[str, Any], chips: int | None) -> None:
    """``replicas`` fills the system: chips / chips per replica (both pools when
    disaggregated); 1 when the replica size is not a positive integer or the chip count is
    invalid (the plan or the system reports it)."""
    if "replicas" not in values:
        inst = values.get("tp", 1) * values.get("pp", 1)
        per_replica = inst
        if values.get("disaggregated"):
            per_replica = values.get("prefill_chips", inst) + values.get("decode_chips", inst)
        ok = isinstance(per_replica, int) and per_replica > 0
        values["replicas"] = max(1, chips // per_replica) if ok and chips is not None else 1


def resolve_job(
    kind: str,
    scenario: str | None,
    refs_flags: dict[str, Any],
    flags: dict[str, Any],
    calibration: str,
    command: str | None = None,
) -> Job:
    """Scenario file (or the default one when no model is given) overridden by flags.

    Raises:
        SpecError: a bad scenario, reference or plan value (every problem at once).
    """
    refs, values, scenario, sc = merge_inputs(
        kind, scenario, DEFAULT_SCENARIO[kind], refs_flags, flags, command
    )
    collective, collective_source = refs_flags.get("collective"), "<arguments>"
    if collective is None and sc is not None:  # the flag, when given, wins
        collective, collective_source = sc.collective, sc.path
    problems: list[Problem] = []
    system = model = None
    try:
        system = load_system(
            refs["system"], chip=refs["chip"], chips=refs["chips"], calibration=calibration
        )
    except SpecError as err:  # reported with the plan's problems, all at once
        problems += err.problems
    else:
        try:
            system = apply_collective(system, collective, collective_source)
        except SpecError as err:
            problems += err.problems
    try:
        model = load_model(refs["model"])
    except SpecError as err:
        problems += err.problems
    chips = None if system is None else int(system.num_chips)
    source = Path(scenario).name if scenario else "<flags>"
    given = {k for k, v in flags.items() if v is not None}
    plan = None
    try:
        if kind == "train":
            _train_defaults(values, chips, None if model is None else refs["model"])
            plan = train_plan(**values, source=source)
        else:
            _serve_defaults(values, chips)
            if system is not None:
                formats = _serve_formats(values, refs, source)
                problems += [_name_flag(p, given) for p in formats]
            plan = serve_plan(**values, source=source)
    except SpecError as err:
        problems += [_name_flag(p, given) for p in err.problems]
    if problems:
        raise SpecError(_unique(problems))
    assert system is not None and model is not None and plan is not None
    return Job(system, model, plan, values, refs, scenario, str(calibration), collective)


def job_chip_formats(refs: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    """The chip of a resolved job (``refs``: its system or chip) and the formats it has a rate
    for (:func:`~diffcost._serve.formats.hardware_chip_formats`)."""
    if refs.get("system"):
        return hardware_chip_formats("system", refs["system"])
    return hardware_chip_formats("chip", refs["chip"])


def _serve_formats(values: dict[str, Any], refs: dict[str, Any], source: str) -> list[Problem]:
    """The serving plan's formats on its chip: an unset ``compute_format`` becomes the format
    the weights' GEMMs really run in there (weight-only in 16 bits when the chip has no rate
    for the weights' own format, :func:`~diffcost._serve.formats.compute_format_on`); a format
    nothing on the chip runs is a problem (:func:`~diffcost._serve.formats.format_problems`)."""
    chip, formats = job_chip_formats(refs)
    problems = format_problems(values, chip, formats, source)
    weight = values.get("weight_format", "bf16")
    if problems or values.get("compute_format") is not None or not isinstance(weight, str):
        return problems
    gemm = compute_format_on(weight, formats)
    if gemm is not None and gemm != default_compute_format(weight):
        values["compute_format"] = gemm
    return problems


def serve_format_summary(job: "Job") -> dict[str, Any]:
    """The ``formats`` block of a serving prediction: the plan's weight, GEMM and KV formats,
    the chip's rates, whether the weights run weight-only and, when the chip lacks the weights'
    own GEMM rate, why (:func:`~diffcost._serve.formats.format_note`)."""
    chip, formats = job_chip_formats(job.refs)
    weight = str(job.values.get("weight_format", "bf16"))
    compute = str(job.values.get("compute_format") or default_compute_format(weight))
    return {
        "weight_format": weight,
        "compute_format": compute,
        "kv_format": str(job.values.get("kv_format", "bf16")),
        "weight_only": weight_only(weight, compute),
        "chip_formats": list(formats),
        "note": format_note(weight, compute, chip, formats),
    }


def apply_collective(system: System, name: str | None, source: str = "<arguments>") -> System:
    """``system`` with the collective algorithm ``--collective`` (or the scenario file
    ``source``) names (``None``: unchanged, the system's default).

    Raises:
        SpecError: an unknown name (the choices listed, the closest first), or one the system
            cannot run (``nvls`` without in-network reduction); both name ``collective``.
    """
    if name is None:
        return system
    reason = collective_problem(name, system)
    if reason is not None:
        raise SpecError([Problem(source, "collective", reason)])
    return with_collective(system, name)


def _unique(problems: list[Problem]) -> list[Problem]:
    """Each problem once, in order."""
    return list(dict.fromkeys(problems))


#: Plan fields whose flag is not spelled from their name (``--draft-fraction``), as declared.
_SPELLED = {
    f.name: flag.split("/")[0]
    for f in (*TRAIN_FIELDS, *SERVE_FIELDS)
    if f.flag
    for flag in [f.cli_flag() or ""]
}


def _name_flag(problem: Problem, given: set[str]) -> Problem:
    """A plan problem whose value came from a command-line flag is an argument problem (shown
    as ``command line: --flag`` by :func:`diffcost.cli._common.friendly_errors`, the flag as
    the field declares it), not one of the scenario file the other values came from."""
    key = problem.key.split(".")[0].split("[")[0]
    if key not in given:
        return problem
    return Problem("<arguments>", _SPELLED.get(key, key), problem.reason)
