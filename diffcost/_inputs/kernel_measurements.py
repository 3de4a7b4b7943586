"""Published per-kernel timings: ``specs/kernels/*.toml``, read strictly.

One file per source (a library's README table, a paper's table, a benchmark log).  Each
``[[kernel]]`` is one kernel call: its operation (``op``: a GEMM, a fused attention call or an
all-reduce over ``ranks`` ranks of ``message_<unit>`` bytes each), the chip it ran on, its
input format and shape, and the number as published, either the time of one call
(``time_<unit>``) or the FLOP/s the source computed from it (``achieved_<unit>``, converted here
to seconds as ``2 m n k / achieved``).  The files are not end-to-end measurements:
``diffcost validate`` does not read them, ``diffcost validate --kernels`` does
(:mod:`diffcost._analysis.validate_kernels`).  Every problem of every file is reported at once
(:class:`SpecError`: file, key, reason).  See ``specs/SCHEMA.md`` ("kernel-measurements").
"""

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._core.errors import Problem, SpecError
from . import schema as S
from .checker import Checker, builtin_names, read_toml, specs_dir

_ATTENTION = ("batch", "q_len", "kv_len", "heads", "kv_heads", "head_dim")
#: Keys of a kernel's shape that each operation requires (every other shape key is refused).
SHAPE_KEYS: dict[str, tuple[str, ...]] = {
    "gemm": ("m", "n", "k"),
    "attention_prefill": (*_ATTENTION, "causal"),
    "attention_decode": _ATTENTION,
    "all_reduce": ("ranks", "message_bytes", "implementation", "cuda_graph"),
}
#: Shape keys an operation may give (default in :func:`_shape`).
OPTIONAL_KEYS: dict[str, tuple[str, ...]] = {
    "gemm": ("power_limit_w",),
    "attention_prefill": ("v_head_dim", "kv_dtype", "latent_kv"),
    "attention_decode": ("v_head_dim", "kv_dtype", "latent_kv"),
    "all_reduce": ("staged_copy",),
}
_SHAPE = {k for keys in (*SHAPE_KEYS.values(), *OPTIONAL_KEYS.values()) for k in keys}


@dataclass(frozen=True)
class KernelMeasurement:
    """One published kernel timing.

    Attributes:
        id: identifier (unique over all kernel files); source: the file's ``name``.
        op: the operation (:data:`~diffcost._inputs.schema.KERNEL_OPS`).
        chip: built-in chip name or resolved path.
        dtype: input format (:data:`~diffcost._inputs.schema.KERNEL_DTYPES`).
        shape: the operation's shape keys (:data:`SHAPE_KEYS`, :data:`OPTIONAL_KEYS` with their
            defaults: ``v_head_dim = head_dim``, ``kv_dtype = dtype``, ``latent_kv = False``,
            ``staged_copy = False``;
            a GEMM's ``power_limit_w`` only where given) -> value; an all-reduce's
            ``message_bytes`` in bytes per rank.
        time_s: measured seconds of one call (converted from ``achieved`` where published so).
        published: ``"time"`` or ``"achieved"``: which quantity the source gave.
        as_published: the source's own words.
        unmodelled: an effect in the timing the term does not model: the point is predicted
            and shown but weighs nothing in the kernel fit.
        timing: what the time includes, the file's ``timing``
            (:data:`~diffcost._inputs.schema.KERNEL_TIMINGS`): ``kernel`` (GPU time of the
            kernel alone) or ``call`` (host-side timing, the launch in it).
        tiling: how the file's GEMM kernels spread output tiles over the multiprocessors
            (:data:`~diffcost._inputs.schema.KERNEL_TILINGS`; default ``balanced``).
        operands: whether the file's calls reuse their operands from cache
            (:data:`~diffcost._inputs.schema.KERNEL_OPERANDS`; default ``fresh``).
    """

    id: str
    source: str
    op: str
    chip: str
    dtype: str
    shape: dict[str, Any]
    time_s: float
    published: str
    as_published: str
    verified: bool
    flags: tuple[str, ...] = ()
    notes: str | None = None
    timing: str = "call"
    unmodelled: str | None = None
    tiling: str = "balanced"
    operands: str = "fresh"
    path: str = ""
    source_info: dict[str, str] = field(default_factory=dict)


def kernels_dir() -> Path:
    """Built-in kernel timing files: ``specs/kernels``."""
    return specs_dir() / S.KIND_DIRS["kernel-measurements"]


def gemm_flop(shape: dict[str, int]) -> float:
    """FLOP of one GEMM of ``shape``: ``2 m n k``."""
    return 2.0 * shape["m"] * shape["n"] * shape["k"]


def read_kernel_measurements(paths: Sequence[str | Path] | None = None) -> list[KernelMeasurement]:
    """Every ``[[kernel]]`` of the given files (default: every built-in one), in file order.

    Raises:
        SpecError: every problem of every file at once (file, key, reason).
    """
    files = sorted(kernels_dir().glob("*.toml")) if paths is None else [Path(p) for p in paths]
    if not files:
        raise SpecError([Problem(str(kernels_dir()), "", "no kernel measurement files")])
    problems: list[Problem] = []
    out: list[KernelMeasurement] = []
    seen: dict[str, str] = {}
    for path in files:
        try:
            got = _read_file(path)
        except SpecError as err:
            problems += err.problems
            continue
        for k in got:
            if k.id in seen:
                problems.append(
                    Problem(str(path), f"kernel[{k.id}]", f"duplicate id (also in {seen[k.id]})")
                )
            seen[k.id] = str(path)
        out += got
    if problems:
        raise SpecError(problems)
    return out


def _read_file(path: Path) -> list[KernelMeasurement]:
    data = read_toml(path)
    ck = Checker(str(path))
    top, info = ck.document(data, S.KINDS["kernel-measurements"], stem=path.stem)
    raw = data.get("kernel")
    if not isinstance(raw, list) or not raw:
        ck.add("kernel", "missing: at least one [[kernel]] table")
        raw = []
    chips = set(builtin_names("chip"))
    name = top.get("name", path.stem)
    out: list[KernelMeasurement] = []
    ids: set[str] = set()
    for i, table in enumerate(raw):
        k = _kernel(ck, path, name, i, table, info, chips, top.get("timing", "call"))
        if k is None:
            continue
        k = dataclasses.replace(
            k, tiling=top.get("tiling", "balanced"), operands=top.get("operands", "fresh")
        )
        if k.id in ids:
            ck.add(f"kernel[{i}].id", f"duplicate id {k.id!r}")
        ids.add(k.id)
        out.append(k)
    ck.raise_if_any()
    return out


def _kernel(
    ck: Checker,
    path: Path,
    source: str,
    i: int,
    raw: Any,
    info: dict[str, str],
    chips: set[str],
    timing: str,
) -> KernelMeasurement | None:
    """One ``[[kernel]]``: checked, its chip resolved, its number made seconds."""
    if not isinstance(raw, dict):
        ck.add(f"kernel[{i}]", "must be a table")
        return None
    before = len(ck.problems)
    kid = raw.get("id")
    pre = f"kernel[{kid}]." if isinstance(kid, str) and kid else f"kernel[{i}]."
    v = ck.table(raw, S.KERNEL_POINT, pre)
    chip = v.get("chip")
    if chip is not None and chip not in chips:
        local = (path.parent / chip).resolve()
        if local.is_file():
            chip = str(local)
        else:
            ck.add(pre + "chip", f"unknown chip {chip!r} (not a built-in name, nor a file)")
    given = [key for key in ("time_s", "achieved_flop_per_s") if key in v]
    if len(given) != 1:
        ck.add(
            pre + "time",
            "give exactly one of time_<unit> and achieved_<unit>"
            + (f" (got both: {', '.join(given)})" if given else ""),
        )
    op = v.get("op")
    if op is not None:
        _check_shape(ck, pre, op, v)
        if op != "gemm" and "achieved_flop_per_s" in v:
            ck.add(pre + "achieved", f"only a gemm may give achieved FLOP/s; give {op}'s time")
        if op != "all_reduce" and v.get("dtype") == "fp32":
            ck.add(
                pre + "dtype", f"fp32 is an all_reduce format only (a {op} runs on matrix units)"
            )
    if len(ck.problems) > before:
        return None
    shape = _shape(v)
    if given[0] == "time_s":
        time_s, published = float(v["time_s"]), "time"
    else:
        time_s, published = gemm_flop(shape) / float(v["achieved_flop_per_s"]), "achieved"
    return KernelMeasurement(
        id=v["id"],
        source=source,
        op=v["op"],
        chip=str(chip),
        dtype=v["dtype"],
        shape=shape,
        time_s=time_s,
        published=published,
        as_published=v["as_published"],
        verified=v["verified"],
        flags=tuple(v.get("flags", ())),
        notes=v.get("notes"),
        path=str(path),
        source_info=info,
        timing=timing,
        unmodelled=v.get("unmodelled"),
    )


def _check_shape(ck: Checker, pre: str, op: str, v: dict[str, Any]) -> None:
    """The operation's shape keys are all there, and no other operation's."""
    flagged = {p.key for p in ck.problems}  # present but refused: not "missing" as well
    for key in SHAPE_KEYS[op]:
        stem = key.removesuffix("_bytes")
        if key not in v and not any(
            f == pre + stem or f.startswith(pre + stem + "_") for f in flagged
        ):
            needs = ", ".join(k.replace("_bytes", "_<unit>") for k in SHAPE_KEYS[op])
            ck.add(pre + key, f"missing: a kernel of op {op!r} needs {needs}")
    allowed = {*SHAPE_KEYS[op], *OPTIONAL_KEYS[op]}
    for key in sorted(_SHAPE & set(v) - allowed):
        ck.add(pre + key, f"not a key of op {op!r} (its keys: {', '.join(sorted(allowed))})")


def _shape(v: dict[str, Any]) -> dict[str, Any]:
    """The shape of a checked kernel, with its defaults."""
    op = v["op"]
    shape = {key: v[key] for key in SHAPE_KEYS[op]}
    if op in ("attention_prefill", "attention_decode"):
        shape["v_head_dim"] = v.get("v_head_dim", v["head_dim"])
        shape["kv_dtype"] = v.get("kv_dtype", v["dtype"])
        shape["latent_kv"] = v.get("latent_kv", False)
    if op == "all_reduce":
        shape["staged_copy"] = v.get("staged_copy", False)
    if op == "gemm" and "power_limit_w" in v:
        shape["power_limit_w"] = v["power_limit_w"]
    return shape


__all__ = ["KernelMeasurement", "kernels_dir", "read_kernel_measurements"]
