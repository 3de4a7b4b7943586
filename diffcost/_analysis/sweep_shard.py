"""Shards of a sweep: a deterministic split of its flat point indices into contiguous ranges,
tables stamped with what sweep they belong to, and the merge that checks and joins them.

Shard ``i`` of ``n`` evaluates points ``[floor(i P / n), floor((i + 1) P / n))`` of a sweep of
``P`` points, so shards differ in size by at most one point and their tables, concatenated in
shard order (or sorted by the ``point`` column), are the unsharded table row for row.  Each
shard's table carries the :data:`STAMP` columns (sweep name, job, a hash of the sweep, shard
index and count, total points), so any scheduler (SLURM array, Kubernetes jobs, Ray tasks) can
run the shards and :func:`merge_tables` can refuse shards of different sweeps, missing or
duplicated points.
"""

import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from .._core.errors import Problem, SpecError
from .sweep_spec import Sweep

#: Columns a shard's table adds (constant within a shard), dropped by the merge.
STAMP = ("shard_sweep", "shard_job", "shard_hash", "shard_index", "shard_count", "shard_points")
_SHARD = re.compile(r"\s*(-?\d+)\s*/\s*(-?\d+)\s*")


def parse_shard(text: str, flag: str = "shard") -> tuple[int, int]:
    """``"I/N"`` -> ``(I, N)`` with ``N >= 1`` and ``0 <= I < N``; otherwise an input error
    naming the flag (``--shard``) and the reason."""
    m = _SHARD.fullmatch(text)
    if m is None:
        reason = f"must be I/N (shard I of N, counted from 0, e.g. 0/4), got {text!r}"
        raise SpecError([Problem("<flags>", flag, reason)])
    i, n = int(m[1]), int(m[2])
    if n < 1:
        raise SpecError([Problem("<flags>", flag, f"the shard count N must be >= 1, got {n}")])
    if not 0 <= i < n:
        reason = f"the shard index I must be in 0..{n - 1} (counted from 0), got {i}"
        raise SpecError([Problem("<flags>", flag, reason)])
    return i, n


def shard_range(points: int, i: int, n: int) -> range:
    """Flat point indices of shard ``i`` of ``n`` of a sweep of ``points`` points: contiguous,
    sizes differ by at most one (empty when there are more shards than points)."""
    return range(i * points // n, (i + 1) * points // n)


def sweep_digest(sweep: Sweep, intervals: bool = True) -> str:
    """A hash (16 hex digits of SHA-256) of what a sweep's values depend on: its file's bytes
    (when it came from one), its tables, outputs and calibration as read, and ``intervals``."""
    h = hashlib.sha256()
    source = Path(sweep.source)
    if source.is_file():
        h.update(source.read_bytes())
    described = [sweep.job, sweep.base, sweep.grid, sweep.zip, sweep.outputs, sweep.calibration]
    h.update(json.dumps([*described, intervals], sort_keys=True, default=str).encode())
    return h.hexdigest()[:16]


def stamp(table: pd.DataFrame, sweep: Sweep, digest: str, i: int, n: int) -> pd.DataFrame:
    """``table`` (shard ``i`` of ``n`` of ``sweep``) with the :data:`STAMP` columns last."""
    values = (sweep.name, sweep.job, digest, i, n, sweep.size())
    return table.assign(**dict(zip(STAMP, values, strict=True)))


def read_table(path: str | Path) -> pd.DataFrame:
    """A sweep table written as CSV or Parquet (by its suffix; anything else is read as CSV)."""
    path = Path(path)
    if not path.is_file():
        raise SpecError([Problem(str(path), "", "file not found")])
    return pd.read_parquet(path) if path.suffix.lower() == ".parquet" else pd.read_csv(path)


def write_table(table: pd.DataFrame, path: str | Path) -> None:
    """Write ``table`` as Parquet (suffix ``.parquet``) or CSV, creating the folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".parquet":
        table.to_parquet(path, index=False)
    else:
        table.to_csv(path, index=False)


def _identity(table: pd.DataFrame, source: str) -> tuple[Any, ...]:
    """The stamp of one shard's table: one value per :data:`STAMP` column."""
    missing = [c for c in ("point", *STAMP) if c not in table]
    if missing:
        reason = f"not a shard of a sweep (no column {', '.join(missing)}; write it with --shard)"
        raise SpecError([Problem(source, "", reason)])
    if table.empty:
        return (None,) * len(STAMP)
    if any(table[c].nunique() > 1 for c in STAMP):
        raise SpecError(
            [Problem(source, "", "mixes shards (several values of the shard_ columns)")]
        )
    return tuple(
        table[c].iloc[0].item() if hasattr(table[c].iloc[0], "item") else table[c].iloc[0]
        for c in STAMP
    )


def merge_tables(
    tables: Sequence[pd.DataFrame], sources: Sequence[str]
) -> tuple[pd.DataFrame, dict]:
    """Concatenate shard tables into the sweep's table, sorted by ``point``, stamp dropped.

    Refused (every problem at once): a table that is not a shard, shards of different sweeps
    (name, job, hash or shard count differ), a shard given twice, missing shards, and points
    missing or duplicated.  Returns the table and the shared stamp (``name``, ``job``,
    ``hash``, ``count``, ``points``)."""
    ids = [_identity(t, s) for t, s in zip(tables, sources, strict=True)]
    known = [(i, s) for i, s in zip(ids, sources, strict=True) if i[0] is not None]
    problems: list[Problem] = []
    if not known:
        raise SpecError([Problem("command line", "FILES", "no shard has any point")])
    first, where = known[0]
    for ident, source in known[1:]:
        for k, name in ((0, "sweep"), (1, "job"), (2, "hash"), (4, "shard count"), (5, "points")):
            if ident[k] != first[k]:
                reason = f"{name} {ident[k]!r} differs from {first[k]!r} of {where}: another sweep"
                problems.append(Problem(source, STAMP[k], reason))
    if problems:
        raise SpecError(problems)
    count, total = int(first[4]), int(first[5])
    seen = [int(i[3]) for i, _ in known]
    twice = sorted({i for i in seen if seen.count(i) > 1})
    missing_shards = sorted(set(range(count)) - set(seen))
    merged = pd.concat(tables, ignore_index=True).sort_values("point", kind="stable")
    point = merged["point"].to_numpy()
    duplicated = sorted(set(point[pd.Series(point).duplicated().to_numpy()].tolist()))
    absent = sorted(set(range(total)) - set(point.tolist()))
    for what, values in (
        (f"shards given twice (of {count})", twice),
        (f"missing shards (of {count})", missing_shards),
        (f"duplicated points (of {total})", duplicated),
        (f"missing points (of {total})", absent),
    ):
        if values:
            shown = ", ".join(map(str, values[:10])) + (", ..." if len(values) > 10 else "")
            problems.append(Problem("command line", "FILES", f"{what}: {shown}"))
    if problems:
        raise SpecError(problems)
    table = merged.drop(columns=list(STAMP)).reset_index(drop=True)
    info = {"name": first[0], "job": first[1], "hash": first[2], "count": count, "points": total}
    return table, info
