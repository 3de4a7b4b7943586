"""Scenario files: a model, a system and a plan, by name, checked strictly."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._core.errors import Problem, SpecError
from . import schema as S
from .checker import Checker, read_toml
from .loader import resolve
from .plan_tables import PlanTables


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


def read_scenario(name_or_path: str | Path, plans: PlanTables) -> Scenario:
    """Load and check a scenario (built-in name or path), its ``[plan]`` against the table of
    its kind in ``plans`` (:func:`diffcost._analysis.plans.load_scenario` passes both jobs');
    all problems are reported at once."""
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
    )
