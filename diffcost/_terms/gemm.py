"""Time of on-chip work: matrix multiplications and memory-streaming kernels.

A GEMM ``(m x k) @ (k x n)`` is a roofline of its FLOP at the achievable peak against its bytes
at the achievable memory bandwidth (Williams, Waterman, Patterson, "Roofline", CACM 2009).  The
achievable peak depends on the shape: each dimension ``d`` contributes ``d / (d + d_half)``, a
smooth stand-in for tile and wave quantization (small or skinny GEMMs fill fewer tiles), so that
efficiency has gradients instead of being a step table.
"""

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike

from .._core.smooth import Smoothing, smax
from .._inputs.hardware import Efficiency, System


def matmul_efficiency(m: ArrayLike, n: ArrayLike, k: ArrayLike, eff: Efficiency) -> Array:
    """Achieved fraction of peak FLOP/s of an ``m x k x n`` GEMM (dimensionless, in (0, 1)).

    ``f_max * m/(m + d) * n/(n + d) * k/(k + d)`` with ``f_max = eff.matmul_peak_fraction``,
    ``d = eff.matmul_half_dim``.
    """
    d = eff.matmul_half_dim
    m, n, k = (jnp.asarray(x) for x in (m, n, k))
    return eff.matmul_peak_fraction * (m / (m + d)) * (n / (n + d)) * (k / (k + d))


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
    ``bytes`` is the element size of the operands.
    """
    eff = system.efficiency
    m, n, k, count = (jnp.asarray(x) for x in (m, n, k, count))
    flop = 2.0 * m * n * k * count
    compute_s = flop / (peak_flop_per_s * matmul_efficiency(m, n, k, eff))
    traffic = jnp.asarray(bytes_per_element) * (m * k + k * n + m * n) * count
    memory_s = stream_time_s(traffic, system)
    return smax(compute_s, memory_s, sm)


def stream_time_s(bytes_moved: ArrayLike, system: System) -> Array:
    """Seconds to stream ``bytes_moved`` through memory at the achievable bandwidth."""
    bandwidth = (
        system.chip.memory_bandwidth_bytes_per_s * system.efficiency.memory_bandwidth_fraction
    )
    return jnp.asarray(bytes_moved) / bandwidth
