"""Collective communication over a two-level network: a scale-up domain and a scale-out fabric.

Alpha-beta cost (Hockney 1994; Thakur, Rabenseifner, Gropp, "Optimization of Collective
Communication Operations in MPICH", IJHPCA 2005): a ring all-reduce of ``B`` bytes over ``g``
ranks takes ``2 (g-1)/g * B / beta + 2 (g-1) * alpha``; all-gather and reduce-scatter take half.

A group of ``g`` ranks whose members are ``stride`` ranks apart (Megatron order: TP innermost,
then CP, DP, PP) has ``l = clip(domain / stride, 1, g)`` members inside one scale-up domain and
spans ``g / l`` domains.  The collective is hierarchical (as NCCL's tree/ring over NVLink then
InfiniBand): a reduce-scatter + all-gather inside the domain over the fast links, and between
domains each of the ``l`` local ranks carries ``B / l`` over its own network share.  A TP group
that spills out of its node therefore pays scale-out bandwidth.
"""

from typing import NamedTuple

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike

from .._core.shared import once
from .._core.smooth import Smoothing, is_one, relu, smax, smin, step
from .._inputs.hardware import System


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


def spans_domains(group: ArrayLike, stride: ArrayLike, system: System, sm: Smoothing) -> Array:
    """1 when a group of ``group`` ranks ``stride`` apart leaves one scale-up domain, else 0:
    ``group * stride > domain`` (``group / local_members > 1``), a step on the chip counts,
    integers at integer plans (exact there); requires ``group >= 2``."""
    g, s = jnp.asarray(group), jnp.asarray(stride)
    return 1.0 - is_one(g * s - system.scale_up_domain_chips + 1.0, sm)


def all_reduce_s(
    bytes_per_rank: ArrayLike,
    group: ArrayLike,
    stride: ArrayLike,
    system: System,
    sm: Smoothing,
) -> Array:
    """Seconds for a hierarchical ring all-reduce of ``bytes_per_rank`` bytes over ``group`` ranks.

    ``2 (l-1)/l * B / beta_up + 2 (g - r) alpha_up + 2 (r-1)/r * (B/l) / beta_out + 2 (r-1)
    alpha_out`` with ``l`` local members and ``r = group / l`` domains; ``beta`` are achievable
    bus bandwidths (link bandwidth times ``link_bandwidth_fraction``).

    Latency: a ring over ``g`` ranks takes ``2 (g - 1)`` steps, ``2 (r - 1)`` of them across
    domains and the other ``2 (g - r)`` inside one (NCCL's own ring model,
    ``(nsteps - nInterSteps) * intraLat + nInterSteps * interLat`` with ``nsteps = 2 (nRanks - 1)``
    and ``nInterSteps = 2 (nNodes - 1)``; ``src/graph/tuning.cc``, NVIDIA/nccl 2.18+).  Every
    rank forwards every chunk, so a ring spread over ``r`` domains pays the intra-domain step
    ``r (l - 1)`` times, not ``l - 1``.  Zero for a group of one,
    with zero derivatives: the sum is multiplied by ``1 - is_one(group)`` (exactly 1 for every
    larger integer group), because at ``group = 1`` the clip of ``l`` has equal bounds and its
    subgradient would charge a one-rank "collective" for the scale-up domain size.
    """
    per_byte_s, fixed_s = ring_cost(group, stride, system, sm)
    return jnp.asarray(bytes_per_rank) * per_byte_s + fixed_s


class RingCost(NamedTuple):
    """A hierarchical ring all-reduce over one group, as ``B * per_byte_s + fixed_s``."""

    per_byte_s: Array  # seconds per byte per rank: the bandwidth terms of all_reduce_s
    fixed_s: Array  # seconds whatever the bytes: the latency terms


@once
def ring_cost(group: ArrayLike, stride: ArrayLike, system: System, sm: Smoothing) -> RingCost:
    """The bytes-independent part of :func:`all_reduce_s` for a group: every collective over
    the same ``(group, stride)`` in one evaluation shares it (:mod:`diffcost._core.shared`).

    ``per_byte_s = [2 (l-1)/(l beta_up) + 2 (r-1)/(l r beta_out)] (1 - [g = 1])`` and
    ``fixed_s = [2 (l-1) r alpha_up + 2 (r-1) alpha_out] (1 - [g = 1])`` (seconds per byte and
    seconds; ``l`` local members, ``r = g / l`` domains, ``beta`` the achievable link
    bandwidths in bytes/s, ``alpha`` the per-step latencies in s; references in
    :func:`all_reduce_s`).
    """
    g = jnp.asarray(group)
    frac = system.efficiency.link_bandwidth_fraction
    local = local_members(g, stride, system, sm)
    domains = g / local
    active = 1.0 - is_one(g, sm)
    intra, inter = 2.0 * (local - 1.0), 2.0 * (domains - 1.0)
    per_byte = intra / (local * system.scale_up_bandwidth_bytes_per_s * frac) + inter / (
        local * domains * system.scale_out_bandwidth_bytes_per_s * frac
    )
    fixed = intra * domains * system.scale_up_latency_s + inter * system.scale_out_latency_s
    return RingCost(per_byte * active, fixed * active)


def all_gather_s(
    bytes_per_rank_out: ArrayLike,
    group: ArrayLike,
    stride: ArrayLike,
    system: System,
    sm: Smoothing,
) -> Array:
    """All-gather or reduce-scatter of a full buffer of ``bytes_per_rank_out``.

    Half an all-reduce: one of its two phases."""
    return 0.5 * all_reduce_s(bytes_per_rank_out, group, stride, system, sm)


def all_to_all_s(
    bytes_per_rank: ArrayLike,
    group: ArrayLike,
    stride: ArrayLike,
    system: System,
    sm: Smoothing,
    scale_out_bytes: ArrayLike | None = None,
) -> Array:
    """Seconds for an all-to-all in which each of ``group`` ranks (``stride`` apart) sends
    ``bytes_per_rank`` spread evenly over all ranks.

    Of the ``g`` destinations ``l = clip(domain / stride, 1, g)`` share the scale-up domain: a
    rank sends ``B (l - 1) / g`` over the scale-up links and ``B (g - l) / g`` over its
    scale-out share, concurrently with ``g - 1`` point-to-point pairs (NCCL ``ncclSend`` /
    ``ncclRecv`` in a group, as ``torch.distributed.all_to_all_single``): the slower of the two
    plus one latency of each level used.  Zero for a group of one.  (Alpha-beta: Thakur et al.,
    IJHPCA 2005 §4.5; the hierarchical split as in :func:`all_reduce_s`.)  ``scale_out_bytes``
    replaces ``B (g - l) / g`` when fewer bytes leave the domain (a dispatch deduplicated per
    node: :func:`~diffcost._terms.moe.remote_dispatch_bytes`).
    """
    b, g = jnp.asarray(bytes_per_rank), jnp.asarray(group)
    frac = system.efficiency.link_bandwidth_fraction
    local = local_members(g, stride, system, sm)
    up = b * (local - 1.0) / g / (system.scale_up_bandwidth_bytes_per_s * frac)
    remote = b * (g - local) / g if scale_out_bytes is None else jnp.asarray(scale_out_bytes)
    out = remote / (system.scale_out_bandwidth_bytes_per_s * frac)
    crosses = spans_domains(g, stride, system, sm)
    latency = system.scale_up_latency_s + crosses * system.scale_out_latency_s
    return (smax(up, out, sm) + latency) * (1.0 - is_one(g, sm))


def exposed_s(comm_s: ArrayLike, window_s: ArrayLike, system: System, sm: Smoothing) -> Array:
    """Time a collective adds when overlapped with ``window_s`` of independent computation.

    ``max(comm - window, 0) + c * min(comm, window)``: the part that does not fit under the
    computation, plus the contention ``c = overlap_contention`` of the part that does
    (communication kernels occupy SMs and memory bandwidth while they run).
    """
    comm, window = jnp.asarray(comm_s), jnp.asarray(window_s)
    c = system.efficiency.overlap_contention
    return relu(comm - window, sm, scale=comm + window) + c * smin(comm, window, sm)


def point_to_point_s(
    bytes_sent: ArrayLike, stride: ArrayLike, system: System, sm: Smoothing
) -> Array:
    """Send ``bytes_sent`` to the rank ``stride`` away: over scale-out once ``stride >= domain``.

    ``B / beta + alpha`` of the level the neighbour sits on (the relaxed step is taken on the
    chip counts ``stride - domain``, integers at integer plans, so it is exact there).
    """
    frac = system.efficiency.link_bandwidth_fraction
    crosses = step(jnp.asarray(stride) - system.scale_up_domain_chips, sm)
    b = jnp.asarray(bytes_sent)
    up = b / (system.scale_up_bandwidth_bytes_per_s * frac) + system.scale_up_latency_s
    out = b / (system.scale_out_bandwidth_bytes_per_s * frac) + system.scale_out_latency_s
    return crosses * out + (1.0 - crosses) * up


def tp_all_reduce_s(
    tokens: ArrayLike, hidden: ArrayLike, tp: ArrayLike, system: System, sm: Smoothing
) -> Array:
    """One tensor-parallel all-reduce of the 16-bit activations of ``tokens`` tokens, seconds.

    :func:`all_reduce_s` of ``2 tokens h`` bytes over the ``tp`` innermost ranks (stride 1);
    a layer forward runs two, after attention and after the MLP (Shoeybi et al. 2019, §3).
    """
    return all_reduce_s(2.0 * jnp.asarray(tokens) * hidden, tp, 1.0, system, sm)
