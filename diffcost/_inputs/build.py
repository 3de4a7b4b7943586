"""Checked spec values (SI, nested by table) -> the Equinox modules the cost models take.

No I/O and no checks here: the values come from :mod:`diffcost._inputs.checker`.
"""

from typing import Any

import numpy as np

from .hardware import (
    ATTENTION_PRIOR,
    FORMAT_FALLBACK,
    FORMATS,
    GRAPH_KERNEL_FRACTION_PRIOR,
    Chip,
    ChipEnergy,
    Efficiency,
    Reliability,
    host_float,
    one_hot_architecture,
    strong_float,
)
from .model import MLP_MATRICES, NORM_PARAMS, Model


def _f(x: Any) -> Any:
    return strong_float(float(x))


def chip_module(values: dict[str, Any]) -> Chip:
    """A chip; a format it lacks runs at the peak of the next wider one it has.  Without an
    ``[execution]`` table it is a GPU (``array_dim`` 1 and ``op_latency_s`` 0, both unused)."""
    compute = values["compute"]
    peaks = _fallback(compute, "_flop_per_s")
    mem = values["memory"]
    execution = values.get("execution", {})
    return Chip(
        peak_flop_per_s=host_float(peaks),
        memory_capacity_bytes=_f(mem["capacity_bytes"]),
        memory_bandwidth_bytes_per_s=_f(mem["bandwidth_bytes_per_s"]),
        on_chip_sram=_f(mem["on_chip_sram"]),
        tdp_w=_f(values["power"]["tdp_w"]),
        architecture=one_hot_architecture(execution.get("architecture", "gpu")),
        array_dim=_f(execution.get("array_dim", 1)),
        op_latency_s=_f(execution.get("op_latency_s", 0.0)),
        energy=_energy(values),
        multiprocessors=_f(execution.get("multiprocessors", 0)),
        warp_mma_fraction=_f(execution.get("warp_mma_fraction", 1.0)),
    )


def _fallback(table: dict[str, Any], suffix: str) -> list[float]:
    """Per-format values of ``table`` (keys ``<format><suffix>``); a format it lacks takes the
    value of the next one along :data:`FORMAT_FALLBACK`, fp32 the widest 16-bit one."""
    out = []
    for fmt in FORMATS:
        current: str | None = fmt
        while current is not None and f"{current}{suffix}" not in table:
            current = FORMAT_FALLBACK[current]
        if current is None:
            current = "bf16" if f"bf16{suffix}" in table else "fp16"
        out.append(float(table[f"{current}{suffix}"]))
    return out


def _energy(values: dict[str, Any]) -> ChipEnergy:
    """The chip's ``[energy]`` table (missing FLOP energies follow the peaks' fallback).
    Without one: idle at TDP, no dynamic energy (energy = TDP x time)."""
    energy = values.get("energy")
    if energy is None:
        return ChipEnergy(
            idle_w=_f(values["power"]["tdp_w"]),
            flop_j=host_float(np.zeros(len(FORMATS))),
            memory_j_per_byte=_f(0.0),
            link_j_per_byte=_f(0.0),
        )
    return ChipEnergy(
        idle_w=_f(energy["idle_w"]),
        flop_j=host_float(_fallback(energy, "_j_per_flop")),
        memory_j_per_byte=_f(energy["memory_j_per_byte"]),
        link_j_per_byte=_f(energy["link_j_per_byte"]),
    )


def reliability_module(values: dict[str, Any] | None) -> Reliability:
    """A system's ``[reliability]`` table in SI units (absent: no jitter, no failures)."""
    if values is None:
        return Reliability()
    return Reliability(
        collective_jitter_s=_f(values["collective_jitter_s"]),
        failures_per_chip_s=_f(values["failures_per_chip_hour"] / 3600.0),
        checkpoint_bandwidth_bytes_per_s=_f(values["checkpoint_bandwidth_bytes_per_s"]),
        restart_s=_f(values["restart_s"]),
    )


def efficiency_module(values: dict[str, Any]) -> Efficiency:
    """Efficiency constants from a calibration's ``[efficiency]`` values (SI)."""
    return Efficiency(
        matmul_peak_fraction=_f(values["matmul_peak_fraction"]),
        matmul_half_dim=_f(values["matmul_half_dim"]),
        memory_bandwidth_fraction=_f(values["memory_bandwidth_fraction"]),
        link_bandwidth_fraction=_f(values["link_bandwidth_fraction"]),
        kernel_launch_s=_f(values["kernel_launch_s"]),
        memory_reserved_bytes=_f(values["memory_reserved_bytes"]),
        memory_fragmentation_fraction=_f(values["memory_fragmentation_fraction"]),
        overlap_contention=_f(values["overlap_contention"]),
        kv_reread_fraction=_f(values["kv_reread_fraction"]),
        graph_kernel_fraction=_f(values.get("graph_kernel_fraction", GRAPH_KERNEL_FRACTION_PRIOR)),
        narrow_matmul_fraction=_f(values.get("narrow_matmul_fraction", 1.0)),
        **{k: _f(values.get(k, v)) for k, v in ATTENTION_PRIOR.items()},
    )


def model_module(v: dict[str, Any]) -> Model:
    """A model from its shape values (``head_dim`` defaults to ``hidden / heads``; a MoE model's
    ``expert_ffn_hidden`` to ``ffn_hidden`` and ``moe_layers`` to all ``layers``)."""
    head_dim = v.get("head_dim", v["hidden"] / v["heads"])
    experts = v.get("experts", 0)
    return Model(
        layers=_f(v["layers"]),
        hidden=_f(v["hidden"]),
        heads=_f(v["heads"]),
        kv_heads=_f(v["kv_heads"]),
        head_dim=_f(head_dim),
        ffn_hidden=_f(v["ffn_hidden"]),
        vocab=_f(v["vocab"]),
        max_seq_len=_f(v["max_seq_len"]),
        mlp_matrices=_f(MLP_MATRICES[v["mlp"]]),
        norm_params=_f(NORM_PARAMS[v["norm"]]),
        learned_positions=_f(v["position"] == "learned"),
        tied_embeddings=_f(v["tied_embeddings"]),
        bias=_f(v["bias"]),
        dropout=_f(v["dropout"]),
        causal=_f(v["architecture"] == "decoder"),
        experts=_f(experts),
        experts_per_token=_f(v.get("experts_per_token", 0)),
        expert_ffn_hidden=_f(v.get("expert_ffn_hidden", v["ffn_hidden"])),
        shared_ffn_hidden=_f(v.get("shared_expert_ffn_hidden", 0)),
        moe_layers=_f(v.get("moe_layers", v["layers"] if experts else 0)),
        v_head_dim=_f(v.get("v_head_dim", head_dim)),
        latent_attention=_f(v.get("kv_lora_rank", 0) > 0),
        kv_lora_rank=_f(v.get("kv_lora_rank", 0)),
        q_lora_rank=_f(v.get("q_lora_rank", 0)),
        rope_head_dim=_f(v.get("rope_head_dim", 0)),
        sliding_window=_f(v.get("sliding_window", 0)),
        sliding_layers=_f(v.get("sliding_layers", v["layers"] if v.get("sliding_window") else 0)),
    )
