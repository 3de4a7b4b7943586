"""Validation of the parametric chip against published chips: each catalogue chip as a design
(:func:`diffcost._codesign.design.chip_as_design`, in its own technology), and the model's die
area, TDP, manufacturing cost, dense bf16/fp16 peak, int8 peak, memory capacity and bandwidth
against the published numbers (``specs/codesign/technology.toml`` ``[chip.*]`` and
``specs/chips/<name>.toml``, both sourced).  One set of constants for every chip: H100 is the
calibration point of the matrix-logic area and the interposer price, every other chip is out
of sample.

The "tdp" row is the design's power with every unit at full rate at once; a real board caps its
power and throttles instead.  So the H100 design is also checked at operating points measured
on an H100 (``benchmarks/results/power-check-h100.json``, ``benchmarks/power_check.py``): the
design model's power at each phase's measured FLOP rate, DRAM rate and SM clock, against the
measured board power.

Run: ``python benchmarks/codesign_chips.py`` (results: ``benchmarks/results/codesign-chips.txt``).
"""

import json
from pathlib import Path

import jax
import jax.numpy as jnp

import diffcost as dc
from diffcost._codesign.design import (
    chip_as_design,
    design_area_mm2,
    design_chip,
    design_cost_usd,
    design_power_w,
    dies,
    energy_scale,
    idle_power_w,
    memory_figures,
)
from diffcost._codesign.technology import reference_chip, reference_technology

CHIPS = ("h100-sxm", "h200", "b200", "mi300x", "groq-lpu", "jetson-agx-orin")
OUT = Path(__file__).parent / "results" / "codesign-chips.txt"
MEASURED = Path(__file__).parent / "results" / "power-check-h100.json"
#: power_check phase -> the format index of its tensor work (diffcost.FORMATS)
PHASE_FORMAT = {"bf16_8192": 2, "bf16_4096": 2, "int8_8192": 5, "fp8_8192": 4, "decode_b16": 2}


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
            "  tdp      " + _cell(float(design_power_w(design, tech)), ref["tdp_w"], 1, "W"),
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
    power (W): idle + FLOP/s x J/FLOP x (V/V_nom)^2 + DRAM bytes/s x J/byte."""
    import equinox as eqx

    tech = reference_technology("h100-sxm")
    design = chip_as_design("h100-sxm", tech)
    mem_j = float(memory_figures(design, tech)[2])
    lines = ["h100-sxm design at operating points measured on an H100 (model / measured W)"]
    for run in json.loads(MEASURED.read_text())["runs"]:
        for name, row in run["phases"].items():
            if "error" in row or name == "idle":
                continue
            clock_ghz = jnp.asarray(row["sm_clock_mhz"] / 1e3)
            at = eqx.tree_at(lambda d: d.clock_ghz, design, clock_ghz)
            fmt = PHASE_FORMAT.get(name, 2)
            model = (
                float(idle_power_w(at, tech))
                + row["flop_per_s"] * float(tech.flop_j[fmt]) * float(energy_scale(at, tech))
                + row["bytes_per_s"] * mem_j
            )
            lines.append(
                f"  {name:16s}"
                + _cell(model, row["power_w"], 1, "W")
                + f" {row['flop_per_s'] / 1e12:6.0f} TFLOP/s {row['bytes_per_s'] / 1e12:5.2f} TB/s"
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
