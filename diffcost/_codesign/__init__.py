"""Hardware co-design: a parametric chip (area, power, cost from sourced technology figures)
mapped onto the :class:`~diffcost.Chip` the cost models take."""

from .design import (
    ChipDesign,
    chip_as_design,
    design_area_mm2,
    design_chip,
    design_cost_usd,
    design_power_w,
    design_system,
)
from .technology import Technology, load_technology, reference_technology

__all__ = [
    "ChipDesign",
    "Technology",
    "chip_as_design",
    "design_area_mm2",
    "design_chip",
    "design_cost_usd",
    "design_power_w",
    "design_system",
    "load_technology",
    "reference_technology",
]
