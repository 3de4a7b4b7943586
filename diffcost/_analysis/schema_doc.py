"""The key reference of ``specs/SCHEMA.md``, generated from the schema source
(:mod:`diffcost._inputs.schema`, and the jobs' ``[plan]`` tables: :mod:`.plans`).

Regenerate after changing a schema: ``python -m diffcost._analysis.schema_doc`` rewrites the part
of ``specs/SCHEMA.md`` between :data:`BEGIN` and :data:`END`; a test checks it is up to date.
"""

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._core.units import UNITS
from .._inputs import schema as S
from .._inputs.checker import specs_dir
from .._inputs.schema import KINDS, MEASURED, POINT_PLAN_REQUIRED, TOP, Field, Kind
from .._serve.engine import ENGINE_KIND
from .plans import PLAN_SCHEMAS

BEGIN = (
    "<!-- BEGIN KEY REFERENCE: generated from diffcost/_inputs/schema.py by "
    "`python -m diffcost._analysis.schema_doc`; do not edit by hand -->"
)
END = "<!-- END KEY REFERENCE -->"


def plan_schemas() -> dict[str, Mapping[str, Any]]:
    """The ``[plan]`` keys of a training and a serving scenario."""
    return dict(PLAN_SCHEMAS)


def _value(f: Any) -> str:
    """What a key holds, in words (a field of :mod:`diffcost._inputs.schema` or one shaped
    like it)."""
    plausible = getattr(f, "plausible", None)
    text = _kind_value(f)
    return f"{text}; plausible {plausible.text()}" if plausible is not None else text


def _kind_value(f: Any) -> str:
    kind = getattr(f, "kind", "?")
    if kind == "quantity":
        return f"{f.dim}: " + ", ".join(f"`{s}`" for s in UNITS[f.dim])
    if kind == "enum":
        return "one of " + ", ".join(f"`{c}`" for c in f.choices)
    if kind == "count":
        return "integer > 0" if getattr(f, "positive", True) else "integer >= 0"
    if kind == "fraction":
        return "number in (0, 1]" if f.positive else "number in [0, 1]"
    if kind == "number":
        return "number > 0" if getattr(f, "positive", True) else "number >= 0"
    return {"bool": "true / false", "str": "text", "list": "list of text"}.get(kind, kind)


def _rows(
    title: str, fields: Mapping[str, Any], required: tuple[str, ...] | None = None
) -> list[str]:
    """One table of keys: key (``<unit>`` for a unit suffix), value, required, meaning."""
    out = [f"**{title}**", "", "| key | value | required | meaning |", "|---|---|---|---|"]
    for key, f in fields.items():
        name = f"{key}_<unit>" if getattr(f, "kind", "") == "quantity" else key
        needed = getattr(f, "required", False) if required is None else key in required
        doc = getattr(f, "doc", "")
        out.append(f"| `{name}` | {_value(f)} | {'yes' if needed else 'no'} | {doc} |")
    return [*out, ""]


def _source(kind: Kind) -> str:
    rule = kind.source
    parts = [f"required ({rule.why})"]
    if rule.required:
        parts.append("keys " + ", ".join(f"`{k}`" for k in rule.required) + " required")
    if rule.allowed is not None:
        parts.append("only " + ", ".join(f"`{k}`" for k in rule.allowed))
    if rule.per_table:
        parts.append("one key per table present, named after it")
    if rule.nonempty:
        parts.append("at least one key")
    return "`[source]`: " + "; ".join(parts) + "; every value a non-empty string."


def _kind(kind: Kind) -> list[str]:
    kinds = kind.kind_values or (kind.name,)
    lines = [f"### {kind.name}: `specs/{kind.directory}/NAME.toml`", "", kind.doc + ".", ""]
    top = {
        **TOP,
        "kind": Field("enum", required=True, choices=kinds, doc="kind of file"),
        **kind.top,
    }
    lines += _rows("top level", top)
    for name, fields in kind.tables.items():
        required = " (required)" if name in kind.required_tables else ""
        if name == "plan":
            for job, plan in plan_schemas().items():
                lines += _rows(f"[plan] of kind = {job!r}", plan)
        elif fields is not None:
            lines += _rows(f"[{name}]{required}", fields)
    for name, (member, fields) in kind.groups.items():
        lines += _rows(f"[{name}.<{member} name>] (any subset)", fields)
    for name, fields in kind.arrays.items():
        lines += _rows(f"[[{name}]]", fields)
    if "point" in kind.arrays:
        lines += _point_tables()
    lines += [_source(kind), ""]
    name_rule = "`name` must equal the file name without `.toml`." if kind.name_is_stem else ""
    rules = [" ".join((r.__doc__ or "").split()) for r in kind.rules]
    if name_rule or rules:
        lines += [f"Also checked: {' '.join([name_rule, *rules]).strip()}", ""]
    return lines


def _point_tables() -> list[str]:
    lines = []
    for job, plan in plan_schemas().items():
        required = POINT_PLAN_REQUIRED[job]
        lines += _rows(f"[point.plan] of kind = {job!r}", plan, required)
    for job, fields in MEASURED.items():
        lines += _rows(f"[point.measured] of kind = {job!r} (exactly one value)", fields)
    return lines


def _technology() -> list[str]:
    lines = [
        "### technology: `specs/codesign/technology.toml`",
        "",
        "The co-design figures of process nodes, memories, links and packaging (one file; its "
        "unit suffixes are its own, converted by diffcost/_codesign/technology.py).  Every value "
        "has a source string at the same place under `[source]` (`[source.node.n4]`, "
        "`[source.formats]`, ...; a catalogue chip: one string in `[source.chip]`).",
        "",
    ]
    lines += _rows("top level", S.TECHNOLOGY_TOP)
    for name, fields in S.TECHNOLOGY_NAMED.items():
        lines += _rows(f"[{name}.<name>]", fields)
    for name, fields in S.TECHNOLOGY_SINGLE.items():
        lines += _rows(f"[{name}] (required)", fields)
    return lines


def reference() -> str:
    """The generated key reference (markdown, between :data:`BEGIN` and :data:`END`)."""
    lines = [
        BEGIN,
        "## Key reference",
        "",
        "Every key of every kind as the loader checks it.  A key written `base_<unit>` takes",
        "one of the listed unit suffixes (see Units).  Any other key is an error.  A value",
        "outside its plausible range (in SI units, whatever the suffix; 0 where allowed is",
        "accepted) is an error: the ranges and their sources are in diffcost/_inputs/ranges.py.",
        "",
    ]
    # the engine kind with its behaviours' switches (completed above the schema's layer)
    for kind in (KINDS | {"engine": ENGINE_KIND}).values():
        lines += _kind(kind)
    lines += _technology()
    return "\n".join([*lines, END])


def render(text: str) -> str:
    """``text`` (SCHEMA.md) with its key reference regenerated (appended if absent)."""
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        return head + reference() + rest.split(END, 1)[1]
    return text.rstrip("\n") + "\n\n" + reference() + "\n"


def main(argv: list[str]) -> int:
    """Rewrite the key reference of ``specs/SCHEMA.md`` (or of the file given)."""
    path = Path(argv[0]) if argv else specs_dir() / "SCHEMA.md"
    path.write_text(render(path.read_text()))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
