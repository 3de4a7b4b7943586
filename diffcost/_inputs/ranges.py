"""Plausible ranges of spec values, in SI units, each with its rationale.

A spec value outside its range is a unit slip or a typo, not a device: ``bf16_flop_per_s = 989``
(a ``_tflop_per_s`` that lost its ``t``) reads an H100 at 989 FLOP/s, ``bf16_j_per_flop = 0.955``
(a ``_pj_per_flop`` that lost its ``p``) at a joule per FLOP.  A range is declared once per
quantity in SI and applies to whatever unit suffix the key carries (the checker converts the
value first, :mod:`diffcost._core.units`), so a suffix that changes the value by 1e3..1e12 lands
outside it.  The bounds span every real device from microcontroller NPUs to wafer-scale engines,
with room on both sides; they are not fits to the catalogue (its extremes are quoted in each
rationale for comparison).

Where a key allows 0 (``positive=False``: "not counted"), 0 is accepted; any other value is held
to the range.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Plausible:
    """Closed range ``[lo, hi]`` of a value in SI units: ``unit`` names them in messages,
    ``what`` the quantity, ``why`` the bounds' rationale and sources."""

    lo: float
    hi: float
    unit: str
    what: str
    why: str

    def text(self) -> str:
        """``1e10..1e18 FLOP/s`` (as the messages and ``specs/SCHEMA.md`` print it)."""
        return f"{_number(self.lo)}..{_number(self.hi)} {self.unit}"

    def outside(self, raw: object, read: str = "") -> str:
        """The problem text for a value ``raw`` outside the range (the spec checker's and a
        sweep file's): ``raw``, what its unit suffix ``read`` makes of it, and the range."""
        return (
            f"{raw!r}{read} is outside the plausible range of {self.what}, {self.text()} "
            "(diffcost/_inputs/ranges.py)"
        )


def _number(x: float) -> str:
    """``1e-08`` as ``1e-8``, ``10000`` as ``1e4``, 660 as ``660``."""
    if 1e-3 <= x < 1e4:
        return f"{x:g}"
    mantissa, exponent = f"{x:.3e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


# --- rates -------------------------------------------------------------------------------------
PEAK = Plausible(
    1e10,
    1e18,
    "FLOP/s",
    "a chip's dense peak",
    "a dense peak of one chip: from a microcontroller NPU (Arm Ethos-U55, 32-256 MAC/cycle: "
    "~3e10-5e11) to past a wafer (Cerebras WSE-3, 1.25e17 sparse); catalogue 5.3e12 (Jetson "
    "AGX Orin fp32) .. 6.25e16 (WSE-3 fp16)",
)
MEMORY_BANDWIDTH = Plausible(
    1e8,
    1e17,
    "bytes/s",
    "a chip's main-memory bandwidth",
    "main-memory bandwidth of one chip: from a microcontroller's SRAM/flash bus (~0.1 GB/s) to "
    "past on-wafer SRAM (WSE-3, 21 PB/s); catalogue 1.2e11 (Apple M4) .. 2.1e16 (WSE-3)",
)
LINK_BANDWIDTH = Plausible(
    1e6,
    1e13,
    "bytes/s",
    "a link or storage bandwidth per chip",
    "per chip per direction over a link or to storage: from a 10 Mbit/s bus (1.25e6) to 10x "
    "NVLink 5 (0.9 TB/s); catalogue 1.2e8 (checkpoint share) .. 9e11 (B300 NVLink)",
)

# --- amounts -----------------------------------------------------------------------------------
CAPACITY = Plausible(
    1e6,
    1e13,
    "bytes",
    "a chip's main memory",
    "memory that holds the weights: from a microcontroller NPU's SRAM (~1 MB) to 10 TB (no "
    "package holds a tenth of it); catalogue 2.3e8 (Groq SRAM) .. 2.88e11 (MI355X HBM)",
)
RESERVED = Plausible(
    1e5,
    1e12,
    "bytes",
    "a runtime's reserved memory",
    "memory a runtime keeps (context, communication buffers): 0.1 MB .. 1 TB; default 1e9",
)

# --- times -------------------------------------------------------------------------------------
LATENCY = Plausible(
    1e-8,
    1e-2,
    "s",
    "a latency per step or operation",
    "one collective step, operation or kernel launch: from an on-package hop (~10 ns) to a "
    "wide-area hop (~10 ms); catalogue 1e-7 (Groq op) .. 5e-5 (laptop Ethernet)",
)
RESTART = Plausible(
    1.0,
    1e6,
    "s",
    "a restart after a failure",
    "detect, reschedule and reload after a failure: from a second (in-memory checkpoint) to 11 "
    "days; catalogue 660 s (Llama 3 field figure)",
)

# --- power and energy --------------------------------------------------------------------------
CHIP_POWER = Plausible(
    1e-2,
    1e5,
    "W",
    "a chip's power",
    "one chip's TDP or idle draw: from a microcontroller NPU (~10 mW) to a wafer-scale system "
    "(CS-3, 23 kW) with margin; catalogue 2.8 W (Apple M4 ANE) .. 23 kW (WSE-3)",
)
NODE_POWER = Plausible(
    1.0,
    1e6,
    "W",
    "a domain's power besides its chips",
    "a scale-up domain's power besides its chips (hosts, NICs, switches, fans): 1 W .. 1 MW "
    "(a rack is ~100 kW); catalogue 1,710 W (DGX H100)",
)
FLOP_ENERGY = Plausible(
    1e-14,
    1e-10,
    "J/FLOP",
    "an energy per FLOP",
    "dynamic energy of one FLOP: 0.01 pJ (below a 4-bit MAC at 3 nm) to 100 pJ (an fp32 "
    "operation of a CPU with its instruction overhead, Horowitz ISSCC 2014); catalogue "
    "1.0e-13 (B200 fp4) .. 1.3e-12 (Jetson AGX Orin fp32)",
)
BYTE_ENERGY = Plausible(
    1e-14,
    1e-9,
    "J/byte",
    "an energy per byte",
    "dynamic energy of a byte read, written or sent: 0.01 pJ (a register) to 1 nJ (125 pJ/bit, "
    "above DDR3 and board-level optics); catalogue 1.2e-12 (WSE-3 SRAM) .. 1.6e-10 (LPDDR5)",
)

# --- money and reliability ---------------------------------------------------------------------
PRICE = Plausible(
    1e-3,
    1e4,
    "USD/h",
    "a price per chip-hour",
    "price of one chip-hour: an edge device's amortised cost (~0.001) to a wafer-scale system "
    "(~1,000); catalogue 2.74 (A100) .. 6.88 (H100)",
)
FAILURE_RATE = Plausible(
    1e-9,
    1e-2,
    "per chip-hour",
    "a failure rate",
    "unexpected interruptions: one per 100,000 chip-years to one per 100 chip-hours; "
    "catalogue 1.97e-5 (Llama 3, arXiv:2407.21783 Table 5)",
)

# --- counts ------------------------------------------------------------------------------------
DOMAIN_CHIPS = Plausible(
    1,
    1e5,
    "chips",
    "a scale-up domain's chip count",
    "chips of one scale-up domain: 1 (a single SoC) .. 1e5; catalogue 1 .. 9,216 (TPU v7 pod)",
)
SYSTEM_CHIPS = Plausible(
    1,
    1e7,
    "chips",
    "a system's chip count",
    "chips of a system: 1 .. 1e7 (the largest clusters hold ~1e5-1e6 accelerators)",
)
ARRAY_DIM = Plausible(
    1,
    4096,
    "elements",
    "a matrix array's side",
    "side of a matrix array: 1 .. 4096; catalogue 8 (WSE-3 core SIMD) .. 320 (Groq)",
)
MULTIPROCESSORS = Plausible(
    1,
    1000,
    "multiprocessors",
    "a GPU's multiprocessor count",
    "streaming multiprocessors of a GPU: 1 .. 1000; catalogue 78 (H20) .. 148 (B200)",
)
HALF_DIM = Plausible(
    1,
    1e5,
    "elements",
    "a half-efficiency GEMM dimension",
    "GEMM dimension at half the peak fraction: 1 .. 1e5; calibrated 112 .. 123",
)

ATTENTION_DIM = Plausible(
    1,
    1024,
    "elements",
    "a fused attention constant in head-dim elements",
    "head dim at which softmax costs as much as the GEMMs: 1 .. 1024; fitted 1 .. 40",
)
ATTENTION_SPAN = Plausible(
    1,
    1e5,
    "tokens",
    "a fused attention tile's half span",
    "keys over which a tile's fixed work halves its rate: 1 .. 1e5; fitted 320 .. 608",
)
ATTENTION_TILES = Plausible(
    1,
    1e5,
    "tiles",
    "a fused attention launch's half fill",
    "query tiles at which a launch fills half the chip: 1 .. 1e5; fitted 32 .. 64",
)

# --- relations -------------------------------------------------------------------------------
PEAK_RATIO = Plausible(
    1 / 100,
    16,
    "times the 16-bit peak",
    "a format's peak over the same chip's 16-bit peak",
    "narrower formats gain at most 2x per halving of the width (4x for 4-bit), Blackwell Ultra's "
    "fp4 5.8x shows a vendor can add more (16x leaves margin); fp32 without tensor cores is "
    "at least ~1/16 (A100); catalogue 1/16 (A100 fp32) .. 5.8 (B300 fp4).  A unit slip of one "
    "format's key (_tflop_per_s for _pflop_per_s) is 1000x",
)

# --- model shapes (counts: the lower bound is 1, or 0 where a key allows it) -------------------
LAYERS = Plausible(
    1,
    1e4,
    "blocks",
    "a block count",
    "transformer blocks: 1 .. 10,000 (DeepNet, arXiv:2203.00555, trained 1,000; catalogue 24 "
    "(BERT-large) .. 128 (Megatron 1T))",
)
WIDTH = Plausible(
    1,
    1e6,
    "elements",
    "a matrix width",
    "a model, head, MLP, expert or latent width: 1 .. 1e6 (catalogue widest 102,400: the "
    "Megatron 1T MLP)",
)
HEADS = Plausible(
    1,
    1e5,
    "heads",
    "a head count",
    "attention heads: 1 .. 1e5 (catalogue 4 .. 232: Falcon-180B)",
)
VOCAB = Plausible(
    1,
    1e8,
    "tokens",
    "a vocabulary size",
    "tokens of a vocabulary: 1 .. 1e8 (byte-level 256; catalogue 30,522 .. 250,880: BLOOM; "
    "Gemma 3 262,144)",
)
CONTEXT = Plausible(
    1,
    1e9,
    "tokens",
    "a context length",
    "tokens of a context or a window: 1 .. 1e9 (the longest published, Llama 4 Scout, 1e7; "
    "catalogue 512 .. 163,840)",
)
EXPERTS = Plausible(
    1,
    1e7,
    "experts",
    "an expert count",
    "routed experts or top-k: 1 .. 1e7 (PEER, arXiv:2407.04202, routes over 1,048,576 "
    "experts; catalogue 8 .. 256)",
)
PARAMS_B = Plausible(
    1e-6,
    1e5,
    "billion parameters",
    "a parameter count",
    "published parameter counts: a thousand parameters to 100 trillion (catalogue 0.34 "
    "(BERT-large) .. 1,008 (Megatron 1T))",
)
KV_BLOCK = Plausible(
    1,
    1e5,
    "tokens",
    "a paged-KV block",
    "tokens per paged-KV block: 1 .. 1e5 (vLLM 16, TensorRT-LLM 64)",
)
ENGINE_SEQS = Plausible(
    1,
    1e6,
    "sequences",
    "an engine's running-sequence cap",
    "sequences one serving instance runs at once (vLLM max_num_seqs, TensorRT-LLM "
    "max_batch_size, SGLang max_running_requests): 1 .. 1e6; engine defaults 8 (TensorRT-LLM "
    "0.6 build) .. 4096 (SGLang request pool)",
)
TOKEN_BUDGET = Plausible(
    1,
    1e7,
    "tokens",
    "an engine's tokens per iteration",
    "tokens one engine iteration schedules or one prompt piece holds (vLLM "
    "max_num_batched_tokens, TensorRT-LLM max_num_tokens, SGLang chunked_prefill_size): "
    "1 .. 1e7; engine defaults 512 .. 16384",
)

# --- measurements ------------------------------------------------------------------------------
STEP_TIME = Plausible(
    1e-4,
    1e5,
    "s",
    "a training step time",
    "one training step: 0.1 ms (a tiny model) .. a day; catalogue 1.1 .. 94 s (Korthikanti "
    "et al. 2022)",
)
REQUEST_TIME = Plausible(
    1e-5,
    1e5,
    "s",
    "a time to first token",
    "time to first token or its limit: 10 us .. a day (a saturated queue); catalogue 0.007 .. 2 s",
)
TOKEN_TIME = Plausible(
    1e-7,
    1e2,
    "s",
    "a time per output token",
    "per output token: 0.1 us (a large batch amortised) .. 100 s; catalogue 6.9e-4 .. 0.23 s",
)
TOKEN_RATE = Plausible(
    1e-3,
    1e8,
    "tokens/s per chip",
    "a token rate per chip",
    "tokens per second per chip: 1e-3 .. 1e8; catalogue 79 .. 26,150",
)
REQUEST_RATE = Plausible(
    1e-6,
    1e7,
    "requests/s",
    "a request rate",
    "requests per second to a deployment: one a fortnight .. 1e7; catalogue 1 .. 361",
)
CLIENTS = Plausible(
    1,
    1e6,
    "clients",
    "a number of concurrent clients",
    "clients of a closed loop (a concurrency benchmark): 1 .. 1e6; catalogue 5 .. 250",
)
VARIATION = Plausible(
    1e-6,
    100,
    "",
    "a coefficient of variation",
    "standard deviation over mean (0: constant, 1: Poisson arrivals); catalogue 0.77 .. 1.1",
)

# --- per-kernel measurements (specs/kernels/) ---------------------------------------------------
KERNEL_TIME = Plausible(
    1e-7,
    10.0,
    "s",
    "one kernel's time",
    "one GPU kernel: 0.1 us (below any launch, ~2 us) .. 10 s (a 64k^3 bf16 GEMM on an A100 "
    "takes ~2 s); catalogue (specs/kernels) 10 us .. 0.5 ms",
)
GEMM_DIM = Plausible(
    1,
    1e7,
    "elements",
    "a GEMM dimension",
    "rows, columns or depth of one GEMM: 1 (a GEMV) .. 1e7 (a long sequence's tokens in one "
    "call); catalogue 64 .. 32,768",
)
MESSAGE = Plausible(
    1,
    1e11,
    "bytes",
    "a collective's message",
    "bytes each rank contributes to one collective: 1 byte .. 100 GB (more than any accelerator "
    "holds); catalogue 1 KiB .. 2 GiB",
)
GROUP_RANKS = Plausible(
    2,
    1e6,
    "ranks",
    "a collective's group",
    "ranks of one collective: 2 (the least that communicates) .. 1e6; catalogue 2 .. 8",
)
