"""Collective algorithms: an extension point (:mod:`diffcost._core.extension`).

An algorithm prices an all-reduce of ``B`` bytes per rank over a group of ``g`` ranks whose
members are ``stride`` ranks apart (Megatron order: TP innermost, then CP, DP, PP) as
``B * per_byte_s + fixed_s`` (:class:`CollectiveCost`; alpha-beta model, Hockney 1994), and an
all-gather or reduce-scatter of the full buffer as half of it (one of its two phases) unless
it says otherwise.  Notation of every formula below, all in SI units:

- ``l = clip(domain / stride, 1, g)`` members inside one scale-up domain
  (:func:`local_members`), ``r = g / l`` domains the group spans;
- ``beta_up``, ``beta_out``: achievable per-chip bandwidths of the scale-up links and of a
  chip's scale-out (NIC) share, bytes/s (link bandwidth times ``link_bandwidth_fraction``);
- ``alpha_up``, ``alpha_out``: latency of one step inside a domain and between domains, s;
- ``[x]``: 1 when ``x`` holds, else 0 (relaxed on the open interval between integers, exact at
  integer plans).

Every cost is multiplied by ``1 - [g = 1]``: a group of one costs nothing, with zero
derivatives.  References: Thakur, Rabenseifner, Gropp, "Optimization of Collective
Communication Operations in MPICH", IJHPCA 19(1), 2005 (alpha-beta costs of ring and tree
algorithms); Patarasuk, Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
workstations", JPDC 69(2), 2009 (the ring's ``2 (g-1)/g B`` is the least any all-reduce moves
through a rank's link without reduction in the network); NCCL's own cost model,
``src/graph/tuning.cc`` (NVIDIA/nccl 2.18+), for the step counts.

The system's :attr:`~diffcost._inputs.hardware.System.collective` selects the algorithm
(:func:`with_collective`); every all-reduce and all-gather of training, serving and the
analyses takes it from there (:func:`collective_of`).  The default, :class:`HierarchicalRing`,
is the model every prediction was calibrated with.  A new algorithm is one final class here
plus its entry in :data:`COLLECTIVES`; ``tests/test_extension_points.py`` tests it.
"""

import abc
import dataclasses
from collections.abc import Mapping
from typing import NamedTuple, final

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike

from .._core.errors import Problem, SpecError
from .._core.extension import AbstractExtension, registry
from .._core.shared import once
from .._core.smooth import Smoothing, is_one, smax, smin
from .._inputs.hardware import System


@once
def local_members(group: ArrayLike, stride: ArrayLike, system: System, sm: Smoothing) -> Array:
    """Members of a group inside one scale-up domain: ``clip(domain / stride, 1, group)``.

    Taken as ``clip(domain, stride, group * stride) / stride``: the clip's arguments are chip
    counts, integers at every integer plan, where the integer blends are exact (the clip of the
    ratio is not: ``max(8 / 16, 1)`` blends a difference of 1/2).
    """
    s, g = jnp.asarray(stride), jnp.asarray(group)
    if not sm.relaxed:  # the same function, rounded as before
        return jnp.minimum(jnp.maximum(system.scale_up_domain_chips / s, 1.0), g)
    chips = smin(smax(system.scale_up_domain_chips, s, sm, integer=True), g * s, sm, integer=True)
    return chips / s


@once
def spans_domains(group: ArrayLike, stride: ArrayLike, system: System, sm: Smoothing) -> Array:
    """1 when a group of ``group`` ranks ``stride`` apart leaves one scale-up domain, else 0:
    ``group * stride > domain`` (``group / local_members > 1``), a step on the chip counts,
    integers at integer plans (exact there); requires ``group >= 2``."""
    g, s = jnp.asarray(group), jnp.asarray(stride)
    return 1.0 - is_one(g * s - system.scale_up_domain_chips + 1.0, sm)


class CollectiveCost(NamedTuple):
    """An all-reduce over one group as ``B * per_byte_s + fixed_s``."""

    per_byte_s: Array  # seconds per byte per rank: the bandwidth terms
    fixed_s: Array  # seconds whatever the bytes: the latency terms


class AbstractCollective(AbstractExtension):
    """A collective algorithm: the cost of an all-reduce, and of an all-gather, over a group of
    ranks on a two-level network (notation in the module docstring)."""

    @abc.abstractmethod
    def all_reduce_cost(
        self, group: ArrayLike, stride: ArrayLike, system: System, sm: Smoothing
    ) -> CollectiveCost:
        """The all-reduce of ``B`` bytes per rank over ``group`` ranks ``stride`` apart, as
        ``B * per_byte_s + fixed_s`` (s/byte and s)."""

    def unavailable(self, system: System) -> str | None:
        """Why ``system`` cannot run this algorithm, or ``None`` when it can."""
        del system
        return None

    def all_reduce_s(
        self,
        bytes_per_rank: ArrayLike,
        group: ArrayLike,
        stride: ArrayLike,
        system: System,
        sm: Smoothing,
    ) -> Array:
        """Seconds for an all-reduce of ``bytes_per_rank`` bytes: ``B * per_byte_s +
        fixed_s`` of :meth:`all_reduce_cost`, computed once per group and evaluation."""
        per_byte_s, fixed_s = _shared_cost(self, group, stride, system, sm)
        return jnp.asarray(bytes_per_rank) * per_byte_s + fixed_s

    def all_gather_s(
        self,
        bytes_per_rank_out: ArrayLike,
        group: ArrayLike,
        stride: ArrayLike,
        system: System,
        sm: Smoothing,
    ) -> Array:
        """Seconds for an all-gather or reduce-scatter of a full buffer of
        ``bytes_per_rank_out``: half an all-reduce (its two phases, Thakur et al. 2005 §4)."""
        return 0.5 * self.all_reduce_s(bytes_per_rank_out, group, stride, system, sm)


@once
def _shared_cost(
    collective: AbstractCollective,
    group: ArrayLike,
    stride: ArrayLike,
    system: System,
    sm: Smoothing,
) -> CollectiveCost:
    """The bytes-independent part, shared by every collective over the same ``(group, stride)``
    in one evaluation (:mod:`diffcost._core.shared`)."""
    return collective.all_reduce_cost(group, stride, system, sm)


def _bandwidths(system: System) -> tuple[Array, Array]:
    """Achievable ``beta_up, beta_out``, bytes/s."""
    frac = system.efficiency.link_bandwidth_fraction
    return (
        system.scale_up_bandwidth_bytes_per_s * frac,
        system.scale_out_bandwidth_bytes_per_s * frac,
    )


@final
class HierarchicalRing(AbstractCollective):
    """A ring inside each domain and rings between domains (the default).

    ``per_byte_s = 2 (l-1)/(l beta_up) + 2 (r-1)/(l r beta_out)`` and ``fixed_s = 2 (l-1) r
    alpha_up + 2 (r-1) alpha_out``.  A reduce-scatter and all-gather inside the domain over
    the fast links, and between domains each of the ``l`` local ranks carries ``B / l`` over
    its own network share (NCCL's rings over NVLink then InfiniBand, one channel per NIC): a
    TP group that spills out of its node pays scale-out bandwidth.

    Latency: a ring over ``g`` ranks takes ``2 (g - 1)`` steps, ``2 (r - 1)`` of them across
    domains and the other ``2 (g - r) = 2 (l - 1) r`` inside one (NCCL's ring model,
    ``(nsteps - nInterSteps) * intraLat + nInterSteps * interLat`` with ``nsteps = 2 (nRanks -
    1)`` and ``nInterSteps = 2 (nNodes - 1)``, ``tuning.cc``): every rank forwards every chunk,
    so a ring spread over ``r`` domains pays the intra-domain step ``r (l - 1)`` times.
    """

    name = "hierarchical"

    def all_reduce_cost(
        self, group: ArrayLike, stride: ArrayLike, system: System, sm: Smoothing
    ) -> CollectiveCost:
        g = jnp.asarray(group)
        frac = system.efficiency.link_bandwidth_fraction
        local = local_members(g, stride, system, sm)
        domains = g / local
        # At group = 1 the clip of l has equal bounds and its subgradient would charge a
        # one-rank "collective" for the domain size: the factor zeroes value and derivatives.
        active = 1.0 - is_one(g, sm)
        intra, inter = 2.0 * (local - 1.0), 2.0 * (domains - 1.0)
        per_byte = intra / (local * system.scale_up_bandwidth_bytes_per_s * frac) + inter / (
            local * domains * system.scale_out_bandwidth_bytes_per_s * frac
        )
        fixed = intra * domains * system.scale_up_latency_s + inter * system.scale_out_latency_s
        return CollectiveCost(per_byte * active, fixed * active)


@final
class Ring(AbstractCollective):
    """One flat ring through all ``g`` ranks (topology-unaware; NCCL ``NCCL_ALGO=Ring`` with one
    channel): every rank sends ``2 (g-1)/g B`` through its ring link (Patarasuk and Yuan 2009),
    and the ring's slowest link sets the pace, a scale-out link once the group leaves a domain.

    ``per_byte_s = 2 (g-1)/g * ([r > 1] / beta_out + (1 - [r > 1]) / beta_up)`` and the ring's
    step count as :class:`HierarchicalRing`: ``fixed_s = 2 (g - r) alpha_up + 2 (r-1)
    alpha_out``.  Inside one domain it equals the hierarchical ring.
    """

    name = "ring"

    def all_reduce_cost(
        self, group: ArrayLike, stride: ArrayLike, system: System, sm: Smoothing
    ) -> CollectiveCost:
        g = jnp.asarray(group)
        up, out = _bandwidths(system)
        domains = g / local_members(g, stride, system, sm)
        crosses = spans_domains(g, stride, system, sm)
        per_byte = 2.0 * (g - 1.0) / g * (crosses / out + (1.0 - crosses) / up)
        fixed = (
            2.0 * (g - domains) * system.scale_up_latency_s
            + 2.0 * (domains - 1.0) * system.scale_out_latency_s
        )
        active = 1.0 - is_one(g, sm)
        return CollectiveCost(per_byte * active, fixed * active)


@final
class Tree(AbstractCollective):
    """NCCL's tree: a chain through the ``l`` ranks of each domain and a double binary tree
    between domains (Sanders, Speck, Träff, "Two-tree algorithms for full bandwidth broadcast,
    reduction and scan", Parallel Computing 35(12), 2009; NCCL 2.4+), reduce up then
    broadcast down, pipelined.

    Each phase moves the whole buffer once through the bottleneck level (NCCL converts a
    tree's bus bandwidth to algorithm bandwidth with ratio 1/2, a ring's with ``g / (2 (g-1))``,
    ``tuning.cc``): ``per_byte_s = 2 [l > 1] / beta_up + 2 [r > 1] / (l beta_out)`` (the ``l``
    local ranks drive ``l`` trees over their own network shares), slightly more than the ring's
    ``2 (g-1)/g`` (Patarasuk and Yuan 2009: no algorithm moves less).  Its gain is latency,
    logarithmic in the domains: ``fixed_s = 2 ((l - 1) alpha_up + log2(r) alpha_out)``
    (NCCL: ``2 * ((nRanks/nNodes - 1) * intraLat + log2i(nNodes) * interLat)``; ``log2`` is
    continuous here, NCCL's integer ``log2i`` at powers of two).
    """

    name = "tree"

    def all_reduce_cost(
        self, group: ArrayLike, stride: ArrayLike, system: System, sm: Smoothing
    ) -> CollectiveCost:
        g = jnp.asarray(group)
        up, out = _bandwidths(system)
        local = local_members(g, stride, system, sm)
        domains = g / local
        inside = 1.0 - is_one(local, sm)
        crosses = spans_domains(g, stride, system, sm)
        per_byte = 2.0 * inside / up + 2.0 * crosses / (local * out)
        fixed = 2.0 * (
            (local - 1.0) * system.scale_up_latency_s
            + jnp.log2(domains) * system.scale_out_latency_s
        )
        active = 1.0 - is_one(g, sm)
        return CollectiveCost(per_byte * active, fixed * active)


@final
class NVLS(AbstractCollective):
    """In-network reduction inside the scale-up domain (NVLink SHARP, NCCL's ``NVLS``
    algorithm on third-generation NVSwitch: H100, H200, B200 and later; NCCL 2.17+): each rank
    sends its buffer to the switch once, which reduces it, and receives the reduced buffer once
    by multicast, the two directions of its links at once.

    ``per_byte_s = [l > 1] / beta_up + 2 (r-1)/(l r beta_out)``: inside the domain ``B`` bytes
    each way instead of the ring's ``2 (l-1)/l B`` (the bound of Patarasuk and Yuan holds
    only without reduction in the network: NVIDIA, "NCCL 2.17+ NVLink SHARP", and Graham et
    al., "Scalable Hierarchical Aggregation Protocol (SHArP)", COMHPC 2016).  Between domains
    the ring share of :class:`HierarchicalRing` (NCCL's multi-node ``NVLS_TREE`` runs a tree
    there; the ring keeps this class a change of the in-domain term only).  Latency: two
    switch traversals inside the domain, ``fixed_s = 2 [l > 1] alpha_up + 2 (r-1) alpha_out``.

    An all-gather gains nothing from reduction (every rank still receives ``(g-1)/g`` of the
    buffer): it is the hierarchical ring's.  Selectable only on a system that declares
    ``in_network_reduction`` (:meth:`unavailable`).
    """

    name = "nvls"

    def unavailable(self, system: System) -> str | None:
        try:
            declared = bool(np.all(np.asarray(system.in_network_reduction) == 1.0))
        except jax.errors.TracerArrayConversionError:
            return None  # a traced flag is honoured by the cost itself (all_reduce_cost)
        if declared:
            return None
        return (
            "nvls needs a system whose scale-up switches reduce in the network "
            "([interconnect] in_network_reduction = true: NVLink SHARP, third-generation "
            "NVSwitch or later)"
        )

    def all_reduce_cost(
        self, group: ArrayLike, stride: ArrayLike, system: System, sm: Smoothing
    ) -> CollectiveCost:
        """As in the class docstring where ``in_network_reduction`` is 1; where it is 0 (a
        system of a stacked batch that does not declare it) the hierarchical ring's cost."""
        g = jnp.asarray(group)
        up, out = _bandwidths(system)
        local = local_members(g, stride, system, sm)
        domains = g / local
        inside = 1.0 - is_one(local, sm)
        per_byte = inside / up + 2.0 * (domains - 1.0) / (local * domains * out)
        fixed = (
            2.0 * inside * system.scale_up_latency_s
            + 2.0 * (domains - 1.0) * system.scale_out_latency_s
        )
        active = 1.0 - is_one(g, sm)
        c = system.in_network_reduction
        ring = DEFAULT_COLLECTIVE.all_reduce_cost(group, stride, system, sm)
        return CollectiveCost(
            c * per_byte * active + (1.0 - c) * ring.per_byte_s,
            c * fixed * active + (1.0 - c) * ring.fixed_s,
        )

    def all_gather_s(
        self,
        bytes_per_rank_out: ArrayLike,
        group: ArrayLike,
        stride: ArrayLike,
        system: System,
        sm: Smoothing,
    ) -> Array:
        return DEFAULT_COLLECTIVE.all_gather_s(bytes_per_rank_out, group, stride, system, sm)


#: Every collective algorithm, by the name a user selects it with.
COLLECTIVES: Mapping[str, type[AbstractCollective]] = registry(HierarchicalRing, Ring, Tree, NVLS)

#: The algorithm of a system that selects none (every calibrated prediction).
DEFAULT_COLLECTIVE = HierarchicalRing()


def collective_of(system: System) -> AbstractCollective:
    """The algorithm ``system`` selects (:data:`DEFAULT_COLLECTIVE` when none).

    Raises:
        SpecError: the system cannot run the selected algorithm.
    """
    chosen = system.collective
    if chosen is None:
        return DEFAULT_COLLECTIVE
    if not isinstance(chosen, AbstractCollective):
        raise TypeError(f"System.collective must be an AbstractCollective, got {chosen!r}")
    why = chosen.unavailable(system)
    if why is not None:
        raise SpecError([Problem("<arguments>", "collective", why)])
    return chosen


def with_collective(system: System, collective: AbstractCollective | str) -> System:
    """``system`` with its all-reduces and all-gathers run by ``collective`` (an instance or
    its name in :data:`COLLECTIVES`).

    Raises:
        SpecError: an unknown name, or an algorithm the system cannot run (``nvls`` without
            ``in_network_reduction``).
    """
    if isinstance(collective, str):
        cls = COLLECTIVES.get(collective)
        if cls is None:
            choices = ", ".join(COLLECTIVES)
            reason = f"must be one of {choices}; got {collective!r}"
            raise SpecError([Problem("<arguments>", "collective", reason)])
        collective = cls()
    why = collective.unavailable(system)
    if why is not None:
        raise SpecError([Problem("<arguments>", "collective", why)])
    return dataclasses.replace(system, collective=collective)


__all__ = [
    "COLLECTIVES",
    "DEFAULT_COLLECTIVE",
    "NVLS",
    "AbstractCollective",
    "CollectiveCost",
    "HierarchicalRing",
    "Ring",
    "Tree",
    "collective_of",
    "local_members",
    "spans_domains",
    "with_collective",
]
