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

The placement law is an extension point (:class:`AbstractPlacement`, registry
:data:`PLACEMENTS`): :class:`BandwidthProportional` above (the default) and
:class:`NearFirst`, the near level filled first; ``NearMemory.placement`` selects one.
"""

import abc
from collections.abc import Mapping
from typing import final

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike

from .._core.extension import AbstractExtension, registry
from .._core.smooth import Smoothing, safe_div, smax, smin
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


class AbstractPlacement(AbstractExtension):
    """How a working set of ``W`` bytes is spread over a near level (``S`` bytes, ``B_n``
    bytes/s) and a far level (``B_f`` bytes/s), both streaming at once: an extension point
    (:mod:`diffcost._core.extension`), selected by ``NearMemory.placement``."""

    @abc.abstractmethod
    def share(
        self,
        near_bytes: ArrayLike,
        near_bytes_per_s: ArrayLike,
        far_bytes_per_s: ArrayLike,
        working_set_bytes: ArrayLike,
        sm: Smoothing,
    ) -> Array:
        """Share ``f`` of the working set placed in the near level, dimensionless in [0, 1]."""

    @abc.abstractmethod
    def bandwidth_bytes_per_s(
        self, share: Array, near_bytes_per_s: ArrayLike, far_bytes_per_s: ArrayLike, sm: Smoothing
    ) -> Array:
        """Bandwidth at which the working set streams with ``share`` of it near, bytes/s."""


@final
class BandwidthProportional(AbstractPlacement):
    """Bandwidth-aware placement (the default; module docstring): ``f = min(S / W, B_n / (B_n +
    B_f))`` (:func:`placement_share`), streaming at ``B_f / (1 - f)`` (Agarwal et al., ASPLOS
    2015, §4 "BW-AWARE"): the fastest any placement streams."""

    name = "proportional"

    def share(
        self,
        near_bytes: ArrayLike,
        near_bytes_per_s: ArrayLike,
        far_bytes_per_s: ArrayLike,
        working_set_bytes: ArrayLike,
        sm: Smoothing,
    ) -> Array:
        return placement_share(near_bytes, near_bytes_per_s, far_bytes_per_s, working_set_bytes, sm)

    def bandwidth_bytes_per_s(
        self, share: Array, near_bytes_per_s: ArrayLike, far_bytes_per_s: ArrayLike, sm: Smoothing
    ) -> Array:
        return jnp.asarray(far_bytes_per_s) / (1.0 - share)


@final
class NearFirst(AbstractPlacement):
    """Capacity-first placement: the near level is filled first, ``f = min(S / W, 1)``, and the
    two levels stream their shares at once, ``W / max(f W / B_n, (1 - f) W / B_f)`` bytes/s
    (Agarwal et al., ASPLOS 2015: the "LOCAL" policy, fastest memory first, which
    bandwidth-aware placement beats once the working set outgrows the near level's
    proportional share).  Never faster than :class:`BandwidthProportional`."""

    name = "near_first"

    def share(
        self,
        near_bytes: ArrayLike,
        near_bytes_per_s: ArrayLike,
        far_bytes_per_s: ArrayLike,
        working_set_bytes: ArrayLike,
        sm: Smoothing,
    ) -> Array:
        return smin(safe_div(near_bytes, working_set_bytes), 1.0, sm)

    def bandwidth_bytes_per_s(
        self, share: Array, near_bytes_per_s: ArrayLike, far_bytes_per_s: ArrayLike, sm: Smoothing
    ) -> Array:
        near_s = safe_div(share, near_bytes_per_s)  # seconds per byte of the working set
        far_s = safe_div(1.0 - share, far_bytes_per_s)
        return 1.0 / smax(near_s, far_s, sm)


#: Every placement law, by name.
PLACEMENTS: Mapping[str, type[AbstractPlacement]] = registry(BandwidthProportional, NearFirst)

#: The law of a near level that selects none.
DEFAULT_PLACEMENT = BandwidthProportional()


def placement_of(chip: Chip) -> AbstractPlacement:
    """The placement law of ``chip``'s near level (:data:`DEFAULT_PLACEMENT` when none)."""
    law = chip.near_memory.placement
    if law is None:
        return DEFAULT_PLACEMENT
    if not isinstance(law, AbstractPlacement):
        raise TypeError(f"NearMemory.placement must be an AbstractPlacement, got {law!r}")
    return law


def near_share(chip: Chip, working_set_bytes: ArrayLike, sm: Smoothing) -> Array:
    """Share of ``working_set_bytes`` in ``chip``'s near level by its placement law
    (:func:`placement_of`; by default :func:`placement_share`)."""
    near = chip.near_memory
    return placement_of(chip).share(
        near.capacity_bytes,
        near.bandwidth_bytes_per_s,
        chip.memory_bandwidth_bytes_per_s,
        working_set_bytes,
        sm,
    )


def placed_bandwidth_bytes_per_s(chip: Chip, working_set_bytes: ArrayLike, sm: Smoothing) -> Array:
    """Bandwidth at which ``working_set_bytes`` streams from both levels, bytes/s: by default
    ``B_f / (1 - f)`` (:func:`near_share`; at most ``B_n + B_f``)."""
    f = near_share(chip, working_set_bytes, sm)
    near = chip.near_memory.bandwidth_bytes_per_s
    return placement_of(chip).bandwidth_bytes_per_s(f, near, chip.memory_bandwidth_bytes_per_s, sm)


def placed_chip(chip: Chip, working_set_bytes: ArrayLike, sm: Smoothing) -> Chip:
    """``chip`` seen by a working set of ``working_set_bytes``: one memory level with the
    placed bandwidth (:func:`placed_bandwidth_bytes_per_s`) and the placement's mean energy
    per byte ``f e_n + (1 - f) e_f``, J/byte, and no near level left (placing it again
    changes nothing).  The chip itself when it has no near level."""
    f = near_share(chip, working_set_bytes, sm)
    far_j = chip.energy.memory_j_per_byte
    j_per_byte = far_j + f * (chip.near_memory.j_per_byte - far_j)
    bandwidth = placement_of(chip).bandwidth_bytes_per_s(
        f, chip.near_memory.bandwidth_bytes_per_s, chip.memory_bandwidth_bytes_per_s, sm
    )
    return eqx.tree_at(
        lambda c: (c.memory_bandwidth_bytes_per_s, c.energy.memory_j_per_byte, c.near_memory),
        chip,
        (bandwidth, j_per_byte, NearMemory()),
    )


def placed_system(system: System, working_set_bytes: ArrayLike, sm: Smoothing) -> System:
    """``system`` with its chip seen by a working set of ``working_set_bytes`` per chip
    (:func:`placed_chip`)."""
    return eqx.tree_at(lambda s: s.chip, system, placed_chip(system.chip, working_set_bytes, sm))


__all__ = [
    "DEFAULT_PLACEMENT",
    "PLACEMENTS",
    "AbstractPlacement",
    "BandwidthProportional",
    "NearFirst",
    "near_share",
    "placement_of",
    "placement_share",
    "placed_bandwidth_bytes_per_s",
    "placed_chip",
    "placed_system",
]
