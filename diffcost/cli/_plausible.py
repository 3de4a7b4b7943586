"""The training search kept under the best published MFU of its chip and precision (issue 42).

The cost model is most optimistic exactly where a search goes (no recomputation, large
micro-batches, small tensor-parallel degrees), so the fastest predicted plan can sit above every
published run of its chip and precision.  Such a plan is not returned as the best: the search is
repeated with the best published MFU of each allowed precision as a ceiling
(:func:`~diffcost._analysis.coverage.mfu_ceilings`, the yardstick ``diffcost train`` prints), its
best plan returned, and the fastest plan it set aside reported with its MFU and the point it
exceeds.  Where no plan stays under the ceiling, the unbounded best is returned and flagged as
before (``IMPLAUSIBLE``); ``--any-mfu`` turns the ceiling off.
"""

from dataclasses import replace
from typing import Any

from .._analysis.coverage import best_published, formats_of, mfu_ceilings
from .._search.core import SearchResult
from .._search.train import TrainSearchSpace, search_train


def plausible_search(
    system: Any, model: Any, space: TrainSearchSpace, exhaustive: bool | None, bounded: bool
) -> tuple[SearchResult, TrainSearchSpace, dict[str, Any] | None]:
    """The search's result, the space it ran in (with the ceilings when they were applied) and,
    when the unbounded best was above its ceiling, what was set aside (``None`` otherwise): the
    plan's row, objective and MFU, the ceiling and its published point, and whether a plan
    under the ceiling was found (``replaced``)."""
    result = search_train(system, model, space, exhaustive=exhaustive)
    ceilings = dict(mfu_ceilings(space.chip, [str(p) for p in space.precision]))
    if not bounded or result.best is None or not ceilings:
        return result, space, None
    fmt = formats_of(result.best, "train")[0]
    mfu = float(result.breakdowns[0].mfu)
    if fmt not in ceilings or mfu <= ceilings[fmt]:
        return result, space, None
    point = best_published(space.chip, fmt)
    assert point is not None
    aside = {
        "plan": result.row(result.best),
        "objective": result.best_objective,
        "mfu": mfu,
        "ceiling_mfu": ceilings[fmt],
        "ceiling_point": point.id,
        "ceiling_source": point.source,
    }
    capped = replace(space, max_mfu=tuple(ceilings.items()))
    within = search_train(system, model, capped, exhaustive=exhaustive)
    aside["replaced"] = within.best is not None
    if within.best is None:
        return result, space, aside
    return within, capped, aside


def set_aside_line(aside: dict[str, Any], fmt_objective: Any) -> str:
    """One line on the plan a search set aside (:func:`plausible_search`)."""
    plan = aside["plan"]
    keys = ("tp", "pp", "cp", "micro_batch", "recompute", "zero")
    text = " ".join(f"{k}={plan[k]}" for k in keys if k in plan)
    head = (
        f"predicted MFU {aside['mfu']:.1%} ({text}, {fmt_objective(aside['objective'])}) is above "
        f"the best published {aside['ceiling_mfu']:.1%} ({aside['ceiling_point']}, "
        f"{aside['ceiling_source']})"
    )
    if aside["replaced"]:
        return f"SET ASIDE: {head}; returned the best plan within it (--any-mfu: the fastest)"
    return f"IMPLAUSIBLE: {head}, and no plan in the space stays within it"


__all__ = ["plausible_search", "set_aside_line"]
