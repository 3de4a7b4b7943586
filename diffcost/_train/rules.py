"""What a framework or a chip refuses: the validity rules of a training plan, as feasibility.

A plan the framework refuses to launch is not a slow plan, it is no plan.  Each rule here has an
exact form (an indicator, for :func:`diffcost._train.problems.train_problems` and the exact
search) and a relaxed form (a violation that is zero exactly at a valid integer plan, for the
relaxed search's penalty), both built on :mod:`diffcost._core.smooth`.

FP8 GEMMs need FP8 matrix units (Hopper, Ada, Blackwell, MI300, Gaudi 3); Transformer Engine
refuses FP8 execution below compute capability 8.9 (``check_fp8_support``,
``transformer_engine/pytorch/fp8.py``), so FP8 training on an A100 does not run (:func:`fp8_units`).
"""

import jax.numpy as jnp
from jaxtyping import Array

from .._inputs.hardware import Chip, format_index
from .plan import TrainPlan

_BF16 = format_index("bf16")
_FP8 = format_index("fp8")


def fp8_units(chip: Chip) -> Array:
    """1.0 if the chip has FP8 matrix units, else 0.0.

    The loader gives a format a chip lacks the peak of its fallback (FP8 -> BF16,
    :data:`diffcost._inputs.hardware.FORMAT_FALLBACK`), so a chip whose FP8 peak is not above
    its BF16 peak has no FP8 speed-up to offer, and on every chip of the catalogue but Gaudi 3
    (FP8 = BF16 = 1835 TFLOP/s, Intel Gaudi 3 white paper) this means it has no FP8 units.
    A property of the chip, constant under the search, so a hard comparison (no plan gradient).
    """
    peaks = chip.peak_flop_per_s
    return jnp.where(peaks[..., _FP8] > peaks[..., _BF16], 1.0, 0.0)


def unsupported_format(chip: Chip, plan: TrainPlan) -> Array:
    """Weight of the plan's precision on formats the chip cannot train in (0 or 1 exact):
    ``w_fp8 * (1 - fp8_units)``."""
    return plan.precision[..., _FP8] * (1.0 - fp8_units(chip))


__all__ = [
    "fp8_units",
    "unsupported_format",
]
