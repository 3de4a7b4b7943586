"""What each kind of spec file may contain (see ``specs/SCHEMA.md``)."""

from dataclasses import dataclass

from .hardware import FORMATS


@dataclass(frozen=True)
class Field:
    """One allowed key.

    ``kind``: quantity (with a unit dimension), count, number, bool, str or enum."""

    kind: str
    dim: str = ""
    required: bool = False
    choices: tuple[str, ...] = ()
    positive: bool = True


Q = lambda dim, required=False: Field("quantity", dim, required)  # noqa: E731

TOP = {
    "schema_version": Field("count", required=True),
    "kind": Field("str", required=True),
    "name": Field("str", required=True),
    "display_name": Field("str", required=True),
}

INTERCONNECT = {
    "scale_up_domain_chips": Field("count"),
    "scale_up_bandwidth": Q("bytes_per_s"),
    "scale_up_latency": Q("s"),
    "scale_out_bandwidth": Q("bytes_per_s"),
    "scale_out_latency": Q("s"),
}

CHIP = {
    "compute": {fmt: Q("flop_per_s") for fmt in FORMATS},
    "memory": {
        "capacity": Q("bytes", True),
        "bandwidth": Q("bytes_per_s", True),
        "on_chip_sram": Field("bool", required=True),
    },
    "interconnect": {k: Field(f.kind, f.dim, True) for k, f in INTERCONNECT.items()},
    "power": {"tdp": Q("w", True)},
    "price": {"usd_per_hour": Field("number", required=True)},
}
CHIP_REQUIRED_TABLES = ("compute", "memory", "interconnect", "power")

SYSTEM_TOP = {"chip": Field("str", required=True), "chips": Field("count", required=True)}
SYSTEM = {
    "interconnect": INTERCONNECT,
    "price": {"usd_per_hour": Field("number", required=True)},
}

MODEL_TOP = {
    "architecture": Field("enum", required=True, choices=("decoder", "encoder")),
    "layers": Field("count", required=True),
    "hidden": Field("count", required=True),
    "heads": Field("count", required=True),
    "kv_heads": Field("count", required=True),
    "head_dim": Field("count"),
    "ffn_hidden": Field("count", required=True),
    "vocab": Field("count", required=True),
    "max_seq_len": Field("count", required=True),
    "mlp": Field("enum", required=True, choices=("gelu", "swiglu", "relu")),
    "norm": Field("enum", required=True, choices=("layernorm", "rmsnorm")),
    "position": Field("enum", required=True, choices=("learned", "rope", "alibi")),
    "tied_embeddings": Field("bool", required=True),
    "bias": Field("bool", required=True),
    "parallel_attention": Field("bool"),
    "dropout": Field("bool", required=True),
    "params_b": Field("number"),
}

CALIBRATION_FIELDS = {
    "matmul_peak_fraction": Field("number", required=True),
    "matmul_half_dim": Field("count", required=True),
    "memory_bandwidth_fraction": Field("number", required=True),
    "link_bandwidth_fraction": Field("number", required=True),
    "kernel_launch": Q("s", True),
    "memory_reserved": Q("bytes", True),
    "memory_fragmentation_fraction": Field("number", required=True, positive=False),
    "overlap_contention": Field("number", required=True, positive=False),
    "kv_reread_fraction": Field("number", required=True),
}
FRACTIONS = (
    "matmul_peak_fraction",
    "memory_bandwidth_fraction",
    "link_bandwidth_fraction",
    "memory_fragmentation_fraction",
    "overlap_contention",
    "kv_reread_fraction",
)

TRAIN_PLAN = {
    "tp": Field("count"),
    "pp": Field("count"),
    "dp": Field("count"),
    "cp": Field("count"),
    "micro_batch": Field("count"),
    "global_batch": Field("count"),
    "seq_len": Field("count"),
    "virtual_stages": Field("count"),
    "sequence_parallel": Field("bool"),
    "flash_attention": Field("bool"),
    "overlap_grad_reduce": Field("bool"),
    "recompute": Field("enum", choices=("none", "selective", "full")),
    "zero": Field("count", positive=False),
    "precision": Field("enum", choices=("fp32", "tf32", "bf16", "fp16", "fp8")),
    "optimizer": Field("enum", choices=("adam", "adam_no_master", "sgd", "sgd_no_master")),
}

SCENARIO_TOP = {
    "model": Field("str", required=True),
    "system": Field("str"),
    "chip": Field("str"),
    "chips": Field("count"),
}
