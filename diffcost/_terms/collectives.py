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
analyses takes it from there (:func:`collective_of`).  The default, :class:`Fastest`, prices
an all-reduce on a GPU as the libraries run it, by message size: the faster of NCCL's choice
among its ring protocols and NVLS (:class:`Nccl`) and the serving engines' one-shot and
two-shot kernels inside a domain (:class:`EngineKernels`); on other chips, and for every
all-gather, the :class:`HierarchicalRing` (the default until issue 41).  A new algorithm is
one final class here plus its entry in :data:`COLLECTIVES`;
``tests/test_extension_points.py`` tests it.
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

    ``per_byte_s = [l > 1] / (eta beta_up) + 2 (r-1)/(l r beta_out)``: inside the domain ``B``
    bytes each way instead of the ring's ``2 (l-1)/l B`` (the bound of Patarasuk and Yuan
    holds only without reduction in the network: NVIDIA, "NCCL 2.17+ NVLink SHARP", and Graham
    et al., "Scalable Hierarchical Aggregation Protocol (SHArP)", COMHPC 2016), at the
    efficiency ``eta`` = :data:`NVLS_EFFICIENCY` of the switch's reductions relative to a
    ring's.  Between domains the ring share of :class:`HierarchicalRing` (NCCL's multi-node
    ``NVLS_TREE`` runs a tree there; the ring keeps this class a change of the in-domain term
    only).  Latency: NCCL's own figure for the in-domain algorithm, ``fixed_s = [l > 1]``
    :data:`NVLS_LATENCY_S` ``+ 2 (r-1) alpha_out``.

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
        nvls = _nvls_cost(group, stride, system, sm)
        c = system.in_network_reduction
        ring = HIERARCHICAL_RING.all_reduce_cost(group, stride, system, sm)
        return CollectiveCost(
            c * nvls.per_byte_s + (1.0 - c) * ring.per_byte_s,
            c * nvls.fixed_s + (1.0 - c) * ring.fixed_s,
        )

    def all_gather_s(
        self,
        bytes_per_rank_out: ArrayLike,
        group: ArrayLike,
        stride: ArrayLike,
        system: System,
        sm: Smoothing,
    ) -> Array:
        return HIERARCHICAL_RING.all_gather_s(bytes_per_rank_out, group, stride, system, sm)


def _nvls_cost(
    group: ArrayLike, stride: ArrayLike, system: System, sm: Smoothing
) -> CollectiveCost:
    """:class:`NVLS`'s cost on a system whose switches reduce (its class docstring)."""
    g = jnp.asarray(group)
    up, out = _bandwidths(system)
    local = local_members(g, stride, system, sm)
    domains = g / local
    inside = 1.0 - is_one(local, sm)
    per_byte = inside / (up * NVLS_EFFICIENCY) + 2.0 * (domains - 1.0) / (local * domains * out)
    fixed = inside * NVLS_LATENCY_S + 2.0 * (domains - 1.0) * system.scale_out_latency_s
    active = 1.0 - is_one(g, sm)
    return CollectiveCost(per_byte * active, fixed * active)


#: The hierarchical ring, the fallback of the algorithms that cannot run a group (NVLS without
#: in-network reduction, a chip that is not a GPU).
HIERARCHICAL_RING = HierarchicalRing()


# --- what the GPU libraries run, by message size ---------------------------------------------
# NCCL picks, per call, the algorithm and protocol its own cost model predicts fastest
# (``ncclTopoGetAlgoTime``: ``latency + bytes / bandwidth`` each); the serving engines run their
# own one-shot or two-shot kernels below a size and NCCL above.  The constants below are NCCL's
# (NVIDIA/nccl src/graph/tuning.cc, ``ncclTunerConstantsDefaults`` of release 2.28) or read off
# published kernel timings (specs/kernels), each with its meaning.

#: NCCL's ring protocols, in its order: LL (8-byte lines of 4 data bytes and a 4-byte flag,
#: no fence between steps), LL128 (128-byte lines, 120 bytes of data), Simple (bulk copies
#: behind a memory fence per step).
PROTOCOLS = ("LL", "LL128", "Simple")
#: Fixed cost of one ring all-reduce by protocol, s: launch and setup, NCCL's
#: ``baseLatencies`` Ring row {6.6, 14.0, 8.4} us.
RING_BASE_S = (6.6e-6, 14.0e-6, 8.4e-6)
#: Latency of one ring step by protocol, as a fraction of Simple's (the system's
#: ``scale_up_latency_s`` and ``scale_out_latency_s``): NCCL's NVLink ``hwLatencies`` Ring row
#: {0.6, 1.9, 3.4} us over 3.4.
RING_STEP_RATIO = (0.6 / 3.4, 1.9 / 3.4, 1.0)
#: Bus bandwidth by protocol, as a fraction of the link's nominal bandwidth for LL and of its
#: achievable one (``link_bandwidth_fraction`` of it) for LL128 and Simple.  LL: NCCL caps it
#: at ``llMaxBws``, 141 GB/s on one Hopper node (NVLink 4: 450 GB/s per direction) and 282 on
#: Blackwell (NVLink 5: 900), 0.313 of the link either way; LL128: 0.92 (120 of 128 bytes).
RING_BANDWIDTH_RATIO = (141.0 / 450.0, 0.92, 1.0)
#: Fixed cost of NCCL's NVLS (NVLink SHARP) all-reduce inside a domain, s: NCCL's NVLink
#: ``hwLatencies`` NVLS Simple, 25 us (its ``baseLatencies`` for NVLS are 0).
NVLS_LATENCY_S = 25e-6
#: NVLS algorithm bandwidth as a fraction of a ring's achievable link bandwidth: "On 8 GPUs,
#: you should reach a peak busBw of ~480GB/s (algbw ~275GB/s)" with NVLink SHARP, where a ring
#: gets "an effective NVLink bandwidth of 370GB/s" (S. Jeaugey, NCCL maintainer, NVIDIA/
#: nccl-tests issue 212, 2024-05-06; also NVIDIA GTC 2024 S62129): 275 GB/s is 0.61 of NVLink
#: 4's 450 GB/s, 0.75 of the 365 GB/s a ring achieves here (link_bandwidth_fraction 0.81,
#: calibration default).
NVLS_EFFICIENCY = 0.75
#: Fixed cost of a serving engine's custom all-reduce kernel (vLLM ``custom_all_reduce``,
#: TensorRT-LLM's one-shot and two-shot kernels), s: the launch and a flag barrier, plus
#: :data:`CUSTOM_PEER_S` per peer and barrier.  Read off SGLang PR 2904 (the TensorRT-LLM
#: kernels on H100, 2 KiB: 3.7 us at 2 ranks, 4.8 at 4, 5.9 at 8; specs/kernels
#: sglang-custom-allreduce-h100, so that source is in sample for these two constants).
CUSTOM_BASE_S = 3.0e-6
#: Added per peer and barrier of a custom all-reduce kernel, s (one flag written to and
#: polled from each peer over NVLink; same source as :data:`CUSTOM_BASE_S`).
CUSTOM_PEER_S = 0.4e-6
#: Bandwidth of a custom kernel's loads from its peers' buffers over NVLink, as a fraction of
#: a ring's achievable link bandwidth: the TensorRT-LLM kernels of SGLang PR 2904 move
#: 283-314 GB/s per link between 2 and 4 MiB on H100 (2, 4 and 8 ranks), against the ring's
#: 365 GB/s (link_bandwidth_fraction 0.81): 0.8 (they run on a few SMs and load, not store).
CUSTOM_LINK_EFFICIENCY = 0.8
#: Blend width of the choice among algorithms, as a fraction of the smoothing's width: the
#: libraries pick the fastest exactly; the blend only keeps the gradient continuous where two
#: algorithms cross, and protocols a few percent apart (LL128 and Simple: 8%) stay exact away
#: from that point.
CHOICE_WIDTH = 0.2


def _choice(sm: Smoothing) -> Smoothing:
    """The smoothing of a choice among algorithms (:data:`CHOICE_WIDTH`)."""
    return Smoothing(sm.relaxed, sm.rel_width * CHOICE_WIDTH)


def _time(cost: CollectiveCost, bytes_per_rank: ArrayLike) -> Array:
    """``B * per_byte_s + fixed_s``, seconds."""
    return jnp.asarray(bytes_per_rank) * cost.per_byte_s + cost.fixed_s


class GpuCosts(NamedTuple):
    """The all-reduce costs of what GPU libraries run over one group (one evaluation's)."""

    ring: tuple[CollectiveCost, ...]  # NCCL's ring, one per protocol of PROTOCOLS
    nvls: CollectiveCost  # NCCL's NVLS (the hierarchical ring where not declared)
    nvls_weight: Array  # 1 where NVLS can run the group: declared and l > 1
    one_shot: CollectiveCost  # each rank reads every peer's buffer
    two_shot: CollectiveCost  # reduce-scatter then all-gather through peer memory
    two_shot_weight: Array  # 1 where two-shot runs: g > 2 (two ranks: one-shot)
    crosses: Array  # 1 when the group leaves its domain: the engines' kernels cannot run
    active: Array  # 0 for a group of one


@once
def gpu_costs(group: ArrayLike, stride: ArrayLike, system: System, sm: Smoothing) -> GpuCosts:
    """Every candidate's ``(per_byte_s, fixed_s)`` over ``group`` ranks ``stride`` apart.

    NCCL's ring with protocol ``p`` (the hierarchical ring's structure, NCCL's ring model in
    ``tuning.cc``): ``per_byte_s = 2 (l-1)/(l b_up) + 2 (r-1)/(l r b_out)`` with ``b`` the
    protocol's bandwidth (:data:`RING_BANDWIDTH_RATIO`), ``fixed_s = base_p + s_p (2 (l-1) r
    alpha_up + 2 (r-1) alpha_out)`` (:data:`RING_BASE_S`, :data:`RING_STEP_RATIO`).  NVLS:
    :class:`NVLS`.  The engines' kernels inside one domain (vLLM ``custom_all_reduce.cuh``,
    TensorRT-LLM ``customAllReduceKernels.cu``): one-shot, every rank loads the ``g - 1`` peers'
    buffers and reduces, ``per_byte_s = (g-1) / (e beta_up)``, ``fixed_s = c0 + (g-1) c1``;
    two-shot, a reduce-scatter and an all-gather through peer memory, ``per_byte_s = 2 (g-1)/g
    / (e beta_up)``, ``fixed_s = c0 + 2 (g-1) c1`` (two barriers), with ``e`` =
    :data:`CUSTOM_LINK_EFFICIENCY`, ``c0`` = :data:`CUSTOM_BASE_S`, ``c1`` =
    :data:`CUSTOM_PEER_S`.  Every cost is zero for a group of one.
    """
    g = jnp.asarray(group)
    frac = system.efficiency.link_bandwidth_fraction
    local = local_members(g, stride, system, sm)
    domains = g / local
    active = 1.0 - is_one(g, sm)
    intra, inter = 2.0 * (local - 1.0), 2.0 * (domains - 1.0)
    steps = intra * domains * system.scale_up_latency_s + inter * system.scale_out_latency_s
    # seconds per byte at the links' nominal bandwidths; a protocol divides it by its fraction
    nominal = (
        intra / (local * system.scale_up_bandwidth_bytes_per_s)
        + inter / (local * domains * system.scale_out_bandwidth_bytes_per_s)
    ) * active
    ring = []
    for p, (base, step_ratio, bw_ratio) in enumerate(
        zip(RING_BASE_S, RING_STEP_RATIO, RING_BANDWIDTH_RATIO, strict=True)
    ):
        scale = bw_ratio if PROTOCOLS[p] == "LL" else bw_ratio * frac
        ring.append(CollectiveCost(nominal / scale, (base + step_ratio * steps) * active))
    link = system.scale_up_bandwidth_bytes_per_s * frac * CUSTOM_LINK_EFFICIENCY
    one = CollectiveCost(
        (g - 1.0) / link * active, (CUSTOM_BASE_S + (g - 1.0) * CUSTOM_PEER_S) * active
    )
    two = CollectiveCost(
        2.0 * (g - 1.0) / g / link * active,
        (CUSTOM_BASE_S + 2.0 * (g - 1.0) * CUSTOM_PEER_S) * active,
    )
    return GpuCosts(
        ring=tuple(ring),
        nvls=_nvls_cost(g, stride, system, sm),
        nvls_weight=system.in_network_reduction * (1.0 - is_one(local, sm)),
        one_shot=one,
        two_shot=two,
        two_shot_weight=1.0 - is_one(g - 1.0, sm),
        crosses=spans_domains(g, stride, system, sm),
        active=active,
    )


def _fastest(times: tuple[Array, ...], sm: Smoothing) -> Array:
    """The least of ``times``, blended over :func:`_choice`'s width."""
    best = times[0]
    for t in times[1:]:
        best = smin(best, t, _choice(sm))
    return best


def _either(base: Array, option: Array, weight: Array, sm: Smoothing) -> Array:
    """``base``, or the faster of ``base`` and ``option`` where ``option`` can run
    (``weight`` 1; a flag, exact at 0 and 1)."""
    return base + weight * (_fastest((base, option), sm) - base)


def nccl_s(bytes_per_rank: ArrayLike, c: GpuCosts, sm: Smoothing) -> Array:
    """NCCL's all-reduce: the fastest of its ring protocols, and of NVLS where it runs."""
    ring = _fastest(tuple(_time(r, bytes_per_rank) for r in c.ring), sm)
    return _either(ring, _time(c.nvls, bytes_per_rank), c.nvls_weight, sm)


def engine_kernels_s(
    bytes_per_rank: ArrayLike, c: GpuCosts, sm: Smoothing, nccl: ArrayLike | None = None
) -> Array:
    """The engines' custom kernel inside one domain: one-shot, or two-shot where faster (more
    than two ranks); NCCL (``nccl``, :func:`nccl_s` when not given) for a group that leaves
    its domain."""
    one = _time(c.one_shot, bytes_per_rank)
    inside = _either(one, _time(c.two_shot, bytes_per_rank), c.two_shot_weight, sm)
    nccl = nccl_s(bytes_per_rank, c, sm) if nccl is None else nccl
    return inside + c.crosses * (nccl - inside)


class AbstractGpuCollective(AbstractCollective):
    """An algorithm chosen by message size among :func:`gpu_costs`' candidates: its
    :meth:`all_reduce_s` is not linear in the bytes (:meth:`time_s`); its
    :meth:`all_reduce_cost` is the large-message limit, the candidate with the least bytes
    term.  All-gathers and reduce-scatters stay the hierarchical ring's."""

    @abc.abstractmethod
    def time_s(self, bytes_per_rank: ArrayLike, c: GpuCosts, sm: Smoothing) -> Array:
        """Seconds for an all-reduce of ``bytes_per_rank`` bytes given the candidates."""

    def all_reduce_s(
        self,
        bytes_per_rank: ArrayLike,
        group: ArrayLike,
        stride: ArrayLike,
        system: System,
        sm: Smoothing,
    ) -> Array:
        return self.time_s(bytes_per_rank, gpu_costs(group, stride, system, sm), sm)

    def all_gather_s(
        self,
        bytes_per_rank_out: ArrayLike,
        group: ArrayLike,
        stride: ArrayLike,
        system: System,
        sm: Smoothing,
    ) -> Array:
        return HIERARCHICAL_RING.all_gather_s(bytes_per_rank_out, group, stride, system, sm)


@final
class Nccl(AbstractGpuCollective):
    """NCCL's own choice: the fastest of its ring protocols LL, LL128 and Simple, and of NVLS
    inside a domain whose switches reduce (:func:`gpu_costs`, :func:`nccl_s`).  A small
    all-reduce over 8 ranks of one node takes LL's ``6.6 + 14 x 0.44`` = 12.8 us (the
    hierarchical ring charges 14 x 2.5 = 35 us); a large one the Simple ring's bandwidth, or
    NVLS's."""

    name = "nccl"

    def all_reduce_cost(
        self, group: ArrayLike, stride: ArrayLike, system: System, sm: Smoothing
    ) -> CollectiveCost:
        c = gpu_costs(group, stride, system, sm)
        simple, w = c.ring[-1], c.nvls_weight
        return CollectiveCost(
            simple.per_byte_s + w * (c.nvls.per_byte_s - simple.per_byte_s),
            simple.fixed_s + w * (c.nvls.fixed_s - simple.fixed_s),
        )

    def time_s(self, bytes_per_rank: ArrayLike, c: GpuCosts, sm: Smoothing) -> Array:
        return nccl_s(bytes_per_rank, c, sm)


@final
class EngineKernels(AbstractGpuCollective):
    """A serving engine's custom all-reduce kernel (vLLM ``custom_all_reduce``, TensorRT-LLM's,
    SGLang's port of it): one-shot, or two-shot where it is faster with more than two ranks;
    NCCL for a group that leaves its NVLink domain (:func:`engine_kernels_s`)."""

    name = "custom"

    def all_reduce_cost(
        self, group: ArrayLike, stride: ArrayLike, system: System, sm: Smoothing
    ) -> CollectiveCost:
        c = gpu_costs(group, stride, system, sm)
        return c.two_shot

    def time_s(self, bytes_per_rank: ArrayLike, c: GpuCosts, sm: Smoothing) -> Array:
        return engine_kernels_s(bytes_per_rank, c, sm)


@final
class OneShot(AbstractGpuCollective):
    """The engines' one-shot kernel forced (NCCL across domains): :func:`gpu_costs`."""

    name = "one_shot"

    def all_reduce_cost(
        self, group: ArrayLike, stride: ArrayLike, system: System, sm: Smoothing
    ) -> CollectiveCost:
        return gpu_costs(group, stride, system, sm).one_shot

    def time_s(self, bytes_per_rank: ArrayLike, c: GpuCosts, sm: Smoothing) -> Array:
        one = _time(c.one_shot, bytes_per_rank)
        return one + c.crosses * (nccl_s(bytes_per_rank, c, sm) - one)


@final
class TwoShot(AbstractGpuCollective):
    """The engines' two-shot kernel forced (NCCL across domains): :func:`gpu_costs`."""

    name = "two_shot"

    def all_reduce_cost(
        self, group: ArrayLike, stride: ArrayLike, system: System, sm: Smoothing
    ) -> CollectiveCost:
        return gpu_costs(group, stride, system, sm).two_shot

    def time_s(self, bytes_per_rank: ArrayLike, c: GpuCosts, sm: Smoothing) -> Array:
        two = _time(c.two_shot, bytes_per_rank)
        return two + c.crosses * (nccl_s(bytes_per_rank, c, sm) - two)


@final
class Fastest(AbstractGpuCollective):
    """The default: on a GPU, the faster of NCCL's choice and the engines' custom kernel, as
    the serving engines dispatch (vLLM's ``custom_all_reduce`` below a size, NCCL above;
    TensorRT-LLM's ``AUTO`` strategy); a training framework's large all-reduces land on NCCL's
    side of the choice by themselves.  On a chip that is not a GPU (weight
    ``Chip.gpu_weight``), the hierarchical ring.

    ``t(B) = min(nccl(B), kernels(B))`` (:func:`nccl_s`, :func:`engine_kernels_s`), relaxed
    by :func:`~diffcost._core.smooth.smin` over :data:`CHOICE_WIDTH` of the usual width."""

    name = "fastest"

    def all_reduce_cost(
        self, group: ArrayLike, stride: ArrayLike, system: System, sm: Smoothing
    ) -> CollectiveCost:
        return Nccl().all_reduce_cost(group, stride, system, sm)

    def all_reduce_s(
        self,
        bytes_per_rank: ArrayLike,
        group: ArrayLike,
        stride: ArrayLike,
        system: System,
        sm: Smoothing,
    ) -> Array:
        c = gpu_costs(group, stride, system, sm)
        # the hierarchical ring is NCCL's Simple ring without its base latency
        ring = _time(c.ring[-1], bytes_per_rank) - RING_BASE_S[-1] * c.active
        return ring + system.chip.gpu_weight() * (self.time_s(bytes_per_rank, c, sm) - ring)

    def time_s(self, bytes_per_rank: ArrayLike, c: GpuCosts, sm: Smoothing) -> Array:
        nccl = nccl_s(bytes_per_rank, c, sm)
        return _fastest((nccl, engine_kernels_s(bytes_per_rank, c, sm, nccl)), sm)


#: Every collective algorithm, by the name a user selects it with.
COLLECTIVES: Mapping[str, type[AbstractCollective]] = registry(
    Fastest, HierarchicalRing, Ring, Tree, NVLS, Nccl, EngineKernels, OneShot, TwoShot
)

#: The algorithm of a system that selects none: the fastest of what the libraries run.
DEFAULT_COLLECTIVE = Fastest()


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
    "HIERARCHICAL_RING",
    "NVLS",
    "AbstractCollective",
    "CollectiveCost",
    "EngineKernels",
    "Fastest",
    "GpuCosts",
    "HierarchicalRing",
    "Nccl",
    "OneShot",
    "Ring",
    "Tree",
    "TwoShot",
    "collective_of",
    "gpu_costs",
    "local_members",
    "spans_domains",
    "with_collective",
]
