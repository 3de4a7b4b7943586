"""Collective communication over a two-level network: a scale-up domain and a scale-out fabric.

Alpha-beta cost (Hockney 1994; Thakur, Rabenseifner, Gropp, "Optimization of Collective
Communication Operations in MPICH", IJHPCA 2005): a ring all-reduce of ``B`` bytes over ``g``
ranks takes ``2 (g-1)/g * B / beta + 2 (g-1) * alpha``; all-gather and reduce-scatter take half.
The all-reduce and all-gather algorithm is the system's (:mod:`diffcost._terms.collectives`:
by default the fastest of what NCCL and the serving engines run, by message size; or the
hierarchical ring, flat ring, tree, NVLS, ...); this module holds the other patterns.

A group of ``g`` ranks whose members are ``stride`` ranks apart (Megatron order: TP innermost,
then CP, DP, PP) has ``l = clip(domain / stride, 1, g)`` members inside one scale-up domain and
spans ``g / l`` domains.  Across domains every all-reduce is hierarchical (as NCCL's rings over
NVLink then InfiniBand): a reduce-scatter + all-gather inside the domain over the fast links, and
between domains each of the ``l`` local ranks carries ``B / l`` over its own network share.  A
TP group that spills out of its node therefore pays scale-out bandwidth.
"""

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike

from .._core.smooth import Smoothing, is_one, relu, smax, smin, step
from .._inputs.hardware import System
from .collectives import collective_of, local_members, spans_domains


def all_reduce_s(
    bytes_per_rank: ArrayLike,
    group: ArrayLike,
    stride: ArrayLike,
    system: System,
    sm: Smoothing,
) -> Array:
    """Seconds for an all-reduce of ``bytes_per_rank`` bytes over ``group`` ranks ``stride``
    apart, by the system's collective algorithm (:func:`~diffcost._terms.collectives.
    collective_of`; default :class:`~diffcost._terms.collectives.Fastest`: on a GPU the faster
    of NCCL's protocols and NVLS and the serving engines' one-shot and two-shot kernels, by
    message size, whose docstrings have the formulas; otherwise the hierarchical ring).
    Zero for a group of one, with zero derivatives."""
    return collective_of(system).all_reduce_s(bytes_per_rank, group, stride, system, sm)


def all_gather_s(
    bytes_per_rank_out: ArrayLike,
    group: ArrayLike,
    stride: ArrayLike,
    system: System,
    sm: Smoothing,
) -> Array:
    """All-gather or reduce-scatter of a full buffer of ``bytes_per_rank_out``, by the system's
    collective algorithm: half an all-reduce (one of its two phases) unless the algorithm says
    otherwise (:meth:`~diffcost._terms.collectives.AbstractCollective.all_gather_s`)."""
    return collective_of(system).all_gather_s(bytes_per_rank_out, group, stride, system, sm)


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
