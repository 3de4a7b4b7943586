"""The plans of both jobs, bound to the readers of files that hold a ``[plan]`` of either.

A scenario or a measurement file may hold a training or a serving plan; their tables are
declared by the jobs (:mod:`diffcost._train.plan`, :mod:`diffcost._serve.plan`), a layer above
the readers (:mod:`diffcost._inputs.scenario`, :mod:`diffcost._inputs.measurements`,
:mod:`diffcost._inputs.load_measurements`), which take them as an argument.  This is the lowest
layer that sees both jobs: here the public loaders pass the two tables in.
"""

import difflib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._inputs.hardware import System
from .._inputs.load_measurements import LoadMeasurement, read_load_measurements
from .._inputs.loader import Spec
from .._inputs.loader import load_spec as _load_spec
from .._inputs.measurements import Measurement, read_measurements
from .._inputs.plan_tables import PlanTable
from .._inputs.scenario import Scenario, read_scenario
from .._inputs.schema import Field
from .._serve.engine import ENGINE_KIND
from .._serve.plan import SERVE_PLAN, plan_kwargs, serve_plan
from .._terms.collectives import COLLECTIVES
from .._train.plan import TRAIN_PLAN, train_plan


def _train_chips(plan: dict[str, Any], source: str) -> tuple[Any, str]:
    """Build a training plan (a SpecError naming ``source``); the chips it uses."""
    train_plan(**plan, source=source)
    return plan["tp"] * plan["pp"] * plan["dp"] * plan["cp"], "tp*pp*dp*cp"


def _serve_chips(plan: dict[str, Any], source: str) -> tuple[Any, str]:
    """Build a serving plan (a SpecError naming ``source``); the chips it uses."""
    kwargs: dict[str, Any] = plan_kwargs(plan)
    serve_plan(**kwargs, source=source)
    return plan["tp"] * plan["pp"] * plan.get("replicas", 1), "tp*pp*replicas"


#: The ``[plan]`` table of each job kind (scenario ``kind``, measurement point ``kind``).
PLANS: dict[str, PlanTable] = {
    "train": PlanTable(TRAIN_PLAN, _train_chips),
    "serve": PlanTable(SERVE_PLAN, _serve_chips),
}
#: The ``[plan]`` keys of each job kind.
PLAN_SCHEMAS: dict[str, Mapping[str, Field]] = {kind: t.fields for kind, t in PLANS.items()}


def collective_problem(name: str, system: System | None) -> str | None:
    """Why the collective algorithm ``name`` cannot be used on ``system``: an unknown name (the
    closest one suggested, the choices listed), or one the system cannot run (``nvls`` without
    in-network reduction; not checked when ``system`` is None); None when it can."""
    if name not in COLLECTIVES:
        close = difflib.get_close_matches(name.lower(), list(COLLECTIVES), n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        return f"unknown collective algorithm {name!r}{hint} (choices: {', '.join(COLLECTIVES)})"
    return None if system is None else COLLECTIVES[name]().unavailable(system)


def load_scenario(name_or_path: str | Path) -> Scenario:
    """Load and check a scenario (built-in name or path); all problems are reported at once."""
    return read_scenario(name_or_path, PLANS, collective_problem)


def load_spec(kind: str, name_or_path: str | Path, where: str = "<arguments>") -> Spec:
    """Validated spec of ``kind`` ("chip", "system", "model", "calibration", "engine") by name or
    path, checked against the kind's whole schema: an engine profile's includes the switch of
    every engine behaviour (:data:`diffcost._serve.engine.ENGINE_KIND`, which the input layer
    below the behaviours cannot name); ``where``: the file that names it, for the message when
    it is unknown."""
    return _load_spec(kind, name_or_path, where, ENGINE_KIND if kind == "engine" else None)


def load_measurements(paths: Sequence[str | Path] | None = None) -> list[Measurement]:
    """Every point of the given measurement files (default: all built-in ones), in file order.

    Raises:
        SpecError: every problem of every file at once (file, key, reason).
    """
    return read_measurements(PLANS, paths)


def load_load_measurements(paths: Sequence[str | Path] | None = None) -> list[LoadMeasurement]:
    """Every point of the given load-measurement files (default: every built-in one), in file
    order.

    Raises:
        SpecError: every problem of every file at once (file, key, reason).
    """
    return read_load_measurements(PLANS, paths)


__all__ = [
    "PLANS",
    "PLAN_SCHEMAS",
    "collective_problem",
    "load_load_measurements",
    "load_measurements",
    "load_scenario",
    "load_spec",
]
