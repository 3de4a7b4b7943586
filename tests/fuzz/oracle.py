"""The fuzz suite's oracle: is a generated input valid?  Rules independent of the loader's code.

Each generator sets :attr:`Case.valid <fuzz.harness.Case>` from these rules; ``None`` when the
rule cannot tell (the harness counts those apart and judges them as before).  The rules read the
documented domain, ``specs/SCHEMA.md``'s key reference (which keys exist, which are required,
``integer > 0`` / ``number >= 0`` / a unit dimension / ``one of`` / text), and the unit table of
the Units section (:data:`diffcost._core.units.UNITS`, the documented suffixes).

Spec-file mutations (:func:`spec_valid`):

- an unknown key (``add unknown key``, ``misspell``: a letter appended) is invalid in every kind
  the key reference covers ("any other key is an error"); in a sweep (free grid keys): None;
- deleting a required key (or a required table) is invalid, an optional one of a chip or a
  system valid (their cross-key rules are encoded: the only 16-bit peak, a systolic chip's
  ``array_dim``), of another kind None (``experts`` needs ``experts_per_token``), a key the
  reference does not list None;
- NaN, +-inf, 1e300, 2**62, a string, a boolean, an array or a table in place of a number is
  invalid; -1 is invalid unless the key is signed (``log``, ``bias``...: None); 0 is invalid
  for ``integer > 0``, ``number > 0``, ``in (0, 1]``, a peak, a bandwidth or a capacity, valid
  where the reference says ``>= 0``, ``in [0, 1]`` or ``0:`` is meaningful, else None;
  1e-300 is invalid for a peak, a bandwidth, a capacity or an integer, else None;
- a number, boolean or array in place of text is invalid; an empty string is invalid for a
  reference, a choice (``one of``), a ``name`` or a ``[source]`` entry; any other string in place
  of a ``name`` (= file stem), a reference or a choice is invalid; in ``display_name`` or a
  ``[source]`` entry any non-empty text is valid; a chip's or system's ``[source]`` has one key
  per table (that key misspelt or deleted: invalid); other ``[source]`` keys None;
- a boolean replaced by ``"false"``, 1 or 0.5 is invalid; a table by 1 or ``"table"`` invalid;
- whole-file damage: empty, truncated JSON, binary, Latin-1 and NUL bytes invalid; CRLF valid;
  a BOM and a truncated TOML file None.

Unit-suffix typos (:func:`unit_typo_valid`): a one-character deletion or adjacent swap of a
unit-suffixed key is invalid unless the new key names the same quantity (same base, same
dimension) and reads the same SI value (the value is 0: valid); a binary for a decimal prefix
(factor within 10%, ``_gib`` -> ``_gb``) is None (a plausible other chip); a key that collides
with one already in the table is a duplicate key (invalid TOML).

Hugging Face configs (:func:`hf_valid`): an unknown key is invalid (the reader cannot tell
whether it changes the architecture, and an input diffcost cannot represent is refused, never
approximated); a non-number, NaN, inf, 1e300, 2**62, 1e-300, 0 or -1 in an architecture count
(:data:`HF_COUNTS`) is invalid; deletions, misspellings and other keys None.

Flags (:func:`flag_valid`): a non-integer (``1.5``, ``x``, ``""``, ``nan``) for an integer flag
and a non-number for a float flag are invalid; 0 and -1 for a degree, count, length or size
(:data:`POSITIVE_INT`) invalid, 1 valid for a degree; NaN and +-inf for any float flag invalid;
0 and -1 for a rate or a latency limit (:data:`POSITIVE_FLOAT`, a limit <= 0 is not "no
limit") invalid, 0.5 valid; -1 for a coefficient of variation or a fraction invalid, 0 for a
CV valid; ``--qps 1e300`` invalid; a path or a made-up name for a built-in spec
(``--model``, ``--chip``...) invalid; a directory or a path below a file as an output invalid;
``int4=nan``, ``int4=-1``, ``int4``, ``=1``, ``x=1`` as an accuracy cost invalid,
``fp8=0.01`` valid; a boolean switch valid, but for ``--distributed`` alone (no coordinator
and no cluster launcher); an existing directory as ``--plots`` (a folder) valid.  A command
line is valid when every flag is, invalid when one is.  Degree combinations
(:func:`degree_valid`): degrees that divide the chips valid (``--tp 2 --chips 8``), a degree
<= 0 invalid (``--tp 0 --chips 8``), others None.
"""

import math
import re
from functools import cache
from pathlib import Path
from typing import Any

from diffcost.testing import UNITS

ROOT = Path(__file__).resolve().parents[2]
_TITLE = re.compile(r"^### ([\w-]+): `")
_TABLE = re.compile(r"^\*\*(?:top level|\[([^\]]+)\])(?: \(([^)]*)\))?\*\*")
_ROW = re.compile(r"^\| `([\w<>]+)` \| (.*?) \| (yes|no) \| (.*) \|$")

#: The documented domain of a key: (value text, required, meaning).
Domain = tuple[str, bool, str]


@cache
def key_reference() -> dict[str, dict[str, Any]]:
    """``{kind: {table: {"required": bool, "keys": {key: Domain}}}}`` from specs/SCHEMA.md; a
    unit-suffixed key is stored as ``base_<unit>`` and a top-level key under table ``""``."""
    ref: dict[str, dict[str, Any]] = {}
    kind = table = None
    for line in (ROOT / "specs" / "SCHEMA.md").read_text().splitlines():
        if m := _TITLE.match(line):
            kind, table = m.group(1), ""
            ref[kind] = {"": {"required": True, "keys": {}}}
        elif kind and (m := _TABLE.match(line)):
            table = m.group(1) or ""
            ref[kind].setdefault(table, {"required": m.group(2) == "required", "keys": {}})
        elif kind and table is not None and (m := _ROW.match(line)):
            ref[kind][table]["keys"][m.group(1)] = (m.group(2), m.group(3) == "yes", m.group(4))
    return ref


def split_unit(key: str) -> tuple[str, str, float] | None:
    """``(base, dimension, factor)`` of a documented unit suffix, longest suffix first."""
    for suffix, dim, factor in sorted(
        ((s, d, f) for d, t in UNITS.items() for s, f in t.items()), key=lambda x: -len(x[0])
    ):
        if key.endswith(suffix) and len(key) > len(suffix):
            return key[: -len(suffix)], dim, factor
    return None


def domain(kind: str, path: tuple[str | int, ...]) -> Domain | None:
    """The documented domain of the key at ``path`` of a ``kind`` file, or None."""
    ref = key_reference().get(kind)
    if ref is None or not path or not isinstance(path[-1], str):
        return None
    table = (
        path[0] if len(path) == 2 and isinstance(path[0], str) else "" if len(path) == 1 else None
    )
    if table is None or table not in ref:
        return None
    keys = ref[table]["keys"]
    key = path[-1]
    if key in keys:
        return keys[key]
    unit = split_unit(key)
    if unit is not None and f"{unit[0]}_<unit>" in keys:
        return keys[f"{unit[0]}_<unit>"]
    return None


#: Kinds whose ``[source]`` holds one required entry per table present.
_SOURCED = ("chip", "system")
_SIGNED_KEY = re.compile(r"log|bias|offset|delta|error|signed|skew")
_SIZE_DIMS = ("flop_per_s", "bytes_per_s")


def _is_size(key: str, value_doc: str) -> bool:
    """A peak, a bandwidth or a capacity: 0 or 1e-300 of one is no chip."""
    unit = split_unit(key)
    return (unit is not None and unit[1] in _SIZE_DIMS) or key.startswith("capacity")


def number_valid(key: str, dom: Domain | None, new: Any) -> bool | None:
    """A number key given ``new`` (one of :data:`fuzz.mutate.NUMBER_VALUES`)."""
    if isinstance(new, bool) or not isinstance(new, (int, float)):
        return False
    if not math.isfinite(new) or abs(new) >= 2**62 or new >= 1e300:
        return False
    value_doc, meaning = (dom[0], dom[2]) if dom else ("", "")
    if new < 0:
        return None if _SIGNED_KEY.search(key) else False
    if new == 0:
        if "in [0" in value_doc:
            return True
        if "> 0" in value_doc or "in (0" in value_doc or _is_size(key, value_doc):
            return False
        if "integer" in value_doc:
            return False
        if ">= 0" in value_doc or "(0:" in meaning:
            return True
        return None
    if 0 < new < 1e-200:
        return False if "integer" in value_doc or _is_size(key, value_doc) else None
    return None


def _text_valid(new: Any) -> bool:
    """A ``[source]`` entry: any non-empty text."""
    return isinstance(new, str) and bool(new)


def _required_by_rule(kind: str, path: tuple[str | int, ...], doc: dict[str, Any]) -> bool:
    """Keys the key reference's "Also checked" lines require: a chip's only 16-bit peak or
    16-bit FLOP energy, a systolic or dataflow chip's ``array_dim`` and ``op_latency_*``."""
    if kind != "chip" or len(path) != 2:
        return False
    table, key = str(path[0]), str(path[1])
    if table in ("compute", "energy") and key.startswith(("bf16_", "fp16_")):
        other = "fp16_" if key.startswith("bf16_") else "bf16_"
        return not any(str(k).startswith(other) for k in doc.get(table, {}))
    arch = doc.get("execution", {}).get("architecture", "gpu")
    return table == "execution" and arch != "gpu" and key.startswith(("array_dim", "op_latency"))


def spec_valid(
    kind: str,
    path: tuple[str | int, ...],
    label: str,
    old: Any,
    new: Any,
    doc: dict[str, Any] | None = None,
) -> bool | None:
    """The validity of a document mutation ``label`` at ``path`` (``new``: the value set;
    ``doc``: the unmutated document)."""
    covered = kind in key_reference()
    key = str(path[-1]) if path else ""
    if len(path) == 2 and path[0] == "source":
        if label.startswith(("misspell ", "delete ")):
            named = kind in _SOURCED and doc is not None and isinstance(doc.get(key), dict)
            return False if named else None
        return _text_valid(new)
    if label == "add unknown key" or label.startswith("misspell "):
        return False if covered else None
    dom = domain(kind, path)
    if label.startswith("delete ") and doc is not None and _required_by_rule(kind, path, doc):
        return False
    if label.startswith("delete ") and path == ("source",) and kind in _SOURCED:
        return False
    if label.startswith("delete "):
        if len(path) == 1 and kind in key_reference() and key in key_reference()[kind]:
            return not key_reference()[kind][key]["required"] if isinstance(old, dict) else None
        if dom is None:
            return None
        # an optional key of a model, scenario... may be required by another (experts and
        # experts_per_token): only a chip's and a system's cross-key rules are known here
        return False if dom[1] else True if kind in _SOURCED else None
    if isinstance(old, bool):
        return False
    if isinstance(old, (int, float)):
        return number_valid(key, dom, new)
    if isinstance(old, str):
        if not isinstance(new, str):
            return False
        in_source = len(path) == 2 and path[0] == "source"
        if in_source or key == "display_name":
            return bool(new) if covered else None
        if key in ("name", "kind", "chip", "model", "engine", "architecture") or (
            dom and dom[0].startswith("one of")
        ):
            return False
        return None
    if isinstance(old, dict):
        return False if not isinstance(new, dict) else None
    if isinstance(old, list):
        if not isinstance(new, list):
            return False
        return False if any(isinstance(x, float) and math.isnan(x) for x in new) else None
    return None


#: Whole-file damage: True valid, False invalid, None cannot tell.
BYTE_VALID: dict[str, bool | None] = {
    "empty file": False,
    "truncated at 1/3": None,
    "truncated at 2/3": None,
    "binary": False,
    "UTF-8 BOM": None,
    "CRLF line ends": True,
    "Latin-1 byte": False,
    "NUL byte": False,
}


def unit_typo_valid(old: str, new: str, value: Any, table_keys: set[str]) -> bool | None:
    """A renamed unit-suffixed key (see the module docstring)."""
    if new in table_keys:
        return False
    a, b = split_unit(old), split_unit(new)
    if a is None or b is None or a[:2] != b[:2]:
        return False
    if isinstance(value, (int, float)) and value * a[2] == value * b[2]:
        return True
    ratio = max(a[2] / b[2], b[2] / a[2])
    return None if ratio < 1.1 else False


#: Hugging Face config keys that count layers, widths, heads, experts or tokens: each must be a
#: positive integer.
HF_COUNTS = frozenset(
    (
        "num_hidden_layers n_layer num_layers hidden_size n_embd d_model intermediate_size "
        "ffn_dim num_attention_heads n_head num_key_value_heads vocab_size "
        "max_position_embeddings n_positions num_local_experts n_routed_experts num_experts "
        "num_experts_per_tok moe_intermediate_size head_dim kv_lora_rank qk_rope_head_dim "
        "qk_nope_head_dim v_head_dim"
    ).split()
)


def hf_valid(path: tuple[str | int, ...], label: str, old: Any, new: Any) -> bool | None:
    """The validity of a Hugging Face config mutation."""
    if label == "add unknown key":
        return False  # may change the architecture: refused rather than misread
    key = path[-1] if path else ""
    if len(path) != 1 or key not in HF_COUNTS or label.startswith(("delete ", "misspell ")):
        return None
    if isinstance(new, bool) or not isinstance(new, int) or isinstance(old, bool):
        return False
    return False if new <= 0 or new >= 2**62 else None


#: Integer flags that are a degree, a count, a length or a size: each must be >= 1.
POSITIVE_INT = frozenset(
    (
        "--chips --tp --pp --dp --cp --ep --expert-tp --micro-batch --global-batch --seq-len "
        "--virtual-stages --replicas --batch --input-len --output-len --prefill-chips "
        "--decode-chips --kv-block --max-cp --max-batch --top --steps --rounds --chunk "
        "--num-processes --shard-group"
    ).split()
)
#: Degrees: 1 is always a valid degree.
DEGREES = frozenset(("--tp", "--pp", "--dp", "--cp", "--ep", "--expert-tp", "--replicas"))
#: Float flags that are a rate or a latency limit: each must be > 0 and finite.
POSITIVE_FLOAT = frozenset(
    ("--qps", "--ttft-p99-ms", "--tpot-p99-ms", "--ttft-slo-ms", "--tpot-slo-ms")
)
#: Flags naming a built-in spec or a spec file.
SPEC_FLAGS = frozenset(("--model", "--system", "--chip", "--scenario", "--engine"))
#: Output paths.
OUTPUT_FLAGS = frozenset(("--csv", "--parquet", "--plots", "--plot", "--tornado"))


def flag_valid(flag: str, kind: Any, value: str | None) -> bool | None:
    """One flag given ``value`` (``None``: a boolean switch)."""
    if value is None:
        # --distributed alone: no coordinator and no cluster launcher here (fuzz, shard 3)
        return flag != "--distributed"
    name = getattr(kind, "__name__", str(kind))
    if name == "int":
        try:
            n = int(value)
        except ValueError:
            return False
        if flag in POSITIVE_INT and n <= 0:
            return False
        if n < 0 and flag in ("--zero", "--draft-len", "--lora-rank", "--process-id"):
            return False
        return True if n == 1 and flag in DEGREES else None
    if name == "float":
        try:
            x = float(value)
        except ValueError:
            return False
        if not math.isfinite(x):
            return False
        if flag in POSITIVE_FLOAT and x <= 0:
            return False
        if x < 0:
            return False
        if flag == "--qps" and x >= 1e300:
            return False
        if x == 0 and flag.endswith("-cv"):
            return True
        return True if x == 0.5 else None
    if flag in SPEC_FLAGS:
        return False
    if flag == "--plots" and value == "{dir}":
        return True  # a folder the plots are written into (fuzz, shard 3)
    if flag in OUTPUT_FLAGS:
        return False if value in ("{dir}", "{dir}/afile/x.png") else None
    if flag == "--accuracy-cost":
        if value in ("int4=nan", "int4=-1", "int4", "=1", "x=1"):
            return False
        return True if value == "fp8=0.01" else None
    return None


def line_valid(parts: list[bool | None]) -> bool | None:
    """A command line: invalid if one part is, valid if every part is."""
    if any(p is False for p in parts):
        return False
    return True if all(p is True for p in parts) else None


def degree_valid(degree: int | str, chips: int) -> bool | None:
    """``--<degree> D --chips C`` (see the module docstring)."""
    try:
        d = int(degree)
    except ValueError:
        return False
    if d <= 0 or chips <= 0:
        return False
    return True if chips % d == 0 else None
