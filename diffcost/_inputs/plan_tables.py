"""What a reader of ``[plan]`` tables (scenarios, measurements) needs of a job's plans.

The plans are declared above this layer (:mod:`diffcost._train.plan`, :mod:`diffcost._serve.plan`);
the readers here take them as an argument, a :class:`PlanTable` per job kind, and
:mod:`diffcost._analysis.plans` binds the two jobs' tables to them (layers point down).
"""

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from .schema import Field


class PlanTable(NamedTuple):
    """One job kind's ``[plan]`` table.

    Attributes:
        fields: its keys (:class:`~diffcost._inputs.schema.Field` by name).
        check: ``check(values, source)`` builds the plan of checked ``values`` (raising
            :class:`~diffcost._core.errors.SpecError` with ``source`` as the file of its
            problems) and returns the chips it uses and the product that counts them
            (``"tp*pp*dp*cp"``).
    """

    fields: Mapping[str, Field]
    check: Callable[[dict[str, Any], str], tuple[Any, str]]


#: Job kind ("train", "serve") -> its plan table.
PlanTables = Mapping[str, PlanTable]

__all__ = ["PlanTable", "PlanTables"]
