"""Two memory levels: the bandwidth a working set sees when part of it fits in on-chip SRAM.

A chip with a near level (SRAM of capacity ``S`` and bandwidth ``B_n``) beside its far level
(HBM or LPDDR, bandwidth ``B_f``) streams a working set of ``W`` bytes fastest by placing
``x = min(S, W B_n / (B_n + B_f))`` bytes near and the rest far, both levels streaming at
once: the time is ``max(x / B_n, (W - x) / B_f)``, so the near share is ``f = min(S / W,
B_n / (B_n + B_f))`` and the time ``(1 - f) W / B_f``, i.e. an effective bandwidth
``B_f / (1 - f)``: ``B_n + B_f`` while the proportional share fits in SRAM (bandwidth-aware
placement: Agarwal, Nellans, Stephenson, O'Connor, Keckler, "Page Placement Strategies for
GPUs within Heterogeneous Memory Systems", ASPLOS 2015, §4: pages in the ratio of the
bandwidths), else the far level streams what SRAM cannot hold.  A small SRAM next to HBM thus
adds a fraction ``S / W`` to the HBM bandwidth, not ``(S / W) B_n``: the SRAM's share of the
bytes is small whatever its bandwidth.  The energy per byte is the placement's mean,
``f e_n + (1 - f) e_f``.

Every byte of the working set is assumed read once per pass (weights and KV cache in decode);
traffic concentrated on a hot subset (an activation buffer re-read by every layer) would see
more of the near level than this gives: a conservative law, listed as such.  A chip without a
near level (every catalogue chip: ``S = B_n = 0``) gets ``f = 0`` and its datasheet
bandwidth, exactly.
"""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike

from .._core.smooth import Smoothing, safe_div, smin
from .._inputs.hardware import Chip, NearMemory, System


def placement_share(
    near_bytes: ArrayLike,
    near_bytes_per_s: ArrayLike,
    far_bytes_per_s: ArrayLike,
    working_set_bytes: ArrayLike,
    sm: Smoothing,
) -> Array:
    """Share ``f`` of a working set of ``W`` bytes placed in a near level of ``S`` bytes and
    ``B_n`` bytes/s beside a far level of ``B_f`` bytes/s, dimensionless:
    ``min(S / W, B_n / (B_n + B_f))`` (module docstring); 0 when ``S = B_n = 0``."""
    fits = safe_div(near_bytes, working_set_bytes)
    proportional = safe_div(near_bytes_per_s, jnp.add(near_bytes_per_s, far_bytes_per_s))
    return smin(fits, proportional, sm)


def near_share(chip: Chip, working_set_bytes: ArrayLike, sm: Smoothing) -> Array:
    """:func:`placement_share` of ``chip``'s two levels for ``working_set_bytes``."""
    near = chip.near_memory
    return placement_share(
        near.capacity_bytes,
        near.bandwidth_bytes_per_s,
        chip.memory_bandwidth_bytes_per_s,
        working_set_bytes,
        sm,
    )


def placed_bandwidth_bytes_per_s(chip: Chip, working_set_bytes: ArrayLike, sm: Smoothing) -> Array:
    """Bandwidth at which ``working_set_bytes`` streams from both levels, bytes/s:
    ``B_f / (1 - f)`` (:func:`near_share`; at most ``B_n + B_f``)."""
    f = near_share(chip, working_set_bytes, sm)
    return chip.memory_bandwidth_bytes_per_s / (1.0 - f)


def placed_chip(chip: Chip, working_set_bytes: ArrayLike, sm: Smoothing) -> Chip:
    """``chip`` seen by a working set of ``working_set_bytes``: one memory level with the
    placed bandwidth (:func:`placed_bandwidth_bytes_per_s`) and the placement's mean energy
    per byte ``f e_n + (1 - f) e_f``, J/byte, and no near level left (placing it again
    changes nothing).  The chip itself when it has no near level."""
    f = near_share(chip, working_set_bytes, sm)
    far_j = chip.energy.memory_j_per_byte
    j_per_byte = far_j + f * (chip.near_memory.j_per_byte - far_j)
    return eqx.tree_at(
        lambda c: (c.memory_bandwidth_bytes_per_s, c.energy.memory_j_per_byte, c.near_memory),
        chip,
        (chip.memory_bandwidth_bytes_per_s / (1.0 - f), j_per_byte, NearMemory()),
    )


def placed_system(system: System, working_set_bytes: ArrayLike, sm: Smoothing) -> System:
    """``system`` with its chip seen by a working set of ``working_set_bytes`` per chip
    (:func:`placed_chip`)."""
    return eqx.tree_at(lambda s: s.chip, system, placed_chip(system.chip, working_set_bytes, sm))


__all__ = [
    "near_share",
    "placement_share",
    "placed_bandwidth_bytes_per_s",
    "placed_chip",
    "placed_system",
]
