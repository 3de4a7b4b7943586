"""A published kernel timing as the inputs of the cost model's term for it.

Shared by the kernel validation (:mod:`diffcost._analysis.validate_kernels`) and the kernel fit
(:mod:`diffcost._analysis.calibrate_kernels`): the format's bytes and achievable peak, and the
:class:`~diffcost._terms.attention.AttentionShape` and prefill arguments of an attention point
(conventions in :mod:`diffcost._analysis.validate_kernels`' docstring).
"""

from typing import Any

import equinox as eqx
import jax.numpy as jnp

from .._inputs.hardware import System, format_index
from .._inputs.kernel_measurements import KernelMeasurement
from .._terms.attention import AttentionShape
from .._terms.gemm import GemmFormat, gemm_bytes
from .._terms.power import burst

#: Bytes per element of each kernel input format.
DTYPE_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp32": 4.0}

#: Output tile ``(tile_m, tile_n)`` of one thread block of the data-parallel GEMM kernels
#: timed (the XLA GPU matmul tables, ``tiling = "data_parallel"``), by kernel family
#: (:data:`~diffcost._analysis.calibrate_kernels.KERNEL_FAMILIES`).  Read off those tables:
#: with b = 1, k = 4096 and m, n in {256, ..., 4096}, their times follow ``c + W t`` with
#: ``W = ceil(T / P)`` waves of ``T`` tiles over ``P`` multiprocessors (148 on sm_100, 132 on
#: sm_90) and one time ``t`` per tile: least median error over tiles of 64, 128 and 256 rows
#: and columns at 64 x 128 on sm_100 (2.4% bf16, 2.3% fp8; one wave up to 148 tiles, then a
#: step per wave: 256 x 256 to 1024 x 1024 all take 10.1-12.7 us in bf16) and with the
#: family's fitted GEMM constants and :func:`~diffcost._terms.gemm.wave_fill` at 64 x 64 on
#: sm_90 (median |error| of the table 8.6% -> 7.0%; 64 x 128 gives 11.3%, 128 x 128 59.9%).
#: The tile is the kernel the library picked for that shape on that chip, not a chip fact.
DATA_PARALLEL_TILE: dict[str, tuple[float, float]] = {
    "hopper": (64.0, 64.0),
    "blackwell": (64.0, 128.0),
}


def peak_of(k: KernelMeasurement, system: System) -> Any:
    """The achievable peak of the point's format (:meth:`diffcost.Efficiency.achievable_peaks`)."""
    peaks = system.efficiency.achievable_peaks(system.chip.peak_flop_per_s)
    return peaks[format_index(k.dtype)]


#: ``(capacity, read bandwidth)`` of the L2 cache of a chip whose kernel timings reuse their
#: operands (``operands = "reused"``), bytes and bytes/s.  B200: 126.5 MB (device query
#: 'L2 Cache Size: 126.50 MB', github.com/pytorch/ao pull request 4002; Chips and Cheese,
#: "Nvidia's B200": 126 MB over the two dies).  No published B200 L2 bandwidth was found
#: (the Blackwell microbenchmark papers, arXiv:2507.10789 and 2512.02189, and the Chips and
#: Cheese article were searched); 10 TB/s is read off vllm-bench-fp8-gemm-b200, whose m <= 64
#: rows are weight-read bound: from n = 4096 to 6144 (k = 4096) the time grows 1.12 us for
#: 16.8 MB more bf16 weight and 0.24 us for 8.4 MB more fp8 weight, and at 3.75 us of fixed
#: cost per kernel the 50 MB bf16 weight of n = 6144 is read at 10.6 TB/s, above the HBM's
#: 7.67 TB/s peak (7680-bit bus at 3996 MHz, the same device query): it is not read from
#: HBM.  A chip without an entry reads every working set from memory.
WARM_L2: dict[str, tuple[float, float]] = {"b200": (126.5e6, 10.0e12)}


def gemm_source(k: KernelMeasurement, system: System, fmt: GemmFormat) -> System:
    """The system whose memory a GEMM point's operands stream from: ``system``, or for a file
    of ``reused`` operands whose working set (:func:`~diffcost._terms.gemm.gemm_bytes`) fits
    the chip's L2 (:data:`WARM_L2`) the system with that L2's read bandwidth as its achievable
    memory bandwidth (the operands stay in L2 between back-to-back calls)."""
    cache = WARM_L2.get(k.chip)
    if k.operands != "reused" or cache is None:
        return system
    s = k.shape
    working = float(gemm_bytes(float(s["m"]), float(s["n"]), float(s["k"]), fmt))
    if working > cache[0]:
        return system
    raw = jnp.full_like(system.chip.memory_bandwidth_bytes_per_s, cache[1])
    raw = raw / system.efficiency.memory_bandwidth_fraction
    return eqx.tree_at(lambda x: x.chip.memory_bandwidth_bytes_per_s, system, raw)


def gemm_format(
    k: KernelMeasurement, system: System, family: str | None, flop_j: Any = None
) -> GemmFormat:
    """The :class:`~diffcost._terms.gemm.GemmFormat` of a GEMM point: the achievable peak and
    bytes of its format for every operand, its J/FLOP under a lowered power limit
    (:func:`gemm_conditions`), and for a ``data_parallel`` file its family's output tile
    (:data:`DATA_PARALLEL_TILE`; none for a family without one)."""
    tile = DATA_PARALLEL_TILE.get(family or "") if k.tiling == "data_parallel" else None
    return GemmFormat(
        peak_of(k, system), jnp.asarray(DTYPE_BYTES[k.dtype]), flop_j=flop_j, tile=tile
    )


def gemm_conditions(k: KernelMeasurement, system: System) -> tuple[System, Any]:
    """The system and the dynamic energy per FLOP (J/FLOP, or None) a GEMM point ran under.

    A point timed alone in a short loop runs at the top clock: :func:`~diffcost._terms.power.
    burst` and None.  A point timed under a lowered board power limit (``power_limit_w``)
    runs at the clock that limit sustains: the system with ``tdp_w`` set to the limit and the
    chip's J/FLOP of the point's format, so that :func:`~diffcost._terms.gemm.gemm_time_s`
    charges its matrix work at the sustained fraction (:func:`~diffcost._terms.power.
    sustained`: the clock at which the tensor work's dynamic power meets the limit, Choi et
    al., IPDPS 2013; ``nvidia-smi --power-limit``), the law every cost model applies to
    sustained work at the chip's own limit.
    """
    limit = k.shape.get("power_limit_w")
    if limit is None:
        return burst(system), None
    tdp = system.chip.tdp_w
    capped = eqx.tree_at(lambda s: s.chip.tdp_w, system, jnp.full_like(tdp, float(limit)))
    return capped, system.chip.energy.flop_j[format_index(k.dtype)]


def attention_shape(k: KernelMeasurement) -> AttentionShape:
    """The :class:`~diffcost._terms.attention.AttentionShape` of an attention point.

    Cached elements per token ``kv_heads (e + e_v)`` (K and V apart), or ``kv_heads e`` for a
    point whose one cached latent serves as K and V (``latent_kv``: multi-head latent attention
    with the up-projections absorbed, as FlashMLA runs it), the cache the steps charge an MLA
    model (:meth:`~diffcost._inputs.model.Model.kv_cache_elements`: ``r_kv + e_rope``, the
    latent and rotary key, which is ``head_dim`` here); decode's dims ``e + e_v`` in both (for
    MLA ``(r_kv + e_rope) + r_kv``, :meth:`~diffcost._inputs.model.Model.
    decode_attention_dim`).
    """
    s = k.shape
    e, ev = float(s["head_dim"]), float(s["v_head_dim"])
    cached = e if s.get("latent_kv") else e + ev
    f = lambda x: jnp.asarray(float(x))  # noqa: E731
    return AttentionShape(
        heads=f(s["heads"]),
        kv_heads=f(s["kv_heads"]),
        head_dim=f(e),
        kv_bytes=f(DTYPE_BYTES[s["kv_dtype"]]),
        act_bytes=f(DTYPE_BYTES[k.dtype]),
        v_dim=f(ev),
        kv_elements=f(s["kv_heads"] * cached),
        decode_dim=f(e + ev),
    )


def prefill_args(k: KernelMeasurement, system: System) -> tuple[Any, Any, Any, Any, Any]:
    """``(tokens, piece, context, shape, peak)`` of
    :func:`~diffcost._terms.attention.prefill_attention` for a prefill point (module
    docstring)."""
    s = k.shape
    q, kv = float(s["q_len"]), float(s["kv_len"])
    context = kv - 0.5 * q if s["causal"] else kv
    f = lambda x: jnp.asarray(float(x))  # noqa: E731
    return f(s["batch"] * q), f(q), f(context), attention_shape(k), peak_of(k, system)


__all__ = [
    "DATA_PARALLEL_TILE",
    "DTYPE_BYTES",
    "attention_shape",
    "gemm_conditions",
    "gemm_format",
    "gemm_source",
    "WARM_L2",
    "peak_of",
    "prefill_args",
]
