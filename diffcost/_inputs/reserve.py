"""Memory a runtime keeps for itself on each chip, whatever the job.

A GPU runtime holds its context, communication buffers (NCCL) and a cached allocator whose
fragmentation loses a fraction of capacity (PyTorch CUDA memory management docs).  Chips whose
weights live in on-chip SRAM (Groq, Cerebras) compile a static memory plan: no runtime reserve
and no allocator fragmentation.
"""

from jaxtyping import Array

from .hardware import System


def runtime_reserve_bytes(system: System) -> Array:
    """Bytes per chip unavailable to the job: ``(1 - sram) * (reserved + frag * capacity)``.

    ``reserved = memory_reserved_bytes``, ``frag = memory_fragmentation_fraction``,
    ``sram = chip.on_chip_sram`` (1 for a static SRAM memory plan).
    """
    chip, eff = system.chip, system.efficiency
    return (1.0 - chip.on_chip_sram) * (
        eff.memory_reserved_bytes + eff.memory_fragmentation_fraction * chip.memory_capacity_bytes
    )


__all__ = ["runtime_reserve_bytes"]
