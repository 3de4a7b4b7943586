"""Discrete plans and exact local search: the candidate table, the integer neighbourhood
moves and the refinement that :func:`diffcost._search.core.search` runs on its rounded plans.

A candidate set is a :class:`Candidates` table (one numpy column per searched axis or choice);
a single plan is a table of one row.
"""

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Axis:
    """One searched integer degree: its allowed values (sorted, positive)."""

    name: str
    values: tuple[float, ...]

    def nearest_two(self, log2_value: float) -> list[float]:
        """The two allowed values nearest to ``2**log2_value`` in log space."""
        logs = np.log2(np.asarray(self.values))
        order = np.argsort(np.abs(logs - log2_value))
        return [self.values[i] for i in order[: min(2, len(order))]]


@dataclass(frozen=True)
class Choice:
    """One searched categorical: the names of its allowed options."""

    name: str
    options: tuple[Any, ...]


@dataclass(frozen=True)
class Candidates:
    """Discrete plans as named columns (one numpy array per axis or choice, equal lengths).

    A single plan is a :class:`Candidates` of one row; :meth:`value` reads its coordinates.
    """

    columns: Mapping[str, np.ndarray]

    def __len__(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    def take(self, index: np.ndarray | Sequence[int]) -> "Candidates":
        """The rows at ``index``, in that order."""
        index = np.asarray(index, dtype=int)
        return Candidates({k: v[index] for k, v in self.columns.items()})

    def value(self, name: str, i: int = 0) -> Any:
        """Coordinate ``name`` of row ``i`` as a plain Python value."""
        return self.columns[name][i].item()

    def row(self, i: int) -> dict[str, Any]:
        """Row ``i`` as plain values (for callers outside the search, e.g. validation)."""
        return {k: self.value(k, i) for k in self.columns}

    def with_column(self, name: str, values: Sequence[Any] | np.ndarray) -> "Candidates":
        """The same rows with column ``name`` replaced."""
        return Candidates({**self.columns, name: np.asarray(values)})

    @staticmethod
    def product(
        axes: Sequence[Axis],
        choices: Sequence[Choice],
        per_axis: Mapping[str, Sequence[Any]] | None = None,
    ) -> "Candidates":
        """Cartesian product of every axis and choice (optionally restricted per name)."""
        names = [a.name for a in axes] + [c.name for c in choices]
        pools = [
            list(per_axis[n])
            if per_axis and n in per_axis
            else list(a.values if isinstance(a, Axis) else a.options)
            for n, a in zip(names, [*axes, *choices], strict=True)
        ]
        flat = np.arange(math.prod(len(p) for p in pools), dtype=np.int64)
        return Candidates._decode(names, pools, flat)

    @staticmethod
    def at(axes: Sequence[Axis], choices: Sequence[Choice], flat: np.ndarray) -> "Candidates":
        """The rows of :meth:`product` (the whole space) at the flat indices ``flat``."""
        pools = [a.values for a in axes] + [c.options for c in choices]
        names = [a.name for a in axes] + [c.name for c in choices]
        return Candidates._decode(names, pools, np.asarray(flat, dtype=np.int64))

    @staticmethod
    def _decode(names: Sequence[str], pools: Sequence[Sequence[Any]], flat: np.ndarray):
        parts = zip(names, pools, digits(pools, flat, np), strict=True)
        return Candidates({n: np.asarray(pool)[d] for n, pool, d in parts})

    @staticmethod
    def size_of(axes: Sequence[Axis], choices: Sequence[Choice]) -> int:
        """Rows of :meth:`product` of the whole space (valid or not), without building it."""
        return math.prod([len(a.values) for a in axes] + [len(c.options) for c in choices])

    @staticmethod
    def concat(parts: Sequence["Candidates"]) -> "Candidates":
        parts = [p for p in parts if len(p)]
        if not parts:
            return Candidates({})
        return Candidates(
            {k: np.concatenate([p.columns[k] for p in parts]) for k in parts[0].columns}
        )


def digits(pools: Sequence[Sequence[Any]], flat: Any, xp: Any) -> list[Any]:
    """Mixed-radix digits of flat plan indices, one array per pool (the last pool fastest:
    ``itertools.product``'s order); ``xp`` is numpy or ``jax.numpy`` (decoding inside ``jit``)."""
    out, stride = [], math.prod(len(p) for p in pools)
    for pool in pools:
        stride //= len(pool)
        out.append((flat // stride) % len(pool))
    return out


def numeric(options: Sequence[Any]) -> bool:
    """Whether a choice's options are numbers (bool, int, float): decoded inside ``jit`` as
    values; other options (names) are decoded as their index."""
    return all(isinstance(o, (bool, int, float)) for o in options)


def device_columns(
    axes: Sequence[Axis], choices: Sequence[Choice], flat: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Traced rows of the whole space at flat indices: columns (axes and numeric choices as
    float values, other choices as their option index) and every choice's option index."""
    import jax.numpy as jnp

    pools = [a.values for a in axes] + [c.options for c in choices]
    d = digits(pools, flat, jnp)
    cols = {a.name: jnp.asarray(a.values)[d[i]] for i, a in enumerate(axes)}
    index = {c.name: d[len(axes) + j] for j, c in enumerate(choices)}
    for c in choices:
        if numeric(c.options):
            cols[c.name] = jnp.asarray([float(o) for o in c.options])[index[c.name]]
        else:
            cols[c.name] = index[c.name]
    return cols, index


@dataclass(frozen=True)
class Evaluation:
    """Exact evaluation of stacked candidates: objective, feasibility (fits in memory and meets
    every limit) and the stacked breakdowns (leading axis = rows)."""

    objective: np.ndarray
    feasible: np.ndarray
    outputs: Any


def layout(num_axes: int, choices: Sequence[tuple[str, int]]) -> dict[str, slice]:
    """Where each part of a relaxed ``theta`` lives: ``x`` (one log2 value per axis), one logit
    slice per choice, and ``size`` (an empty slice at the total length)."""
    out, start = {"x": slice(0, num_axes)}, num_axes
    for name, size in choices:
        out[name] = slice(start, start + size)
        start += size
    out["size"] = slice(start, start)
    return out


def best_of(
    objective: np.ndarray, feasible: np.ndarray, k: int = 5
) -> tuple[np.ndarray, np.ndarray]:
    """Indices of the ``k`` best feasible entries (ascending objective) and their values."""
    obj = np.where(feasible & np.isfinite(objective), objective, np.inf)
    order = np.argsort(obj, kind="stable")[:k]
    order = order[np.isfinite(obj[order])]
    return order, obj[order]


def _with_rows(current: Candidates, names: Sequence[str], combos: list[tuple]) -> Candidates:
    """``current`` (one row) repeated, with columns ``names`` set to each combination."""
    cols = {k: np.repeat(v, len(combos)) for k, v in current.columns.items()}
    for j, name in enumerate(names):
        cols[name] = np.asarray([c[j] for c in combos])
    return Candidates(cols)


def moves(
    current: Candidates, pools: Mapping[str, Sequence[Any]], max_changes: int = 2
) -> Candidates:
    """``current`` (one row) and every plan that differs from it in 1..``max_changes`` of the
    coordinates named in ``pools``."""
    parts = [current]
    for k in range(1, max_changes + 1):
        for subset in itertools.combinations(list(pools), k):
            others = [[v for v in pools[n] if v != current.value(n)] for n in subset]
            combos = list(itertools.product(*others))
            if combos:
                parts.append(_with_rows(current, subset, combos))
    return Candidates.concat(parts)


def _window(pool: Sequence[Any], value: Any, full: int = 12, radius: int = 3) -> list[Any]:
    """A small pool whole; a large one (a fine batch grid) as ``radius`` steps around ``value``
    plus every ``len / full``-th value, so a round can both fine-tune and jump."""
    if len(pool) <= full:
        return list(pool)
    i = list(pool).index(value)
    near = list(pool[max(0, i - radius) : i + radius + 1])
    far = list(pool[:: max(1, len(pool) // full)])
    return sorted(set(near) | set(far), key=list(pool).index)


def scaled_moves(
    current: Candidates,
    pools: Mapping[str, Sequence[Any]],
    coupled: Mapping[str, Sequence[str]],
    flip: Sequence[str] = (),
) -> Candidates:
    """Moves that change a degree and rescale the axis that scales with it: doubling ``pp`` of a
    serving instance doubles the batch it holds (``coupled = {"batch": ("tp", "pp")}``); each
    may also change one of the categorical choices named in ``flip`` (a degree change can make a
    choice invalid, e.g. sequence parallelism at ``tp = 1``)."""
    parts: list[Candidates] = []
    for long_name, shorts in coupled.items():
        pool = np.asarray(pools[long_name], dtype=float)
        for short in shorts:
            combos = []
            for value in pools[short]:
                if value == current.value(short):
                    continue
                target = current.value(long_name) * value / current.value(short)
                i = int(np.argmin(np.abs(np.log(pool) - np.log(target))))
                near = range(max(0, i - 1), min(len(pool), i + 2))
                combos += [(value, pools[long_name][j]) for j in near]
            if combos:
                parts.append(_with_rows(current, (short, long_name), combos))
    scaled = Candidates.concat(parts)
    flipped = []
    for i in range(len(scaled)):
        row = scaled.take([i])
        for name in flip:
            others = [(v,) for v in pools[name] if v != row.value(name)]
            if others:
                flipped.append(_with_rows(row, (name,), others))
    return Candidates.concat([scaled, *flipped])


def refine(
    start: Candidates,
    pools: Mapping[str, Sequence[Any]],
    score: Callable[[Candidates], np.ndarray],
    max_rounds: int = 40,
    coupled: Mapping[str, Sequence[str]] | None = None,
    flip: Sequence[str] = (),
    repair: Callable[[Candidates], Candidates] | None = None,
) -> tuple[Candidates, float, int]:
    """Exact discrete local search from ``start`` (one row): move to the best plan within two
    coordinate changes until none improves (a long axis moves locally or by coarse jumps, see
    :func:`_window`).  ``score`` returns the exact objective (inf where invalid or infeasible).

    Returns the local optimum (one row), its objective and the number of plans evaluated.
    """
    current, value, evaluated = start, np.inf, 0
    for _ in range(max_rounds):
        near = {k: _window(v, current.value(k)) for k, v in pools.items()}
        cand = moves(current, near)
        extra = scaled_moves(current, pools, coupled or {}, flip)
        if len(extra):
            cand = Candidates.concat([cand, extra])
        if repair is not None:  # project moves that broke a validity rule back onto the space
            cand = unique(Candidates.concat([cand, repair(cand)]))
        obj = score(cand)
        evaluated += len(cand)
        i = int(np.argmin(obj))
        if not obj[i] < value:
            break
        current, value = cand.take([i]), float(obj[i])
    return current, value, evaluated


def row_keys(c: Candidates) -> list[tuple]:
    """Each row as a hashable tuple of plain values (column order)."""
    return list(zip(*[c.columns[k].tolist() for k in c.columns], strict=True))


def unique(c: Candidates) -> Candidates:
    """Drop repeated rows (first occurrence kept, order preserved)."""
    seen: dict[tuple, int] = {}
    for i, k in enumerate(row_keys(c)):
        seen.setdefault(k, i)
    return c.take(np.asarray(sorted(seen.values()), dtype=int))
