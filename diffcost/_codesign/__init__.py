"""Hardware co-design: a parametric chip (area, power, cost from sourced technology figures)
mapped onto the :class:`~diffcost.Chip` the cost models take, and its optimisation under area,
power and cost budgets (:func:`codesign`)."""

from .design import (
    ChipDesign,
    chip_as_design,
    design_area_mm2,
    design_chip,
    design_cost_usd,
    design_power_w,
    design_system,
)
from .multistart import codesign
from .optimize import CodesignResult
from .technology import Technology, load_technology, reference_technology

__all__ = [
    "ChipDesign",
    "CodesignResult",
    "Technology",
    "codesign",
    "chip_as_design",
    "design_area_mm2",
    "design_chip",
    "design_cost_usd",
    "design_power_w",
    "design_system",
    "load_technology",
    "reference_technology",
]
