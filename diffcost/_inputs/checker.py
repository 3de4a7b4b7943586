"""The one reader and the one checker of every input file, driven by :mod:`.schema`.

:func:`read_toml` / :func:`read_json` turn a file into plain data or raise a clear
:class:`SpecError` (missing, a folder, binary, not UTF-8, not valid TOML/JSON).  A
:class:`Checker` collects every problem of a file (file, key, reason) and raises them together;
:meth:`Checker.document` checks a whole file against its :class:`~.schema.Kind` and converts
quantities to SI (:mod:`diffcost._core.units`).  Loaders of files with their own structure
(sweeps) use :meth:`Checker.value` and :meth:`Checker.table` on their parts.
"""

import difflib
import json
import math
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .._core.errors import Problem, SpecError
from .._core.units import SI_SUFFIX, UNITS, accepted_suffixes, split_unit
from .schema import KIND_DIRS, TOP, Field, Kind, Source


def specs_dir() -> Path:
    """Built-in specs: packaged as ``diffcost/specs`` in a wheel, ``specs/`` in a checkout."""
    here = Path(__file__).resolve().parents[1]  # the diffcost package
    for candidate in (here / "specs", here.parent / "specs"):
        if (candidate / "chips").is_dir():
            return candidate
    raise FileNotFoundError(f"built-in specs not found next to {here}")


def builtin_names(kind: str) -> list[str]:
    """Names of the built-in specs of a kind (file stems)."""
    return sorted(p.stem for p in (specs_dir() / KIND_DIRS[kind]).glob("*.toml"))


# --- reading -----------------------------------------------------------------------------------
def read_text(path: Path, what: str = "TOML") -> str:
    """A file's text (UTF-8, with or without a byte-order mark), or a :class:`SpecError`
    saying why it cannot be read."""
    fail = lambda reason: SpecError([Problem(str(path), "", reason)])  # noqa: E731
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise fail("file not found") from None
    except IsADirectoryError:
        raise fail(f"is a folder, not a {what} file") from None
    except OSError as err:
        raise fail(f"cannot be read: {err.strerror or err}") from None
    if b"\x00" in raw:
        raise fail(f"is a binary file, not {what} text")
    try:
        # "utf-8-sig": a byte-order mark, as some Windows editors write, is read as UTF-8
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        byte = raw[err.start]
        raise fail(
            f"is not UTF-8 text (byte 0x{byte:02x} at offset {err.start}): save it as UTF-8"
        ) from None


def read_toml(path: Path) -> dict[str, Any]:
    """A TOML file as plain data."""
    try:
        return tomllib.loads(read_text(path, "TOML"))
    except tomllib.TOMLDecodeError as err:
        raise SpecError([Problem(str(path), "", f"not valid TOML: {err}")]) from None


def read_json(path: Path) -> Any:
    """A JSON file as plain data."""
    try:
        return json.loads(read_text(path, "JSON"))
    except json.JSONDecodeError as err:
        raise SpecError([Problem(str(path), "", f"not a readable JSON file: {err}")]) from None


# --- checking ----------------------------------------------------------------------------------
def _suffixes(dim: str) -> list[str]:
    return list(UNITS[dim])


def _unknown_key(key: str, schema: Mapping[str, Field]) -> str:
    names = []
    for base, spec in schema.items():
        names += [base + sfx for sfx in _suffixes(spec.dim)] if spec.kind == "quantity" else [base]
    close = difflib.get_close_matches(key, names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    allowed = [
        base + "_<unit>" if spec.kind == "quantity" else base for base, spec in schema.items()
    ]
    return f"unknown key{hint} (allowed: {', '.join(sorted(allowed))})"


#: Largest magnitude of any spec value in SI units (bytes, FLOP/s, seconds, counts ...): a
#: zettabyte or a zettaFLOP/s is far beyond any chip or cluster, and products of inputs must
#: stay inside float32 (3.4e38), in which the model computes by default.
MAX_SI_VALUE = 1e21
#: Smallest non-zero magnitude: a femtosecond or a femtobyte is below any physical input, and
#: quotients by such values overflow float32.
MIN_SI_VALUE = 1e-15


class Checker:
    """Collects the problems of one file; :meth:`raise_if_any` raises them together."""

    def __init__(self, path: str):
        self.path = path
        self.problems: list[Problem] = []

    def add(self, key: str, reason: str) -> None:
        """Record one problem at ``key``."""
        self.problems.append(Problem(self.path, key, reason))

    def raise_if_any(self) -> None:
        """Raise every problem recorded so far as one :class:`SpecError`."""
        if self.problems:
            raise SpecError(self.problems)

    def value(self, key: str, raw: Any, spec: Field) -> Any:
        """One value checked against its field; None (and a problem) if it is invalid."""
        if spec.kind in ("count", "number", "quantity", "fraction"):
            return self._number(key, raw, spec)
        if spec.kind == "list":
            if not isinstance(raw, list) or not all(isinstance(x, str) and x.strip() for x in raw):
                self.add(key, "must be a list of non-empty strings")
                return None
            return raw
        if spec.kind == "bool":
            if not isinstance(raw, bool):
                self.add(key, f"must be true or false, got {raw!r}")
                return None
            return raw
        if not isinstance(raw, str) or not raw:
            self.add(key, f"must be a non-empty string, got {raw!r}")
            return None
        if spec.kind == "enum" and raw not in spec.choices:
            self.add(key, f"must be one of {', '.join(spec.choices)}; got {raw!r}")
            return None
        return raw

    def _number(self, key: str, raw: Any, spec: Field) -> Any:
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            self.add(key, f"must be a number, got {raw!r}")
            return None
        if spec.kind == "count" and not isinstance(raw, int):
            self.add(key, f"must be an integer, got {raw!r}")
            return None
        if not math.isfinite(raw):
            self.add(key, f"must be a finite number, got {raw!r}")
            return None
        if spec.positive and not raw > 0:
            self.add(key, f"must be positive, got {raw!r}")
            return None
        if not spec.positive and raw < 0:
            self.add(key, f"must not be negative, got {raw!r}")
            return None
        if spec.kind == "fraction" and raw > 1:
            self.add(key, f"is a fraction and must lie in [0, 1], got {raw!r}")
            return None
        return raw

    def table(self, data: Any, schema: Mapping[str, Field], prefix: str) -> dict[str, Any]:
        """Check one table: returns SI values keyed ``base + SI suffix`` for quantities."""
        out: dict[str, Any] = {}
        if not isinstance(data, dict):
            self.add(prefix.rstrip("."), "must be a table")
            return out
        seen: dict[str, str] = {}
        for key, raw in data.items():
            if isinstance(raw, dict):
                self.add(prefix + key, "unexpected table")
                continue
            got = self._key(prefix + key, key, schema, seen)
            if got is None:
                continue
            base, spec, factor, si_key = got
            seen[base] = key
            value = self.value(prefix + key, raw, spec)
            numeric = spec.kind in ("count", "number", "quantity", "fraction")
            si = abs(value * factor) if value is not None and numeric else 0.0
            if value is not None and 0.0 < si < MIN_SI_VALUE:
                self.add(
                    prefix + key,
                    f"{raw!r} is below any physical input (at least {MIN_SI_VALUE:.0e} in SI "
                    "units, or 0 where allowed; smaller values vanish in float32)",
                )
            elif value is not None and numeric and si > MAX_SI_VALUE:
                self.add(
                    prefix + key,
                    f"{raw!r} is beyond any physical input (at most {MAX_SI_VALUE:.0e} in SI "
                    "units; the model computes in float32)",
                )
            elif value is not None and not self._plausible(prefix + key, key, raw, spec, factor):
                continue
            elif value is not None:
                out[si_key] = value * factor if spec.kind == "quantity" else value
        for base, spec in schema.items():
            if spec.required and base not in seen:
                hint = f" (with a unit: {accepted_suffixes(spec.dim)})" if spec.dim else ""
                self.add(prefix + base, f"missing required key{hint}")
        return out

    def _plausible(self, full: str, key: str, raw: Any, spec: Field, factor: float) -> bool:
        """Whether a value lies in its field's plausible range (:mod:`.ranges`), in SI units;
        a problem naming the value, the unit its suffix implies and the range if not.  0 is
        accepted where the field allows it ("not counted")."""
        rng = spec.plausible
        if rng is None or (raw == 0 and not spec.positive):
            return True
        si = raw * factor
        if rng.lo <= si <= rng.hi:
            return True
        unit = split_unit(key) if spec.kind == "quantity" else None
        read = f" (its suffix {key[len(unit[0]) :]} reads {si:.4g} {rng.unit})" if unit else ""
        hint = f"; check the unit suffix (accepted: {accepted_suffixes(spec.dim)})" if unit else ""
        self.add(full, rng.outside(raw, read) + hint)
        return False

    def _key(
        self, full: str, key: str, schema: Mapping[str, Field], seen: dict[str, str]
    ) -> tuple[str, Field, float, str] | None:
        """A key's base name, field, unit factor and SI key; None (and a problem) if invalid."""
        spec = schema.get(key)
        base, factor, si_key = key, 1.0, key
        if spec is None:
            unit = split_unit(key)
            if unit is None or unit[0] not in schema or schema[unit[0]].kind != "quantity":
                self.add(full, _unknown_key(key, schema))
                return None
            base, dim, factor = unit
            spec = schema[base]
            if dim != spec.dim:
                self.add(
                    full,
                    f"unit of {key!r} is {dim}, but {base} is in {spec.dim} "
                    f"(use one of {accepted_suffixes(spec.dim)})",
                )
                return None
            si_key = base + SI_SUFFIX[dim]
        elif spec.kind == "quantity":
            seen[base] = key
            self.add(
                full,
                f"missing unit suffix: write {key}{_suffixes(spec.dim)[0]} "
                f"(accepted: {accepted_suffixes(spec.dim)})",
            )
            return None
        if base in seen:
            self.add(full, f"given twice (also as {seen[base]!r})")
            return None
        return base, spec, factor, si_key

    # --- whole files -------------------------------------------------------------------------
    def document(
        self,
        data: dict[str, Any],
        kind: Kind,
        stem: str | None = None,
        tables: Mapping[str, Mapping[str, Field] | None] | None = None,
    ) -> tuple[dict[str, Any], dict[str, str]]:
        """Check a whole file of ``kind``: returns its values (SI, nested by table) and its
        ``[source]`` strings.  ``stem``: the file name that ``name`` must equal (None: not
        checked); ``tables``: the kind's tables, where they depend on a value (a scenario's
        plan; None as a table's keys: allowed, not checked).  Arrays of tables are left to the
        kind's own loader."""
        tables = dict(kind.tables) if tables is None else tables
        is_table = lambda k, v: (
            isinstance(v, dict)
            or (  # noqa: E731
                isinstance(v, list) and (k in kind.arrays or any(isinstance(x, dict) for x in v))
            )
        )
        top_schema = {**TOP, **kind.top}
        if kind.kind_values:
            top_schema["kind"] = Field(
                "enum", required=True, choices=kind.kind_values, doc="kind of file"
            )
        top = self.table({k: v for k, v in data.items() if not is_table(k, v)}, top_schema, "")
        self._identity(top, kind, stem)
        values = dict(top)
        allowed = ", ".join(sorted([*tables, *kind.groups, *kind.arrays, "source"]))
        for name, sub in data.items():
            if name == "source" or name in kind.arrays or not is_table(name, sub):
                continue
            if name in kind.groups:
                values[name] = self._group(name, sub, *kind.groups[name])
            elif name not in tables:
                self.add(name, f"unknown table (allowed: {allowed})")
            elif (schema := tables[name]) is not None:
                values[name] = self.table(sub, schema, name + ".")
        for name in kind.required_tables:
            if name not in data:
                self.add(name, "missing required table")
        present = [n for n in data if n in tables and is_table(n, data[n])]
        source = self.source(data.get("source"), kind.source, present)
        for key in kind.source.when_given:
            if key in data and key not in source:
                self.add(f"source.{key}", f"missing: {kind.source.why} ({key} is given)")
        for rule in kind.rules:
            rule(values, self.add)
        return values, source

    def _identity(self, top: dict[str, Any], kind: Kind, stem: str | None) -> None:
        if top.get("schema_version", 1) != 1:
            self.add("schema_version", f"unsupported version {top['schema_version']} (expected 1)")
        if not kind.kind_values and "kind" in top and top["kind"] != kind.name:
            self.add(
                "kind",
                f"expected {kind.name!r} for a file in {kind.directory}/, got {top['kind']!r}",
            )
        if kind.name_is_stem and stem is not None and "name" in top and top["name"] != stem:
            self.add("name", f"must equal the file name {stem!r}, got {top['name']!r}")

    def _group(
        self, name: str, data: Any, member_kind: str, schema: Mapping[str, Field]
    ) -> dict[str, Any]:
        """A table of named sub-tables (``[overrides.<chip>]``), each named by a built-in."""
        if not isinstance(data, dict):
            self.add(name, f"must be a table of {member_kind}-name tables")
            return {}
        known = set(builtin_names(member_kind))
        out = {}
        for member, table in data.items():
            if member not in known:
                self.add(f"{name}.{member}", f"unknown {member_kind} name")
            out[member] = self.table(table, schema, f"{name}.{member}.")
        return out

    def source(self, raw: Any, rule: Source, present: list[str]) -> dict[str, str]:
        """Check a ``[source]`` table: where every number comes from."""
        if not isinstance(raw, dict) or (rule.nonempty and not raw):
            self.add("source", f"missing [source] table: {rule.why}")
        source = raw if isinstance(raw, dict) else {}
        for key in rule.required:
            if key not in source:
                self.add(f"source.{key}", "missing required key")
        for key, text in source.items():
            if rule.allowed is not None and key not in rule.allowed:
                self.add(f"source.{key}", f"unknown key (allowed: {', '.join(rule.allowed)})")
            elif not isinstance(text, str) or not text.strip():
                self.add(f"source.{key}", "must be a non-empty string")
        if rule.per_table:
            for name in present:
                if name not in source:
                    self.add(f"source.{name}", "missing: " + rule.per_table.format(name))
        return {k: v for k, v in source.items() if isinstance(v, str)}

    # --- files of their own structure ----------------------------------------------------------
    def named_tables(
        self, data: Any, schema: Mapping[str, Field], prefix: str
    ) -> dict[str, dict[str, Any]]:
        """A table of named tables (``[node.n4]``, ``[node.n3]``, ...), each checked against
        ``schema`` by :meth:`table`; any names."""
        if not isinstance(data, dict):
            self.add(prefix, "must be a table of named tables")
            return {}
        return {name: self.table(sub, schema, f"{prefix}.{name}.") for name, sub in data.items()}

    def key_sources(self, raw: Any, keys: Iterable[str], where: str) -> None:
        """Sources given key by key (``[source.node.n4]`` beside ``[node.n4]``): a non-empty
        string for every one of ``keys``, and no other key."""
        if raw is None:
            self.add(where, "missing source table: every value needs a source string")
            return
        if not isinstance(raw, dict):
            self.add(where, "must be a table of source strings")
            return
        keys = list(keys)
        for key in keys:
            text = raw.get(key)
            if text is None:
                self.add(f"{where}.{key}", "missing source string")
            elif not isinstance(text, str) or not text.strip():
                self.add(f"{where}.{key}", "must be a non-empty string")
        for key in raw:
            if key not in keys:
                self.add(f"{where}.{key}", f"unknown key (allowed: {', '.join(keys)})")
