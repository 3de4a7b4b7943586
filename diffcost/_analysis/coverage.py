"""Which published measurements stand behind a prediction, and whether its MFU is plausible.

A prediction is only as good as the measurements its efficiency constants were fitted to
(:mod:`diffcost._analysis.calibrate`).  For a chip and the number formats a job uses this module
says whether any point of ``specs/measurements`` ran on that chip, whether each format was
measured on it, and where the chip's efficiency constants come from (fitted to its own points,
inherited from its family's fit, a per-chip prior from public microbenchmarks, or the global
values).  ``diffcost train`` and ``diffcost serve`` print it (a ``coverage`` object in
``--json``, one line under the table).

MFU plausibility (issue 17): the MFU of a published training point is recomputed from its
measured throughput with the model's own convention (:func:`diffcost._train.cost.step_flop`,
PaLM App. B: ``MFU = 3 F_fwd(B, s) / (B s) * T / (N P_bf16)``, ``T`` the measured tokens/s of
the job, ``N`` chips, ``P_bf16`` the chip's dense bf16 peak); a predicted MFU above the best
published one for the same chip and training precision is flagged.  Where no point of that
chip and precision exists the check says so and flags nothing.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np

from .._core.disk_cache import cached_json
from .._inputs.calibration import FAMILIES
from .._inputs.checker import specs_dir
from .._inputs.hardware import FORMATS
from .._inputs.loader import load_chip, load_model, load_spec
from .._inputs.measurements import Measurement, measurements_dir
from .._serve.engine import DEFAULT_ENGINE
from .._train.regimes import zero3_multinode_weight
from .plans import load_load_measurements, load_measurements
from .validate import chip_name

_BF16 = FORMATS.index("bf16")


@dataclass(frozen=True)
class Measured:
    """What one published point measured: chip, job, formats and (training) its MFU."""

    id: str
    source: str
    chip: str
    kind: str
    formats: tuple[str, ...]
    mfu: float | None
    features: frozenset[str] = frozenset()


def plan_features(kind: str, values: Mapping[str, Any]) -> frozenset[str]:
    """The parallel, batching and engine features of a plan's plain values (a published
    point's ``[point.plan]``, a job's plan values, a searched plan row) that a published run
    may or may not stand behind.  Only features every published point records are named
    (degrees, ZeRO stage, LoRA, engine, batching mode; not recomputation, which the training
    rule chooses where a paper does not say)."""
    v = values
    out: set[str] = set()
    if kind == "train":
        if int(v.get("pp", 1)) > 1:
            out.add("pipeline parallelism")
        if int(v.get("virtual_stages") or 1) > 1:
            out.add("interleaved pipeline")
        if int(v.get("cp", 1)) > 1:
            out.add("context parallelism")
        if int(v.get("ep") or 1) > 1:
            out.add("expert parallelism")
        out.add(f"ZeRO-{int(v.get('zero', 0))}")
        if v.get("lora_rank"):
            out.add("LoRA")
        shard = v.get("shard_group")
        if shard and int(shard) < int(v.get("dp", shard)):
            out.add("hybrid sharding")
    else:
        out.add(f"engine {v.get('engine') or DEFAULT_ENGINE}")
        out.add(f"{v.get('mode') or 'static'} batching")
        if int(v.get("pp", 1)) > 1:
            out.add("pipeline parallelism")
        if v.get("expert_parallel") and int(v.get("tp", 1)) > 1:
            out.add("expert parallelism")
    return frozenset(out)


def _point_formats(m: Measurement) -> tuple[str, ...]:
    if m.kind == "train":
        return (str(m.plan["precision"]),)
    keys = ("weight_format", "compute_format", "kv_format")
    return tuple(sorted({str(m.plan[k]) for k in keys if k in m.plan}))


def measured_mfu(m: Measurement, chip: str) -> float:
    """MFU of a published training point from its measured tokens/s (dimensionless):
    ``3 F_fwd(B, s) / (B s) * T / (N P_bf16)`` (the convention of ``TrainCost.mfu``)."""
    gb, s = float(m.plan["global_batch"]), float(m.plan["seq_len"])
    flop_per_token = 3.0 * float(load_model(m.model).forward_flop(gb, s)) / (gb * s)
    peak = float(load_chip(chip).peak_flop_per_s[_BF16])
    return flop_per_token * m.measured / (m.chips * peak)


def index(points: Sequence[Measurement]) -> list[Measured]:
    """Every predicted (not excluded) point as a :class:`Measured`."""
    out = []
    for m in points:
        if m.excluded is not None:
            continue
        chip = chip_name(m)
        # LoRA trains less than the model's 6N FLOP per token (no weight gradients of frozen
        # weights): its "MFU" in the full-training convention is not comparable (>100%); a
        # fine-tuning run (short packed samples, one node) is no pre-training yardstick either.
        full = m.metric == "train_throughput" and not m.plan.get("lora_rank", 0)
        full = full and m.workload == "pretraining"
        mfu = measured_mfu(m, chip) if full else None
        feats = plan_features(m.kind, m.plan)
        out.append(Measured(m.id, m.source, chip, m.kind, _point_formats(m), mfu, feats))
    return out


@cache
def builtin_index() -> tuple[Measured, ...]:
    """:func:`index` of the built-in ``specs/measurements`` (read once per process, and kept on
    disk between runs while the specs and the package are unchanged:
    :func:`~diffcost._core.disk_cache.cached_json`, one file per float type: the values are
    those the process would compute itself, bit for bit)."""

    def compute() -> list[list[Any]]:
        return [
            [m.id, m.source, m.chip, m.kind, list(m.formats), m.mfu, sorted(m.features)]
            for m in index(load_measurements())
        ]

    # Stored per float type: a point's MFU goes through JAX arithmetic (the model's parameter
    # count in `_inputs/measurements.py`, its FLOP), which differs in the 8th digit between a
    # float32 process (the command line) and a float64 one (the tests, JAX_ENABLE_X64=1); one
    # shared file gave a command the value of whichever process had filled it.
    dtype = np.dtype(jnp.result_type(float)).name
    package = Path(__file__).resolve().parents[1]
    rows = cached_json(f"coverage-index-{dtype}", [specs_dir(), package], compute)
    return tuple(Measured(r[0], r[1], r[2], r[3], tuple(r[4]), r[5], frozenset(r[6])) for r in rows)


@cache
def outside_fit_serving_features() -> frozenset[str]:
    """Serving features (:func:`plan_features`) of the published runs that are not in the fit:
    the points under load (``specs/measurements/load``) and the held-out ones
    (``specs/measurements/held-out``, evaluation only).  They stand behind an engine or a
    batching mode as much as a fitted point does; they do not count as measurements of a chip
    (the counts are of the points the efficiency constants were fitted to).  Kept on disk like
    :func:`builtin_index`."""

    def compute() -> list[str]:
        held_out = sorted((measurements_dir() / "held-out").glob("*.toml"))
        points = [*load_load_measurements(), *(load_measurements(held_out) if held_out else [])]
        feats: set[str] = set()
        for m in points:
            if m.excluded is None and getattr(m, "kind", "serve") == "serve":
                feats |= plan_features("serve", m.plan)
        return sorted(feats)

    package = Path(__file__).resolve().parents[1]
    return frozenset(cached_json("coverage-outside-fit", [specs_dir(), package], compute))


def family_of(chip: str) -> str | None:
    """The calibration family of a chip (:data:`diffcost._analysis.calibrate.FAMILIES`)."""
    return next((f for f, members in FAMILIES.items() if chip in members), None)


def efficiency_basis(chip: str, calibration: str = "default") -> str:
    """Where a chip's efficiency constants come from in a calibration file: its own
    ``source.<chip>`` (a prior from public numbers), its family's fit, or the global values."""
    spec = load_spec("calibration", calibration)
    if chip in spec.info.source:
        return "prior"
    if chip in spec.values.get("overrides", {}):
        return "family fit"
    return "global"


def coverage(
    chip: str,
    kind: str,
    formats: Sequence[str],
    calibration: str = "default",
    points: Sequence[Measured] | None = None,
    features: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """Whether measurements stand behind a ``kind`` ("train"/"serve") job on ``chip`` using
    ``formats``: the chip measured (any job), this job measured on it, the formats never
    measured on it, the chip's family and whether any of its chips is measured, where the
    efficiency constants come from, and the plan's ``features`` (:func:`plan_features`) no
    published ``kind`` run on any chip has (with the built-in points, the serving runs outside
    the fit count too: :func:`outside_fit_serving_features`); ``note`` says it in one
    sentence."""
    pts = builtin_index() if points is None else points
    on_chip = [p for p in pts if p.chip == chip]
    fam = family_of(chip)
    fam_chips = set(FAMILIES.get(fam, ())) if fam else {chip}
    measured_formats = {f for p in on_chip for f in p.formats}
    out = {
        "chip": chip,
        "chip_measured": bool(on_chip),
        "job_measured": any(p.kind == kind for p in on_chip),
        "measurements": sum(1 for p in on_chip if p.kind == kind),
        "family": fam,
        "family_measured": any(p.chip in fam_chips for p in pts),
        "formats": sorted(set(formats)),
        "formats_unmeasured": sorted(set(formats) - measured_formats),
        "efficiency": efficiency_basis(chip, calibration),
        "features_unmeasured": sorted(
            features
            - {f for p in pts if p.kind == kind for f in p.features}
            - (outside_fit_serving_features() if kind == "serve" and points is None else set())
        ),
    }
    out["note"] = _note(out, kind)
    return out


def _note(c: dict[str, Any], kind: str) -> str:
    """One sentence on what stands behind the prediction."""
    eff = {
        "prior": f"its own prior from public numbers (source.{c['chip']} of the calibration file)",
        "family fit": f"the {c['family']} family's fit",
        "global": "the global fit (fitted mostly on A100/H100)",
    }[c["efficiency"]]
    if not c["chip_measured"]:
        head = f"no published measurement on {c['chip']}"
    elif not c["job_measured"]:
        head = f"no published {kind} measurement on {c['chip']}"
    else:
        head = f"{c['measurements']} published {kind} measurements on {c['chip']}"
    tail = ""
    if c["formats_unmeasured"]:
        tail = f"; never measured on it: {', '.join(c['formats_unmeasured'])}"
    if c.get("features_unmeasured"):
        tail += f"; no published run has: {', '.join(c['features_unmeasured'])}"
    return f"{head}; efficiency from {eff}{tail}"


#: Training precisions that run at the same dense peak (the 16-bit tensor-core formats: every
#: chip spec that lists both gives them one peak), so an MFU in one is compared with MFUs in
#: either.
_SAME_PEAK = {"bf16": ("bf16", "fp16"), "fp16": ("bf16", "fp16")}


def best_published(
    chip: str, precision: str, points: Sequence[Measured] | None = None
) -> Measured | None:
    """The published pre-training point of the highest MFU on ``chip`` in a precision of the
    same peak as ``precision`` (bf16 and fp16 together); None where there is none."""
    pts = builtin_index() if points is None else points
    peers = _SAME_PEAK.get(precision, (precision,))
    same = [p for p in pts if p.chip == chip and p.mfu is not None and set(peers) & set(p.formats)]
    return max(same, key=lambda p: float(np.asarray(p.mfu))) if same else None


def mfu_ceilings(
    chip: str, precisions: Sequence[str], points: Sequence[Measured] | None = None
) -> tuple[tuple[str, float], ...]:
    """``(precision, best published MFU)`` of every precision of ``precisions`` that has a
    published point on ``chip`` (:func:`best_published`): the ceilings a plan search keeps
    its answer under (:attr:`~diffcost._train.space.TrainSearchSpace.max_mfu`)."""
    out = []
    for fmt in precisions:
        best = best_published(chip, str(fmt), points)
        if best is not None:
            out.append((str(fmt), float(np.asarray(best.mfu))))
    return tuple(out)


def mfu_check(
    chip: str, precision: str, mfu: float, points: Sequence[Measured] | None = None
) -> dict[str, Any]:
    """A predicted training MFU against the best published one for the same chip and a
    precision of the same peak (bf16 and fp16 together; ``above_best_published``: flagged);
    where none exists, says so."""
    peers = _SAME_PEAK.get(precision, (precision,))
    best = best_published(chip, precision, points)
    out: dict[str, Any] = {"predicted_mfu": mfu, "precision": precision}
    label = "/".join(peers)
    if best is None:
        out.update(best_published_mfu=None, best_published_point=None, above_best_published=False)
        out["note"] = f"no published {label} training measurement on {chip} to compare MFU"
        return out
    best_mfu = float(np.asarray(best.mfu))
    above = mfu > best_mfu
    out.update(
        best_published_mfu=best_mfu,
        best_published_point=best.id,
        above_best_published=above,
    )
    verdict = "above" if above else "within"
    out["note"] = (
        f"predicted MFU {mfu:.1%} is {verdict} the best published {label} MFU on {chip}: "
        f"{best_mfu:.1%} ({best.id}, {best.source})"
    )
    return out


#: Regimes where published runs disagree with the model far beyond its error and no mechanism
#: is modelled: (name, source of the measurements, what they show).
UNMODELLED_REGIMES = {
    "zero3_multi_node": (
        "megatron-sc21-zero3",
        "DeepSpeed ZeRO-3 sharding over more than one node: the published DeepSpeed ZeRO-3 runs at "
        "384-2,240 A100 (Narayanan et al. SC'21, Table 2; "
        "specs/measurements/megatron-sc21-zero3.toml) did not speed up with more GPUs and ran "
        "11-34% slower than this model predicts even with each GPU's collectives through its own "
        "NIC; the rest of the mechanism is not modelled (see `diffcost validate`). PyTorch FSDP "
        "over nodes (the default, llm-foundry-mpt-h100.toml) is not flagged",
    ),
}


def unmodelled_regimes(kind: str, plan: Any, system: Any) -> list[dict[str, str]]:
    """The :data:`UNMODELLED_REGIMES` an exact plan on ``system`` is in: DeepSpeed ZeRO-3
    (``deepspeed_zero3``) sharding over more than one node (:func:`zero3_multinode_weight`).
    PyTorch FSDP over nodes is measured (llm-foundry's MPT runs on 16-512 H100 keep the
    single node's error) and not flagged."""
    out: list[dict[str, str]] = []
    if kind == "train" and float(zero3_multinode_weight(plan, system)) > 0.5:
        source, note = UNMODELLED_REGIMES["zero3_multi_node"]
        out.append({"regime": "zero3_multi_node", "source": source, "note": note})
    return out


def formats_of(plan: Any, kind: str) -> tuple[str, ...]:
    """Number formats an exact plan uses (argmax of its one-hot format weights)."""
    keys = ("precision",) if kind == "train" else ("weight_format", "compute_format", "kv_format")
    return tuple(FORMATS[int(np.argmax(np.asarray(getattr(plan, k))))] for k in keys)


def job_chip(refs: dict[str, Any]) -> str:
    """Chip name of a resolved job (``refs`` of :func:`diffcost.cli._resolve.resolve_job`)."""
    if refs.get("system"):
        system = load_spec("system", refs["system"])
        return load_spec("chip", system.values["chip"], system.info.path).info.name
    return load_spec("chip", refs["chip"]).info.name


def job_coverage(
    kind: str,
    refs: dict[str, Any],
    plan: Any,
    calibration: str,
    mfu: float | None = None,
    system: Any = None,
    values: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``coverage`` object of a ``diffcost train|serve`` prediction: :func:`coverage` of
    its chip, formats and (``values``: the plan's plain values) plan features, for training
    (``mfu`` given) :func:`mfu_check` under ``"mfu"``, and (``system`` given) the
    :func:`unmodelled_regimes` of the plan under ``"unmodelled"``."""
    chip = job_chip(refs)
    formats = formats_of(plan, kind)
    feats = plan_features(kind, values) if values is not None else frozenset()
    out = coverage(chip, kind, formats, calibration, features=feats)
    if mfu is not None:
        out["mfu"] = mfu_check(chip, formats[0], mfu)
    if system is not None:
        out["unmodelled"] = unmodelled_regimes(kind, plan, system)
    return out


def coverage_lines(cov: dict[str, Any]) -> list[str]:
    """The text lines printed under a prediction's table: coverage, and (training) the MFU
    against the best published one, ``IMPLAUSIBLE`` when above it."""
    lines = [f"coverage: {cov['note']}"]
    mfu = cov.get("mfu")
    if mfu is not None:
        lines.append(
            f"{'IMPLAUSIBLE' if mfu['above_best_published'] else 'MFU check'}: {mfu['note']}"
        )
    if cov.get("set_aside"):
        lines.append(cov["set_aside"]["line"])
    lines += [f"UNMODELLED: {r['note']}" for r in cov.get("unmodelled", [])]
    return lines


__all__ = [
    "UNMODELLED_REGIMES",
    "Measured",
    "best_published",
    "builtin_index",
    "coverage",
    "coverage_lines",
    "efficiency_basis",
    "formats_of",
    "index",
    "job_chip",
    "job_coverage",
    "measured_mfu",
    "mfu_ceilings",
    "mfu_check",
    "plan_features",
    "outside_fit_serving_features",
    "unmodelled_regimes",
]
