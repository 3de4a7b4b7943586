"""Scenario files: a model, a system and a plan, by name, checked strictly."""

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._core.errors import Problem, SpecError
from .._serve.plan import SERVE_PLAN
from . import schema as S
from .loader import _Checker, _read_toml, resolve

#: Plan schema per scenario kind; the serving model registers "serve".
PLAN_SCHEMAS: dict[str, dict[str, S.Field]] = {"train": S.TRAIN_PLAN, "serve": SERVE_PLAN}


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


def load_scenario(name_or_path: str | Path) -> Scenario:
    """Load and check a scenario (built-in name or path); all problems are reported at once."""
    path = resolve("scenario", name_or_path)
    data = _read_toml(path)
    ck = _Checker(str(path))
    kinds = tuple(PLAN_SCHEMAS)
    top_schema = {**S.TOP, **S.SCENARIO_TOP, "kind": S.Field("enum", True, choices=kinds)}
    top = ck.table({k: v for k, v in data.items() if not isinstance(v, dict)}, top_schema, "")
    if ("system" in top) == ("chip" in top):
        ck.add("system/chip", "give exactly one of system or chip")
    plan_schema = PLAN_SCHEMAS.get(top.get("kind", ""), {})
    plan = ck.table(data.get("plan", {}), plan_schema, "plan.") if plan_schema else {}
    for name in data:
        if isinstance(data[name], dict) and name not in ("plan", "source"):
            ck.add(name, "unknown table (allowed: plan, source)")
    source = data.get("source")
    if not isinstance(source, dict) or not source:
        ck.add("source", "missing [source] table: say where the scenario comes from")
        source = {}
    for ref_kind in ("model", "system", "chip"):
        if ref_kind in top:
            try:
                resolve(ref_kind, top[ref_kind], where=str(path))
            except SpecError as err:
                ck.problems += [Problem(str(path), ref_kind, p.reason) for p in err.problems]
    if ck.problems:
        raise SpecError(ck.problems)
    return Scenario(
        kind=top["kind"],
        name=top["name"],
        display_name=top["display_name"],
        path=str(path),
        model=top["model"],
        system=top.get("system"),
        chip=top.get("chip"),
        chips=top.get("chips"),
        plan=plan,
        source={k: v for k, v in source.items() if isinstance(v, str)},
    )
