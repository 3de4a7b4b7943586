"""Mutations of one input document: every key deleted, misspelled and retyped; every number
made zero, negative, NaN, infinite, huge and tiny; every string emptied, marked up and made
huge; and whole-file damage (empty, truncated, binary, BOM, CRLF, Latin-1, duplicate table).

A mutation is ``(label, bytes)``: what was done, and the file's new content.  Documents are
read as dicts (TOML or JSON); arrays of tables are mutated in their first element only (the
others have the same keys), so a 50-point measurement file costs what a one-point file does.
"""

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

from .toml_text import dumps

Path_ = tuple[str | int, ...]

#: Replacement values for a number: the edges of every range check.
NUMBER_VALUES: tuple[Any, ...] = (
    0,
    -1,
    float("nan"),
    float("inf"),
    float("-inf"),
    1e300,
    1e-300,
    2**62,
    "12",
    True,
    [1],
    {"x": 1},
)
#: Replacement values for a string (names, references, choices, sources).
STRING_VALUES: tuple[Any, ...] = ("", "[/x] [bold]", "x" * 500, "ünï-cødé", 7, True, ["a"])
#: Replacement values for a boolean flag.
BOOL_VALUES: tuple[Any, ...] = ("false", 1, 0.5)
#: Replacement values for an array.
LIST_VALUES: tuple[Any, ...] = ([], ["?"], 1, [float("nan")])
#: Replacement values for a table.
TABLE_VALUES: tuple[Any, ...] = (1, "table", {})


def leaves(doc: Any, path: Path_ = ()) -> Iterator[tuple[Path_, Any]]:
    """Every (path, value) of the document; tables also yield themselves (path non-empty)."""
    if isinstance(doc, dict):
        if path:
            yield path, doc
        for k, v in doc.items():
            yield from leaves(v, (*path, k))
    elif isinstance(doc, list) and doc and all(isinstance(x, dict) for x in doc):
        yield from leaves(doc[0], (*path, 0))
    else:
        yield path, doc


def _parent(doc: Any, path: Path_) -> Any:
    for p in path[:-1]:
        doc = doc[p]
    return doc


def _set(doc: Any, path: Path_, value: Any) -> Any:
    new = copy.deepcopy(doc)
    _parent(new, path)[path[-1]] = value
    return new


def _delete(doc: Any, path: Path_) -> Any:
    new = copy.deepcopy(doc)
    del _parent(new, path)[path[-1]]
    return new


def _rename(doc: Any, path: Path_) -> Any:
    new = copy.deepcopy(doc)
    parent = _parent(new, path)
    parent[f"{path[-1]}x"] = parent.pop(path[-1])
    return new


def replacements(value: Any) -> tuple[Any, ...]:
    """The values tried in place of ``value``, by its type."""
    if isinstance(value, bool):
        return BOOL_VALUES
    if isinstance(value, (int, float)):
        return NUMBER_VALUES
    if isinstance(value, str):
        return STRING_VALUES
    if isinstance(value, list):
        return LIST_VALUES
    if isinstance(value, dict):
        return TABLE_VALUES
    return ()


def _name(path: Path_) -> str:
    return ".".join(str(p) for p in path)


#: What one mutation did: ``(label, path, old value, new value)``; the oracle reads it
#: (:mod:`fuzz.oracle`).  Whole-file damage has an empty path.
What = tuple[str, Path_, Any, Any]


def document_mutations(doc: dict[str, Any]) -> Iterator[tuple[What, dict[str, Any]]]:
    """Every key deleted, misspelled and given each replacement value; an unknown key added."""
    yield ("add unknown key", ("unknown_key",), None, 1), {**doc, "unknown_key": 1}
    for path, value in leaves(doc):
        if not isinstance(path[-1], str):
            continue
        name = _name(path)
        yield (f"delete {name}", path, value, None), _delete(doc, path)
        yield (f"misspell {name}", path, value, f"{path[-1]}x"), _rename(doc, path)
        for new in replacements(value):
            yield (f"{name} = {new!r:.40}", path, value, new), _set(doc, path, new)


def byte_mutations(raw: bytes) -> Iterator[tuple[str, bytes]]:
    """Whole-file damage: what an editor, a download or a copy can do to a file."""
    yield "empty file", b""
    yield "truncated at 1/3", raw[: len(raw) // 3]
    yield "truncated at 2/3", raw[: 2 * len(raw) // 3]
    yield "binary", bytes(range(256)) * 4
    yield "UTF-8 BOM", b"\xef\xbb\xbf" + raw
    yield "CRLF line ends", raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    yield "Latin-1 byte", raw.replace(b"\n", b"\n# caf\xe9\n", 1)
    yield "NUL byte", raw + b"\x00"


Writer = Callable[[dict[str, Any]], bytes]


def toml_bytes(doc: dict[str, Any]) -> bytes:
    """A mutated document as TOML."""
    return dumps(doc).encode()


def json_bytes(doc: dict[str, Any]) -> bytes:
    """A mutated document as JSON (``NaN``/``Infinity`` as Python's json writes them)."""
    return json.dumps(doc).encode()


def all_mutations(doc: dict[str, Any], raw: bytes, write: Writer) -> Iterator[tuple[What, bytes]]:
    """Document mutations written back with ``write``, then byte mutations of ``raw``."""
    for what, new in document_mutations(doc):
        yield what, write(new)
    for label, content in byte_mutations(raw):
        yield (label, (), None, None), content
