"""Time of on-chip work: matrix multiplications and memory-streaming kernels.

A GEMM ``(m x k) @ (k x n)`` is a roofline of its FLOP at the achievable peak against its bytes
at the achievable memory bandwidth (Williams, Waterman, Patterson, "Roofline", CACM 2009).  The
achievable peak depends on the shape: each dimension ``d`` contributes ``d / (d + d_half)``, a
smooth stand-in for tile and wave quantization (small or skinny GEMMs fill fewer tiles), so that
efficiency has gradients instead of being a step table.

The number formats of a GEMM are a :class:`GemmFormat`: the peak FLOP/s of its compute format
and the bytes per element it moves, either one size for every operand (training: all operands in
the compute format) or a separate size for the ``k x n`` weight operand (serving: weight-only
formats, and a separately dequantized copy of the weight).
"""

from typing import NamedTuple

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike

from .._core.smooth import Smoothing, smax
from .._inputs.hardware import Efficiency, System


class GemmFormat(NamedTuple):
    """Formats a GEMM runs in (a pytree; every field an array or None).

    Attributes:
        peak_flop_per_s: dense peak FLOP/s of the compute format.
        act_bytes: bytes per element of the ``m x k`` input and ``m x n`` output (and of the
            ``k x n`` operand when ``weight_bytes`` is None).
        weight_bytes: bytes moved per element of the ``k x n`` weight operand, when it differs
            from ``act_bytes`` (None: every operand has ``act_bytes``).
    """

    peak_flop_per_s: ArrayLike
    act_bytes: ArrayLike
    weight_bytes: ArrayLike | None = None


def matmul_efficiency(m: ArrayLike, n: ArrayLike, k: ArrayLike, eff: Efficiency) -> Array:
    """Achieved fraction of peak FLOP/s of an ``m x k x n`` GEMM (dimensionless, in (0, 1)).

    ``f_max * m/(m + d) * n/(n + d) * k/(k + d)`` with ``f_max = eff.matmul_peak_fraction``,
    ``d = eff.matmul_half_dim``.
    """
    d = eff.matmul_half_dim
    m, n, k = (jnp.asarray(x) for x in (m, n, k))
    return eff.matmul_peak_fraction * (m / (m + d)) * (n / (n + d)) * (k / (k + d))


def gemm_flop(m: ArrayLike, n: ArrayLike, k: ArrayLike, count: ArrayLike = 1.0) -> Array:
    """FLOP of ``count`` independent ``m x k x n`` GEMMs: ``2 m n k count``."""
    m, n, k, count = (jnp.asarray(x) for x in (m, n, k, count))
    return 2.0 * m * n * k * count


def gemm_bytes(
    m: ArrayLike, n: ArrayLike, k: ArrayLike, fmt: GemmFormat, count: ArrayLike = 1.0
) -> Array:
    """Bytes ``count`` independent ``m x k x n`` GEMMs move through memory (each operand once).

    ``b (m k + k n + m n) count`` with one element size ``b = fmt.act_bytes``; with a separate
    weight size ``w = fmt.weight_bytes``: ``(k n w + (m k + m n) a) count`` (equal when
    ``w == a``; a weight of ``w`` bytes is read once whatever ``m``, which makes small-``m``
    GEMMs memory-bound; Pope et al., "Efficiently Scaling Transformer Inference", MLSys'23).
    """
    m, n, k, count = (jnp.asarray(x) for x in (m, n, k, count))
    if fmt.weight_bytes is None:
        return jnp.asarray(fmt.act_bytes) * (m * k + k * n + m * n) * count
    return (k * n * fmt.weight_bytes + (m * k + m * n) * fmt.act_bytes) * count


def gemm_time_s(
    m: ArrayLike,
    n: ArrayLike,
    k: ArrayLike,
    fmt: GemmFormat,
    system: System,
    sm: Smoothing,
    count: ArrayLike = 1.0,
) -> Array:
    """Seconds for ``count`` independent ``m x k x n`` GEMMs in the formats ``fmt``.

    ``max(2 m n k count / (peak * eff(m, n, k)), bytes / (bw * f_bw))`` with ``bytes`` from
    :func:`gemm_bytes` and ``eff`` from :func:`matmul_efficiency` (Roofline, CACM 2009).
    """
    m, n, k = (jnp.asarray(x) for x in (m, n, k))
    eff = matmul_efficiency(m, n, k, system.efficiency)
    compute_s = gemm_flop(m, n, k, count) / (fmt.peak_flop_per_s * eff)
    memory_s = stream_time_s(gemm_bytes(m, n, k, fmt, count), system)
    return smax(compute_s, memory_s, sm)


def matmul_time_s(
    m: ArrayLike,
    n: ArrayLike,
    k: ArrayLike,
    peak_flop_per_s: ArrayLike,
    bytes_per_element: ArrayLike,
    system: System,
    sm: Smoothing,
    count: ArrayLike = 1.0,
) -> Array:
    """Seconds for ``count`` independent ``m x k x n`` GEMMs (e.g. one per attention head).

    ``max(2 m n k / (peak * eff), bytes * (m k + k n + m n) / (bw * f_bw))`` per GEMM, where
    ``bytes`` is the element size of the operands: :func:`gemm_time_s` with one element size.
    """
    fmt = GemmFormat(peak_flop_per_s, bytes_per_element)
    return gemm_time_s(m, n, k, fmt, system, sm, count)


def stream_time_s(bytes_moved: ArrayLike, system: System) -> Array:
    """Seconds to stream ``bytes_moved`` through memory at the achievable bandwidth.

    ``bytes / (bw * f_bw)`` (datasheet bandwidth times ``memory_bandwidth_fraction``).
    """
    bandwidth = (
        system.chip.memory_bandwidth_bytes_per_s * system.efficiency.memory_bandwidth_fraction
    )
    return jnp.asarray(bytes_moved) / bandwidth
