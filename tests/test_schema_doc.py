"""specs/SCHEMA.md and the schema source agree: the key reference is generated from
diffcost/_inputs/schema.py and up to date, every key of every kind is in it with its unit
dimension and requiredness, and every key of the hand-written examples exists in the schema."""

import re
from collections.abc import Mapping

import pytest

import diffcost as dc
from diffcost.testing import ENGINE_KIND, schema_doc, split_unit
from diffcost.testing import schema as S

DOC = dc.specs_dir() / "SCHEMA.md"


def _reference() -> dict[str, dict[str, dict[str, list[str]]]]:
    """kind -> table title -> key -> row cells, read from the generated reference."""
    text = DOC.read_text().split(schema_doc.BEGIN, 1)[1].split(schema_doc.END, 1)[0]
    out: dict[str, dict[str, dict[str, list[str]]]] = {}
    kind = title = ""
    for line in text.splitlines():
        if line.startswith("### "):
            kind = line[4:].split(":")[0]
            out[kind] = {}
        elif line.startswith("**"):
            title = re.sub(r" \(.*\)$", "", line.strip("*"))
            out[kind][title] = {}
        elif line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            out[kind][title][cells[0].strip("`")] = cells
    return out


def test_key_reference_is_up_to_date():
    text = DOC.read_text()
    assert schema_doc.BEGIN in text and schema_doc.END in text
    assert schema_doc.render(text) == text, "run: python -m diffcost._analysis.schema_doc"


def _schema_tables(kind: S.Kind) -> dict[str, dict[str, S.Field]]:
    """Table title (as the reference names it) -> fields and required keys, per kind."""
    tables = {"top level": {**S.TOP, **kind.top}}
    for name, fields in kind.tables.items():
        if fields is not None and name != "plan":
            tables[f"[{name}]"] = dict(fields)
    for name, (member, fields) in kind.groups.items():
        tables[f"[{name}.<{member} name>]"] = fields
    for name, fields in kind.arrays.items():
        tables[f"[[{name}]]"] = fields
    return tables


@pytest.mark.parametrize("name", list(S.KINDS))
def test_every_schema_key_is_documented_with_its_unit_and_requiredness(name):
    documented = _reference()[name]
    kind = ENGINE_KIND if name == "engine" else S.KINDS[name]  # with its behaviours' switches
    for title, fields in _schema_tables(kind).items():
        rows = documented[title]
        for key, field in fields.items():
            doc_key = f"{key}_<unit>" if field.kind == "quantity" else key
            assert doc_key in rows, (name, title, key)
            _, value, required, _ = rows[doc_key]
            assert required == ("yes" if field.required else "no"), (name, title, key)
            if field.kind == "quantity":
                assert value.startswith(field.dim + ":"), (name, key, value)
        assert set(rows) == {
            f"{k}_<unit>" if f.kind == "quantity" else k for k, f in fields.items()
        }


def test_plan_keys_are_documented_for_both_jobs():
    from diffcost.testing import PLAN_SCHEMAS

    ref = _reference()
    for job, fields in PLAN_SCHEMAS.items():
        scenario = ref["scenario"][f"[plan] of kind = {job!r}"]
        point = ref["measurements"][f"[point.plan] of kind = {job!r}"]
        assert set(scenario) == set(point) == set(fields), job
        assert all(row[2] == "no" for row in scenario.values())
        required = {k for k, row in point.items() if row[2] == "yes"}
        assert required == set(S.POINT_PLAN_REQUIRED[job]), job


# --- the hand-written examples only use keys the schema has ------------------------------------
_EXAMPLE_KIND = {"chip", "system", "model", "calibration", "measurements", "train", "serve"}


def _examples() -> list[tuple[str, list[tuple[str, str]]]]:
    """(kind, [(table, key)]) of every ```toml example before the generated reference."""
    text = DOC.read_text().split(schema_doc.BEGIN, 1)[0]
    out = []
    for block in re.findall(r"```toml\n(.*?)```", text, flags=re.S):
        kind = re.search(r'^kind = "([a-z]+)"', block, flags=re.M)
        if kind is None or kind.group(1) not in _EXAMPLE_KIND:
            continue  # sweeps: checked by their own loader (diffcost/_analysis/sweep_spec.py)
        table, keys = "", []
        for line in block.splitlines():
            line = line.split("#", 1)[0].strip()
            if header := re.fullmatch(r"\[\[?([^\]]+)\]\]?", line):
                table = header.group(1)
            elif key := re.match(r"([A-Za-z0-9_]+)\s*=", line):
                keys.append((table, key.group(1)))
        out.append((kind.group(1), keys))
    return out


def _allowed(kind: str, table: str) -> Mapping[str, S.Field] | None:
    """The schema of a table of an example (None: any key, as in a free [source])."""
    from diffcost.testing import PLAN_SCHEMAS

    plans = {k: f for p in PLAN_SCHEMAS.values() for k, f in p.items()}
    if kind in ("train", "serve"):
        spec = S.KINDS["scenario"]
        return {"": {**S.TOP, **spec.top}, "plan": PLAN_SCHEMAS[kind], "source": None}[table]
    spec = S.KINDS[kind]
    if table == "source":
        allowed = spec.source.allowed
        return None if allowed is None else {k: S.Field("str") for k in allowed}
    if table == "":
        return {**S.TOP, **spec.top}
    if table == "point":
        return S.POINT
    if table == "point.plan":
        return plans
    if table == "point.measured":
        return {k: f for m in S.MEASURED.values() for k, f in m.items()}
    group = table.split(".")[0]
    if group in spec.groups:
        return spec.groups[group][1]
    return spec.tables[table]


def test_every_example_key_exists_in_the_schema():
    examples = _examples()
    assert {kind for kind, _ in examples} == _EXAMPLE_KIND - {"serve"}  # serve: in words
    for kind, keys in examples:
        for table, key in keys:
            allowed = _allowed(kind, table)
            if allowed is None:
                continue
            unit = split_unit(key)
            base = key if key in allowed else (unit[0] if unit else key)
            assert base in allowed, (kind, table, key)
            field = allowed[base]
            if base != key:  # a unit suffix: only on a quantity, of its dimension
                assert field.kind == "quantity" and unit is not None and unit[1] == field.dim


def test_serve_plan_keys_named_in_words_exist():
    from diffcost.testing import PLAN_SCHEMAS

    text = DOC.read_text().split("A serve scenario's `[plan]`", 1)[1].split("\n\n", 1)[0]
    named = set(re.findall(r"`([a-z_<>]+)`", text)) - {"static", "continuous"}
    named = {k.replace("<format>", "fp8") for k in named}
    assert len(named) > 15 and named <= set(PLAN_SCHEMAS["serve"]), named - set(
        PLAN_SCHEMAS["serve"]
    )
