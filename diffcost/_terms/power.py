"""Clock under the board power limit: a sustained kernel slows down, a short burst does not.

A GPU raises its clock until either the top boost clock or the board power limit binds (NVIDIA
GPU Boost; ``nvidia-smi --power-limit``).  A compute-bound kernel at the top clock would draw

    ``P = P_idle + (F e_f + B e_m) / t``  (W),

``F`` its FLOP at ``e_f`` J/FLOP, ``B`` its memory bytes at ``e_m`` J/byte, ``t`` its time at
the top clock (Choi, Bedard, Fowler, Vuduc, "A roofline model of energy", IPDPS 2013, eq. 3).
When ``P`` exceeds the limit ``TDP``, the power manager lowers the SM clock to a fraction ``r``
of the top clock.  Dynamic energy per operation falls with the clock too (the voltage follows
the clock down the DVFS curve): ``e_f(r) = e_f r^g`` with ``g`` = :data:`DVFS_ENERGY_EXPONENT`,
so the compute power is ``F e_f r^(1 + g) / t`` and the clock that meets the limit is

    ``r = min(1, ((TDP - P_idle) / P_dyn)^(1 / (1 + g)))``,  ``P_dyn = (F e_f + B e_m) / t``

(``B e_m``: a large GEMM's operand stream, small against its tensor work and left out).  The
cost models apply ``r`` once per format, to the sustained fraction of a large GEMM
(:func:`sustained`): the GEMM law runs the useful issue slots at ``f r`` and the idle ones at the
full clock, so a memory-bound (skinny) GEMM, which draws little tensor power, keeps the top
clock.

"Sustained" is what a training step or a serving engine under load sees: kernels back to back
for seconds, longer than the power manager's averaging window.  Published kernel benchmarks
time a kernel alone in short loops and mostly see the top clock ("burst"): the same kernel
measured both ways on an H100 SXM (700 W) ran 8192^3 bf16 products at 628.8 TFLOP/s for 8 s
at 1459 MHz and 700 W (``benchmarks/results/power-check-h100-sxm.txt``), where XLA's
autotuner tables and DeepGEMM's README report 80-95% of the 989 TFLOP/s peak.  The kernel
validation (:mod:`diffcost._analysis.validate_kernels`) predicts bursts with :func:`burst`;
every cost model predicts sustained work.

Chips whose FLOP energies are top-down (``(TDP - P_idle) / peak``: the board reaches its limit
at its datasheet peak, most chip files' ``[energy]``) never throttle below that peak; chips with
measured energies (H100, H200) throttle where the measurement says they do.
"""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike

from .._core.shared import once
from .._core.smooth import Smoothing, smax
from .._inputs.hardware import ChipEnergy, System

#: Exponent ``g`` of dynamic energy per operation against SM clock, ``e(r) = e(1) r^g``
#: (dimensionless).  From the H100 SXM power check (``benchmarks/results/power-check-h100-
#: sxm.txt``, run 1, phase bf16_8192): 560 W above the running floor at 628.8 TFLOP/s and
#: 0.54 TB/s of HBM traffic at 1459 MHz (``r = 1459 / 1980 = 0.737``); less the memory's
#: 0.54e12 * 8 * 17.6e-12 = 76 W, 484 W / 628.8e12 FLOP/s = 0.770 pJ/FLOP against 0.955 pJ/FLOP
#: at 1980 MHz (the unthrottled decode phases' fit), so ``g = ln(0.770 / 0.955) / ln(0.737) =
#: 0.70``.  CMOS dynamic energy is ``C V^2`` per switch and the DVFS voltage falls with the
#: clock: ``g = 2`` if ``V`` were proportional to ``f``; a floor voltage makes it smaller
#: (Le Sueur and Heiser, "Dynamic voltage and frequency scaling: the laws of diminishing
#: returns", HotPower 2010).
DVFS_ENERGY_EXPONENT = 0.70

#: Power available to dynamic work is floored at this many watts so that a chip without an
#: ``[energy]`` table (``idle_w = tdp_w``, zero dynamic energies) divides 0 by a positive number.
_MIN_DYNAMIC_W = 1.0
#: A kernel's time is floored at this many seconds in the power demand (a real kernel takes
#: microseconds; an empty one, 0 s and 0 J, then demands 0 W).
_MIN_KERNEL_S = 1e-12


def clock_slowdown(
    dynamic_j: ArrayLike, burst_s: ArrayLike, system: System, sm: Smoothing
) -> Array:
    """``1 / r`` (dimensionless, >= 1): how much the power limit stretches a kernel's compute.

    ``max(1, P_dyn / (TDP - P_idle))^(1 / (1 + g))`` with ``P_dyn = dynamic_j / burst_s`` the
    kernel's dynamic power at the top clock (module docstring).  1 for a chip without energy
    figures and for a :func:`burst` system (``TDP`` infinite).
    """
    chip = system.chip
    available_w = jnp.maximum(chip.tdp_w - chip.energy.idle_w, _MIN_DYNAMIC_W)
    # an empty kernel (0 J in 0 s) demands nothing; the floor keeps the quotient's gradient
    # finite in float32 (safe_div's 1e-30 squares to 0)
    seconds = jnp.maximum(jnp.asarray(burst_s), _MIN_KERNEL_S)
    demand = jnp.asarray(dynamic_j) / (seconds * available_w)
    return smax(1.0, demand, sm) ** (1.0 / (1.0 + DVFS_ENERGY_EXPONENT))


@once
def sustained(
    system: System, peak_flop_per_s: ArrayLike, flop_j: ArrayLike, sm: Smoothing
) -> System:
    """``system`` with the sustained fraction of peak of a format's matrix work,
    ``matmul_peak_fraction * r`` (dimensionless), in place of the top-clock one.

    ``r = 1 / clock_slowdown`` of one second of a large GEMM at the top clock: ``P f`` FLOP at
    ``flop_j`` J/FLOP (``P`` the format's peak, ``f = matmul_peak_fraction``).  The GEMM law
    (:func:`~diffcost._terms.execution.sustained_efficiency`) runs a kernel's useful issue slots
    at this fraction and its idle ones at the full clock, so a skinny, memory-bound GEMM, which
    draws little tensor power, keeps the top clock.  The memory's power is left out (an
    8192^3 bf16 product streams 50-80 W of HBM traffic on an H100 against 560 W of tensor work).
    Once per (system, format) and evaluation (:mod:`diffcost._core.shared`).
    """
    f = system.efficiency.matmul_peak_fraction
    dynamic = jnp.asarray(peak_flop_per_s) * f * jnp.asarray(flop_j)
    r = 1.0 / clock_slowdown(dynamic, 1.0, system, sm)
    return eqx.tree_at(lambda s: s.efficiency.matmul_peak_fraction, system, f * r)


@once
def sustained_energy(system: System, sm: Smoothing) -> ChipEnergy:
    """The chip's energy figures with each format's J/FLOP at its sustained clock,
    ``e_f r_f^g`` (J/FLOP; ``g`` = :data:`DVFS_ENERGY_EXPONENT`), for activity energy.

    ``r_f = 1 / clock_slowdown`` of one second of a large GEMM in format ``f``, as
    :func:`sustained` computes it: the power manager lowers the voltage with the clock, so a
    throttled GEMM draws exactly the power limit (``P f r e r^g = TDP - P_idle``) and not the
    top-clock energy over a longer time (module docstring; Le Sueur and Heiser, HotPower 2010).
    Every FLOP of a format is charged at that clock: the FLOP of memory-bound work (a batch-1
    decode) are a small part of its energy, which its bytes set.  Unchanged where the limit
    does not bind (``r = 1``) and for a :func:`burst` system.  Once per evaluation.
    """
    energy = system.chip.energy
    dynamic = system.chip.peak_flop_per_s * system.efficiency.matmul_peak_fraction * energy.flop_j
    slowdown = clock_slowdown(dynamic, 1.0, system, sm)  # elementwise over the formats
    flop_j = energy.flop_j * slowdown ** (-DVFS_ENERGY_EXPONENT)
    return eqx.tree_at(lambda e: e.flop_j, energy, flop_j)


def burst(system: System) -> System:
    """``system`` with no power limit (``tdp_w`` infinite): a kernel timed alone in a short
    loop, at the top clock (module docstring)."""
    tdp = system.chip.tdp_w
    return eqx.tree_at(lambda s: s.chip.tdp_w, system, jnp.full_like(tdp, jnp.inf))


__all__ = [
    "DVFS_ENERGY_EXPONENT",
    "burst",
    "clock_slowdown",
    "sustained",
    "sustained_energy",
]
