"""A small TOML writer for mutated spec documents (the standard library only reads TOML).

It writes what the mutations produce: tables, arrays of tables, scalars (including ``nan`` and
``inf``, which TOML 1.0 allows), arrays and inline tables.  Strings are written as JSON strings,
which are valid TOML basic strings (same escapes, ``\\uXXXX`` for non-ASCII).
"""

import json
import math
import re
from typing import Any

_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(k: str) -> str:
    return k if _BARE.match(k) else json.dumps(k)


def scalar(v: Any) -> str:
    """One TOML value (inline)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(scalar(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(k)} = {scalar(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def _is_table_array(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


def dumps(doc: dict[str, Any], prefix: str = "") -> str:
    """A document as TOML text: scalars first, then sub-tables, then arrays of tables."""
    lines = [f"{_key(k)} = {scalar(v)}" for k, v in doc.items() if not _nested(v)]
    for k, v in doc.items():
        name = f"{prefix}{_key(k)}"
        if isinstance(v, dict):
            lines += ["", f"[{name}]", dumps(v, name + ".")]
        elif _is_table_array(v):
            for item in v:
                lines += ["", f"[[{name}]]", dumps(item, name + ".")]
    return "\n".join(line for line in lines if line is not None)


def _nested(v: Any) -> bool:
    return isinstance(v, dict) or _is_table_array(v)
