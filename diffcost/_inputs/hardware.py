"""Hardware as Equinox modules: a chip, the system it sits in, and its efficiency constants.

All differentiable quantities are float array leaves in SI units, so ``eqx.filter_grad`` gives
sensitivities to every hardware number and ``jax.vmap`` runs over stacked chips.  Names and
sources live in :class:`diffcost.SpecInfo`, not here, so that different chips stack.
"""

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, ArrayLike, Float

from .._core.extension import AbstractExtension


def host_float(value: ArrayLike | Sequence[float]) -> Array:
    """A host value (number, list, numpy array) as a strongly typed array of JAX's default
    float type, converted on the host and placed on the device: one transfer and no compiled
    program (``jnp.asarray`` with a dtype compiles a conversion per shape, and building specs
    and plans eagerly compiled ~30 small programs per process)."""
    return jax.device_put(np.asarray(value, dtype=jnp.result_type(float)))


def strong_float(value: ArrayLike) -> Array:
    """A spec or plan leaf: a strongly typed float array of JAX's default float type (weakly
    typed leaves make every traced operation with a strongly typed one a cast: 337 of a
    training step's equations); a host value goes through :func:`host_float`."""
    if isinstance(value, jax.Array):  # a device array or a tracer
        return jnp.asarray(value, dtype=jnp.result_type(float))
    return host_float(value)


#: Numeric formats, in the order of ``Chip.peak_flop_per_s``.
FORMATS: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4", "int4")

#: Storage size of one element, bytes (sub-byte formats are fractional: int4 = 0.5 byte).
BYTES_PER_ELEMENT: dict[str, float] = {
    "fp32": 4.0,
    "tf32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "fp4": 0.5,
    "int4": 0.5,
}

#: 1 for the formats of 8 bits or fewer (:data:`FORMATS` order): their GEMMs reach
#: ``Efficiency.narrow_matmul_fraction`` of the 16-bit share of peak.
_NARROW_FORMATS = np.asarray([BYTES_PER_ELEMENT[f] <= 1.0 for f in FORMATS])

#: A format a chip lacks runs at the peak of the next wider format it has (an upcasting kernel).
FORMAT_FALLBACK: dict[str, str | None] = {
    "fp32": None,
    "tf32": "fp32",
    "bf16": "fp16",
    "fp16": "bf16",
    "fp8": "bf16",
    "int8": "bf16",
    "fp4": "fp8",
    "int4": "int8",
}


#: Share of ``kernel_launch_s`` a kernel still pays inside a replayed CUDA graph until a
#: calibration fits it: 1 (no saving assumed; see ``Efficiency.graph_kernel_fraction``).
GRAPH_KERNEL_FRACTION_PRIOR = 1.0

#: Fused attention constants until a calibration sets them (fitted on the cuDNN H200/B200 prefill
#: timings of ``specs/kernels``, :mod:`diffcost._analysis.calibrate_kernels`).
ATTENTION_PRIOR = {
    "attention_softmax_dim": 24.0,
    "attention_half_span": 480.0,
    "attention_half_tiles": 32.0,
}

#: Execution classes, in the order of ``Chip.architecture``: GPU kernels launched one by one
#: (NVIDIA, AMD), systolic matrix arrays run by a whole-program compiler (TPU MXU, Gaudi MME),
#: compiler-scheduled dataflow with weights in on-chip SRAM (Groq TSP, Cerebras WSE).
ARCHITECTURES: tuple[str, ...] = ("gpu", "systolic", "dataflow")


def one_hot_architecture(name: str) -> Float[Array, "3"]:
    """One-hot weights of an execution class of :data:`ARCHITECTURES` (a chip's exact class)."""
    return host_float(np.eye(len(ARCHITECTURES))[ARCHITECTURES.index(name)])


def format_index(name: str) -> int:
    """Position of a format in :data:`FORMATS`."""
    return FORMATS.index(name)


def one_hot_format(name: str) -> Float[Array, "8"]:
    """One-hot weights selecting a single format (the exact limit of a format mixture)."""
    return jnp.zeros(len(FORMATS)).at[format_index(name)].set(1.0)


class Efficiency(eqx.Module):
    """Achievable fractions of the datasheet peaks: the model's only empirical constants.

    Defaults and fitted values live in ``specs/calibration/`` with their provenance; they are
    global per chip family, never per data point.

    Attributes:
        matmul_peak_fraction: fraction of dense peak FLOP/s a large GEMM reaches (dimensionless).
        matmul_half_dim: GEMM dimension (elements) at which that dimension alone halves the
            efficiency: ``eff = f_max * prod_i n_i / (n_i + n_half)`` (tile/wave quantization).
        memory_bandwidth_fraction: fraction of the memory bandwidth a streaming kernel reaches.
        link_bandwidth_fraction: collective bus bandwidth / link bandwidth (NCCL "busbw").
        kernel_launch_s: fixed cost per kernel (launch and synchronisation), seconds.
        memory_reserved_bytes: runtime context, communication buffers (not for on-chip SRAM).
        memory_fragmentation_fraction: fraction of capacity lost to allocator fragmentation.
        overlap_contention: fraction of an overlapped collective's time that still slows the
            computation it hides under (communication kernels occupy SMs and memory bandwidth).
        kv_reread_fraction: cost of re-reading data another thread block has just read, as a
            fraction of a memory read (dimensionless): part of the re-reads hit the L2 cache.
            Between the L2 bound (memory/L2 bandwidth, ~0.3 on A100 and H200) and 1 (every
            re-read misses).  Used for GQA-unaware decode attention.
        narrow_matmul_fraction: share of ``matmul_peak_fraction`` a GEMM in an 8-bit or
            narrower format reaches of its own (higher) peak (dimensionless, in (0, 1]; default 1):
            Hopper's FP8 tensor cores accumulate in reduced precision, so FP8 GEMM libraries
            promote partial sums to FP32 on the CUDA cores every few MMA steps (DeepSeek-V3
            technical report, arXiv:2412.19437, §3.3.2; DeepGEMM README), which costs issue
            slots a 16-bit GEMM does not pay.  Fitted on per-kernel timings
            (:mod:`diffcost._analysis.calibrate_kernels`).
        attention_softmax_dim: head dim ``d_s`` (elements) at which a fused attention kernel's
            softmax (exponentials on the special-function units, scaling and row statistics on
            the CUDA cores) costs as much as its two GEMMs: the kernel reaches ``e / (e + d_s)``
            of the GEMM rate at head dim ``e`` (Shah et al., "FlashAttention-3", arXiv:2407.08608,
            §3: 989 TFLOP/s of matmul against 3.9 T exponentials/s on an H100, 512 FLOP per
            exponential at head dim 128).  :func:`diffcost._terms.attention.
            fused_prefill_efficiency`; fitted on per-kernel timings.
        attention_half_span: keys (tokens) over which a fused attention tile's fixed work
            (loading its queries, the final softmax rescale, writing its output) costs as much as
            its inner loop: ``span / (span + d)``.
        attention_half_tiles: query tiles (128 rows of one head of one sequence) at which a
            fused attention launch fills half the chip: ``C / (C + c)``, the last wave and the
            causal imbalance of few tiles.
        graph_kernel_fraction: share of the per-kernel cost ``kernel_launch_s`` a kernel still
            pays inside a replayed CUDA graph (dimensionless, in [0, 1]): 0 if all of it is the
            host launch the graph removes, 1 if all of it is GPU-side (grid launch, ramp and
            tail, the barrier before the dependent kernel).  Default 1 (no saving) until
            calibrated: ``kernel_launch_s`` was fitted on engines that launch from the host, and
            no published split is known (:mod:`diffcost._serve.engine`).
    """

    matmul_peak_fraction: Float[Array, ""]
    matmul_half_dim: Float[Array, ""]
    memory_bandwidth_fraction: Float[Array, ""]
    link_bandwidth_fraction: Float[Array, ""]
    kernel_launch_s: Float[Array, ""]
    memory_reserved_bytes: Float[Array, ""]
    memory_fragmentation_fraction: Float[Array, ""]
    overlap_contention: Float[Array, ""]
    kv_reread_fraction: Float[Array, ""]
    graph_kernel_fraction: Float[Array, ""] = eqx.field(
        default_factory=lambda: strong_float(GRAPH_KERNEL_FRACTION_PRIOR)
    )
    narrow_matmul_fraction: Float[Array, ""] = eqx.field(default_factory=lambda: strong_float(1.0))
    attention_softmax_dim: Float[Array, ""] = eqx.field(
        default_factory=lambda: strong_float(ATTENTION_PRIOR["attention_softmax_dim"])
    )
    attention_half_span: Float[Array, ""] = eqx.field(
        default_factory=lambda: strong_float(ATTENTION_PRIOR["attention_half_span"])
    )
    attention_half_tiles: Float[Array, ""] = eqx.field(
        default_factory=lambda: strong_float(ATTENTION_PRIOR["attention_half_tiles"])
    )

    def achievable_peaks(self, peak_flop_per_s: ArrayLike) -> Array:
        """The per-format peaks (:data:`FORMATS` order, FLOP/s) with the formats of 8 bits or
        fewer scaled by ``narrow_matmul_fraction``: the peaks the GEMM law's
        ``matmul_peak_fraction`` applies to."""
        scale = jnp.where(jnp.asarray(_NARROW_FORMATS), self.narrow_matmul_fraction, 1.0)
        return jnp.asarray(peak_flop_per_s) * scale


class ChipEnergy(eqx.Module):
    """Energy figures of one chip, for activity-based energy (:mod:`diffcost._terms.energy`).

    Attributes:
        idle_w: power drawn while powered and idle (leakage, clock trees, memory refresh), W.
        flop_j: dynamic energy per FLOP by format, J/FLOP, indexed by :data:`FORMATS`.
        memory_j_per_byte: dynamic energy per byte read or written in the memory the weights
            live in (HBM/LPDDR, or SRAM for an on-chip-SRAM chip), J/byte.
        link_j_per_byte: dynamic energy per byte sent over a scale-up or scale-out link, J/byte.

    A chip file without an ``[energy]`` table gets ``idle_w = tdp_w`` and zero dynamic
    energies: energy is then ``chips * TDP * time``, the pre-activity model.
    """

    idle_w: Float[Array, ""]
    flop_j: Float[Array, "8"]
    memory_j_per_byte: Float[Array, ""]
    link_j_per_byte: Float[Array, ""]


class NearMemory(eqx.Module):
    """A second, faster memory level beside the one :class:`Chip` describes (on-chip SRAM
    that holds part of the working set, next to HBM or LPDDR).

    Attributes:
        capacity_bytes: bytes of the working set it can hold (counted inside the chip's
            ``memory_capacity_bytes``), bytes.
        bandwidth_bytes_per_s: its aggregate read bandwidth, bytes/s.
        j_per_byte: dynamic energy per byte read or written in it, J/byte.

    All zero (the default) for a chip with one memory level: every catalogue chip, whose
    caches are part of its fitted efficiency.  :func:`diffcost._terms.memory_levels.
    placed_bandwidth_bytes_per_s` turns the two levels into the bandwidth a working set
    sees.
    """

    capacity_bytes: Float[Array, ""] = eqx.field(default_factory=lambda: strong_float(0.0))
    bandwidth_bytes_per_s: Float[Array, ""] = eqx.field(default_factory=lambda: strong_float(0.0))
    j_per_byte: Float[Array, ""] = eqx.field(default_factory=lambda: strong_float(0.0))
    #: How a working set is spread over the two levels (:mod:`diffcost._terms.memory_levels`,
    #: an ``AbstractPlacement``); ``None``: bandwidth-proportional placement.  Static.
    placement: AbstractExtension | None = eqx.field(static=True, default=None)


class Chip(eqx.Module):
    """One accelerator.

    Attributes:
        peak_flop_per_s: dense peak per format, FLOP/s, indexed by :data:`FORMATS` (missing
            formats already resolved to their fallback by the loader).
        memory_capacity_bytes: capacity of the memory the weights live in (HBM or SRAM), bytes.
        memory_bandwidth_bytes_per_s: its bandwidth, bytes/s.
        on_chip_sram: 1.0 if weights live in on-chip SRAM (Groq, Cerebras), else 0.0.
        tdp_w: thermal design power, W.
        architecture: one-hot weights of the execution class, indexed by
            :data:`ARCHITECTURES` (a flag, like ``on_chip_sram``: it selects which physics
            applies; a non-one-hot mixture is only meaningful as a relaxation).
        array_dim: side ``R`` of the chip's matrix array, elements (TPU v4/v5e/v5p MXU 128,
            v6e 256, Gaudi 3 MME 256, Groq MXM 320): GEMM dimensions mapped onto it are
            padded to multiples of ``R``.  1.0 for GPUs (unused: their small-matrix loss is
            the fitted ``matmul_half_dim``).
        op_latency_s: latency floor of one dependent operation of a compiled systolic or
            dataflow program, seconds: the time from an operation's first input to its last
            output when it moves almost no data (array pipeline fill and drain, on-chip
            operand transport, partial-sum reduction across the fabric).  Paid per operation
            instead of the GPU's ``kernel_launch_s`` (:func:`diffcost._terms.kernels.launch_s`).
            0.0 for GPUs (unused).
        energy: per-operation energy figures (:class:`ChipEnergy`).
        near_memory: a faster second memory level (:class:`NearMemory`; none by default).
            ``memory_bandwidth_bytes_per_s`` and ``energy.memory_j_per_byte`` are then the
            far level's; the cost models place the working set over both levels
            (:mod:`diffcost._terms.memory_levels`).
        multiprocessors: a GPU's streaming multiprocessors, the slots of one wave of a
            kernel's thread blocks (:func:`diffcost._terms.gemm.wave_fill`); 0.0 where not
            stated (no wave quantization charged) and for other classes.
        warp_mma_fraction: share of the tensor-core peak that kernels built on the warp-level
            ``mma.sync`` instructions can reach, dimensionless (1 by default: Ampere and Ada
            reach their peak with them; Hopper about 2/3, its peak needs the warpgroup
            ``wgmma`` instructions: Shah et al., "FlashAttention-3", arXiv:2407.08608, §1).
            Only a kernel written for the older instructions pays it
            (:class:`~diffcost._serve.behaviours.NativeMoeGemm`).
    """

    peak_flop_per_s: Float[Array, "8"]
    memory_capacity_bytes: Float[Array, ""]
    memory_bandwidth_bytes_per_s: Float[Array, ""]
    on_chip_sram: Float[Array, ""]
    tdp_w: Float[Array, ""]
    architecture: Float[Array, "3"]
    array_dim: Float[Array, ""]
    op_latency_s: Float[Array, ""]
    energy: ChipEnergy
    near_memory: NearMemory = eqx.field(default_factory=NearMemory)
    multiprocessors: Float[Array, ""] = eqx.field(default_factory=lambda: strong_float(0.0))
    warp_mma_fraction: Float[Array, ""] = eqx.field(default_factory=lambda: strong_float(1.0))

    def gpu_weight(self) -> Array:
        """Weight of the GPU class in :attr:`architecture` (1 for a GPU, 0 otherwise)."""
        return self.architecture[0]


class Reliability(eqx.Module):
    """Jitter and failures of a system at scale (:mod:`diffcost._terms.reliability`).

    Attributes:
        collective_jitter_s: standard deviation of the time each rank arrives at a
            synchronising collective (OS noise, clock/thermal variation, congestion), s.
            0 for a statically scheduled dataflow system (Groq, Cerebras).
        failures_per_chip_s: unexpected job interruptions per chip-second, 1/s.
        checkpoint_bandwidth_bytes_per_s: storage write bandwidth per chip for a checkpoint,
            bytes/s.
        restart_s: time from an interruption to training again (detect, reschedule, reload), s.

    A system file without a ``[reliability]`` table gets no jitter and no failures (the
    bandwidth then never matters: without failures nothing is checkpointed).
    """

    collective_jitter_s: Float[Array, ""] = eqx.field(default_factory=lambda: strong_float(0.0))
    failures_per_chip_s: Float[Array, ""] = eqx.field(default_factory=lambda: strong_float(0.0))
    checkpoint_bandwidth_bytes_per_s: Float[Array, ""] = eqx.field(
        default_factory=lambda: strong_float(1.0)
    )
    restart_s: Float[Array, ""] = eqx.field(default_factory=lambda: strong_float(0.0))


class System(eqx.Module):
    """A cluster of identical chips with a two-level network (scale-up domain, scale-out).

    Attributes:
        chip: the accelerator.
        num_chips: chips in the job.
        scale_up_domain_chips: chips sharing the fast fabric (NVLink/NVSwitch node, ICI slice).
        scale_up_bandwidth_bytes_per_s: per chip, per direction, bytes/s.
        scale_up_latency_s: per collective step inside a domain, s.
        scale_out_bandwidth_bytes_per_s: per chip, per direction, between domains, bytes/s.
        scale_out_latency_s: per collective step between domains, s.
        price_usd_per_chip_hour: rental price, USD per chip-hour (0 if unknown).
        efficiency: achievable fractions of the peaks.
        node_overhead_w: power a scale-up domain draws besides its chips (host CPUs, NICs,
            switches, fans), W; 0 when the system file gives none (chip energy only).
        reliability: jitter, failure rate, checkpoint and restart (:class:`Reliability`).
    """

    chip: Chip
    num_chips: Float[Array, ""]
    scale_up_domain_chips: Float[Array, ""]
    scale_up_bandwidth_bytes_per_s: Float[Array, ""]
    scale_up_latency_s: Float[Array, ""]
    scale_out_bandwidth_bytes_per_s: Float[Array, ""]
    scale_out_latency_s: Float[Array, ""]
    price_usd_per_chip_hour: Float[Array, ""]
    efficiency: Efficiency
    node_overhead_w: Float[Array, ""] = eqx.field(default_factory=lambda: jnp.zeros(()))

    def overhead_w(self, chips: ArrayLike) -> Array:
        """Power besides the chips of a job on ``chips`` chips, W: ``node_overhead_w`` per
        scale-up domain, ``chips / scale_up_domain_chips`` domains (a fractional domain pays
        its share: a smooth count)."""
        return self.node_overhead_w * jnp.asarray(chips) / self.scale_up_domain_chips

    reliability: Reliability = eqx.field(default_factory=Reliability)
    #: Algorithm of the all-reduces and all-gathers (:mod:`diffcost._terms.collectives`;
    #: :func:`~diffcost._terms.collectives.with_collective` sets it); ``None``: the default,
    #: :class:`~diffcost._terms.collectives.Fastest`.  Static: it chooses the formula, not a
    #: number.
    collective: AbstractExtension | None = eqx.field(static=True, default=None)
    #: 1.0 when the scale-up switches reduce in the network (NVLink SHARP on third-generation
    #: NVSwitch and later), else 0.0: only then is the NVLS collective selectable.  A flag like
    #: ``Chip.on_chip_sram`` (a leaf, not a static field, so that systems stack).
    in_network_reduction: Float[Array, ""] = eqx.field(default_factory=lambda: strong_float(0.0))
