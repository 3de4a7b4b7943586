"""Scenario files: a model, a system and a plan, by name, checked strictly."""

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._core.errors import Problem, SpecError
from . import schema as S
from .checker import Checker, read_toml
from .hardware import System
from .loader import load_system, resolve
from .plan_tables import PlanTables

#: ``check(name, system)``: why the collective algorithm ``name`` cannot be used on ``system``
#: (None: its system did not load; only the name is checked), or None when it can.  The
#: registry of algorithms sits above this layer (:mod:`diffcost._terms.collectives`):
#: :func:`diffcost._analysis.plans.load_scenario` passes it in, as it does the plan tables.
CollectiveCheck = Callable[[str, System | None], str | None]


@dataclass(frozen=True)
class Scenario:
    """A validated scenario: references by name/path and the plan's plain values."""

    kind: str
    name: str
    display_name: str
    path: str
    model: str
    system: str | None
    chip: str | None
    chips: int | None
    plan: dict[str, Any] = field(default_factory=dict)
    source: dict[str, str] = field(default_factory=dict)
    collective: str | None = None  # a name of diffcost.COLLECTIVES; None: the system's


def read_scenario(
    name_or_path: str | Path, plans: PlanTables, collective: CollectiveCheck | None = None
) -> Scenario:
    """Load and check a scenario (built-in name or path), its ``[plan]`` against the table of
    its kind in ``plans`` (:func:`diffcost._analysis.plans.load_scenario` passes both jobs'),
    its ``collective`` with ``collective`` (required when the file names one); all problems
    are reported at once."""
    path = resolve("scenario", name_or_path)
    data = read_toml(path)
    ck = Checker(str(path))
    table = plans.get(data["kind"]) if isinstance(data.get("kind"), str) else None
    plan_schema = None if table is None else table.fields
    top, source = ck.document(
        data, S.KINDS["scenario"], stem=path.stem, tables={"plan": plan_schema}
    )
    if ("system" in top) == ("chip" in top):
        ck.add("system/chip", "give exactly one of system or chip")
    for ref_kind in ("model", "system", "chip"):
        if ref_kind in top:
            try:
                resolve(ref_kind, top[ref_kind], where=str(path))
            except SpecError as err:
                ck.problems += [Problem(str(path), ref_kind, p.reason) for p in err.problems]
    if "collective" in top:
        _check_collective(ck, top, path, collective, not ck.problems)
    ck.raise_if_any()
    return Scenario(
        kind=top["kind"],
        name=top["name"],
        display_name=top["display_name"],
        path=str(path),
        model=top["model"],
        system=top.get("system"),
        chip=top.get("chip"),
        chips=top.get("chips"),
        plan=top.get("plan", {}),
        source=source,
        collective=top.get("collective"),
    )


def _check_collective(
    ck: Checker, top: dict[str, Any], path: Path, check: CollectiveCheck | None, loads: bool
) -> None:
    """The scenario's ``collective``: a known name that its system (when the rest of the file
    is valid, so that it loads) can run."""
    if check is None:
        ck.add("collective", "no registry of collective algorithms given to read it")
        return
    system = None
    if loads:
        refs = {k: resolve(k, top[k], str(path)) for k in ("system", "chip") if k in top}
        try:
            system = load_system(refs.get("system"), chip=refs.get("chip"), chips=top.get("chips"))
        except SpecError:  # the system's own problems are its file's, reported by loading it
            system = None
    reason = check(top["collective"], system)
    if reason is not None:
        ck.add("collective", reason)
