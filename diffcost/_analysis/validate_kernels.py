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
  f_bw))``).  The published fp8 timings take inputs already in fp8: the steps' separate
  quantization kernels (:func:`~diffcost._terms.kernels.quantize_bytes`) are not in them.
* fused prefill attention of ``batch`` sequences of ``q_len`` new tokens over ``kv_len`` keys:
  :func:`diffcost._terms.attention.prefill_attention` with ``tokens = batch q_len``, one chunk
  per sequence (``piece = q_len``) and the mean attended keys ``context = kv_len - q_len / 2``
  (causal, bottom-right aligned: ``s / 2`` for ``q_len = kv_len = s``, as the serving step's
  :meth:`~diffcost._inputs.model.Model.prompt_attended_tokens`) or ``kv_len`` (no mask).
* decode attention: :func:`diffcost._terms.attention.decode_attention` with ``seqs = batch``,
  ``query_tokens = q_len``, ``context = kv_len`` and no re-read of the KV cache (the measured
  kernels are GQA-aware: a KV head read once for its query group).
  Both take the :class:`~diffcost._terms.attention.AttentionShape` of the point (standard
  attention: ``kv_elements = kv_heads (e + e_v)``, ``decode_dim = e + e_v``), the achievable
  peak of ``dtype`` and the bytes of ``dtype`` (Q, O) and ``kv_dtype`` (K, V).

Error ``= predicted / measured - 1``.  The table groups the points by operation, chip, format and
regime (GEMM rows ``m``: small ``m <= 64``, medium ``64 < m <= 1024``, large ``m > 1024``, the
regimes of issue 41; attention by keys per sequence: short ``kv_len <= 4096``, long beyond)
and gives the median |error| and median error.  Leave-one-source-out: the GEMM and fused
attention constants of a chip family are fitted on these points
(:mod:`diffcost._analysis.calibrate_kernels`); each GEMM and prefill point of a family with
several sources is also predicted by the family's fit without its own source (``held_out``),
the honest error of those constants; decode attention has no constant fitted on these points.
"""

from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np

from .._core.smooth import EXACT
from .._inputs.hardware import System
from .._inputs.kernel_measurements import KernelMeasurement, read_kernel_measurements
from .._inputs.loader import load_system
from .._terms.attention import decode_attention, prefill_attention
from .._terms.gemm import GemmFormat, gemm_time_s
from .._terms.power import burst
from .calibrate_kernels import fit_kernels, fixed_s
from .kernel_points import DTYPE_BYTES, attention_shape, peak_of, prefill_args

#: Upper bounds of the GEMM row regimes (``m``), in order; above the last: "large".
GEMM_REGIMES = (("small", 64), ("medium", 1024))
#: Largest ``kv_len`` of a "short" attention call; beyond: "long".
SHORT_ATTENTION = 4096
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
    return "short" if k.shape["kv_len"] <= SHORT_ATTENTION else "long"


@dataclass(frozen=True)
class KernelPrediction:
    """The model's seconds for one kernel: its term at the top clock, and the fixed cost a cost
    model charges per kernel as the source timed it."""

    term_s: float
    fixed_s: float


def predict_gemm(k: KernelMeasurement, system: System) -> KernelPrediction:
    """:func:`~diffcost._terms.gemm.gemm_time_s` of the point's shape and format on ``system``
    at the top clock, and the fixed cost per kernel (module docstring)."""
    fmt = GemmFormat(peak_of(k, system), jnp.asarray(DTYPE_BYTES[k.dtype]))
    s = k.shape
    term = gemm_time_s(float(s["m"]), float(s["n"]), float(s["k"]), fmt, burst(system), EXACT)
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


_PREDICT = {
    "gemm": predict_gemm,
    "attention_prefill": predict_prefill,
    "attention_decode": predict_decode,
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
    """Median errors by (op, chip, dtype, regime), by op and by source."""
    groups: dict[tuple[str, str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["op"], r["chip"], r["dtype"], r["regime"]), []).append(r)
    keys = sorted(groups, key=lambda g: (g[0], g[1], g[2], _REGIME_ORDER.index(g[3])))
    by_group = [
        {"op": g[0], "chip": g[1], "dtype": g[2], "regime": g[3], **_stats(groups[g])} for g in keys
    ]
    sources = sorted({r["source"] for r in rows})
    by_source = {s: _stats([r for r in rows if r["source"] == s]) for s in sources}
    ops = sorted({r["op"] for r in rows})
    by_op = {o: _stats([r for r in rows if r["op"] == o]) for o in ops}
    return {
        "by_group": by_group,
        "by_op": by_op,
        "by_source": by_source,
        "all": _stats(rows) if rows else None,
        "leave_one_source_out": "GEMM and prefill attention points of a chip family with "
        "several sources: predicted by the family's kernel fit without their source (held_out); "
        "decode attention: no constant is fitted on these points",
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
    lines += ["", "by operation"]
    for op, st in summary["by_op"].items():
        lines.append(line(f"{op:<42}", st))
    lines += ["", "by source (held-out: the GEMM fit of the source's chip family without it)"]
    for src, st in summary["by_source"].items():
        lines.append(line(f"{src:<42}", st))
    return lines


__all__ = ["error_lines", "gemm_regime", "kernel_rows", "kernel_table", "validate_kernels"]
