"""``diffcost validate --kernels``: the cost model's kernel terms against published kernel timings.

Each point of ``specs/kernels/*.toml`` (:mod:`diffcost._inputs.kernel_measurements`) is
predicted with the term the cost models charge for that kernel, on the chip's own default system
with the calibration's constants (:func:`diffcost._inputs.loader.load_system`), in the exact
model (:data:`~diffcost._core.smooth.EXACT`), at the top clock (:func:`diffcost._terms.power.
burst`: the published kernels are timed alone in short loops, which the board's power limit does
not throttle; the cost models' steps are sustained work and are), plus the fixed cost a cost
model charges per kernel as the source timed it (:func:`diffcost._analysis.calibrate_kernels.
fixed_s`: the GPU-side share for a profiler's kernel time, the whole launch for host-side
timing around calls):

* GEMM ``m x k @ k x n`` in format ``dtype``: :func:`diffcost._terms.gemm.gemm_time_s` with
  :class:`~diffcost._terms.gemm.GemmFormat` ``(achievable peak of dtype, bytes of dtype)`` for
  every operand (bf16/fp16: 2 bytes, fp8: 1; the peak of an 8-bit format scaled by
  ``narrow_matmul_fraction``, :meth:`diffcost.Efficiency.achievable_peaks`), the roofline the
  training and serving steps charge per GEMM (``max(2 m n k / (peak eff(m, n, k)), bytes / (bw
  f_bw))``), whose libraries balance the last wave; a file of ``data_parallel`` kernels (one
  thread block per output tile: the XLA tables) is charged its last partial wave too
  (:func:`~diffcost._terms.gemm.wave_fill` with the family's tile,
  :data:`~diffcost._analysis.kernel_points.DATA_PARALLEL_TILE`, and the chip's
  ``multiprocessors``); a file of ``reused`` operands whose working set fits the chip's L2
  reads it from L2 (:func:`~diffcost._analysis.kernel_points.gemm_source`).  The published
  fp8 timings take inputs already in fp8: the steps' separate quantization kernels
  (:func:`~diffcost._terms.kernels.quantize_bytes`) are not in them.  A
  point timed under a lowered board power limit (``power_limit_w``) is charged at the clock
  that limit sustains, with the power law the steps apply at the chip's own limit
  (:func:`~diffcost._analysis.kernel_points.gemm_conditions`).
* fused prefill attention of ``batch`` sequences of ``q_len`` new tokens over ``kv_len`` keys:
  :func:`diffcost._terms.attention.prefill_attention` with ``tokens = batch q_len``, one chunk
  per sequence (``piece = q_len``) and the mean attended keys ``context = kv_len - q_len / 2``
  (causal, bottom-right aligned: ``s / 2`` for ``q_len = kv_len = s``, as the serving step's
  :meth:`~diffcost._inputs.model.Model.prompt_attended_tokens`) or ``kv_len`` (no mask).
* decode attention: :func:`diffcost._terms.attention.decode_attention` with ``seqs = batch``,
  ``query_tokens = q_len``, ``context = kv_len`` and no re-read of the KV cache (the measured
  kernels are GQA-aware: a KV head read once for its query group).
  Both take the :class:`~diffcost._terms.attention.AttentionShape` of the point (standard
  attention: ``kv_elements = kv_heads (e + e_v)``, ``decode_dim = e + e_v``; a ``latent_kv``
  point, whose one cached latent serves as K and V, as FlashMLA runs multi-head latent
  attention: ``kv_elements = kv_heads e``, the cache the steps charge an MLA model), the achievable
  peak of ``dtype`` and the bytes of ``dtype`` (Q, O) and ``kv_dtype`` (K, V).
* all-reduce of ``message`` bytes per rank over ``ranks`` ranks of one node:
  :func:`diffcost._terms.comm.all_reduce_s` ``(message, ranks, stride 1)``, the term every
  tensor-parallel and data-parallel all-reduce of the steps is charged, on the chip's default
  system (one scale-up domain of ``scale_up_domain_chips``) with the collective algorithm of
  the implementation that was timed (:data:`IMPLEMENTATION_COLLECTIVE`: NCCL's choice, the
  engines' custom kernel, one-shot or two-shot forced, NVLS multimem on a system that
  reduces in the network), so each part of the default's choice
  (:class:`~diffcost._terms.collectives.Fastest`) is checked against its own timings; a point
  replayed in a CUDA graph is charged the GPU-side share of the launch whatever the file's
  timing; the engines' kernels no launch beyond their term (their fixed cost is the whole
  call's), and a ``staged_copy`` point the copy of its input as one more kernel
  (:func:`predict_all_reduce`).

Error ``= predicted / measured - 1``.  The table groups the points by operation, chip, format and
regime (GEMM rows ``m``: small ``m <= 64``, medium ``64 < m <= 1024``, large ``m > 1024``, the
regimes of issue 41; attention by keys per sequence: short ``kv_len <= 4096``, long beyond;
all-reduce by bytes per rank: small ``<= 1 MiB``, large beyond, :data:`SMALL_ALL_REDUCE_BYTES`)
and gives the median |error| and median error.  Leave-one-source-out: the GEMM and fused
attention constants of a chip family are fitted on these points
(:mod:`diffcost._analysis.calibrate_kernels`); each GEMM and prefill point of a family with
several sources is also predicted by the family's fit without its own source (``held_out``),
the honest error of those constants; decode attention has no constant fitted on these points,
nor has the all-reduce, except that the custom all-reduce kernel's three constants
(:data:`~diffcost._terms.collectives.CUSTOM_BASE_S`, ``CUSTOM_PEER_S``,
``CUSTOM_LINK_EFFICIENCY``) were read off ``sglang-custom-allreduce-h100``, so that source's
error is in sample.
"""

import dataclasses
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np

from .._core.smooth import EXACT
from .._inputs.hardware import System
from .._inputs.kernel_measurements import KernelMeasurement, read_kernel_measurements
from .._inputs.loader import load_system
from .._terms.attention import decode_attention, prefill_attention
from .._terms.collectives import with_collective
from .._terms.comm import all_reduce_s
from .._terms.gemm import gemm_time_s, stream_time_s
from .._terms.power import burst
from .calibrate_kernels import family_of_chip, fit_kernels, fixed_s
from .kernel_points import (
    attention_shape,
    gemm_conditions,
    gemm_format,
    gemm_source,
    peak_of,
    prefill_args,
)

#: Upper bounds of the GEMM row regimes (``m``), in order; above the last: "large".
GEMM_REGIMES = (("small", 64), ("medium", 1024))
#: Largest ``kv_len`` of a "short" attention call; beyond: "long".
SHORT_ATTENTION = 4096
#: Largest message (bytes per rank) of a "small" all-reduce; beyond: "large".  1 MiB lies
#: between the sizes where the latency and the bandwidth terms of the two kinds of kernels
#: cross on an 8-GPU NVLink 4 node (busbw ~365 GB/s): a one-shot kernel's ~5 us floor equals
#: its ``7 B / bw`` at ~0.26 MB, a ring's 14 steps x 2.5 us equal its ``1.75 B / bw`` at ~7 MB;
#: it is also where the serving engines leave one-shot kernels (vLLM's custom all-reduce runs
#: one-shot up to 512 KiB at 8 ranks, two-shot beyond) and NCCL its LL protocol.
SMALL_ALL_REDUCE_BYTES = 2**20
_REGIME_ORDER = ("small", "medium", "large", "short", "long")


def gemm_regime(m: int) -> str:
    """``small`` (``m <= 64``), ``medium`` (``<= 1024``) or ``large``."""
    for name, top in GEMM_REGIMES:
        if m <= top:
            return name
    return "large"


def regime(k: KernelMeasurement) -> str:
    """The regime of a point: a GEMM's by its rows, an attention call's by its keys."""
    if k.op == "gemm":
        return gemm_regime(k.shape["m"])
    if k.op == "all_reduce":
        return "small" if k.shape["message_bytes"] <= SMALL_ALL_REDUCE_BYTES else "large"
    return "short" if k.shape["kv_len"] <= SHORT_ATTENTION else "long"


@dataclass(frozen=True)
class KernelPrediction:
    """The model's seconds for one kernel: its term at the top clock, and the fixed cost a cost
    model charges per kernel as the source timed it."""

    term_s: float
    fixed_s: float


def predict_gemm(k: KernelMeasurement, system: System) -> KernelPrediction:
    """:func:`~diffcost._terms.gemm.gemm_time_s` of the point's shape and format on ``system``
    at the top clock, or at the clock a lowered power limit sustains
    (:func:`~diffcost._analysis.kernel_points.gemm_conditions`), and the fixed cost per kernel
    (module docstring)."""
    held, flop_j = gemm_conditions(k, system)
    fmt = gemm_format(k, system, family_of_chip(k.chip), flop_j)
    held = gemm_source(k, held, fmt)
    s = k.shape
    term = gemm_time_s(float(s["m"]), float(s["n"]), float(s["k"]), fmt, held, EXACT)
    return KernelPrediction(float(term), fixed_s(system, k.timing))


def predict_prefill(k: KernelMeasurement, system: System) -> KernelPrediction:
    """:func:`~diffcost._terms.attention.prefill_attention` of the point (module docstring)."""
    got = prefill_attention(*prefill_args(k, system), burst(system), EXACT)
    return KernelPrediction(float(got.time_s), fixed_s(system, k.timing))


def predict_decode(k: KernelMeasurement, system: System) -> KernelPrediction:
    """:func:`~diffcost._terms.attention.decode_attention` of the point (module docstring)."""
    s = k.shape
    got = decode_attention(
        float(s["batch"]),
        float(s["q_len"]),
        float(s["kv_len"]),
        attention_shape(k),
        0.0,
        peak_of(k, system),
        burst(system),
        EXACT,
    )
    return KernelPrediction(float(got.time_s), fixed_s(system, k.timing))


#: The collective algorithm (:data:`~diffcost._terms.collectives.COLLECTIVES`) of each timed
#: all-reduce implementation (``implementation`` of a kernel file).
IMPLEMENTATION_COLLECTIVE = {
    "nccl": "nccl",
    "custom": "custom",
    "one_shot": "one_shot",
    "two_shot": "two_shot",
    "multimem": "nvls",
}


#: Implementations run by the engines' own kernels, whose fixed cost
#: (:data:`~diffcost._terms.collectives.CUSTOM_BASE_S`) is the whole kernel's, its launch in it.
ENGINE_KERNELS = ("custom", "one_shot", "two_shot")


def predict_all_reduce(k: KernelMeasurement, system: System) -> KernelPrediction:
    """:func:`~diffcost._terms.comm.all_reduce_s` of ``message_bytes`` per rank over ``ranks``
    ranks one apart (one node) on ``system``, run by the timed implementation's algorithm
    (module docstring).  A multimem timing shows the switches reduce in the network: the
    system is given ``in_network_reduction``.

    The fixed cost per call: NCCL's and multimem's kernels the cost models' per-kernel launch
    (:func:`~diffcost._analysis.calibrate_kernels.fixed_s`); the engines' kernels
    (:data:`ENGINE_KERNELS`) none beyond their term, whose fixed part ``CUSTOM_BASE_S`` is the
    launch and flag barrier of the whole call, read off host-timed calls of the TensorRT-LLM
    kernels that copy their input into the shared buffer inside the kernel (SGLang PR 2904;
    sgl-kernel ``trt_reduce_internal.cu``, the ``COPY_INPUT`` branch).  A ``staged_copy``
    point (vLLM's ``custom_all_reduce`` on an unregistered input: ``all_reduce`` given the
    registered buffer, ``all_reduce_unreg`` in older versions, issues ``cudaMemcpyAsync`` of
    the input into that buffer, then the kernel; vLLM ``csrc/custom_all_reduce.cu``) runs one
    more operation on the stream: a kernel's GPU-side
    fixed cost plus reading and writing the message at the achievable memory bandwidth
    (:func:`~diffcost._terms.gemm.stream_time_s`); in a loop of back-to-back eager calls its
    host launch overlaps the GPU work before it, as the kernel's does."""
    s = k.shape
    if s["implementation"] == "multimem":
        system = dataclasses.replace(system, in_network_reduction=jnp.ones(()))
    system = with_collective(system, IMPLEMENTATION_COLLECTIVE[s["implementation"]])
    message = float(s["message_bytes"])
    term = float(all_reduce_s(message, float(s["ranks"]), 1.0, system, EXACT))
    if s["implementation"] in ENGINE_KERNELS:
        fixed = 0.0
    else:
        fixed = fixed_s(system, "kernel" if s["cuda_graph"] else k.timing)
    if s.get("staged_copy"):
        term += float(stream_time_s(2.0 * message, system))
        fixed += fixed_s(system, "kernel")
    return KernelPrediction(term, fixed)


_PREDICT = {
    "gemm": predict_gemm,
    "attention_prefill": predict_prefill,
    "attention_decode": predict_decode,
    "all_reduce": predict_all_reduce,
}


def kernel_rows(
    points: list[KernelMeasurement], calibration: str = "default", loso: bool = True
) -> list[dict[str, Any]]:
    """One row per point: measured and predicted seconds, error, regime, source, and (GEMM
    and prefill attention points of a family with several sources, ``loso``) the prediction of
    the family's kernel fit without the point's source
    (:mod:`diffcost._analysis.calibrate_kernels`)."""
    systems: dict[str, System] = {}
    held = fit_kernels(points, calibration).held_out_s() if loso else {}
    rows = []
    for k in points:
        if k.chip not in systems:
            systems[k.chip] = load_system(chip=k.chip, calibration=calibration)
        p = _PREDICT[k.op](k, systems[k.chip])
        predicted = p.term_s + p.fixed_s
        held_s = held.get(k.id)
        rows.append(
            {
                "id": k.id,
                "source": k.source,
                "op": k.op,
                "chip": _chip_label(k.chip),
                "dtype": k.dtype,
                "regime": regime(k),
                "shape": dict(k.shape),
                "timing": k.timing,
                "measured_s": k.time_s,
                "term_s": p.term_s,
                "fixed_s": p.fixed_s,
                "predicted_s": predicted,
                "error": predicted / k.time_s - 1.0,
                "held_out_s": held_s,
                "held_out_error": None if held_s is None else held_s / k.time_s - 1.0,
                "unmodelled": k.unmodelled,
                "published": k.published,
                "as_published": k.as_published,
            }
        )
    return rows


def _chip_label(chip: str) -> str:
    """A built-in chip's name, or a chip file's stem."""
    return chip.rsplit("/", 1)[-1].removesuffix(".toml")


def _stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    e = np.asarray([r["error"] for r in rows], dtype=float)
    h = np.asarray([r["held_out_error"] for r in rows if r["held_out_error"] is not None])
    return {
        "n": len(rows),
        "median_abs_error": float(np.median(np.abs(e))),
        "median_error": float(np.median(e)),
        "p90_abs_error": float(np.quantile(np.abs(e), 0.9)),
        "n_held_out": len(h),
        "median_abs_held_out_error": float(np.median(np.abs(h))) if len(h) else None,
    }


def kernel_table(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Median errors by (op, chip, dtype, regime) and by op over the points without an
    unmodelled effect, by source over every point, and over the unmodelled points apart."""
    modelled = [r for r in rows if not r.get("unmodelled")]
    unmodelled = [r for r in rows if r.get("unmodelled")]
    groups: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for r in modelled:
        groups.setdefault((r["op"], r["chip"], r["dtype"], r["regime"]), []).append(r)
    keys = sorted(groups, key=lambda g: (g[0], g[1], g[2], _REGIME_ORDER.index(g[3])))
    by_group = [
        {"op": g[0], "chip": g[1], "dtype": g[2], "regime": g[3], **_stats(groups[g])} for g in keys
    ]
    sources = sorted({r["source"] for r in rows})
    by_source = {s: _stats([r for r in rows if r["source"] == s]) for s in sources}
    ops = sorted({r["op"] for r in modelled})
    by_op = {o: _stats([r for r in modelled if r["op"] == o]) for o in ops}
    return {
        "by_group": by_group,
        "by_op": by_op,
        "by_source": by_source,
        "all": _stats(rows) if rows else None,
        "unmodelled": _stats(unmodelled) if unmodelled else None,
        "leave_one_source_out": "GEMM and prefill attention points of a chip family with "
        "several sources: predicted by the family's kernel fit without their source (held_out); "
        "decode attention and all-reduce: no constant is fitted on these points (the custom "
        "all-reduce kernel's floor and link efficiency were read off "
        "sglang-custom-allreduce-h100: that source is in sample)",
    }


def validate_kernels(
    points: list[KernelMeasurement] | None = None, calibration: str = "default"
) -> dict[str, Any]:
    """Predict every published kernel timing (default: every ``specs/kernels`` file)."""
    points = read_kernel_measurements() if points is None else points
    rows = kernel_rows(points, calibration)
    return {"rows": rows, "summary": kernel_table(rows)}


def error_lines(result: dict[str, Any]) -> list[str]:
    """The summary as plain text lines (``diffcost validate --kernels``)."""
    head = (
        f"{'op':<17} {'chip':<10} {'dtype':<5} {'regime':<7} {'n':>4} "
        f"{'med |err|':>9} {'med err':>8} {'p90 |err|':>9} {'held-out |err|':>14}"
    )

    def line(label: str, s: dict[str, Any]) -> str:
        held = s["median_abs_held_out_error"]
        held_txt = f"{held:.1%} (n={s['n_held_out']})" if held is not None else "-"
        return (
            f"{label} {s['n']:>4} {s['median_abs_error']:>9.1%} {s['median_error']:>+8.1%} "
            f"{s['p90_abs_error']:>9.1%} {held_txt:>14}"
        )

    summary = result["summary"]
    lines = [
        "kernel terms vs published kernel timings (error = predicted / measured - 1; predicted: "
        "the term at the top clock plus the fixed cost per kernel as the source timed it)",
        head,
    ]
    for g in summary["by_group"]:
        lines.append(line(f"{g['op']:<17} {g['chip']:<10} {g['dtype']:<5} {g['regime']:<7}", g))
    if summary.get("unmodelled"):
        lines += ["", line(f"{'with an unmodelled effect (not above)':<42}", summary["unmodelled"])]
    lines += ["", "by operation (points without an unmodelled effect)"]
    for op, st in summary["by_op"].items():
        lines.append(line(f"{op:<42}", st))
    lines += ["", "by source, every point (held-out: the family's kernel fit without the source)"]
    for src, st in summary["by_source"].items():
        lines.append(line(f"{src:<42}", st))
    return lines


__all__ = ["error_lines", "gemm_regime", "kernel_rows", "kernel_table", "validate_kernels"]
