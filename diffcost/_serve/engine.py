"""Serving engines as named, versioned profiles (``specs/engines/<name>.toml``).

An engine release decides kernels and runtime mechanisms that change the bytes a decode step
moves and the launches it pays, at the same model, chips and plan.  The profile holds the
sourced data (which release has which behaviour); each behaviour, its plan field and its cost
effect, is a class of :data:`diffcost._serve.behaviours.ENGINE_BEHAVIOURS`:

* ``gqa_decode_kernel``: decode attention reads a KV head once per query group (TensorRT-LLM
  XQA, FlashAttention, FlashInfer) or once per query head (TensorRT-LLM <= 0.9 masked MHA);
* ``fused_dequant``: weight-only formats are dequantized inside the GEMM (Marlin, AWQ,
  TensorRT-LLM weight-only GEMMs) or by a separate kernel (DeepSpeed-Inference 2022 int8);
* ``cuda_graphs``: a decode step replays one captured CUDA graph instead of launching every
  kernel from the host, so it pays one host launch per step, not one per kernel (NVIDIA,
  "Getting Started with CUDA Graphs", developer.nvidia.com/blog/cuda-graphs; vLLM "Capturing
  cudagraphs for decoding", SGLang "CUDA graph for decode", TensorRT-LLM
  ``cuda_graph_config``); each kernel keeps the GPU-side share ``graph_kernel_fraction`` of
  the fitted per-kernel cost (:class:`diffcost.Efficiency`; prior 1 until calibrated: the
  public current-engine points of ``specs/measurements/`` are not faster per kernel than the
  2023 engines the cost was fitted on).  Engines capture graphs for decode-only batches;
  prefill and mixed chunked-prefill iterations launch kernel by kernel
  (:mod:`diffcost._serve.passes`);
* ``kv_block``: the default paged-KV block size (vLLM 16, TensorRT-LLM 64 tokens);
* the scheduler's caps when its user sets none: ``max_seqs``, ``token_budget``,
  ``prefill_chunk``, ``preemption`` (and ``budget_covers_context``), with a ``[large_device]``
  table where the engine picks larger caps on chips with more memory; resolved for one chip
  and model, and applied to a plan under load, by :mod:`diffcost._serve.caps`.

Every field of a profile file carries its own ``[source]``.  The profile only supplies the
defaults of the corresponding :func:`diffcost.serve_plan` fields; a value given in the plan
wins.  An unknown name is a :class:`~diffcost._core.errors.SpecError` listing the built-in ones.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._inputs.checker import builtin_names
from .._inputs.loader import load_spec
from .._inputs.schema import ENGINE_LOAD_KEYS, engine_kind
from .behaviours import BEHAVIOUR_FIELDS, ENGINE_BEHAVIOURS

#: The engine a plan that names none is served with: a current release.
DEFAULT_ENGINE = "vllm-0.10"

#: Plan fields an engine profile supplies (their defaults when the plan does not give them).
ENGINE_PLAN_FIELDS: tuple[str, ...] = (*ENGINE_BEHAVIOURS, "kv_block")

#: The scheduler defaults a profile may give at its top level (:class:`EngineProfile` ``caps``).
ENGINE_CAP_KEYS = (
    "max_seqs",
    "token_budget",
    "prefill_chunk",
    "preemption",
    "budget_covers_context",
)

#: What an engine profile file may contain: one required switch per behaviour, derived from
#: its declaration (:func:`diffcost._inputs.schema.engine_kind`).
ENGINE_KIND = engine_kind(BEHAVIOUR_FIELDS)


@dataclass(frozen=True)
class EngineProfile:
    """One serving-engine release (static: resolved into plan fields before any tracing).

    Attributes:
        name, display_name, framework, version: who it is.
        behaviours: whether it has each behaviour of
            :data:`~diffcost._serve.behaviours.ENGINE_BEHAVIOURS` its file names (by name;
            also read as attributes: ``profile.cuda_graphs``).
        attention_kernel: the decode attention kernel family (reported, not a cost term).
        kv_block: default paged-KV block size in tokens, ``None`` to keep the plan default.
        caps: the scheduler defaults the file gives (``max_seqs``, ``token_budget``,
            ``prefill_chunk``, ``preemption``, ``budget_covers_context``; absent keys: not
            found or not applicable, as its source says), and the load model's iteration keys
            ``mixed_prefill`` and ``host_share`` (:mod:`diffcost._serve.scheduling`).
        large_device: the ``[large_device]`` table (``min_memory_bytes``, ``excluded_chips``
            and the caps it overrides), ``None`` without one.
        source: where each choice comes from.
    """

    name: str
    display_name: str
    framework: str
    version: str
    behaviours: Mapping[str, bool]
    attention_kernel: str
    kv_block: int | None
    source: dict[str, str]
    caps: Mapping[str, Any] = field(default_factory=dict)
    large_device: Mapping[str, Any] | None = None

    def __getattr__(self, name: str) -> bool:
        behaviours = self.__dict__.get("behaviours", {})
        if name in behaviours:
            return behaviours[name]
        raise AttributeError(name)

    def plan_defaults(self) -> dict[str, bool | int]:
        """The :func:`diffcost.serve_plan` values this engine implies (``kv_block`` when set)."""
        out: dict[str, bool | int] = dict(self.behaviours)
        if self.kv_block is not None:
            out["kv_block"] = self.kv_block
        return out


def engine_names() -> list[str]:
    """Names of the built-in engine profiles."""
    return builtin_names("engine")


def load_engine(name_or_path: str | Path, where: str = "<arguments>") -> EngineProfile:
    """The engine profile of a built-in name or a file path.

    Raises:
        SpecError: an unknown name (listing the built-in ones) or an invalid file.
    """
    spec = load_spec("engine", name_or_path, where, ENGINE_KIND)
    v = spec.values
    return EngineProfile(
        name=v["name"],
        display_name=v["display_name"],
        framework=v["framework"],
        version=v["version"],
        behaviours={name: v[name] for name in ENGINE_BEHAVIOURS if name in v},
        attention_kernel=v["attention_kernel"],
        kv_block=v.get("kv_block"),
        source=dict(spec.info.source),
        caps={k: v[k] for k in (*ENGINE_CAP_KEYS, *ENGINE_LOAD_KEYS) if k in v},
        large_device=v.get("large_device"),
    )


__all__ = [
    "DEFAULT_ENGINE",
    "ENGINE_CAP_KEYS",
    "ENGINE_KIND",
    "ENGINE_PLAN_FIELDS",
    "EngineProfile",
    "engine_names",
    "load_engine",
]
