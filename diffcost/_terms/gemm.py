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
GPU expression (the other classes are multiplied by 0).  Each class's law is a final class of
the extension point :class:`~diffcost._terms.execution.AbstractExecutionClass`
(:mod:`diffcost._terms.execution`, which holds the efficiency functions re-exported here).

The number formats of a GEMM are a :class:`GemmFormat`: the peak FLOP/s of its compute format
and the bytes per element it moves, either one size for every operand (training: all operands in
the compute format) or a separate size for the ``k x n`` weight operand (serving: weight-only
formats, and a separately dequantized copy of the weight).
"""

from typing import NamedTuple

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike

from .._core.shared import once
from .._core.smooth import Smoothing, ceil_div, smax
from .._inputs.hardware import System
from .execution import ALIGN_TOL as ALIGN_TOL
from .execution import array_pad as array_pad
from .execution import array_tiles as array_tiles
from .execution import dataflow_fill as dataflow_fill
from .execution import gpu_fill as gpu_fill
from .execution import gpu_matmul_efficiency as gpu_matmul_efficiency
from .execution import matmul_efficiency, mma_fraction_scale
from .execution import sustained_efficiency as sustained_efficiency
from .execution import systolic_fill as systolic_fill
from .power import sustained


class GemmFormat(NamedTuple):
    """Formats a GEMM runs in (a pytree; every field an array or None).

    Attributes:
        peak_flop_per_s: dense peak FLOP/s of the compute format.
        act_bytes: bytes per element of the ``m x k`` input and ``m x n`` output (and of the
            ``k x n`` operand when ``weight_bytes`` is None).
        weight_bytes: bytes moved per element of the ``k x n`` weight operand, when it differs
            from ``act_bytes`` (None: every operand has ``act_bytes``).
        flop_j: dynamic energy per FLOP of the compute format, J/FLOP: its matrix work then
            runs at the sustained fraction under the board power limit
            (:func:`diffcost._terms.power.sustained`); None: at the top clock.
        tile: ``(tile_m, tile_n)`` output tile of a data-parallel kernel (one thread block per
            tile, whole ``k``), whose last partial wave is charged (:func:`wave_fill`); None
            (the steps' GEMMs): a library that balances the last wave (split-k, stream-k).
        mma_fraction: share of the tensor peak the kernel's matrix instructions reach when it
            is built on older ones than the chip's peak needs
            (:func:`~diffcost._terms.execution.mma_fraction_scale`); None: the native path.
    """

    peak_flop_per_s: ArrayLike
    act_bytes: ArrayLike
    weight_bytes: ArrayLike | None = None
    flop_j: ArrayLike | None = None
    tile: tuple[ArrayLike, ArrayLike] | None = None
    mma_fraction: ArrayLike | None = None


def wave_fill(
    m: ArrayLike,
    n: ArrayLike,
    tile_m: ArrayLike,
    tile_n: ArrayLike,
    multiprocessors: ArrayLike,
    sm: Smoothing,
) -> Array:
    """Share of the multiprocessor slots a data-parallel GEMM kernel's output tiles fill
    (dimensionless, in (0, 1]).

    A kernel that gives each ``tile_m x tile_n`` output tile to one thread block for the whole
    ``k`` runs ``T = ceil(m / tile_m) ceil(n / tile_n)`` blocks in ``ceil(T / P)`` waves over
    ``P`` multiprocessors, each wave as long as one tile: ``T / (P ceil(T / P))`` of the slots
    do work (wave quantization: Osama, Merrill, Cecka, Garland, Owens, "Stream-K: Work-centric
    Parallel Decomposition for Dense Matrix-Matrix Multiplication on the GPU", PPoPP 2023,
    §2; CUTLASS and cuBLAS split or stream ``k`` to avoid it, :data:`~diffcost._inputs.schema.
    KERNEL_TILINGS`).  The padding of ``m`` and ``n`` inside a tile is not in it (the fill of
    :func:`~diffcost._terms.execution.gpu_fill` stands for it).  1 for a chip that states no
    multiprocessors (``P = 0``).  Counts by :func:`~diffcost._core.smooth.ceil_div` (exact at
    integer shapes).
    """
    p = jnp.asarray(multiprocessors)
    slots = jnp.maximum(p, 1.0)
    tiles = ceil_div(m, tile_m, sm) * ceil_div(n, tile_n, sm)
    fill = tiles / (ceil_div(tiles, slots, sm) * slots)
    return jnp.where(p > 0.0, fill, 1.0)


def gemm_flop(m: ArrayLike, n: ArrayLike, k: ArrayLike, count: ArrayLike = 1.0) -> Array:
    """FLOP of ``count`` independent ``m x k x n`` GEMMs: ``2 m n k count``."""
    count = jnp.asarray(count)
    return _product(_product(_product(2.0, m), n), k) * count


@once
def _product(a: ArrayLike, b: ArrayLike) -> Array:
    """``a * b``, once per pair of operands and evaluation: the GEMMs of a step share their
    rows and widths, so their FLOP and operand sizes share partial products."""
    return jnp.multiply(a, b)


def gemm_bytes(
    m: ArrayLike, n: ArrayLike, k: ArrayLike, fmt: GemmFormat, count: ArrayLike = 1.0
) -> Array:
    """Bytes ``count`` independent ``m x k x n`` GEMMs move through memory (each operand once).

    ``b (m k + k n + m n) count`` with one element size ``b = fmt.act_bytes``; with a separate
    weight size ``w = fmt.weight_bytes``: ``(k n w + (m k + m n) a) count`` (equal when
    ``w == a``; a weight of ``w`` bytes is read once whatever ``m``, which makes small-``m``
    GEMMs memory-bound; Pope et al., "Efficiently Scaling Transformer Inference", MLSys'23).
    """
    count = jnp.asarray(count)
    mk, kn, mn = _product(m, k), _product(k, n), _product(m, n)
    if fmt.weight_bytes is None:
        return jnp.asarray(fmt.act_bytes) * (mk + kn + mn) * count
    return (kn * fmt.weight_bytes + (mk + mn) * fmt.act_bytes) * count


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
    :func:`gemm_bytes` and ``eff`` from :func:`matmul_efficiency` (Roofline, CACM 2009), whose
    large-GEMM fraction is the format's sustained one under the board power limit
    (:func:`~diffcost._terms.power.sustained`) when ``fmt.flop_j`` is given, the top-clock one
    otherwise; times :func:`wave_fill` for a data-parallel kernel (``fmt.tile``).
    """
    m, n, k = (jnp.asarray(x) for x in (m, n, k))
    # ``flop / eff`` tends to a finite limit as m -> 0 (eff is proportional to m there): an
    # empty GEMM (no tokens) takes that limit, not 0 / 0, and its gradient stays finite
    rows = nonzero_rows(m)
    held = system if fmt.flop_j is None else sustained(system, fmt.peak_flop_per_s, fmt.flop_j, sm)
    eff = matmul_efficiency(rows, n, k, held, sm)
    if fmt.tile is not None:
        eff = eff * wave_fill(rows, n, *fmt.tile, system.chip.multiprocessors, sm)
    if fmt.mma_fraction is not None:
        eff = eff * mma_fraction_scale(rows, held.efficiency, fmt.mma_fraction)
    compute_s = gemm_flop(rows, n, k, count) / (fmt.peak_flop_per_s * eff)
    memory_s = stream_time_s(gemm_bytes(m, n, k, fmt, count), system)
    return smax(compute_s, memory_s, sm)


@once
def nonzero_rows(m: ArrayLike) -> Array:
    """``max(m, 1e-6)``: a GEMM's rows kept off 0 (:func:`gemm_time_s`); once per row count."""
    return jnp.maximum(m, 1e-6)


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
    return jnp.asarray(bytes_moved) / achievable_bandwidth(system)


@once
def achievable_bandwidth(system: System) -> Array:
    """Achievable memory bandwidth, bytes/s: ``bw * f_bw`` (datasheet bandwidth times
    ``memory_bandwidth_fraction``); once per system and evaluation
    (:mod:`diffcost._core.shared`)."""
    return jnp.asarray(
        system.chip.memory_bandwidth_bytes_per_s * system.efficiency.memory_bandwidth_fraction
    )
