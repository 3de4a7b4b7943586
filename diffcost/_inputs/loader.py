"""The one place that reads files: strict TOML specs, Hugging Face configs, scenarios.

Every problem of a file is collected and raised together as a :class:`SpecError` naming the file,
the key and the reason.  Values are converted to SI (:mod:`diffcost._units`) and turned into the
Equinox modules of :mod:`diffcost._hardware` and :mod:`diffcost._model`.
"""

import difflib
import json
import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jax.numpy as jnp

from .._core.errors import Problem, SpecError
from .._core.units import SI_SUFFIX, accepted_suffixes, split_unit
from . import schema as S
from .hardware import FORMAT_FALLBACK, FORMATS, Chip, Efficiency, System
from .model import MLP_MATRICES, NORM_PARAMS, Model

KIND_DIRS = {
    "chip": "chips",
    "system": "systems",
    "model": "models",
    "scenario": "scenarios",
    "calibration": "calibration",
}
PARAMS_TOLERANCE = 0.05


def specs_dir() -> Path:
    """Built-in specs: packaged as ``diffcost/specs`` in a wheel, ``specs/`` in a checkout."""
    here = Path(__file__).resolve().parents[1]  # the diffcost package
    for candidate in (here / "specs", here.parent / "specs"):
        if (candidate / "chips").is_dir():
            return candidate
    raise FileNotFoundError(f"built-in specs not found next to {here}")


@dataclass(frozen=True)
class SpecInfo:
    """Who a spec is: kind, name, display name, file and the sources of its numbers."""

    kind: str
    name: str
    display_name: str
    path: str
    source: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Spec:
    """A validated spec: its identity and its values in SI (nested by table)."""

    info: SpecInfo
    values: dict[str, Any]


# --- value checking ------------------------------------------------------------------------
class _Checker:
    def __init__(self, path: str):
        self.path = path
        self.problems: list[Problem] = []

    def add(self, key: str, reason: str) -> None:
        self.problems.append(Problem(self.path, key, reason))

    def value(self, key: str, raw: Any, spec: S.Field) -> Any:
        kind = spec.kind
        if kind in ("count", "number", "quantity"):
            if isinstance(raw, bool) or not isinstance(raw, (int, float)):
                self.add(key, f"must be a number, got {raw!r}")
                return None
            if kind == "count" and not isinstance(raw, int):
                self.add(key, f"must be an integer, got {raw!r}")
                return None
            if spec.positive and not raw > 0:
                self.add(key, f"must be positive, got {raw!r}")
                return None
            if not spec.positive and raw < 0:
                self.add(key, f"must not be negative, got {raw!r}")
                return None
            return raw
        if kind == "bool":
            if not isinstance(raw, bool):
                self.add(key, f"must be true or false, got {raw!r}")
                return None
            return raw
        if not isinstance(raw, str) or not raw:
            self.add(key, f"must be a non-empty string, got {raw!r}")
            return None
        if kind == "enum" and raw not in spec.choices:
            self.add(key, f"must be one of {', '.join(spec.choices)}; got {raw!r}")
            return None
        return raw

    def table(self, data: Any, schema: dict[str, S.Field], prefix: str) -> dict[str, Any]:
        """Check one table: returns SI values keyed ``base + SI suffix`` for quantities."""
        out: dict[str, Any] = {}
        if not isinstance(data, dict):
            self.add(prefix.rstrip("."), "must be a table")
            return out
        seen: dict[str, str] = {}
        for key, raw in data.items():
            full = prefix + key
            if isinstance(raw, dict):
                self.add(full, "unexpected table")
                continue
            spec = schema.get(key)
            base, factor, si_key = key, 1.0, key
            if spec is None:
                unit = split_unit(key)
                if unit is not None and unit[0] in schema and schema[unit[0]].kind == "quantity":
                    base, dim, factor = unit
                    spec = schema[base]
                    if dim != spec.dim:
                        self.add(
                            full,
                            f"unit of {key!r} is {dim}, but {base} is in {spec.dim} "
                            f"(use one of {accepted_suffixes(spec.dim)})",
                        )
                        continue
                    si_key = base + SI_SUFFIX[dim]
                else:
                    self.add(full, _unknown_key(key, schema))
                    continue
            elif spec.kind == "quantity":
                seen[base] = key
                self.add(
                    full,
                    f"missing unit suffix: write {key}{next(iter(_suffixes(spec.dim)))} "
                    f"(accepted: {accepted_suffixes(spec.dim)})",
                )
                continue
            if base in seen:
                self.add(full, f"given twice (also as {seen[base]!r})")
                continue
            seen[base] = key
            value = self.value(full, raw, spec)
            if value is not None:
                out[si_key] = value * factor if spec.kind == "quantity" else value
        for base, spec in schema.items():
            if spec.required and base not in seen:
                hint = (
                    f" (with a unit: {accepted_suffixes(spec.dim)})"
                    if spec.kind == "quantity"
                    else ""
                )
                self.add(prefix + base, f"missing required key{hint}")
        return out


def _suffixes(dim: str) -> list[str]:
    from .._core.units import UNITS

    return list(UNITS[dim])


def _unknown_key(key: str, schema: dict[str, S.Field]) -> str:
    names = []
    for base, spec in schema.items():
        names += [base + sfx for sfx in _suffixes(spec.dim)] if spec.kind == "quantity" else [base]
    close = difflib.get_close_matches(key, names, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown key{hint} (allowed: {', '.join(sorted(schema))})"


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise SpecError([Problem(str(path), "", "file not found")]) from None
    except tomllib.TOMLDecodeError as err:
        raise SpecError([Problem(str(path), "", f"not valid TOML: {err}")]) from None


def _check_spec(
    path: Path,
    kind: str,
    tables: dict[str, dict[str, S.Field]],
    top: dict[str, S.Field],
    required_tables: tuple[str, ...] = (),
) -> Spec:
    data = _read_toml(path)
    ck = _Checker(str(path))
    top_schema = {**S.TOP, **top}
    top_values = ck.table(
        {k: v for k, v in data.items() if not isinstance(v, dict)}, top_schema, ""
    )
    values: dict[str, Any] = dict(top_values)
    if top_values.get("schema_version", 1) != 1:
        ck.add("schema_version", f"unsupported version {top_values['schema_version']} (expected 1)")
    if "kind" in top_values and top_values["kind"] != kind:
        ck.add(
            "kind",
            f"expected {kind!r} for a file in {KIND_DIRS[kind]}/, got {top_values['kind']!r}",
        )
    if "name" in top_values and path.suffix == ".toml" and top_values["name"] != path.stem:
        ck.add("name", f"must equal the file name {path.stem!r}, got {top_values['name']!r}")
    for name, sub in data.items():
        if not isinstance(sub, dict) or name == "source":
            continue
        if name not in tables:
            ck.add(name, f"unknown table (allowed: {', '.join(sorted([*tables, 'source']))})")
            continue
        values[name] = ck.table(sub, tables[name], name + ".")
    for name in required_tables:
        if name not in data:
            ck.add(name, "missing required table")
    source = data.get("source")
    if not isinstance(source, dict):
        ck.add("source", "missing [source] table: every number needs a source")
        source = {}
    for key, text in source.items():
        if not isinstance(text, str) or not text.strip():
            ck.add(f"source.{key}", "must be a non-empty string")
    present = [n for n in data if isinstance(data[n], dict) and n in tables]
    for name in present:
        if name not in source:
            ck.add(f"source.{name}", f"missing: say where the numbers of [{name}] come from")
    _kind_checks(kind, values, ck)
    if ck.problems:
        raise SpecError(ck.problems)
    info = SpecInfo(
        kind,
        values["name"],
        values["display_name"],
        str(path),
        {k: v for k, v in source.items() if isinstance(v, str)},
    )
    return Spec(info, values)


def _kind_checks(kind: str, values: dict[str, Any], ck: _Checker) -> None:
    if kind == "chip":
        compute = values.get("compute", {})
        if not any(f"{fmt}_flop_per_s" in compute for fmt in ("bf16", "fp16")):
            ck.add("compute", "needs bf16_tflop_per_s or fp16_tflop_per_s")
    if kind == "model" and all(k in values for k in ("hidden", "heads", "kv_heads")):
        if values["heads"] % values["kv_heads"]:
            ck.add(
                "kv_heads",
                f"heads ({values['heads']}) must be divisible by kv_heads ({values['kv_heads']})",
            )
        if "head_dim" not in values and values["hidden"] % values["heads"]:
            ck.add(
                "head_dim",
                f"hidden ({values['hidden']}) is not divisible by heads "
                f"({values['heads']}): give head_dim",
            )
        required = (
            "layers",
            "ffn_hidden",
            "vocab",
            "max_seq_len",
            "mlp",
            "norm",
            "position",
            "tied_embeddings",
            "bias",
            "dropout",
            "architecture",
        )
        if "params_b" in values and all(k in values for k in required):
            computed = float(_model_module(values).num_params()) / 1e9
            rel = abs(computed - values["params_b"]) / values["params_b"]
            if rel > PARAMS_TOLERANCE:
                ck.add(
                    "params_b",
                    f"published {values['params_b']}B disagrees with the shape's "
                    f"{computed:.2f}B by {rel:.0%} (> {PARAMS_TOLERANCE:.0%})",
                )
    if kind == "calibration":
        for section in [values.get("efficiency", {}), *values.get("overrides", {}).values()]:
            for key in S.FRACTIONS:
                if key in section and not 0 <= section[key] <= 1:
                    ck.add(key, f"is a fraction and must lie in [0, 1], got {section[key]}")


# --- resolution of names and paths ---------------------------------------------------------
def builtin_names(kind: str) -> list[str]:
    """Names of the built-in specs of a kind (file stems)."""
    return sorted(p.stem for p in (specs_dir() / KIND_DIRS[kind]).glob("*.toml"))


def resolve(kind: str, name_or_path: str | Path, where: str = "<arguments>") -> Path:
    """A built-in name or a path -> the file; unknown names list the built-in ones."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".toml", ".json") or candidate.is_file():
        if not candidate.is_file():
            raise SpecError([Problem(str(candidate), "", f"{kind} file not found")])
        return candidate
    names = builtin_names(kind)
    if str(name_or_path) in names:
        return specs_dir() / KIND_DIRS[kind] / f"{name_or_path}.toml"
    close = difflib.get_close_matches(str(name_or_path), names, n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise SpecError(
        [
            Problem(
                where,
                kind,
                f"unknown {kind} {str(name_or_path)!r}{hint} "
                f"(built-in: {', '.join(names)}; or give a file path)",
            )
        ]
    )


@cache
def _load_spec_cached(kind: str, path: str) -> Spec:
    p = Path(path)
    if kind == "chip":
        return _check_spec(p, kind, S.CHIP, {}, S.CHIP_REQUIRED_TABLES)
    if kind == "system":
        return _check_spec(p, kind, S.SYSTEM, S.SYSTEM_TOP)
    if kind == "model":
        if p.suffix == ".json":
            return _hf_config(p)
        return _check_spec(p, kind, {}, S.MODEL_TOP)
    if kind == "calibration":
        return _load_calibration(p)
    raise ValueError(kind)


def load_spec(kind: str, name_or_path: str | Path) -> Spec:
    """Validated spec of ``kind`` ("chip", "system", "model", "calibration") by name or path."""
    return _load_spec_cached(kind, str(resolve(kind, name_or_path).resolve()))


# --- calibration ---------------------------------------------------------------------------
def _load_calibration(path: Path) -> Spec:
    data = _read_toml(path)
    overrides = data.pop("overrides", {})
    tmp = dict(data)
    spec = _check_spec_from_data(path, tmp)
    ck = _Checker(str(path))
    optional = {
        k: S.Field(f.kind, f.dim, False, f.choices, f.positive)
        for k, f in S.CALIBRATION_FIELDS.items()
    }
    ov_values = {}
    if not isinstance(overrides, dict):
        ck.add("overrides", "must be a table of chip-name tables")
        overrides = {}
    known_chips = set(builtin_names("chip"))
    for chip_name, table in overrides.items():
        if chip_name not in known_chips:
            ck.add(f"overrides.{chip_name}", "unknown chip name")
        ov_values[chip_name] = ck.table(table, optional, f"overrides.{chip_name}.")
    _kind_checks("calibration", {"efficiency": {}, "overrides": ov_values}, ck)
    if ck.problems:
        raise SpecError(ck.problems)
    spec.values["overrides"] = ov_values
    return spec


def _check_spec_from_data(path: Path, data: dict[str, Any]) -> Spec:
    ck = _Checker(str(path))
    top = ck.table({k: v for k, v in data.items() if not isinstance(v, dict)}, S.TOP, "")
    eff = ck.table(data.get("efficiency", {}), S.CALIBRATION_FIELDS, "efficiency.")
    for name in data:
        if isinstance(data[name], dict) and name not in ("efficiency", "source"):
            ck.add(name, "unknown table (allowed: efficiency, overrides, source)")
    source = data.get("source", {})
    if "efficiency" not in source:
        ck.add("source.efficiency", "missing: say where the efficiency constants come from")
    _kind_checks("calibration", {"efficiency": eff}, ck)
    if ck.problems:
        raise SpecError(ck.problems)
    info = SpecInfo("calibration", top["name"], top["display_name"], str(path), dict(source))
    return Spec(info, {**top, "efficiency": eff})


def efficiency_for(chip_name: str, calibration: str | Path = "default") -> Efficiency:
    """Efficiency constants for a chip: the calibration's global values and chip overrides."""
    spec = load_spec("calibration", calibration)
    values = dict(spec.values["efficiency"])
    values.update(spec.values.get("overrides", {}).get(chip_name, {}))
    f = lambda k: jnp.asarray(float(values[k]))
    return Efficiency(
        matmul_peak_fraction=f("matmul_peak_fraction"),
        matmul_half_dim=f("matmul_half_dim"),
        memory_bandwidth_fraction=f("memory_bandwidth_fraction"),
        link_bandwidth_fraction=f("link_bandwidth_fraction"),
        kernel_launch_s=f("kernel_launch_s"),
        memory_reserved_bytes=f("memory_reserved_bytes"),
        memory_fragmentation_fraction=f("memory_fragmentation_fraction"),
        overlap_contention=f("overlap_contention"),
        kv_reread_fraction=f("kv_reread_fraction"),
    )


# --- modules -------------------------------------------------------------------------------
def _chip_module(values: dict[str, Any]) -> Chip:
    compute = values["compute"]
    peaks = []
    for fmt in FORMATS:
        current: str | None = fmt
        while current is not None and f"{current}_flop_per_s" not in compute:
            current = FORMAT_FALLBACK[current]
        if current is None:  # fp32 missing: fall back to the widest 16-bit peak
            current = "bf16" if "bf16_flop_per_s" in compute else "fp16"
        peaks.append(float(compute[f"{current}_flop_per_s"]))
    mem = values["memory"]
    return Chip(
        peak_flop_per_s=jnp.asarray(peaks),
        memory_capacity_bytes=jnp.asarray(float(mem["capacity_bytes"])),
        memory_bandwidth_bytes_per_s=jnp.asarray(float(mem["bandwidth_bytes_per_s"])),
        on_chip_sram=jnp.asarray(float(mem["on_chip_sram"])),
        tdp_w=jnp.asarray(float(values["power"]["tdp_w"])),
    )


def load_chip(name_or_path: str | Path) -> Chip:
    """A chip by built-in name or spec path."""
    return _chip_module(load_spec("chip", name_or_path).values)


def load_system(
    system: str | Path | None = None,
    *,
    chip: str | Path | None = None,
    chips: int | None = None,
    calibration: str | Path = "default",
) -> System:
    """A system by name/path, or a chip's own default system (its node and network).

    ``chips`` overrides the system's default chip count.
    """
    if (system is None) == (chip is None):
        raise SpecError(
            [Problem("<arguments>", "system/chip", "give exactly one of system or chip")]
        )
    if chips is not None and (isinstance(chips, bool) or not isinstance(chips, int) or chips < 1):
        raise SpecError(
            [Problem("<arguments>", "chips", f"must be a positive integer, got {chips!r}")]
        )
    if system is not None:
        sys_spec = load_spec("system", system)
        chip_spec = load_spec("chip", sys_spec.values["chip"])
        links = {**chip_spec.values["interconnect"], **sys_spec.values.get("interconnect", {})}
        price = {**chip_spec.values.get("price", {}), **sys_spec.values.get("price", {})}
        count = sys_spec.values["chips"] if chips is None else chips
    else:
        chip_spec = load_spec("chip", chip)
        links = chip_spec.values["interconnect"]
        price = chip_spec.values.get("price", {})
        count = links["scale_up_domain_chips"] if chips is None else chips
    f = lambda x: jnp.asarray(float(x))
    return System(
        chip=_chip_module(chip_spec.values),
        num_chips=f(count),
        scale_up_domain_chips=f(links["scale_up_domain_chips"]),
        scale_up_bandwidth_bytes_per_s=f(links["scale_up_bandwidth_bytes_per_s"]),
        scale_up_latency_s=f(links["scale_up_latency_s"]),
        scale_out_bandwidth_bytes_per_s=f(links["scale_out_bandwidth_bytes_per_s"]),
        scale_out_latency_s=f(links["scale_out_latency_s"]),
        price_usd_per_chip_hour=f(price.get("usd_per_hour", 0.0)),
        efficiency=efficiency_for(chip_spec.info.name, calibration),
    )


def _model_module(v: dict[str, Any]) -> Model:
    f = lambda x: jnp.asarray(float(x))
    head_dim = v.get("head_dim", v["hidden"] / v["heads"])
    return Model(
        layers=f(v["layers"]),
        hidden=f(v["hidden"]),
        heads=f(v["heads"]),
        kv_heads=f(v["kv_heads"]),
        head_dim=f(head_dim),
        ffn_hidden=f(v["ffn_hidden"]),
        vocab=f(v["vocab"]),
        max_seq_len=f(v["max_seq_len"]),
        mlp_matrices=f(MLP_MATRICES[v["mlp"]]),
        norm_params=f(NORM_PARAMS[v["norm"]]),
        learned_positions=f(v["position"] == "learned"),
        tied_embeddings=f(v["tied_embeddings"]),
        bias=f(v["bias"]),
        dropout=f(v["dropout"]),
        causal=f(v["architecture"] == "decoder"),
    )


def load_model(name_or_path: str | Path) -> Model:
    """A model by built-in name, TOML spec path or Hugging Face ``config.json`` path."""
    return _model_module(load_spec("model", name_or_path).values)


# --- Hugging Face config.json --------------------------------------------------------------
_HF_KEYS = {
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "hidden": ("hidden_size", "n_embd", "d_model"),
    "heads": ("num_attention_heads", "n_head"),
    "kv_heads": ("num_key_value_heads", "num_kv_heads", "n_head_kv"),
    "ffn_hidden": ("intermediate_size", "n_inner", "ffn_dim"),
    "vocab": ("vocab_size",),
    "max_seq_len": ("max_position_embeddings", "n_positions", "seq_length"),
    "head_dim": ("head_dim",),
}
_SWIGLU_ACTS = ("silu", "swiglu", "swish")


def _hf_config(path: Path) -> Spec:
    """Read a Hugging Face ``config.json`` (local file; nothing is downloaded)."""
    ck = _Checker(str(path))
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise SpecError([Problem(str(path), "", f"not a readable JSON file: {err}")]) from None
    if not isinstance(data, dict):
        raise SpecError([Problem(str(path), "", "must be a JSON object")])
    v: dict[str, Any] = {}
    for field_name, keys in _HF_KEYS.items():
        for key in keys:
            if data.get(key) is not None:
                v[field_name] = ck.value(key, data[key], S.Field("count"))
                break
    for required in ("layers", "hidden", "heads", "vocab"):
        if required not in v:
            ck.add(" or ".join(_HF_KEYS[required]), "missing required key")
    if ck.problems:
        raise SpecError(ck.problems)
    act = str(data.get("hidden_act", data.get("activation_function", "gelu"))).lower()
    model_type = str(data.get("model_type", "")).lower()
    swiglu = act in _SWIGLU_ACTS or model_type in ("llama", "mistral", "qwen2", "gemma")
    v.setdefault("kv_heads", v["heads"])
    v.setdefault("ffn_hidden", 4 * v["hidden"])
    v.setdefault("max_seq_len", 2048)
    encoder = model_type in ("bert", "roberta", "deberta", "electra")
    learned = model_type in ("gpt2", "bert", "roberta", "opt", "gpt_bigcode", "electra")
    rms = "rms_norm_eps" in data
    v.update(
        architecture="encoder" if encoder else "decoder",
        mlp="swiglu" if swiglu else ("relu" if act == "relu" else "gelu"),
        norm="rmsnorm" if rms else "layernorm",
        position="learned" if learned else ("alibi" if data.get("alibi") else "rope"),
        tied_embeddings=bool(data.get("tie_word_embeddings", not swiglu)),
        bias=bool(data.get("bias", data.get("attention_bias", not rms))),
        dropout=float(data.get("attention_dropout", data.get("attn_pdrop", 0.0)) or 0.0) > 0,
        name=path.parent.name or path.stem,
        display_name=f"{model_type or 'transformer'} from {path}",
    )
    _kind_checks("model", v, ck)
    if ck.problems:
        raise SpecError(ck.problems)
    info = SpecInfo(
        "model", v["name"], v["display_name"], str(path), {"shape": f"Hugging Face config {path}"}
    )
    return Spec(info, v)
