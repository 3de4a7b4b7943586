"""The design model's power at operating points measured on a real chip.

``specs/power/h100-sxm-phases.toml`` holds the board power of an H100 SXM at 20 measured
phases (one kernel back to back: a running floor, HBM streams, dense products, decode-shaped
products), each with its SM clock, FLOP rate and DRAM rate.  :func:`phase_power_w` is the
design model's power (:func:`~diffcost._codesign.design.activity_power_w`) of a design doing
that phase's work at that clock, so the technology's energies can be checked against the
board: in sample for the H100 (the n4 energies are derived from these phases), the method
for any chip measured the same way.  A phase whose clock is below the chip's full clock ran
at the board's power limit (throttled): the model must then reach the limit too.
"""

import tomllib
from pathlib import Path
from typing import Any

import equinox as eqx
import jax.numpy as jnp

from .._inputs.checker import specs_dir
from .._inputs.hardware import FORMATS
from .design import ChipDesign, activity_power_w
from .technology import Technology

#: Full SM clock of the measured H100 (MHz): a phase below it ran at the power limit.
FULL_CLOCK_MHZ = 1980.0


def phases_path() -> Path:
    """The measured phases of an H100 SXM."""
    return specs_dir() / "power" / "h100-sxm-phases.toml"


def measured_phases(path: Path | None = None) -> list[dict[str, Any]]:
    """The ``[[phase]]`` rows (name, run, format, power_w, sm_clock_mhz, flop_per_s,
    bytes_per_s)."""
    with open(path or phases_path(), "rb") as f:
        return tomllib.load(f)["phase"]


def phase_power_w(design: ChipDesign, tech: Technology, phase: dict[str, Any]) -> float:
    """The design's power (W) doing ``phase``'s work at its clock: its FLOP rate in its format
    (``int8`` on the matrix units at their 8-bit energy, as an H100 runs it on its tensor
    cores; ``none``: no FLOP), its DRAM rate at the external memory's J/byte."""
    at = eqx.tree_at(lambda d: d.clock_ghz, design, jnp.asarray(phase["sm_clock_mhz"] / 1e3))
    fmt = {"int8": "fp8"}.get(phase["format"], phase["format"])
    rates = jnp.zeros(len(FORMATS))
    if fmt != "none":
        rates = rates.at[FORMATS.index(fmt)].set(phase["flop_per_s"])
    return float(activity_power_w(at, tech, rates, phase["bytes_per_s"]))


def throttled(phase: dict[str, Any]) -> bool:
    """Whether the phase ran below the full clock (at the board's power limit)."""
    return phase["sm_clock_mhz"] < FULL_CLOCK_MHZ - 1.0


__all__ = ["FULL_CLOCK_MHZ", "measured_phases", "phase_power_w", "phases_path", "throttled"]
