"""Validation of the parametric chip against published chips: each catalogue chip as a design
(:func:`diffcost._codesign.design.chip_as_design`, in its own technology), and the model's die
area, TDP, manufacturing cost, dense bf16/fp16 peak, int8 peak, memory capacity and bandwidth
against the published numbers (``specs/codesign/technology.toml`` ``[chip.*]`` and
``specs/chips/<name>.toml``, both sourced).  One set of constants for every chip: H100 is the
calibration point of the matrix-logic area and the interposer price, every other chip is out
of sample.

The "full" row is the design's power with every unit at full rate at once against the published
TDP: not an error, as no workload reaches it and a real board caps its power below it and
throttles (measured on an H100: dense bf16 products at the 700 W limit and 64% of the peak).
So the H100 design is checked at the operating points measured on an H100
(``specs/power/h100-sxm-phases.toml``, from ``benchmarks/power_check.py``): the design model's
power at each phase's measured FLOP rate, DRAM rate and SM clock
(:func:`diffcost._codesign.power_points.phase_power_w`), against the measured board power.

Run: ``python benchmarks/codesign_chips.py`` (results: ``benchmarks/results/codesign-chips.txt``).
"""

from pathlib import Path

import jax

import diffcost as dc
from diffcost._codesign.design import (
    chip_as_design,
    design_area_mm2,
    design_chip,
    design_cost_usd,
    design_power_w,
    dies,
    idle_power_w,
    memory_figures,
)
from diffcost._codesign.power_points import measured_phases, phase_power_w, throttled
from diffcost._codesign.technology import reference_chip, reference_technology

CHIPS = ("h100-sxm", "h200", "b200", "mi300x", "groq-lpu", "jetson-agx-orin")
OUT = Path(__file__).parent / "results" / "codesign-chips.txt"


def _cell(model: float, real: float, scale: float, unit: str) -> str:
    """``model / published (error)``; ``n/a`` where nothing is published (0)."""
    if real <= 0:
        return f"{model / scale:9.4g} {unit} / n/a".ljust(34)
    err = 100.0 * (model / real - 1.0)
    return f"{model / scale:9.4g} / {real / scale:<8.4g} {unit} ({err:+5.0f}%)".ljust(34)


def rows() -> list[str]:
    """One block of lines per chip."""
    lines = []
    for name in CHIPS:
        tech, ref = reference_technology(name), reference_chip(name)
        design = chip_as_design(name, tech)
        chip, real = design_chip(design, tech), dc.load_chip(name)
        n = float(dies(design, tech))
        lines += [
            f"{name} ({ref['node']}, {ref['hbm'] if float(design.hbm_stacks) >= 1 else 'no HBM'}"
            f", {float(design.clock_ghz):.2f} GHz, {n:.0f} die(s))",
            "  area     "
            + _cell(float(design_area_mm2(design, tech)), ref["die_area_mm2"], 1, "mm2"),
            "  full     " + _cell(float(design_power_w(design, tech)), ref["tdp_w"], 1, "W"),
            "  floor    " + _cell(float(idle_power_w(design, tech)), 0, 1, "W"),
            "  cost     " + _cell(float(design_cost_usd(design, tech)), ref["cost_usd"], 1, "USD"),
            "  bf16     "
            + _cell(float(chip.peak_flop_per_s[3]), float(real.peak_flop_per_s[3]), 1e12, "TF/s"),
            "  int8     "
            + _cell(float(chip.peak_flop_per_s[5]), float(real.peak_flop_per_s[5]), 1e12, "TOP/s"),
            "  capacity "
            + _cell(
                float(chip.memory_capacity_bytes), float(real.memory_capacity_bytes), 1e9, "GB"
            ),
            "  bandw.   "
            + _cell(
                float(memory_figures(design, tech)[1]),
                float(real.memory_bandwidth_bytes_per_s),
                1e12,
                "TB/s",
            ),
        ]
    return lines


def measured_rows() -> list[str]:
    """The H100 design's power at each measured phase's rates and clock vs the measured board
    power (W): :func:`~diffcost._codesign.power_points.phase_power_w`."""
    tech = reference_technology("h100-sxm")
    design = chip_as_design("h100-sxm", tech)
    lines = ["h100-sxm design at operating points measured on an H100 (model / measured W)"]
    for p in measured_phases():
        lines.append(
            f"  {p['name']:16s} run {p['run']}"
            + _cell(phase_power_w(design, tech, p), p["power_w"], 1, "W")
            + f" {p['flop_per_s'] / 1e12:6.0f} TFLOP/s {p['bytes_per_s'] / 1e12:5.2f} TB/s"
            + f" {p['sm_clock_mhz']:5.0f} MHz{' (clock lowered)' if throttled(p) else ''}"
        )
    return lines


def main() -> None:
    """Print the comparison and write it to ``benchmarks/results/codesign-chips.txt``."""
    jax.config.update("jax_enable_x64", True)
    head = "model / published (error); area = total logic silicon; cost = manufacturing (BOM)"
    text = "\n".join([head, *rows(), *measured_rows()]) + "\n"
    print(text, end="")
    OUT.write_text(text)


if __name__ == "__main__":
    main()
