"""Activity-based energy: what a piece of work costs in joules, from what it does.

``E = min(chips * P_idle * t + sum_f FLOP_f * e_f + B_mem * e_mem + B_link * e_link,
chips * TDP * t) + P_overhead * t``: the chips are capped at their power limit (a chip cannot
draw more for long; it throttles: NVIDIA, "GPU Boost" / power capping, nvidia-smi
``--power-limit``), the system's power besides the chips (hosts, NICs, switches, fans) is
added for the whole time.  Per-operation energies and an idle floor replace ``TDP x time``
so that a power budget can bind and a memory-bound decode costs less per second than a
compute-bound prefill (Horowitz, "Computing's energy problem", ISSCC 2014, §1.1; Choi,
Bedard, Fowler, Vuduc, "A roofline model of energy", IPDPS 2013, eq. 3:
``E = W e_flop + Q e_mem + P_0 T``).
"""

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .._core.smooth import Smoothing, smin
from .._inputs.hardware import ChipEnergy, System


def activity_energy_j(
    energy: ChipEnergy,
    tdp_w: ArrayLike,
    *,
    time_s: ArrayLike,
    chips: ArrayLike,
    flop_by_format: Float[Array, "8"],
    memory_bytes: ArrayLike,
    link_bytes: ArrayLike,
    sm: Smoothing,
    overhead_w: ArrayLike = 0.0,
) -> Array:
    """Energy of ``time_s`` of work on ``chips`` chips, J.

    Args:
        energy: the chip's per-operation figures.
        tdp_w: the chip's power limit, W (the energy is at most ``chips * tdp_w * time_s``).
        time_s: wall time of the work, s.
        chips: chips that are powered for that time.
        flop_by_format: FLOP executed, summed over chips, per format (:data:`FORMATS`).
        memory_bytes: bytes read or written in the weights' memory, summed over chips.
        link_bytes: bytes sent over links, summed over chips.
        sm: smoothing of the power cap (a minimum).
        overhead_w: power besides the chips (hosts, NICs, switches, fans:
            :meth:`~diffcost._inputs.hardware.System.overhead_w`), W, drawn for ``time_s``
            outside the chips' cap.
    """
    idle = chips * energy.idle_w * time_s
    dynamic = (
        jnp.sum(flop_by_format * energy.flop_j)
        + memory_bytes * energy.memory_j_per_byte
        + link_bytes * energy.link_j_per_byte
    )
    return smin(idle + dynamic, chips * tdp_w * time_s, sm) + overhead_w * time_s


def energy_basis(system: System, chip_name: str) -> str:
    """How a prediction's energy was computed, for display (concrete values, not traced):
    ``"activity"``, or ``"at TDP: no energy figures for <chip>"`` for a chip file without an
    ``[energy]`` table (its default, :func:`diffcost._inputs.build._energy`, is idle power =
    TDP and no dynamic energy), plus the system's overhead when it has one."""
    e, chip = system.chip.energy, system.chip
    default = (
        float(e.idle_w) == float(chip.tdp_w)
        and not bool(jnp.any(e.flop_j))
        and float(e.memory_j_per_byte) == 0.0
        and float(e.link_j_per_byte) == 0.0
    )
    basis = f"at TDP: no energy figures for {chip_name}" if default else "activity"
    overhead = float(system.node_overhead_w)
    return basis + (f", + {overhead:,.0f} W per node" if overhead > 0.0 else "")


__all__ = ["activity_energy_j", "energy_basis"]
