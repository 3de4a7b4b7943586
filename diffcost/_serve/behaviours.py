"""Serving-engine behaviours: an extension point (:mod:`diffcost._core.extension`).

An engine release (:mod:`diffcost._serve.engine`, ``specs/engines/*.toml``) says which
behaviours it has, each with its ``[source]``; the behaviour itself is one final class here:
the bool plan field that switches it (:attr:`AbstractEngineBehaviour.field`, its help text and
command-line flag), its reference, and its cost effect as methods on quantities the serving
passes already compute (:mod:`diffcost._serve.passes`).  The passes apply every behaviour of
:data:`ENGINE_BEHAVIOURS` generically, with the plan's switch ``on`` (1 on, 0 off, relaxed in
between) as the weight of its effect, so the relaxed model and its gradients stay valid:

* :meth:`~AbstractEngineBehaviour.kv_rereads`: extra reads of the KV cache per decode read;
* :meth:`~AbstractEngineBehaviour.weight_copy_bytes`: extra bytes per weight element a GEMM
  uses;
* :meth:`~AbstractEngineBehaviour.extra_kernels`: kernels per layer added (or removed);
* :meth:`~AbstractEngineBehaviour.launch_saved_s`: launch seconds per layer saved;
* :meth:`~AbstractEngineBehaviour.pass_launch_s`: launch seconds per stage and micro-batch
  added to a pass;
* :meth:`~AbstractEngineBehaviour.expert_format`: the number format and kernel path of the
  routed experts' GEMMs.

A method left at its default returns ``None`` (no effect, nothing traced).  A new behaviour is
one final class plus its entry in :data:`ENGINE_BEHAVIOURS`: its ``ServePlan`` leaf, its
:func:`~diffcost._serve.plan.serve_plan` keyword and command-line flag, its engine-profile key
(:data:`diffcost._serve.engine.ENGINE_KIND`), its place on ``diffcost serve``'s engine line
and its launch options (:mod:`diffcost._launch.serving`) are derived from the class;
``tests/test_extension_points.py`` tests it.
"""

import functools
import operator
from collections.abc import Iterable, Mapping
from typing import ClassVar, final

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike

from .._core.extension import AbstractExtension, registry
from .._core.options import PlanField
from .._inputs.hardware import System
from .._terms.attention import AttentionShape
from .._terms.gemm import GemmFormat
from .._terms.kernels import GEMMS_PER_LAYER


class AbstractEngineBehaviour(AbstractExtension):
    """A kernel or runtime choice of a serving engine (module docstring).

    Attributes:
        field: the bool :class:`~diffcost._core.options.PlanField` that switches it (its
            ``name`` is the behaviour's name, the engine profile key and the ``ServePlan``
            leaf; its ``doc`` and ``help`` are the behaviour's help text).
        reference: where its cost effect comes from.
        shown: how ``diffcost serve``'s engine line names it (on, off).
        launch: how a server is told to run it: ``{server: (on, off)}``, each the server's
            options for that state (``vllm``: ``vllm serve`` arguments; ``trtllm``: entries of
            ``trtllm-serve``'s ``extra_llm_api_options`` YAML), ``{name}`` filled with the
            plan's value (:mod:`diffcost._launch.serving`); a server not named has no switch
            for it.

    Every method takes ``on``, the plan's switch (0 or 1; relaxed in between), and returns the
    behaviour's contribution weighted by it, or ``None`` where it has no effect.
    """

    field: ClassVar[PlanField]
    reference: ClassVar[str]
    shown: ClassVar[tuple[str, str]]
    launch: ClassVar[Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {}

    def kv_rereads(self, on: Array, shape: AttentionShape, system: System) -> Array | None:
        """Extra reads of the KV cache per decode read (dimensionless, beyond the first)."""
        del on, shape, system
        return None

    def weight_copy_bytes(self, on: Array, weight_only: Array, act_bytes: Array) -> Array | None:
        """Extra bytes moved per weight element a GEMM uses (``weight_only``: 1 when weights
        are stored narrower than the compute format)."""
        del on, weight_only, act_bytes
        return None

    def extra_kernels(self, on: Array, weight_only: Array) -> Array | None:
        """Kernels per layer forward added (negative: removed), count."""
        del on, weight_only
        return None

    def launch_saved_s(
        self, on: Array, decode_only: ArrayLike, kernels: Array, system: System
    ) -> Array | None:
        """Launch seconds per layer saved in a pass (``decode_only``: 1 for a pass of decode
        tokens only; ``kernels``: the layer's kernels)."""
        del on, decode_only, kernels, system
        return None

    def expert_format(
        self, on: Array, fmt: GemmFormat, peak16: Array, flop_j16: Array, system: System
    ) -> GemmFormat | None:
        """Format of the routed experts' GEMMs given the layer's ``fmt`` (``peak16``,
        ``flop_j16``: the chip's 16-bit peak and J/FLOP); ``None``: ``fmt``."""
        del on, fmt, peak16, flop_j16, system
        return None

    def pass_launch_s(self, on: Array, decode_only: ArrayLike, system: System) -> Array | None:
        """Launch seconds added per stage and micro-batch of a pass."""
        del on, decode_only, system
        return None


def _flag(name: str, doc: str, help: str, flag: str = "", default: bool = True) -> PlanField:
    return PlanField(name, "bool", default, doc, flag=flag, help=help)


@final
class GqaDecodeKernel(AbstractEngineBehaviour):
    """Decode attention reads the K/V of a KV head once for its whole group of query heads
    (TensorRT-LLM XQA, FlashInfer, vLLM's GQA-aware kernels); off, it reads it once per query
    head (TensorRT-LLM <= 0.9 masked MHA on GQA models): the first read streams from memory,
    the ``g - 1`` re-reads cost ``r = kv_reread_fraction`` of a read each (part hit L2), so the
    K/V traffic is ``1 + (1 - on) (g - 1) r`` times the cache (``g = heads / kv_heads`` on the
    chip)."""

    name = "gqa_decode_kernel"
    field = _flag(
        name,
        "decode reads each KV head once per group",
        "Decode attention reads each KV head once per group (default), or once per "
        "query head (TensorRT-LLM <= 0.9 masked MHA).",
        flag="--gqa-decode-kernel/--per-query-head-decode",
    )
    reference = "TensorRT-LLM 0.10 release notes (XQA kernels for GQA/MQA decode)"
    shown = ("GQA-aware decode", "per-query-head decode")

    def kv_rereads(self, on: Array, shape: AttentionShape, system: System) -> Array:
        return (1.0 - on) * (shape.group() - 1.0) * system.efficiency.kv_reread_fraction


@final
class FusedDequant(AbstractEngineBehaviour):
    """Weight-only formats are expanded to the compute format inside the GEMM (TensorRT-LLM
    weight-only GEMMs, Marlin, AWQ kernels); off, a separate kernel per weight GEMM writes a
    compute-format copy of the weight and the GEMM reads it back: ``2 a`` more bytes per
    weight element (int8 W8A16: 1 + 2 + 2 = 5 bytes instead of 1) and one more kernel per
    weight GEMM.  Same weight and compute formats need no dequantization
    (``weight_only = 0``)."""

    name = "fused_dequant"
    field = _flag(
        name,
        "weight-only formats dequantized inside the GEMM",
        "Weight-only formats dequantized inside the GEMM (default), or by a separate "
        "kernel writing a 16-bit copy (DeepSpeed-Inference 2022 int8).",
        flag="--fused-dequant/--separate-dequant",
    )
    reference = (
        "bigscience-workshop/Megatron-DeepSpeed scripts/bloom-inference-scripts/README.md "
        "(DeepSpeed-Inference int8: a separate dequantization kernel)"
    )
    shown = ("fused dequant", "separate dequant")

    def weight_copy_bytes(self, on: Array, weight_only: Array, act_bytes: Array) -> Array:
        return (1.0 - on) * weight_only * 2.0 * act_bytes

    def extra_kernels(self, on: Array, weight_only: Array) -> Array:
        return GEMMS_PER_LAYER * ((1.0 - on) * weight_only)


def graphed(on: ArrayLike, decode_only: ArrayLike, system: System) -> Array:
    """Weight of CUDA-graph replay of a pass: ``on * decode_only * w_gpu`` (only a GPU
    launches kernels, :func:`diffcost._terms.kernels.launch_s`)."""
    return jnp.asarray(on) * jnp.asarray(decode_only) * system.chip.gpu_weight()


@final
class CudaGraphs(AbstractEngineBehaviour):
    """Decode-only steps replay a captured CUDA graph instead of launching every kernel from the
    host (vLLM, SGLang, TensorRT-LLM 1.x): one ``cudaGraphLaunch`` per stage and micro-batch
    replaces the per-kernel launches, and each kernel keeps only the GPU-side share ``f =
    graph_kernel_fraction`` of its per-kernel cost, saving ``g (1 - f) kernels
    kernel_launch_s`` per layer (``g`` = :func:`graphed`).  Engines capture graphs of
    decode-only batches (fixed shapes); prefill and mixed chunked-prefill iterations launch
    kernel by kernel."""

    name = "cuda_graphs"
    field = _flag(
        name,
        "decode steps replay a CUDA graph (one launch per step)",
        "Decode steps replay a CUDA graph (one launch per step), or launch every "
        "kernel from the host (default: the engine's).",
    )
    reference = (
        'NVIDIA, "Getting Started with CUDA Graphs", developer.nvidia.com/blog/cuda-graphs; '
        'vLLM "Capturing cudagraphs for decoding"; SGLang "CUDA graph for decode"'
    )
    shown = ("CUDA graphs", "per-kernel launches")
    launch = {
        "vllm": ((), ("--enforce-eager",)),
        "trtllm": (("cuda_graph_config:\n  max_batch_size: {batch}",), ()),
    }

    def launch_saved_s(
        self, on: Array, decode_only: ArrayLike, kernels: Array, system: System
    ) -> Array:
        eff = system.efficiency
        saved = (1.0 - eff.graph_kernel_fraction) * kernels * eff.kernel_launch_s
        return graphed(on, decode_only, system) * saved

    def pass_launch_s(self, on: Array, decode_only: ArrayLike, system: System) -> Array:
        return graphed(on, decode_only, system) * system.efficiency.kernel_launch_s


@final
class NativeMoeGemm(AbstractEngineBehaviour):
    """Routed-expert GEMMs run in the plan's compute format on the chip's native tensor-core
    path (grouped GEMMs built for the chip: TensorRT-LLM >= 0.10's Hopper MoE GEMMs, vLLM's
    and SGLang's fused-MoE kernels).  Off, they run the MoE GEMM of TensorRT-LLM up to 0.9: a
    CUTLASS 2.x grouped GEMM for 16-bit activations (``half``/``bf16``, or weight-only
    ``int8``/``int4`` expanded to 16 bits in the kernel) which on Hopper dispatches the Ampere
    kernels (``cutlass::arch::Sm80`` for ``sm >= 90``: "TODO Update the arch to Sm90 once
    CUTLASS hopper specialisations are available").  The expert GEMMs then compute at the
    16-bit peak (``on p + (1 - on) p16``) and sustain ``r = warp_mma_fraction`` of it on a
    chip whose peak needs warpgroup MMA (``on + (1 - on) r``, Hopper about 2/3:
    :func:`~diffcost._terms.execution.mma_fraction_scale`); their weights keep the stored
    format's bytes.  Nothing changes for a dense model or a 16-bit plan on Ampere."""

    name = "moe_native_gemm"
    field = _flag(
        name,
        "routed-expert GEMMs in the compute format on the chip's native MMA path",
        "Routed-expert GEMMs in the compute format on the chip's native MMA path (default), "
        "or 16-bit Ampere-class grouped GEMMs (TensorRT-LLM <= 0.9's MoE plugin).",
        flag="--moe-native-gemm/--moe-ampere-gemm",
    )
    reference = (
        "TensorRT-LLM's MoE GEMM as copied into vllm-project/vllm csrc/moe_gemm/"
        "moe_gemm_kernels_template.h @ c19120761825e1d66d9eacf3301caf870079c094 (dispatchToArch: "
        "Sm80 kernels for sm >= 90; half/bf16/float activations, int8/int4 weight-only); "
        "Shah et al., FlashAttention-3, arXiv:2407.08608, sec. 1 (mma.sync: about 2/3 of the "
        "H100 tensor peak)"
    )
    shown = ("native MoE GEMMs", "Ampere-class 16-bit MoE GEMMs")

    def expert_format(
        self, on: Array, fmt: GemmFormat, peak16: Array, flop_j16: Array, system: System
    ) -> GemmFormat:
        off = 1.0 - on
        flop_j = None if fmt.flop_j is None else on * fmt.flop_j + off * flop_j16
        return fmt._replace(
            peak_flop_per_s=on * fmt.peak_flop_per_s + off * peak16,
            flop_j=flop_j,
            mma_fraction=on + off * system.chip.warp_mma_fraction,
        )


#: Every engine behaviour, in ``ServePlan`` field order.
ENGINE_BEHAVIOURS = registry(GqaDecodeKernel, FusedDequant, CudaGraphs, NativeMoeGemm)

#: The plan fields of the behaviours (spliced into :data:`diffcost._serve.plan.SERVE_FIELDS`).
BEHAVIOUR_FIELDS: tuple[PlanField, ...] = tuple(b.field for b in ENGINE_BEHAVIOURS.values())


def total(parts: Iterable[Array | None]) -> Array | None:
    """The sum of the behaviours' contributions that are not ``None`` (``None`` if none is):
    a channel no behaviour uses traces nothing."""
    given = [p for p in parts if p is not None]
    return functools.reduce(operator.add, given) if given else None


__all__ = [
    "BEHAVIOUR_FIELDS",
    "ENGINE_BEHAVIOURS",
    "AbstractEngineBehaviour",
    "CudaGraphs",
    "FusedDequant",
    "GqaDecodeKernel",
    "NativeMoeGemm",
    "graphed",
    "total",
]
