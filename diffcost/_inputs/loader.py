"""The one place that reads spec files: chips, systems, models (TOML or Hugging Face
``config.json``) and calibrations, by built-in name or path.

Every file goes through the one reader and checker of :mod:`diffcost._inputs.checker`, driven by
the one schema source :mod:`diffcost._inputs.schema`: every problem of a file is raised together
as a :class:`SpecError` naming the file, the key and the reason.  Values are converted to SI
(:mod:`diffcost._core.units`) and turned into the Equinox modules of
:mod:`diffcost._inputs.hardware` and :mod:`diffcost._inputs.model` (:mod:`.build`).
Scenarios (:mod:`.scenario`) and measurements (:mod:`.measurements`) use the same engine.
"""

import difflib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from .._core.errors import Problem, SpecError
from .build import chip_module, efficiency_module, model_module, reliability_module
from .checker import Checker, builtin_names, read_toml, specs_dir
from .hardware import Chip, Efficiency, Reliability, System, strong_float
from .hf_config import hf_document
from .model import Model
from .reserve import runtime_reserve_bytes
from .schema import KIND_DIRS, KINDS, PARAMS_TOLERANCE, Kind


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


# --- resolution of names and paths ---------------------------------------------------------
def _is_file(path: Path) -> bool:
    """``path.is_file()``, false for a name the OS cannot look up (too long, a NUL byte)."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def resolve(kind: str, name_or_path: str | Path, where: str = "<arguments>") -> Path:
    """A built-in name or a path -> the file; unknown names list the built-in ones."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".toml", ".json") or _is_file(candidate):
        if not _is_file(candidate):
            raise SpecError([Problem(str(candidate), "", f"{kind} file not found")])
        return candidate
    names = builtin_names(kind)
    name = builtin_name(str(name_or_path), names)
    if name is not None:
        return specs_dir() / KIND_DIRS[kind] / f"{name}.toml"
    by_lower = {n.lower(): n for n in names}
    close = difflib.get_close_matches(str(name_or_path).lower(), list(by_lower), n=3)
    close = [by_lower[c] for c in close]
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


def builtin_name(name: str, names: list[str]) -> str | None:
    """The built-in name ``name`` stands for: itself, or the one name it equals ignoring case
    (``LLAMA-3-70B`` is ``llama-3-70b``: built-in names are lower case, so a match ignoring
    case is unambiguous unless two names differ only in case, and then none is chosen)."""
    if name in names:
        return name
    same = [n for n in names if n.lower() == name.lower()]
    return same[0] if len(same) == 1 else None


def is_builtin(path: str | Path) -> bool:
    """Whether a path lies inside the built-in specs (read-only: they ship with the package)."""
    return Path(path).resolve().is_relative_to(specs_dir().resolve())


def check_document(
    path: Path, kind: str, data: dict[str, Any], stem: str | None, schema: Kind | None = None
) -> Spec:
    """Check a file's data against the schema of ``kind`` (``schema``: instead of
    :data:`KINDS` ``[kind]``); every problem at once."""
    ck = Checker(str(path))
    values, source = ck.document(data, schema or KINDS[kind], stem)
    ck.raise_if_any()
    return Spec(SpecInfo(kind, values["name"], values["display_name"], str(path), source), values)


@cache
def _load_spec_cached(kind: str, path: str, schema: Kind | None) -> Spec:
    p = Path(path)
    if kind not in ("chip", "system", "model", "calibration", "engine"):
        raise ValueError(kind)
    if kind == "model" and p.suffix == ".json":
        return check_document(p, kind, hf_document(p), None, schema)
    return check_document(p, kind, read_toml(p), p.stem if p.suffix == ".toml" else None, schema)


def load_spec(
    kind: str, name_or_path: str | Path, where: str = "<arguments>", schema: Kind | None = None
) -> Spec:
    """Validated spec of ``kind`` ("chip", "system", "model", "calibration", "engine") by name
    or path; ``where``: the file that names it, for the message when it is unknown;
    ``schema``: the kind's schema where a higher layer completes it (an engine's behaviour
    switches, :data:`diffcost._serve.engine.ENGINE_KIND`; default :data:`KINDS` ``[kind]``)."""
    return _load_spec_cached(kind, str(resolve(kind, name_or_path, where).resolve()), schema)


def clear_cache() -> None:
    """Forget every loaded spec (after a spec file was rewritten)."""
    _load_spec_cached.cache_clear()


def efficiency_for(chip_name: str, calibration: str | Path = "default") -> Efficiency:
    """Efficiency constants for a chip: the calibration's global values and chip overrides."""
    spec = load_spec("calibration", calibration)
    values = dict(spec.values["efficiency"])
    values.update(spec.values.get("overrides", {}).get(chip_name, {}))
    return efficiency_module(values)


# --- modules -------------------------------------------------------------------------------
def load_chip(name_or_path: str | Path) -> Chip:
    """A chip by built-in name or spec path."""
    return chip_module(load_spec("chip", name_or_path).values)


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
        chip_spec = load_spec("chip", sys_spec.values["chip"], sys_spec.info.path)
        links = {**chip_spec.values["interconnect"], **sys_spec.values.get("interconnect", {})}
        price = {**chip_spec.values.get("price", {}), **sys_spec.values.get("price", {})}
        count = sys_spec.values["chips"] if chips is None else chips
        overhead = sys_spec.values.get("power", {}).get("node_overhead_w", 0.0)
        reliability = reliability_module(sys_spec.values.get("reliability"))
        reduces = bool(links.get("in_network_reduction", False))
    else:
        assert chip is not None  # exactly one of system and chip
        chip_spec = load_spec("chip", chip)
        links = chip_spec.values["interconnect"]
        price = chip_spec.values.get("price", {})
        count = links["scale_up_domain_chips"] if chips is None else chips
        overhead = 0.0
        reliability = Reliability()
        reduces = False
    f = lambda x: strong_float(float(x))
    out = System(
        chip=chip_module(chip_spec.values),
        num_chips=f(count),
        scale_up_domain_chips=f(links["scale_up_domain_chips"]),
        scale_up_bandwidth_bytes_per_s=f(links["scale_up_bandwidth_bytes_per_s"]),
        scale_up_latency_s=f(links["scale_up_latency_s"]),
        scale_out_bandwidth_bytes_per_s=f(links["scale_out_bandwidth_bytes_per_s"]),
        scale_out_latency_s=f(links["scale_out_latency_s"]),
        price_usd_per_chip_hour=f(price.get("usd_per_hour", 0.0)),
        efficiency=efficiency_for(chip_spec.info.name, calibration),
        node_overhead_w=f(overhead),
        reliability=reliability,
        in_network_reduction=f(1.0 if reduces else 0.0),
    )
    _check_reserve(out, chip_spec, calibration)
    return out


def _check_reserve(system: System, chip_spec: "Spec", calibration: str | Path) -> None:
    """A chip whose whole memory goes to the runtime reserve (CUDA context, allocator
    fragmentation: :func:`diffcost._inputs.reserve.runtime_reserve_bytes`) cannot hold any job;
    refused here, naming both inputs, rather than costed with negative usable memory."""
    capacity = float(system.chip.memory_capacity_bytes)
    reserve = float(runtime_reserve_bytes(system))
    if reserve >= capacity:
        raise SpecError(
            [
                Problem(
                    chip_spec.info.path,
                    "memory.capacity_<unit>",
                    f"{capacity / 1e9:.3g} GB is not more than the runtime reserve of "
                    f"{reserve / 1e9:.3g} GB (calibration {calibration!s}: "
                    "memory_reserved_bytes + memory_fragmentation_fraction * capacity)",
                )
            ]
        )


def load_model(name_or_path: str | Path) -> Model:
    """A model by built-in name, TOML spec path or Hugging Face ``config.json`` path."""
    return model_module(load_spec("model", name_or_path).values)


__all__ = [
    "KIND_DIRS",
    "PARAMS_TOLERANCE",
    "Spec",
    "SpecInfo",
    "builtin_names",
    "clear_cache",
    "efficiency_for",
    "is_builtin",
    "load_chip",
    "load_model",
    "load_spec",
    "load_system",
    "resolve",
    "specs_dir",
]
