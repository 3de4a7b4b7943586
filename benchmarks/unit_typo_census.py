"""Unit-suffix typo census (issue 39): how many one-character typos of a unit-suffixed key of
the built-in chip and system specs does the loader accept?

For every built-in chip and system file and every key of it that carries a unit suffix
(:func:`diffcost._core.units.split_unit`), each mutation renames that one key: every
one-character deletion, every swap of two adjacent (different) characters, and every
substitution of the suffix by another suffix of the same dimension.  The mutated document goes
through the loader's checks (:func:`diffcost._inputs.loader.check_document`); a mutated key that
collides with a key already in its table is a duplicate key, which TOML refuses.

A mutation is *accepted* when the loader returns a spec.  An accepted mutation is *harmless*
when the spec has the same SI values as the original (another spelling of the same quantity at
the same value: ``_gb`` -> ``_gib`` is not, ``1e9`` bytes are not ``2**30``); every other
accepted one is a *silent* misreading, which the plausible ranges of
:mod:`diffcost._inputs.ranges` exist to refuse.

    python benchmarks/unit_typo_census.py [--list]

prints the counts (``--list``: every accepted mutation).
"""

import argparse
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from diffcost._core.errors import SpecError
from diffcost._core.units import UNITS, split_unit
from diffcost._inputs.checker import read_toml, specs_dir
from diffcost._inputs.loader import check_document


@dataclass(frozen=True)
class Mutation:
    """One renamed key of one file."""

    kind: str  # "chip" or "system"
    file: str  # file stem
    table: str  # "" for the top level
    key: str
    new: str
    how: str  # "delete", "swap" or "suffix"


def key_mutations(key: str) -> Iterator[tuple[str, str]]:
    """Every one-character deletion, adjacent swap and same-dimension suffix substitution of
    ``key`` (each distinct new key once; never ``key`` itself)."""
    seen = {key}
    out: list[tuple[str, str]] = []
    for i in range(len(key)):
        out.append((key[:i] + key[i + 1 :], "delete"))
    for i in range(len(key) - 1):
        out.append((key[:i] + key[i + 1] + key[i] + key[i + 2 :], "swap"))
    unit = split_unit(key)
    if unit is not None:
        base, dim, _ = unit
        out += [(base + sfx, "suffix") for sfx in UNITS[dim]]
    for new, how in out:
        if new not in seen:
            seen.add(new)
            yield new, how


def mutations(kinds: tuple[str, ...] = ("chip", "system")) -> Iterator[tuple[Mutation, Any]]:
    """Every mutation of the built-in files and the mutated document."""
    for kind in kinds:
        folder = specs_dir() / {"chip": "chips", "system": "systems"}[kind]
        for path in sorted(folder.glob("*.toml")):
            data = read_toml(path)
            tables = [("", data)] + [
                (name, sub) for name, sub in data.items() if isinstance(sub, dict)
            ]
            for table, content in tables:
                if table == "source":
                    continue
                for key in list(content):
                    if isinstance(content[key], dict) or split_unit(key) is None:
                        continue
                    for new, how in key_mutations(key):
                        m = Mutation(kind, path.stem, table, key, new, how)
                        if new in content:
                            yield m, None  # a duplicate key: not valid TOML
                            continue
                        renamed = {(new if k == key else k): v for k, v in content.items()}
                        doc = renamed if not table else {**data, table: renamed}
                        yield m, doc


def _load(kind: str, file: str, doc: Any) -> dict[str, Any] | None:
    path = specs_dir() / {"chip": "chips", "system": "systems"}[kind] / f"{file}.toml"
    try:
        return check_document(path, kind, doc, file).values
    except SpecError:
        return None


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, float | int) and isinstance(b, float | int) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=1e-12)
    return a == b


#: A mutation whose unit factor differs by less than this ratio from the original's (a binary
#: for a decimal prefix: ``_gib`` -> ``_gb`` is 7%) reads a value no plausible range can tell
#: from the intended one.
NEAR = 1.1


def factor_ratio(m: Mutation) -> float:
    """The mutated key's unit factor over the original's (>= 1; inf when the new key has none)."""
    old, new = split_unit(m.key), split_unit(m.new)
    if old is None or new is None:
        return math.inf
    ratio = new[2] / old[2]
    return max(ratio, 1 / ratio)


def census(
    kinds: tuple[str, ...] = ("chip", "system"), every: int = 1
) -> tuple[Counter[str], list[tuple[Mutation, bool]]]:
    """Counts and the accepted mutations with whether each is harmless; ``every``: keep one
    mutation in ``every``.  Counts, for ``typo`` (deletions and swaps) and ``suffix``
    (substitutions): the total, then ``accepted`` split into ``harmless`` (same values),
    ``near`` (a unit factor within :data:`NEAR` of the original's) and ``silent`` (any other)."""
    counts: Counter[str] = Counter()
    accepted: list[tuple[Mutation, bool]] = []
    originals: dict[tuple[str, str], dict[str, Any] | None] = {}
    for i, (m, doc) in enumerate(mutations(kinds)):
        if i % every:
            continue
        counts["typo" if m.how in ("delete", "swap") else "suffix"] += 1
        if doc is None:
            continue
        values = _load(m.kind, m.file, doc)
        if values is None:
            continue
        if (m.kind, m.file) not in originals:
            path = specs_dir() / {"chip": "chips", "system": "systems"}[m.kind] / f"{m.file}.toml"
            originals[m.kind, m.file] = _load(m.kind, m.file, read_toml(path))
        harmless = _same(values, originals[m.kind, m.file])
        typo = "typo" if m.how in ("delete", "swap") else "suffix"
        near = not harmless and factor_ratio(m) < NEAR
        verdict = "harmless" if harmless else "near" if near else "silent"
        counts[f"{typo} accepted"] += 1
        counts[f"{typo} {verdict}"] += 1
        accepted.append((m, harmless))
    return counts, accepted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print every accepted mutation")
    args = parser.parse_args()
    counts, accepted = census()
    if args.list:
        for m, harmless in accepted:
            where = f"{m.table}." if m.table else ""
            tag = "harmless" if harmless else "near" if factor_ratio(m) < NEAR else "SILENT"
            print(f"{tag:8} {m.kind} {m.file}: {where}{m.key} -> {m.new} ({m.how})")
    for typo, what in (
        ("typo", "one-character deletions and adjacent swaps"),
        ("suffix", "substitutions of the unit suffix"),
    ):
        print(
            f"{counts[typo]:,} {what}: {counts[typo + ' accepted']} accepted = "
            f"{counts[typo + ' harmless']} harmless (same quantity, same value) + "
            f"{counts[typo + ' near']} binary/decimal prefix (unit factor within {NEAR}x) + "
            f"{counts[typo + ' silent']} silent"
        )


if __name__ == "__main__":
    main()
