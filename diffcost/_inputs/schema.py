"""What every kind of input file may contain: the one schema source.

The loader (:mod:`diffcost._inputs.checker`), the reference section of ``specs/SCHEMA.md``
(generated from this module by :mod:`diffcost._analysis.schema_doc`) and the CLI all read the
:data:`KINDS` below.  A :class:`Kind` lists a file's top-level keys, its tables, how its
``[source]`` table is checked and the rules that relate several values.
"""

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from .._core.options import PlanField
from .._core.units import accepted_suffixes
from . import ranges as R
from .build import model_module
from .hardware import ARCHITECTURES, FORMATS
from .ranges import Plausible


@dataclass(frozen=True)
class Field:
    """One allowed key.

    ``kind``: quantity (with a unit dimension ``dim``; the file's key carries a unit suffix of
    :mod:`diffcost._core.units`), count (positive integer, or non-negative if not
    ``positive``), number, fraction (a number in [0, 1]), bool, str, list (of non-empty
    strings) or enum (one of ``choices``).  ``doc`` says what the key means (shown in
    ``specs/SCHEMA.md``).  ``plausible``: the range of a number in SI units
    (:mod:`diffcost._inputs.ranges`); a value outside it is refused (0 is accepted where
    ``positive`` is false).
    """

    kind: str
    dim: str = ""
    required: bool = False
    choices: tuple[Any, ...] = ()
    positive: bool = True
    doc: str = ""
    plausible: Plausible | None = None


def Q(dim: str, required: bool = False, doc: str = "", plausible: Plausible | None = None) -> Field:
    """A quantity with a unit dimension."""
    return Field("quantity", dim, required, doc=doc, plausible=plausible)


def C(
    doc: str,
    plausible: Plausible,
    *,
    required: bool = False,
    positive: bool = True,
    kind: str = "count",
) -> Field:
    """A count (or a ``kind = "number"``) with its plausible range (``positive``: 0 refused;
    else 0 means none)."""
    return Field(kind, required=required, positive=positive, doc=doc, plausible=plausible)


def _req(table: dict[str, Field]) -> dict[str, Field]:
    return {k: replace(f, required=True) for k, f in table.items()}


def _opt(table: dict[str, Field]) -> dict[str, Field]:
    return {k: replace(f, required=False) for k, f in table.items()}


@dataclass(frozen=True)
class Source:
    """How a kind's ``[source]`` table is checked (every value a non-empty string).

    ``why``: the reason given when the table is missing; ``required``: keys every file gives;
    ``allowed``: the only keys allowed (None: any); ``per_table``: for each table present, its
    source key is required, with this reason (``{}`` is the table's name; empty: not required);
    ``nonempty``: the table must hold at least one key; ``when_given``: optional top-level
    keys whose source key is required when the file gives them (with the ``why`` reason).
    """

    why: str
    required: tuple[str, ...] = ()
    allowed: tuple[str, ...] | None = None
    per_table: str = ""
    nonempty: bool = False
    when_given: tuple[str, ...] = ()


#: A rule relating several values: ``rule(values, add)`` calls ``add(key, reason)`` per problem.
Rule = Callable[[dict[str, Any], Callable[[str, str], None]], None]


@dataclass(frozen=True, eq=False)  # hashed by identity: a cache key of the loader
class Kind:
    """One kind of input file.

    Attributes:
        name: the kind (``kind = "..."`` in the file, unless ``kind_values`` lists others).
        directory: folder of the built-in files under ``specs/``.
        top: top-level keys besides :data:`TOP`.
        tables: allowed ``[table]`` names and their keys (None: any keys, checked by the
            kind's own loader, as a sweep's ``[grid]``).
        groups: tables of named sub-tables (``[overrides.<chip>]``): the kind whose built-in
            names the sub-tables must have, and the sub-tables' keys.
        arrays: arrays of tables (``[[point]]``), checked by the kind's own loader.
        required_tables: tables every file has.
        source: how ``[source]`` is checked.
        kind_values: the values ``kind`` may take (empty: exactly ``name``).
        name_is_stem: ``name`` must equal the file name without ``.toml``.
        rules: checks relating several values, run once every key is checked.
        doc: one line for ``specs/SCHEMA.md``.
    """

    name: str
    directory: str
    top: dict[str, Field] = field(default_factory=dict)
    tables: Mapping[str, Mapping[str, Field] | None] = field(default_factory=dict)
    groups: dict[str, tuple[str, dict[str, Field]]] = field(default_factory=dict)
    arrays: dict[str, dict[str, Field]] = field(default_factory=dict)
    required_tables: tuple[str, ...] = ()
    source: Source = Source("every number needs a source")
    kind_values: tuple[str, ...] = ()
    name_is_stem: bool = True
    rules: tuple[Rule, ...] = ()
    doc: str = ""


# --- keys shared by every kind ----------------------------------------------------------------
TOP = {
    "schema_version": Field("count", required=True, doc="format version; must be 1"),
    "kind": Field("str", required=True, doc="kind of file"),
    "name": Field("str", required=True, doc="identifier (= file stem, where checked)"),
    "display_name": Field("str", required=True, doc="human-readable name"),
}

# --- chips and systems ------------------------------------------------------------------------
INTERCONNECT = {
    "scale_up_domain_chips": C("chips in one scale-up domain (NVLink node, ...)", R.DOMAIN_CHIPS),
    "scale_up_bandwidth": Q(
        "bytes_per_s", False, "per direction per chip, inside the domain", R.LINK_BANDWIDTH
    ),
    "scale_up_latency": Q("s", False, "per collective step (alpha), inside the domain", R.LATENCY),
    "scale_out_bandwidth": Q(
        "bytes_per_s",
        False,
        "per direction per chip (NIC share), between domains",
        R.LINK_BANDWIDTH,
    ),
    "scale_out_latency": Q("s", False, "per collective step (alpha), between domains", R.LATENCY),
}
PRICE = {
    "usd_per_hour": Field(
        "number", required=True, doc="price per chip-hour, USD", plausible=R.PRICE
    )
}

CHIP = {
    "compute": {fmt: Q("flop_per_s", doc=f"dense {fmt} peak", plausible=R.PEAK) for fmt in FORMATS},
    "memory": {
        "capacity": Q(
            "bytes", True, "main memory the weights live in (HBM, GDDR or SRAM)", R.CAPACITY
        ),
        "bandwidth": Q("bytes_per_s", True, "main-memory bandwidth", R.MEMORY_BANDWIDTH),
        "on_chip_sram": Field("bool", required=True, doc="true: no HBM (Groq, Cerebras)"),
    },
    "interconnect": _req(INTERCONNECT),
    "power": {"tdp": Q("w", True, "thermal design power", R.CHIP_POWER)},
    "energy": {
        "idle": Q(
            "w", True, "power drawn while powered and idle (activity-based energy)", R.CHIP_POWER
        ),
        **{
            fmt: Q(
                "j_per_flop",
                doc=f"dynamic energy per {fmt} FLOP (missing: as the peaks)",
                plausible=R.FLOP_ENERGY,
            )
            for fmt in FORMATS
        },
        "memory": Q(
            "j_per_byte", True, "dynamic energy per byte read or written in [memory]", R.BYTE_ENERGY
        ),
        "link": Q("j_per_byte", True, "dynamic energy per byte sent over a link", R.BYTE_ENERGY),
    },
    "price": PRICE,
    "execution": {
        "architecture": Field(
            "enum",
            required=True,
            choices=ARCHITECTURES,
            doc="gpu (kernels launched one by one), systolic (TPU, Gaudi), dataflow (Groq, "
            "Cerebras); without this table: gpu",
        ),
        "array_dim": Field(
            "count",
            doc="side of the matrix array, elements (systolic and dataflow: required)",
            plausible=R.ARRAY_DIM,
        ),
        "multiprocessors": Field(
            "count",
            doc="GPU: streaming multiprocessors (compute units) enabled, the slots of one wave "
            "of a kernel's thread blocks (default 0: not stated, no wave quantization charged)",
            plausible=R.MULTIPROCESSORS,
        ),
        "op_latency": Q(
            "s",
            doc="latency floor of one operation of the compiled program: array fill/drain and "
            "on-chip transport (systolic and dataflow: required; GPUs pay kernel_launch instead)",
            plausible=R.LATENCY,
        ),
        "warp_mma_fraction": Field(
            "fraction",
            doc="share of the tensor peak kernels on the warp-level mma.sync instructions reach "
            "(default 1; Hopper about 2/3: its peak needs warpgroup MMA)",
        ),
    },
}
CHIP_REQUIRED_TABLES = ("compute", "memory", "interconnect", "power")

SYSTEM_TOP = {
    "chip": Field("str", required=True, doc="built-in chip name or path"),
    "chips": Field(
        "count",
        required=True,
        doc="default chip count (the CLI's --chips)",
        plausible=R.SYSTEM_CHIPS,
    ),
}
RELIABILITY = {
    "collective_jitter": Field(
        "quantity",
        "s",
        True,
        positive=False,
        doc="standard deviation of each rank's arrival at a synchronising collective "
        "(0: statically scheduled, or not measured: not counted)",
        plausible=R.LATENCY,
    ),
    "failures_per_chip_hour": Field(
        "number",
        required=True,
        positive=False,
        doc="unexpected job interruptions per chip-hour",
        plausible=R.FAILURE_RATE,
    ),
    "checkpoint_bandwidth": Q(
        "bytes_per_s", True, "storage write bandwidth per chip", R.LINK_BANDWIDTH
    ),
    "restart": Field(
        "quantity",
        "s",
        True,
        positive=False,
        doc="interruption to training again: detect, reschedule, reload",
        plausible=R.RESTART,
    ),
}
SYSTEM = {
    "interconnect": {
        **INTERCONNECT,
        "in_network_reduction": Field(
            "bool",
            doc="the scale-up switches reduce in the network (NVLink SHARP: third-generation "
            "NVSwitch and later); only then can the NVLS collective be selected; without it: false",
        ),
    },
    "price": PRICE,
    "reliability": RELIABILITY,
    "power": {
        "node_overhead": Q(
            "w",
            True,
            "power of one scale-up domain besides its chips (host CPUs, NICs, switches, fans), "
            "added to energy; without this table: 0 (chip energy only)",
            R.NODE_POWER,
        )
    },
}


def _chip_has_16bit_peak(values: dict[str, Any], add: Callable[[str, str], None]) -> None:
    """`[compute]` gives a 16-bit peak: `bf16_*` or `fp16_*`."""
    compute = values.get("compute", {})
    if not any(f"{fmt}_flop_per_s" in compute for fmt in ("bf16", "fp16")):
        add("compute", "needs bf16_tflop_per_s or fp16_tflop_per_s")


def _chip_peak_ratios(values: dict[str, Any], add: Callable[[str, str], None]) -> None:
    """Each format's peak lies within a plausible ratio of the chip's 16-bit peak
    (:data:`diffcost._inputs.ranges.PEAK_RATIO`): a unit slip of one key is 1000x."""
    compute = values.get("compute", {})
    ref = next((fmt for fmt in ("bf16", "fp16") if f"{fmt}_flop_per_s" in compute), None)
    if ref is None:
        return
    base = compute[f"{ref}_flop_per_s"]
    rng = R.PEAK_RATIO
    for fmt in FORMATS:
        peak = compute.get(f"{fmt}_flop_per_s")
        if peak is not None and not rng.lo <= peak / base <= rng.hi:
            add(
                f"compute.{fmt}_<unit>",
                f"{peak:.4g} FLOP/s is {peak / base:.3g}x the {ref} peak ({base:.4g} FLOP/s), "
                f"outside the plausible {rng.text()} ({rng.what}): is one of the two unit "
                f"suffixes wrong? (accepted: {accepted_suffixes('flop_per_s')})",
            )


def _chip_energy(values: dict[str, Any], add: Callable[[str, str], None]) -> None:
    """An `[energy]` table gives a 16-bit FLOP energy (the others fall back to it as the peaks
    do) and an idle power at most the TDP."""
    energy = values.get("energy")
    if energy is None:
        return
    if not any(f"{fmt}_j_per_flop" in energy for fmt in ("bf16", "fp16")):
        add("energy", "needs bf16_pj_per_flop or fp16_pj_per_flop")
    tdp = values.get("power", {}).get("tdp_w")
    if tdp is not None and energy.get("idle_w", 0.0) > tdp:
        add("energy.idle_w", f"{energy['idle_w']} W is more than the TDP ({tdp} W)")


def _chip_array_dim(values: dict[str, Any], add: Callable[[str, str], None]) -> None:
    """A systolic or dataflow chip gives `array_dim` (its GEMM tiling has no default) and
    `op_latency_*` (its per-operation latency floor: no physical chip runs an operation in
    zero time)."""
    execution = values.get("execution", {})
    arch = execution.get("architecture", "gpu")
    if arch == "gpu":
        return
    if "array_dim" not in execution:
        add("execution.array_dim", f"required for a {arch} chip")
    if "op_latency_s" not in execution:
        add(
            "execution.op_latency_us",
            f"required for a {arch} chip (any time unit: {accepted_suffixes('s')})",
        )


# --- models -----------------------------------------------------------------------------------
MODEL_TOP = {
    "architecture": Field(
        "enum", required=True, choices=("decoder", "encoder"), doc="causal LM or BERT-style"
    ),
    "layers": C("transformer blocks", R.LAYERS, required=True),
    "hidden": C("model width", R.WIDTH, required=True),
    "heads": C("query heads", R.HEADS, required=True),
    "kv_heads": C("key/value heads; heads % kv_heads == 0", R.HEADS, required=True),
    "head_dim": C("default hidden / heads", R.WIDTH),
    "ffn_hidden": C("MLP width", R.WIDTH, required=True),
    "vocab": C("vocabulary size", R.VOCAB, required=True),
    "max_seq_len": C("longest context", R.CONTEXT, required=True),
    "mlp": Field(
        "enum",
        required=True,
        choices=("gelu", "swiglu", "relu", "geglu"),
        doc="MLP: 2, 3, 2, 3 matrices (geglu: gated GELU, Gemma)",
    ),
    "norm": Field("enum", required=True, choices=("layernorm", "rmsnorm"), doc="norm type"),
    "position": Field(
        "enum", required=True, choices=("learned", "rope", "alibi"), doc="position encoding"
    ),
    "tied_embeddings": Field("bool", required=True, doc="output projection = input embedding"),
    "bias": Field("bool", required=True, doc="linear layers have biases"),
    "parallel_attention": Field("bool", doc="GPT-J/Falcon parallel attention + MLP block"),
    "dropout": Field("bool", required=True, doc="training uses dropout"),
    "params_b": Field(
        "number", doc="published parameter count, billions (checked)", plausible=R.PARAMS_B
    ),
    "hf_id": Field(
        "str",
        doc="Hugging Face repository of the published checkpoint (the model argument of the "
        "vLLM / TensorRT-LLM launch lines; none: a placeholder path)",
    ),
    "experts": C("routed experts per MoE block (0: dense)", R.EXPERTS, positive=False),
    "experts_per_token": C("top-k: routed experts each token uses", R.EXPERTS),
    "expert_ffn_hidden": C("MLP width of one routed expert (default ffn_hidden)", R.WIDTH),
    "shared_expert_ffn_hidden": C(
        "total MLP width of a MoE block's shared experts (default 0)", R.WIDTH, positive=False
    ),
    "moe_layers": C("blocks with a MoE MLP (default all)", R.LAYERS, positive=False),
    "v_head_dim": C("value head size (default head_dim)", R.WIDTH),
    "kv_lora_rank": C("MLA KV latent size (0: standard attention)", R.WIDTH, positive=False),
    "q_lora_rank": C("MLA query latent size (0: none)", R.WIDTH, positive=False),
    "rope_head_dim": C(
        "MLA rotary key size shared by the heads (part of head_dim)", R.WIDTH, positive=False
    ),
    "params_active_b": Field(
        "number",
        doc="published active (per-token) parameter count, billions (checked)",
        plausible=R.PARAMS_B,
    ),
    "sliding_window": C(
        "tokens a sliding-window layer attends (0: none)", R.CONTEXT, positive=False
    ),
    "sliding_layers": C(
        "blocks with sliding-window attention (default all)", R.LAYERS, positive=False
    ),
}
#: Keys a model needs before its parameter count can be computed.
MODEL_SHAPE_KEYS = tuple(k for k, f in MODEL_TOP.items() if f.required)

#: Published parameter counts must agree with the shape's count within this relative error.
#: Publications round to two significant figures ("1.7B", "0.34B"): the built-in catalogue
#: agrees within 2.9% (megatron-gpt-1.7b: 1.65B computed), every other model within 1.8%.
PARAMS_TOLERANCE = 0.03


def _model_shape(values: dict[str, Any], add: Callable[[str, str], None]) -> None:
    """`heads` is a multiple of `kv_heads`; without `head_dim`, `hidden` of `heads`."""
    if not all(k in values for k in ("hidden", "heads", "kv_heads")):
        return
    if values["heads"] % values["kv_heads"]:
        add(
            "kv_heads",
            f"heads ({values['heads']}) must be divisible by kv_heads ({values['kv_heads']})",
        )
    if "head_dim" not in values and values["hidden"] % values["heads"]:
        add(
            "head_dim",
            f"hidden ({values['hidden']}) is not divisible by heads ({values['heads']}): "
            "give head_dim",
        )


def _model_moe(values: dict[str, Any], add: Callable[[str, str], None]) -> None:
    """A MoE model (``experts`` > 0) names its top-k, at most ``experts`` of them, and at least
    one and at most ``layers`` MoE blocks; a dense model has no MoE keys."""
    experts = values.get("experts", 0)
    moe_keys = ("experts_per_token", "expert_ffn_hidden", "shared_expert_ffn_hidden")
    if not experts:
        for key in (*moe_keys, "moe_layers"):
            if values.get(key):
                add(key, "given for a dense model (experts is 0 or absent)")
        return
    top_k = values.get("experts_per_token")
    if top_k is None:
        add("experts_per_token", f"required for a mixture of {experts} experts")
    elif top_k > experts:
        add("experts_per_token", f"{top_k} is more than the {experts} experts")
    if values.get("moe_layers") == 0:
        add("moe_layers", f"0 leaves no MoE block for the {experts} experts")
    if values.get("moe_layers", 0) > values.get("layers", float("inf")):
        add("moe_layers", f"{values['moe_layers']} is more than the {values['layers']} layers")


def _model_window(values: dict[str, Any], add: Callable[[str, str], None]) -> None:
    """``sliding_layers`` needs a ``sliding_window``, is positive with one, and is at most
    ``layers``."""
    layers = values.get("layers", float("inf"))
    if values.get("sliding_layers") and not values.get("sliding_window"):
        add("sliding_layers", "given without a sliding window (sliding_window is 0 or absent)")
    if values.get("sliding_window") and values.get("sliding_layers", 1) == 0:
        add(
            "sliding_layers",
            "0 with a sliding window: no layer would use the window "
            "(give the layers that do, or remove sliding_window)",
        )
    if values.get("sliding_layers", 0) > layers:
        add("sliding_layers", f"{values['sliding_layers']} is more than the {layers} layers")


def _model_latent(values: dict[str, Any], add: Callable[[str, str], None]) -> None:
    """Multi-head latent attention (``kv_lora_rank`` > 0) up-projects a key and a value per
    query head (``kv_heads == heads``) and its rotary part is a part of ``head_dim``; its other
    keys need it."""
    if not values.get("kv_lora_rank"):
        for key in ("q_lora_rank", "rope_head_dim"):
            if values.get(key):
                add(key, "given without multi-head latent attention (kv_lora_rank is 0 or absent)")
        return
    if "kv_heads" in values and "heads" in values and values["kv_heads"] != values["heads"]:
        add("kv_heads", "must equal heads under multi-head latent attention (one K, V per head)")
    if values.get("rope_head_dim", 0) >= values.get("head_dim", float("inf")):
        add("rope_head_dim", f"must be less than head_dim ({values.get('head_dim')})")
    if values.get("rope_head_dim") == 0:
        add(
            "rope_head_dim",
            "must be positive under multi-head latent attention: its rotary key is the part "
            "of head_dim the latent cannot carry (DeepSeek-V2, arXiv:2405.04434, section 2.1.3)",
        )


def _model_params(values: dict[str, Any], add: Callable[[str, str], None]) -> None:
    """`params_b` (total) and `params_active_b` (per token) agree with the shape's counts
    within 3% (:data:`PARAMS_TOLERANCE`)."""
    if not all(k in values for k in MODEL_SHAPE_KEYS):
        return

    model = model_module(values)
    for key, count in (("params_b", model.num_params), ("params_active_b", model.active_params)):
        if key not in values:
            continue
        computed = float(count()) / 1e9
        rel = abs(computed - values[key]) / values[key]
        if rel > PARAMS_TOLERANCE:
            add(
                key,
                f"published {values[key]}B disagrees with the shape's "
                f"{computed:.2f}B by {rel:.0%} (> {PARAMS_TOLERANCE:.0%})",
            )


# --- calibration ------------------------------------------------------------------------------
CALIBRATION_FIELDS = {
    "matmul_peak_fraction": Field(
        "fraction", required=True, doc="fraction of the dense peak a large GEMM reaches"
    ),
    "matmul_half_dim": Field(
        "count", required=True, doc="GEMM dimension that halves it", plausible=R.HALF_DIM
    ),
    "memory_bandwidth_fraction": Field(
        "fraction", required=True, doc="streaming kernels, fraction of memory bandwidth"
    ),
    "link_bandwidth_fraction": Field(
        "fraction", required=True, doc="collective bus bandwidth / link bandwidth"
    ),
    "kernel_launch": Q("s", True, "fixed cost per kernel", R.LATENCY),
    "memory_reserved": Q("bytes", True, "runtime context and communication buffers", R.RESERVED),
    "memory_fragmentation_fraction": Field(
        "fraction", required=True, positive=False, doc="allocator fragmentation"
    ),
    "overlap_contention": Field(
        "fraction", required=True, positive=False, doc="compute slow-down under a collective"
    ),
    "kv_reread_fraction": Field(
        "fraction", required=True, doc="cost of a GQA-unaware K/V re-read, fraction of a read"
    ),
    "graph_kernel_fraction": Field(
        "fraction",
        positive=False,
        doc="share of the per-kernel cost still paid inside a replayed CUDA graph (default 1)",
    ),
    "narrow_matmul_fraction": Field(
        "fraction",
        doc="share of matmul_peak_fraction an 8-bit or narrower GEMM reaches of its own peak "
        "(default 1)",
    ),
    "attention_softmax_dim": Field(
        "number",
        doc="head dim at which fused attention's softmax costs as much as its GEMMs",
        plausible=R.ATTENTION_DIM,
    ),
    "attention_half_span": Field(
        "number",
        doc="keys over which a fused attention tile's fixed work is amortised by half",
        plausible=R.ATTENTION_SPAN,
    ),
    "attention_half_tiles": Field(
        "number",
        doc="query tiles at which a fused attention launch fills half the chip",
        plausible=R.ATTENTION_TILES,
    ),
}
FRACTIONS = tuple(k for k, f in CALIBRATION_FIELDS.items() if f.kind == "fraction")

# --- plans ------------------------------------------------------------------------------------
_PLAN_KIND = {"degree": "count", "count": "count", "bool": "bool", "number": "number"}


def plan_table(fields: Iterable[PlanField]) -> dict[str, Field]:
    """The ``[plan]`` table of a scenario or measurement, derived from a job's field table
    (:data:`diffcost._train.plan.TRAIN_FIELDS`, :data:`diffcost._serve.plan.SERVE_FIELDS`).

    A categorical field is an ``enum`` of its plain values, except an integer enumeration (the
    ZeRO stage, written 0..3), which is a non-negative count; a degree or count is positive when
    its minimum is at least 1; a number is positive when its own range check rejects 0.
    """
    table = {}
    for f in fields:
        if f.kind == "categorical" and f.choices is not None and issubclass(f.choices, int):
            table[f.name] = Field("count", positive=False, doc=f.doc)
        elif f.kind == "categorical":
            table[f.name] = Field("enum", choices=f.options(), doc=f.doc)
        elif f.kind == "number":
            positive = f.check is not None and not f.check(0.0)
            table[f.name] = Field("number", positive=positive, doc=f.doc)
        else:
            table[f.name] = Field(_PLAN_KIND[f.kind], positive=f.minimum >= 1, doc=f.doc)
    return table


# --- scenarios --------------------------------------------------------------------------------
SCENARIO_TOP = {
    "model": Field("str", required=True, doc="built-in model name or path"),
    "system": Field("str", doc="built-in system name or path (or chip)"),
    "chip": Field("str", doc="built-in chip name or path (or system)"),
    "chips": Field("count", doc="chip count (default: the system's)", plausible=R.SYSTEM_CHIPS),
    "collective": Field(
        "str",
        doc="collective algorithm of the all-reduces and all-gathers (a name of "
        "diffcost.COLLECTIVES: fastest, hierarchical, ring, tree, nvls, nccl, custom, one_shot, "
        "two_shot; nvls needs a system with in_network_reduction; default: the system's, "
        "fastest); the command line's --collective wins",
    ),
}

# --- measurements -----------------------------------------------------------------------------
FLOP_CONVENTIONS = ("narayanan-eq3", "6n-12lhs")
MEASUREMENT_SOURCE_KEYS = ("reference", "conventions", "hardware", "unreported", "data")
POINT = {
    "id": Field("str", required=True, doc="unique over all files"),
    "kind": Field("enum", required=True, choices=("train", "serve"), doc="job"),
    "model": Field("str", required=True, doc="built-in name or a path relative to the file"),
    "system": Field("str", doc="built-in name or path (or chip)"),
    "chip": Field("str", doc="built-in name or path (or system)"),
    "chips": Field(
        "count",
        required=True,
        doc="= tp*pp*dp*cp (train), tp*pp*replicas (serve)",
        plausible=R.SYSTEM_CHIPS,
    ),
    "verified": Field("bool", required=True, doc="headline number read in the primary source"),
    "notes": Field("str", doc="free text"),
    "excluded": Field("str", doc="why the point is carried but not predicted"),
    "unmodelled": Field("str", doc="an effect the model lacks: predicted, not fitted"),
    "flags": Field("list", doc="unverified fields, assumptions"),
    "workload": Field(
        "enum",
        choices=("pretraining", "fine-tuning"),
        doc="what a training run trains (default pretraining): a fine-tuning run (SFT on short "
        "packed samples, LoRA) is no yardstick of a pre-training MFU",
    ),
}
#: plan keys a point must publish; the others of a training plan are chosen by the validation
#: rule (:mod:`diffcost._analysis.validate`) when absent.
POINT_PLAN_REQUIRED = {
    "train": (
        "tp",
        "pp",
        "dp",
        "cp",
        "global_batch",
        "seq_len",
        "precision",
        "flash_attention",
        "overlap_grad_reduce",
    ),
    "serve": (
        "tp",
        "pp",
        "batch",
        "input_len",
        "output_len",
        "weight_format",
        "kv_format",
        "mode",
        "kv_block",
        "engine",
    ),
}
AS_PUBLISHED = Field("str", required=True, doc="the number as the source wrote it")
MEASURED = {
    "train": {
        "step_time": Q("s", doc="seconds per step", plausible=R.STEP_TIME),
        "tokens_per_s_per_chip": Field(
            "number", doc="training tokens/s per chip", plausible=R.TOKEN_RATE
        ),
        "achieved_per_chip": Q(
            "flop_per_s", doc="achieved FLOP/s per chip (with a convention)", plausible=R.PEAK
        ),
        "flop_convention": Field("enum", choices=FLOP_CONVENTIONS, doc="how FLOPs are counted"),
        "as_published": AS_PUBLISHED,
    },
    "serve": {
        "output_tokens_per_s_per_chip": Field(
            "number", doc="output tokens/s per chip", plausible=R.TOKEN_RATE
        ),
        "ttft": Q("s", doc="time to first token", plausible=R.REQUEST_TIME),
        "amortized_time_per_token": Q(
            "s", doc="batch time per output token", plausible=R.TOKEN_TIME
        ),
        "as_published": AS_PUBLISHED,
    },
}

#: A point measured under load (``specs/measurements/load/``): the scenario keys of
#: :data:`POINT` but for ``kind`` (always serving), the offered load and the measured
#: percentiles (:mod:`diffcost._inputs.load_measurements`).
LOAD_POINT = {k: f for k, f in POINT.items() if k != "kind"} | {
    "mixed_prefill": Field(
        "bool",
        doc="the server mixed prompt chunks with the decodes (chunked prefill on: true) or ran "
        "prefill-only iterations (false), where its settings differ from its engine profile's "
        "default (absent: the profile's mixed_prefill)",
    )
}
LOAD = {
    "qps": C(
        "requests/s to the whole deployment (realised): an open loop (give qps or concurrency)",
        R.REQUEST_RATE,
        kind="number",
    ),
    "concurrency": C(
        "clients of a closed loop, each sending its next request when the last ends (a "
        "concurrency benchmark; give qps or concurrency)",
        R.CLIENTS,
    ),
    "arrival_cv": C(
        "coefficient of variation of the arrival gaps (1: Poisson)",
        R.VARIATION,
        positive=False,
        kind="number",
    ),
    "input_cv": C(
        "coefficient of variation of prompt lengths", R.VARIATION, positive=False, kind="number"
    ),
    "ttft_p99_limit": Q(
        "s",
        False,
        "p99 TTFT limit the rate was validated under (with tpot_p99_limit: goodput)",
        R.REQUEST_TIME,
    ),
    "tpot_p99_limit": Q("s", False, "p99 TPOT limit the rate was validated under", R.TOKEN_TIME),
}
#: The percentiles a load measurement reports (seconds), each with its meaning and range.
_LOAD_TIMES = {
    "ttft_mean": ("mean time to first token", R.REQUEST_TIME),
    "ttft_p50": ("median time to first token", R.REQUEST_TIME),
    "ttft_p99": ("99th percentile time to first token", R.REQUEST_TIME),
    "tpot_mean": ("mean time per output token after the first, per request", R.TOKEN_TIME),
    "tpot_p50": ("median of the per-request time per output token", R.TOKEN_TIME),
    "tpot_p99": ("99th percentile of the per-request time per output token", R.TOKEN_TIME),
}
LOAD_MEASURED = {
    **{key: Q("s", doc=doc, plausible=rng) for key, (doc, rng) in _LOAD_TIMES.items()},
    "as_published": AS_PUBLISHED,
}

#: One published kernel timing (``specs/kernels/``, :mod:`diffcost._inputs.kernel_measurements`):
#: the kernel's operation and shape, the chip it ran on and the number as published.  The shape
#: keys of each operation are required for it and refused for the others (the reader checks).
KERNEL_OPS = ("gemm", "attention_prefill", "attention_decode", "all_reduce")
KERNEL_DTYPES = ("bf16", "fp16", "fp8", "fp32")
KERNEL_SOURCE_KEYS = ("reference", "conventions", "hardware", "data")
#: What a kernel file's times include: ``kernel``, the GPU time of the kernel alone (a
#: profiler's kernel duration: no host launch); ``call``, host-side timing around calls (CUDA
#: events, a wall clock): the launch is in it.
KERNEL_TIMINGS = ("kernel", "call")
#: How a file's GEMM kernels spread their output tiles over the multiprocessors: ``balanced``
#: (the libraries the serving engines and training frameworks call, cuBLAS and CUTLASS, split
#: ``k`` or stream it so the last wave is full: Osama et al., "Stream-K", PPoPP 2023), or
#: ``data_parallel`` (one thread block per output tile, whole ``k``, so a last partial wave
#: leaves multiprocessors idle: :func:`diffcost._terms.gemm.wave_fill`).
KERNEL_TILINGS = ("balanced", "data_parallel")
#: Whether a file's calls read the same operands again: ``fresh`` (new operands, a flushed
#: cache, or a working set too large to stay cached: read from memory) or ``reused`` (the same
#: operands every call, no cache flush between calls, as ``triton.testing.do_bench_cudagraph``
#: times them: a working set within the chip's L2 is read from it).
KERNEL_OPERANDS = ("fresh", "reused")
KERNEL_TOP = {
    "timing": Field(
        "enum",
        required=True,
        choices=KERNEL_TIMINGS,
        doc="what the times include: kernel (profiler GPU time, no host launch) or call "
        "(host-side timing around calls, launch included)",
    ),
    "tiling": Field(
        "enum",
        choices=KERNEL_TILINGS,
        doc="gemm: how the timed kernels spread output tiles over the multiprocessors: "
        "balanced (split-k / stream-k, the default) or data_parallel (one block per output "
        "tile, whole k: the last partial wave is charged)",
    ),
    "operands": Field(
        "enum",
        choices=KERNEL_OPERANDS,
        doc="gemm: fresh (read from memory, the default) or reused (the same operands every "
        "call, no cache flush: a working set within the chip's L2 is read from it)",
    ),
}
#: How a measured all-reduce ran (``implementation`` of an ``all_reduce`` point): ``nccl``:
#: NCCL's own choice of algorithm and protocol; ``custom``: a serving engine's custom
#: all-reduce kernel, one-shot or two-shot as it picks by size (vLLM ``custom_all_reduce``,
#: TensorRT-LLM's); ``one_shot`` / ``two_shot``: one of them forced; ``multimem``: NVLink SHARP
#: loads and stores from the kernel (``torch.distributed._symmetric_memory`` multimem).
ALL_REDUCE_IMPLEMENTATIONS = ("nccl", "custom", "one_shot", "two_shot", "multimem")
KERNEL_POINT = {
    "id": Field("str", required=True, doc="unique over all kernel files"),
    "op": Field("enum", required=True, choices=KERNEL_OPS, doc="the kernel's operation"),
    "chip": Field("str", required=True, doc="built-in chip name or path it ran on"),
    "dtype": Field(
        "enum",
        required=True,
        choices=KERNEL_DTYPES,
        doc="input format of the matrix units (all_reduce: of the reduced elements, fp32 "
        "only there)",
    ),
    "m": C("gemm: rows (tokens)", R.GEMM_DIM),
    "n": C("gemm: columns (output features)", R.GEMM_DIM),
    "k": C("gemm: depth (input features)", R.GEMM_DIM),
    "batch": C("attention: sequences", R.GEMM_DIM),
    "q_len": C("attention: query tokens per sequence (decode: 1 + speculative)", R.CONTEXT),
    "kv_len": C("attention: key/value tokens per sequence (cached + new)", R.CONTEXT),
    "heads": C("attention: query heads", R.HEADS),
    "kv_heads": C("attention: key/value heads", R.HEADS),
    "head_dim": C("attention: query/key head size", R.WIDTH),
    "v_head_dim": C("attention: value head size (default head_dim)", R.WIDTH),
    "causal": Field("bool", doc="attention_prefill: causal mask (bottom-right aligned)"),
    "latent_kv": Field(
        "bool",
        doc="attention: one cached latent of head_dim per KV head serves as K and its first "
        "v_head_dim columns as V (multi-head latent attention with absorbed up-projections, "
        "FlashMLA; default false: K and V cached apart)",
    ),
    "kv_dtype": Field(
        "enum", choices=KERNEL_DTYPES, doc="attention: KV-cache format (default dtype)"
    ),
    "ranks": C("all_reduce: ranks of the group", R.GROUP_RANKS),
    "message": Q(
        "bytes",
        doc="all_reduce: bytes per rank (each rank's buffer, reduced in place)",
        plausible=R.MESSAGE,
    ),
    "implementation": Field(
        "enum",
        choices=ALL_REDUCE_IMPLEMENTATIONS,
        doc="all_reduce: the library or kernel that ran it",
    ),
    "cuda_graph": Field("bool", doc="all_reduce: timed as a replayed CUDA graph"),
    "staged_copy": Field(
        "bool",
        doc="all_reduce: the input is first copied into the registered buffer by a separate "
        "device-to-device copy (vLLM's custom all-reduce on an unregistered input; default false)",
    ),
    "power_limit": Q(
        "w",
        doc="gemm: the board power limit the timing ran under, when lowered below the chip's "
        "tdp (the kernel is predicted at its sustained clock under it; default: the top clock)",
        plausible=R.CHIP_POWER,
    ),
    "time": Q("s", doc="measured time of one call", plausible=R.KERNEL_TIME),
    "achieved": Q(
        "flop_per_s",
        doc="gemm only: published FLOP/s of one call (2 m n k / time)",
        plausible=R.PEAK,
    ),
    "as_published": AS_PUBLISHED,
    "verified": Field("bool", required=True, doc="number read in the primary source"),
    "notes": Field("str", doc="free text"),
    "flags": Field("list", doc="assumptions, mappings"),
    "unmodelled": Field(
        "str",
        doc="an effect in the timing that the term does not model (shown, never fitted)",
    ),
}

#: Preemption modes of an engine's scheduler when the KV cache runs out: ``recompute`` (the
#: victim's KV blocks are freed and its prompt and output so far are prefilled again: vLLM,
#: SGLang retraction), ``swap`` (its blocks are copied to host memory and back) or ``none``
#: (a request is admitted only when the blocks of its whole length are reserved: TensorRT-LLM
#: GUARANTEED_NO_EVICT).
PREEMPTION_MODES = ("recompute", "swap", "none")

#: The scheduler caps an engine sets when its user does not (:mod:`diffcost._serve.caps`),
#: at the top level of a profile and, overridden, in its ``[large_device]`` table.
ENGINE_CAPS: dict[str, Field] = {
    "max_seqs": C(
        "default most sequences running at once (vLLM max_num_seqs, TensorRT-LLM "
        "max_batch_size, SGLang max_running_requests); absent: the plan's batch",
        R.ENGINE_SEQS,
    ),
    "token_budget": C(
        "default most tokens one iteration schedules, decode tokens included (vLLM "
        "max_num_batched_tokens, TensorRT-LLM max_num_tokens, SGLang chunked_prefill_size); "
        "absent: the plan's prefill_chunk",
        R.TOKEN_BUDGET,
    ),
    "prefill_chunk": C(
        "default longest piece of one prompt per iteration (chunked prefill; at most the "
        "token budget); absent: prompts are not split",
        R.TOKEN_BUDGET,
    ),
}

#: ``[large_device]`` of an engine profile: the caps an engine sets on chips with at least
#: ``min_memory`` whose name contains none of ``excluded_chips`` (vLLM V1: 70 GiB, not A100).
ENGINE_LARGE_DEVICE: dict[str, Field] = {
    "min_memory": Q(
        "bytes", True, "chips with at least this much memory take this table", R.CAPACITY
    ),
    "excluded_chips": Field(
        "list", doc="chips whose name contains one of these (lower case) keep the top-level caps"
    ),
    **ENGINE_CAPS,
}

#: Fields of a serving-engine profile (``specs/engines/``) besides its behaviours' switches
#: (:func:`engine_kind`): the kernel and runtime choices of one engine release that change the
#: bytes moved or the launches paid (:mod:`diffcost._serve.engine`), and its scheduler's
#: defaults (:data:`ENGINE_CAPS`).
ENGINE_FIELDS: dict[str, Field] = {
    "framework": Field("str", required=True, doc="the serving framework (TensorRT-LLM, vLLM, ...)"),
    "version": Field("str", required=True, doc="the release the profile describes"),
    "attention_kernel": Field("str", required=True, doc="decode attention kernel family"),
    "kv_block": Field(
        "count",
        doc="default tokens per paged-KV block (absent: plan default)",
        plausible=R.KV_BLOCK,
    ),
    **ENGINE_CAPS,
    "budget_covers_context": Field(
        "bool",
        doc="the token budget is at least the model's context length, so no prompt is split "
        "(vLLM V0 without chunked prefill: max(max_model_len, 2048))",
    ),
    "preemption": Field(
        "enum",
        choices=PREEMPTION_MODES,
        doc="what the scheduler does when the KV cache runs out (absent: not found)",
    ),
    "mixed_prefill": Field(
        "bool",
        doc="prompt chunks ride in the decode iterations (chunked prefill mixed with decodes); "
        "false: prompts run in prefill-only iterations that stall the running decodes (SGLang "
        "enable_mixed_chunk False, vLLM V0 without chunked prefill); absent: mixed",
    ),
    "host_share": Field(
        "fraction",
        positive=False,
        doc="share of an iteration's wall time the host spends on scheduling, output "
        "processing and detokenisation not overlapped with the GPU (engines before the "
        "overlapped schedulers); absent: 0 (overlapped)",
    ),
}

#: Engine keys of the load model's iteration (:mod:`diffcost._serve.scheduling`): optional,
#: each with its own ``[source]`` key when given (:func:`_engine_load_keys_sourced`).
ENGINE_LOAD_KEYS = ("mixed_prefill", "host_share")

#: ``[source]`` keys every engine profile gives: where each scheduler default is set in the
#: engine's code (file and version), or why the profile has none.
ENGINE_CAP_SOURCES = ("max_seqs", "token_budget", "prefill_chunk", "preemption")


def _engine_chunk_within_budget(values: dict[str, Any], add: Callable[[str, str], None]) -> None:
    """`prefill_chunk` is at most `token_budget` (a piece of a prompt fits in one iteration),
    at the top level and in `[large_device]`."""
    top = {k: values[k] for k in ("token_budget", "prefill_chunk") if k in values}
    for prefix, table in (("", top), ("large_device.", values.get("large_device", {}))):
        chunk, budget = table.get("prefill_chunk"), table.get("token_budget")
        if chunk is not None and budget is not None and chunk > budget:
            add(prefix + "prefill_chunk", f"must be at most token_budget = {budget}, got {chunk}")


def engine_kind(switches: Iterable[PlanField]) -> Kind:
    """The engine-profile kind with one required bool key per behaviour switch (the bool plan
    fields the engine behaviours declare, :data:`diffcost._serve.behaviours.BEHAVIOUR_FIELDS`,
    passed down by :mod:`diffcost._serve.engine`), after ``version``; each switch, the
    attention kernel and each scheduler default (:data:`ENGINE_CAP_SOURCES`) need their own
    ``[source]`` key, as does a ``[large_device]`` table."""
    rows = {f.name: Field("bool", required=True, doc=f.doc) for f in switches}
    top = dict(ENGINE_FIELDS)
    top = {k: top[k] for k in ("framework", "version")} | rows | top
    sourced = (*rows, "attention_kernel", *ENGINE_CAP_SOURCES)
    return Kind(
        "engine",
        "engines",
        top=top,
        tables={"large_device": ENGINE_LARGE_DEVICE},
        source=Source(
            "every engine choice needs a source",
            required=sourced,
            allowed=(
                *sourced,
                *ENGINE_LOAD_KEYS,
                "kv_block",
                "budget_covers_context",
                "large_device",
                "notes",
            ),
            per_table="say where the caps of [{}] and its condition are set",
            when_given=ENGINE_LOAD_KEYS,
        ),
        rules=(_engine_chunk_within_budget,),
        doc="a serving engine release: its kernel and runtime choices and its scheduler's "
        "defaults, each with a source",
    )


SPEC_SOURCE = Source(
    "every number needs a source", per_table="say where the numbers of [{}] come from"
)

# --- every kind -------------------------------------------------------------------------------
KINDS: dict[str, Kind] = {
    "chip": Kind(
        "chip",
        "chips",
        tables=CHIP,
        required_tables=CHIP_REQUIRED_TABLES,
        source=SPEC_SOURCE,
        rules=(_chip_has_16bit_peak, _chip_peak_ratios, _chip_array_dim, _chip_energy),
        doc="one accelerator: dense peaks, memory, interconnect, power, price, execution class",
    ),
    "system": Kind(
        "system",
        "systems",
        top=SYSTEM_TOP,
        tables=SYSTEM,
        source=SPEC_SOURCE,
        doc="a chip, how many, and how they are wired (overrides the chip's tables)",
    ),
    "model": Kind(
        "model",
        "models",
        top=MODEL_TOP,
        source=SPEC_SOURCE,
        rules=(_model_shape, _model_moe, _model_latent, _model_window, _model_params),
        doc="a transformer's shape (dense or mixture of experts)",
    ),
    "calibration": Kind(
        "calibration",
        "calibration",
        tables={"efficiency": CALIBRATION_FIELDS},
        groups={"overrides": ("chip", _opt(CALIBRATION_FIELDS))},
        required_tables=("efficiency",),
        source=Source(
            "say where the efficiency constants come from",
            per_table="say where the {} constants come from",
        ),
        doc="efficiency constants (global, and per-chip overrides of any subset; an override "
        "that is a prior, not a fit, for a chip with no measurement cites its numbers in its own "
        "`source.<chip>` key, which a refit carries unchanged)",
    ),
    "scenario": Kind(
        "scenario",
        "scenarios",
        top=SCENARIO_TOP,
        tables={"plan": None},  # its keys depend on the kind (train / serve): scenario.py
        source=Source("say where the scenario comes from", nonempty=True),
        kind_values=("train", "serve"),
        doc="a model, a system or chip, and a plan",
    ),
    "measurements": Kind(
        "measurements",
        "measurements",
        arrays={"point": POINT},
        source=Source(
            "say where the measurements come from",
            required=MEASUREMENT_SOURCE_KEYS,
            allowed=(*MEASUREMENT_SOURCE_KEYS, "notes"),
        ),
        kind_values=("measurements",),
        doc="published measurements of one source, one [[point]] each",
    ),
    "load-measurements": Kind(
        "load-measurements",
        "measurements/load",
        arrays={"point": LOAD_POINT},
        source=Source(
            "say where the measurements come from",
            required=MEASUREMENT_SOURCE_KEYS,
            allowed=(*MEASUREMENT_SOURCE_KEYS, "notes"),
        ),
        doc="published serving measurements under an arrival rate (percentiles), one [[point]] "
        "each: a serving plan, the offered load and what was measured",
    ),
    "kernel-measurements": Kind(
        "kernel-measurements",
        "kernels",
        top=KERNEL_TOP,
        arrays={"kernel": KERNEL_POINT},
        source=Source(
            "say where the kernel timings come from",
            required=KERNEL_SOURCE_KEYS,
            allowed=(*KERNEL_SOURCE_KEYS, "unreported", "notes"),
        ),
        doc="published per-kernel timings of one source, one [[kernel]] each (exactly one of "
        "time and achieved; the shape keys of its op: gemm m, n, k; attention batch, q_len, "
        "kv_len, heads, kv_heads, head_dim; all_reduce ranks, message, implementation, "
        "cuda_graph); read by `diffcost validate --kernels` only",
    ),
    # its behaviours' switches are passed down by diffcost._serve.engine (ENGINE_KIND)
    "engine": engine_kind(()),
    "sweep": Kind(
        "sweep",
        "sweeps",
        top={
            "job": Field("enum", required=True, choices=("train", "serve"), doc="what is swept"),
            "outputs": Field("list", doc="breakdown fields to keep (default: all)"),
            "calibration": Field(
                "str",
                doc="calibration (built-in name, or a file relative to the sweep file) of every "
                "system's efficiency constants and of the interval columns (default: default)",
            ),
        },
        # plan, hardware and model keys of the job: checked by diffcost._analysis.sweep_spec
        tables={
            "base": None,
            "grid": None,
            "zip": None,
            "output": {
                "csv": Field("str", doc="CSV table to write"),
                "parquet": Field("str", doc="Parquet table to write"),
                "plots": Field("str", doc="folder for the plots"),
            },
        },
        required_tables=("base",),
        source=Source("say what the sweep is for", nonempty=True),
        doc="a batched sweep: [base] values, [grid] axes (product), [zip] axes (together)",
    ),
}
KIND_DIRS = {name: kind.directory for name, kind in KINDS.items()}


# --- the co-design technology file (specs/codesign/technology.toml) ---------------------------
# Not a KINDS entry: one file of its own structure (tables of named tables, sources key by key),
# checked by diffcost._codesign.technology with the Checker on these tables.  Its unit suffixes
# are the file's own (mm2, pJ, USD per area or byte...); technology.py converts them.
def _n(doc: str, positive: bool = True) -> Field:
    return Field("number", required=True, positive=positive, doc=doc)


TECHNOLOGY_NODE = {
    "matrix_mm2_per_tflop_per_s_per_ghz": _n("matrix-logic area per dense bf16 TFLOP/s per GHz"),
    "int_mm2_per_tflop_per_s_per_ghz": _n("int8-array area per int8 TOP/s per GHz"),
    "sram_mm2_per_mb": _n("on-chip SRAM area per MB (1e6 bytes)"),
    "sram_gb_per_s_per_mb_per_ghz": _n("SRAM bandwidth per MB of SRAM per GHz"),
    "fp32_pj_per_flop": _n("fp32 energy per FLOP at the nominal clock"),
    "bf16_pj_per_flop": _n("bf16 energy per FLOP at the nominal clock"),
    "fp8_pj_per_flop": _n("fp8 energy per FLOP at the nominal clock"),
    "int8_pj_per_flop": _n("int8 energy per op at the nominal clock"),
    "sram_pj_per_byte": _n("SRAM read/write energy per byte"),
    "leakage_w_per_mm2": _n("idle (static) power of logic and SRAM per mm2"),
    "floor_w_per_mm2": _n("dynamic power of a running chip with no work per mm2"),
    "memory_path_pj_per_byte": _n("on-die path energy of an external-memory byte"),
    "nominal_clock_ghz": _n("clock at which the energies hold"),
    "threshold_voltage_fraction": _n("a in V/V_nom = a + (1 - a) f/f_nom"),
    "wafer_usd": _n("price of one wafer"),
    "defect_density_per_cm2": _n("defects per cm2"),
}
TECHNOLOGY_HBM = {
    "capacity_gb": _n("capacity of one stack, 1e9 bytes"),
    "bandwidth_gb_per_s": _n("bandwidth of one stack, 1e9 bytes/s"),
    "pj_per_byte": _n("device energy per byte"),
    "idle_w": _n("idle power of one stack"),
    "phy_mm2": _n("PHY area on the die"),
    "footprint_mm2": _n("interposer footprint of one stack"),
    "usd_per_gb": _n("price per 1e9 bytes"),
}
TECHNOLOGY_LPDDR = {k: f for k, f in TECHNOLOGY_HBM.items() if k != "footprint_mm2"}
TECHNOLOGY_FORMATS = {
    "fp32_per_bf16": _n("fp32 rate over the dense bf16 rate"),
    "tf32_per_bf16": _n("tf32 rate over the dense bf16 rate"),
    "fp8_per_bf16": _n("fp8 rate over the dense bf16 rate"),
    "int8_per_bf16": _n("int8 rate over the dense bf16 rate"),
    "int4_per_int8": _n("int4 rate over the int8 rate"),
}
TECHNOLOGY_LINKS = {
    "serdes_mm2_per_gb_per_s": _n("link area per 1e9 bytes/s per direction"),
    "pj_per_byte": _n("link energy per byte sent"),
}
TECHNOLOGY_PACKAGE = {
    "reticle_mm2": _n("lithography field"),
    "wafer_diameter_mm": _n("wafer diameter"),
    "interposer_usd_per_mm2": _n("2.5D packaging cost per mm2 of die and HBM footprint"),
    "test_assembly_usd": _n("test and assembly cost per package"),
}
#: ``[chip.<name>]``: the tables a catalogue chip is built from (names of ``[node.*]``,
#: ``[hbm.*]``, ``[lpddr.*]``) and its published figures (0 = not published).
TECHNOLOGY_CHIP = {
    "node": Field("str", required=True, doc="a [node.*] table"),
    "hbm": Field("str", required=True, doc="an [hbm.*] table"),
    "lpddr": Field("str", required=True, doc="an [lpddr.*] table"),
    **{
        k: _n(doc, positive=False)
        for k, doc in (
            ("clock_ghz", "clock"),
            ("sram_mb", "on-chip SRAM, 1e6 bytes"),
            ("hbm_stacks", "HBM stacks"),
            ("lpddr_channels", "x16 LPDDR channels"),
            ("die_area_mm2", "die area"),
            ("tdp_w", "thermal design power"),
            ("cost_usd", "manufacturing cost"),
        )
    },
}
TECHNOLOGY_TOP = {
    "schema_version": TOP["schema_version"],
    "kind": Field("enum", required=True, choices=("technology",), doc="kind of file"),
}
#: Tables of named tables (``[node.n4]``), with the keys of each; their values are sourced key
#: by key in ``[source.<table>.<name>]`` (chips: one string each in ``[source.chip]``).
TECHNOLOGY_NAMED: dict[str, dict[str, Field]] = {
    "node": TECHNOLOGY_NODE,
    "hbm": TECHNOLOGY_HBM,
    "lpddr": TECHNOLOGY_LPDDR,
    "chip": TECHNOLOGY_CHIP,
}
#: Single tables, sourced key by key in ``[source.<table>]``.
TECHNOLOGY_SINGLE: dict[str, dict[str, Field]] = {
    "formats": TECHNOLOGY_FORMATS,
    "links": TECHNOLOGY_LINKS,
    "package": TECHNOLOGY_PACKAGE,
}
