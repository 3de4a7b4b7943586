"""The constants a calibration fits and the chip families it fits them for.

Which :class:`~diffcost._inputs.hardware.Efficiency` fields a calibration file
(``specs/calibration/``) sets by fitting, their physical bounds, priors and keys
(:data:`PARAMS`), and the chip families that share one set of offsets (:data:`FAMILIES`).  Read
by the fit (:mod:`diffcost._analysis.calibrate`) and by the posterior stored beside a
calibration (:mod:`diffcost._inputs.posterior`).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Param:
    """A fitted constant: its :class:`~diffcost._inputs.hardware.Efficiency` field, physical
    bounds and prior (SI), the prior's log-space width, its calibration-file key, and the
    log-space width of a chip family's value around the global one (default: the prior's
    width)."""

    name: str
    lo: float
    hi: float
    prior: float
    prior_log_width: float
    toml_key: str
    toml_scale: float = 1.0  # SI value * scale = value written under toml_key
    family_log_width: float | None = None


#: Bounds are physical ranges; priors are public microbenchmarks (the pre-fit constants of
#: ``specs/calibration/default.toml``, whose ``[source]`` of that version cites them).
PARAMS: tuple[Param, ...] = (
    # cuBLAS/CUTLASS large GEMMs reach ~75-87% of the dense peak (A100 ~270/312, H100 ~750/989).
    # A family's fraction may sit far from the global one (factor ~1.6 at 1 sigma): families
    # differ in the format they run (Hopper and Ada at their FP8 peak, twice the 16-bit one,
    # which frameworks reach a smaller share of: NeMo's FP8 runs at 35-40% of it against 50-55%
    # of bf16 for Megatron on A100); bandwidth fractions and launch costs vary far less.
    Param(
        "matmul_peak_fraction", 0.40, 0.95, 0.80, 0.15, "matmul_peak_fraction", family_log_width=0.5
    ),
    # GEMM tiles are 64-256 wide: a dimension of d_half fills half a tile's useful work, so
    # d_half lies between a quarter of the smallest and half of the largest tile.
    Param("matmul_half_dim", 16.0, 128.0, 96.0, 0.7, "matmul_half_dim"),
    # STREAM-like kernels reach 80-90% of HBM peak (babelstream); 50-95% allowed.
    Param("memory_bandwidth_fraction", 0.50, 0.95, 0.85, 0.15, "memory_bandwidth_fraction"),
    # nccl-tests bus bandwidth ~80% of the per-direction line rate; 30-95% allowed.
    Param("link_bandwidth_fraction", 0.30, 0.95, 0.80, 0.3, "link_bandwidth_fraction"),
    # launch + dependency latency per kernel: a few us; 1-30 us (CUDA graphs to Python eager).
    Param("kernel_launch_s", 1e-6, 30e-6, 4e-6, 0.7, "kernel_launch_us", 1e6),
    # NCCL runs on 1-32 of 108-132 SMs and shares HBM: 2-40% slow-down of hidden compute.
    Param("overlap_contention", 0.02, 0.40, 0.15, 0.7, "overlap_contention"),
    # A re-read of data just read by another block costs between the L2 bound (HBM/L2 bandwidth
    # ~0.3: gpu-benches gpu-l2-cache A100-80GB 5.4 vs 1.73 TB/s, H200 9.8 vs 3.9 TB/s) and a
    # full miss (1); the prior is the geometric middle of those bounds.
    Param("kv_reread_fraction", 0.25, 1.0, 0.55, 0.5, "kv_reread_fraction"),
    # Share of the per-kernel cost a CUDA-graph replay keeps (the GPU-side part: a graph removes
    # the host launch, not the kernel's own ramp and tail; NVIDIA "Getting Started with CUDA
    # Graphs" shows a ~2x cut of per-kernel overhead for short kernels): between a small share
    # (launch mostly host-side) and 1 (no saving); prior the middle, 0.5, wide in log space.
    # Only decode passes of engines with CUDA graphs constrain it.
    Param("graph_kernel_fraction", 0.1, 1.0, 0.5, 0.7, "graph_kernel_fraction"),
)


NAMES = tuple(p.name for p in PARAMS)


#: Chip families: one set of offsets each, written as overrides for every member chip.
FAMILIES: dict[str, tuple[str, ...]] = {
    "ampere": ("a100-sxm-40gb", "a100-sxm-80gb"),
    "hopper": ("h100-sxm", "h100-pcie", "h200"),
    "ada": ("l40s", "l4"),
}


FAMILY_NAMES = tuple(FAMILIES)


def family_of(chip: str) -> int:
    """Index of a chip's family in :data:`FAMILY_NAMES` (``len(FAMILY_NAMES)``: none)."""
    for i, members in enumerate(FAMILIES.values()):
        if chip in members:
            return i
    return len(FAMILIES)


__all__ = ["FAMILIES", "FAMILY_NAMES", "NAMES", "PARAMS", "Param", "family_of"]
