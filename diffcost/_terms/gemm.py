"""Time of on-chip work: matrix multiplications and memory-streaming kernels.

A GEMM ``(m x k) @ (k x n)`` is a roofline of its FLOP at the achievable peak against its bytes
at the achievable memory bandwidth (Williams, Waterman, Patterson, "Roofline", CACM 2009).  The
achievable peak depends on the shape and on the chip's execution class (``Chip.architecture``):

* gpu: each dimension ``d`` contributes ``d / (d + d_half)``, a smooth stand-in for tile and wave
  quantization of CUDA/HIP kernels (small or skinny GEMMs fill fewer tiles), fitted through
  ``matmul_half_dim``;
* systolic (TPU MXU, Gaudi MME): a weight-stationary ``R x R`` array holds an ``R x R`` tile of
  the ``k x n`` operand, so ``k`` and ``n`` are padded to multiples of ``R``; the ``m`` rows
  stream through it, and each tile pass pays ``R`` cycles of pipeline fill and drain (Kung,
  "Why systolic architectures?", IEEE Computer 1982: ``m`` inputs through an ``R``-stage array
  take ``m + R - 1`` steps; Jouppi et al., "In-Datacenter Performance Analysis of a Tensor
  Processing Unit", ISCA 2017, §2: weights stationary, activations streamed, and the next tile's
  ``R``-cycle weight shift double-buffered under the current pass, so it adds nothing here);
* dataflow (Groq TSP, Cerebras WSE): the compiler schedules every stream statically, weight
  tiles are installed from on-chip SRAM at the SRAM bandwidth the memory roofline already
  charges, and passes are software-pipelined (Abts et al., "Think Fast: A Tensor Streaming
  Processor", ISCA 2020, §3-4), so only the padding of ``k`` and ``n`` to the array width
  remains.

A GEMM's shape leaves part of the matrix units' issue slots idle in two ways.  Padding of ``n``
and ``k`` to tiles (and a GPU's last partial wave) happens inside a compute-bound kernel that
runs at the sustained fraction ``f = matmul_peak_fraction`` of peak a large GEMM reaches (clock
under sustained matrix power, scheduling), so it scales that rate.  Missing *rows* (``m`` below
a tile's height, or a systolic pass's ``R`` fill/drain rows) starve the units: a skinny GEMM is
a memory-streaming kernel whose matrix units idle, draw little power and do not pull the clock
down, so its row fill ``u`` costs time at the full rate (:func:`sustained_efficiency`):
``1 / e = 1 / f + 1 / u - 1``, the useful slots at ``f * peak``, the ``1/u - 1`` idle slots per
useful one at ``peak`` (time, energy and power caps on a roofline: Choi, Bedard, Fowler, Vuduc,
"A roofline model of energy", IPDPS 2013, and its report GT-CSE-2012-01 §5.2; sustained vs
boost clock under matrix load: AMD ROCm blog "Measuring Max-Achievable FLOPs - Part 2", 2025).
``e = f`` for a large GEMM (the old product ``f * u``) and ``e -> u`` for a skinny one, so
small-batch decode sits at the weight-read floor on a chip with a low ``f`` too, as current
GEMV / small-``m`` kernels do (TensorRT-LLM ``weightOnlyBatchedGemv`` kernels for ``m <= 4``,
cpp/tensorrt_llm/kernels/weightOnlyBatchedGemv/; Frantar et al., "MARLIN: Mixed-Precision
Auto-Regressive Parallel Inference on Large Language Models", PPoPP 2025, arXiv:2408.11743:
int4 weights give close to the ideal 4x speed-up up to batch 16-32, so small-batch GEMMs are
bound by the weight read).  The product ``f * u`` charged the sustained-load loss to the idle
rows too, and turned batch-1 decode compute-bound on chips with a low ``f`` (MI300X at 0.45).

The class weights are one-hot for every built-in chip, so a GPU's efficiency is exactly the
GPU expression (the other classes are multiplied by 0).

The number formats of a GEMM are a :class:`GemmFormat`: the peak FLOP/s of its compute format
and the bytes per element it moves, either one size for every operand (training: all operands in
the compute format) or a separate size for the ``k x n`` weight operand (serving: weight-only
formats, and a separately dequantized copy of the weight).
"""

from typing import NamedTuple

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike

from .._core.smooth import EXACT, Smoothing, ceil, clip01, smax
from .._inputs.hardware import Chip, Efficiency, System


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


def sustained_efficiency(fill: ArrayLike, peak_fraction: ArrayLike) -> Array:
    """Fraction of peak FLOP/s of a GEMM whose rows fill ``fill`` of the matrix issue slots.

    ``1 / (1 / f + 1 / u - 1)`` with ``u = fill`` and ``f = peak_fraction`` (dimensionless): the
    useful slots at the sustained rate ``f``, the idle ones at the full rate (module docstring;
    Choi et al., IPDPS 2013).  Equals ``f`` at ``u = 1``, ``u`` at ``f = 1``, tends to ``u`` as
    ``u -> 0``, increasing in both; smooth, so the relaxed and exact models share it.
    """
    u, f = jnp.asarray(fill), jnp.asarray(peak_fraction)
    return f * u / (u + f * (1.0 - u))  # the same, with finite gradients at u = 0


def gpu_fill(m: ArrayLike, n: ArrayLike, k: ArrayLike, eff: Efficiency) -> Array:
    """Fill of an ``m x k x n`` GEMM on a GPU: ``m/(m + d) * n/(n + d) * k/(k + d)``.

    ``d = eff.matmul_half_dim``: tile and wave quantization, smoothed (module docstring).
    """
    d = eff.matmul_half_dim
    m, n, k = (jnp.asarray(x) for x in (m, n, k))
    return (m / (m + d)) * (n / (n + d)) * (k / (k + d))


def gpu_matmul_efficiency(m: ArrayLike, n: ArrayLike, k: ArrayLike, eff: Efficiency) -> Array:
    """Fraction of peak FLOP/s of an ``m x k x n`` GEMM on a GPU (dimensionless, in (0, 1)).

    ``n/(n + d) * k/(k + d) * e(m/(m + d))`` with ``e`` = :func:`sustained_efficiency` at
    ``f = eff.matmul_peak_fraction`` and ``d = eff.matmul_half_dim`` (module docstring):
    ``f * n/(n + d) * k/(k + d) * m / (m + f d)``.
    """
    d, f = eff.matmul_half_dim, eff.matmul_peak_fraction
    m, n, k = (jnp.asarray(x) for x in (m, n, k))
    return (n / (n + d)) * (k / (k + d)) * sustained_efficiency(m / (m + d), f)


#: Relative tolerance below which a dimension counts as a multiple of the array side.  Model
#: dimensions are integers computed as float32 ratios (``heads head_dim / tp``); a rounding
#: error or the 1e-6 perturbation of a finite difference must not add a whole tile at an exact
#: multiple.  Exact at every integer dimension up to ``1 / (tol R)`` tiles (1,500 at R = 320).
ALIGN_TOL = 2e-6


def array_tiles(dim: ArrayLike, array_dim: ArrayLike, sm: Smoothing) -> Array:
    """Tiles of side ``R = array_dim`` a dimension of ``dim`` elements needs: ``ceil(dim / R)``.

    Exact: ``ceil(dim / R * (1 - tol))`` (:data:`ALIGN_TOL`), flat at multiples of ``R``.
    Relaxed: ``ceil(dim / R) - 1 + clip01(dim - R (ceil(dim / R) - 1))``, the smooth step
    confined to ``(j R, j R + 1)``, so it equals the exact count at every integer ``dim`` (not
    only at multiples of ``R``), is C1 in ``dim`` and has finite gradients.
    """
    dim, r = jnp.asarray(dim), jnp.asarray(array_dim)
    if not sm.relaxed:
        return ceil(dim / r * (1.0 - ALIGN_TOL), EXACT)
    below = ceil(dim / r, EXACT) - 1.0
    return below + clip01(dim - r * below, sm)


def array_pad(n: ArrayLike, k: ArrayLike, chip: Chip, sm: Smoothing) -> Array:
    """Fraction of an ``R x R`` array a ``k x n`` weight fills: ``k/(R ceil(k/R)) n/(R ceil(n/R))``.

    ``k`` and ``n`` padded to the array side ``R = chip.array_dim`` (systolic: Jouppi et al.
    ISCA 2017 §2; dataflow: the Groq MXM is 320 wide, Abts et al. ISCA 2020).
    """
    r = chip.array_dim
    n, k = jnp.asarray(n), jnp.asarray(k)
    return (k / (r * array_tiles(k, r, sm))) * (n / (r * array_tiles(n, r, sm)))


def systolic_fill(m: ArrayLike, n: ArrayLike, k: ArrayLike, chip: Chip, sm: Smoothing) -> Array:
    """Fraction of an ``R x R`` weight-stationary array's cycles that do useful work.

    ``k / (R ceil(k / R)) * n / (R ceil(n / R)) * m / (m + R)``: ``k`` and ``n`` padded to the
    array (:func:`array_pad`), ``m`` streamed with ``R`` cycles of fill and drain per tile pass
    (Kung 1982; Jouppi et al. ISCA 2017 §2).  One row (batch-1 decode) uses ``1 / (1 + R)`` of
    the array's cycles.
    """
    m = jnp.asarray(m)
    return array_pad(n, k, chip, sm) * m / (m + chip.array_dim)


def dataflow_fill(n: ArrayLike, k: ArrayLike, chip: Chip, sm: Smoothing) -> Array:
    """Fraction of a dataflow chip's matrix array a ``k x n`` weight fills (dimensionless).

    :func:`array_pad` with ``R`` the array width (Groq MXM 320 x 320, Abts et al. ISCA 2020):
    no per-pass fill, the compiler pipelines the streams.
    """
    return array_pad(n, k, chip, sm)


def matmul_efficiency(
    m: ArrayLike, n: ArrayLike, k: ArrayLike, system: System, sm: Smoothing
) -> Array:
    """Achieved fraction of peak FLOP/s of an ``m x k x n`` GEMM (dimensionless, in (0, 1)).

    ``w_gpu eff_gpu + pad (w_sys e(m / (m + R)) + w_df f)`` over the chip's class weights
    ``(w_gpu, w_sys, w_df)``: :func:`gpu_matmul_efficiency`, :func:`array_pad` and ``e`` =
    :func:`sustained_efficiency` at ``f = eff.matmul_peak_fraction`` (module docstring): the
    systolic row fill (:func:`systolic_fill`) at the full clock, the padding at the sustained
    rate; a dataflow chip (:func:`dataflow_fill`) has no row penalty.
    """
    chip, eff = system.chip, system.efficiency
    w_gpu, w_sys, w_df = chip.architecture[0], chip.architecture[1], chip.architecture[2]
    f = eff.matmul_peak_fraction
    m = jnp.asarray(m)
    gpu = gpu_matmul_efficiency(m, n, k, eff)
    rows = sustained_efficiency(m / (m + chip.array_dim), f)
    array = array_pad(n, k, chip, sm) * (w_sys * rows + w_df * f)
    return w_gpu * gpu + array


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
    # ``flop / eff`` tends to a finite limit as m -> 0 (eff is proportional to m there): an
    # empty GEMM (no tokens) takes that limit, not 0 / 0, and its gradient stays finite
    rows = jnp.maximum(m, 1e-6)
    eff = matmul_efficiency(rows, n, k, system, sm)
    compute_s = gemm_flop(rows, n, k, count) / (fmt.peak_flop_per_s * eff)
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
