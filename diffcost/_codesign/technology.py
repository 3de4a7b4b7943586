"""Figures of one process node with its memory, links and packaging: the parametric chip's inputs.

Read from ``specs/codesign/technology.toml``, where every value has a source string; the one spec
checker (:class:`~diffcost._inputs.checker.Checker`, with the ``TECHNOLOGY_*`` tables of
:mod:`diffcost._inputs.schema`) checks every key of the file (known, present, a positive finite
number, sourced) and reports all problems at once, each naming file, key and reason.  Values
are converted to SI here (areas stay in mm^2, the unit of the design's names).
"""

from pathlib import Path
from typing import Any

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._inputs import schema as S
from .._inputs.checker import Checker, read_toml, specs_dir

#: Keys of a node table and the factor from the file's unit to the module's (the keys are those of
#: ``schema.TECHNOLOGY_NODE``, and so on for each table: tests/test_codesign_design.py).
NODE_KEYS: dict[str, float] = {
    # mm^2 per (TFLOP/s per GHz) = mm^2 per 1000 FLOP per cycle -> mm^2 per (FLOP/cycle)
    "matrix_mm2_per_tflop_per_s_per_ghz": 1e-3,
    "int_mm2_per_tflop_per_s_per_ghz": 1e-3,
    "sram_mm2_per_mb": 1e-6,  # -> mm^2 per byte
    "sram_gb_per_s_per_mb_per_ghz": 1e9 / 1e6 / 1e9,  # -> bytes per cycle per byte of SRAM
    "fp32_pj_per_flop": 1e-12,
    "bf16_pj_per_flop": 1e-12,
    "fp8_pj_per_flop": 1e-12,
    "int8_pj_per_flop": 1e-12,
    "sram_pj_per_byte": 1e-12,
    "leakage_w_per_mm2": 1.0,
    "floor_w_per_mm2": 1.0,
    "memory_path_pj_per_byte": 1e-12,
    "nominal_clock_ghz": 1e9,
    "threshold_voltage_fraction": 1.0,
    "wafer_usd": 1.0,
    "defect_density_per_cm2": 1e-2,  # -> per mm^2
}
HBM_KEYS: dict[str, float] = {
    "capacity_gb": 1e9,
    "bandwidth_gb_per_s": 1e9,
    "pj_per_byte": 1e-12,
    "idle_w": 1.0,
    "phy_mm2": 1.0,
    "footprint_mm2": 1.0,
    "usd_per_gb": 1e-9,  # -> USD per byte
}
LPDDR_KEYS: dict[str, float] = {k: v for k, v in HBM_KEYS.items() if k != "footprint_mm2"}
FORMAT_KEYS: dict[str, float] = {
    "fp32_per_bf16": 1.0,
    "tf32_per_bf16": 1.0,
    "fp8_per_bf16": 1.0,
    "int8_per_bf16": 1.0,
    "int4_per_int8": 1.0,
}
LINK_KEYS: dict[str, float] = {"serdes_mm2_per_gb_per_s": 1e-9, "pj_per_byte": 1e-12}
PACKAGE_KEYS: dict[str, float] = {
    "reticle_mm2": 1.0,
    "wafer_diameter_mm": 1.0,
    "interposer_usd_per_mm2": 1.0,
    "test_assembly_usd": 1.0,
}


class Technology(eqx.Module):
    """One process node with its HBM and LPDDR generations, links and packaging (float leaves).

    Attributes (per-format rates are relative to the dense bf16 rate of the matrix units):
        matrix_mm2_per_flop_per_cycle: area of training-capable matrix logic per dense bf16
            FLOP per clock cycle (tensor cores and the SM logic that feeds them), mm^2.
        int_mm2_per_op_per_cycle: area of inference-only int8 arrays per int8 op per cycle, mm^2.
        sram_mm2_per_byte: on-chip SRAM area per byte, mm^2.
        sram_bytes_per_cycle_per_byte: SRAM bandwidth per clock per byte of SRAM.
        flop_j: dynamic energy per operation at the nominal clock's voltage, J, by
            :data:`diffcost.FORMATS` (int formats at the int arrays' energy).
        sram_j_per_byte: SRAM read/write energy, J/byte.
        leakage_w_per_mm2: idle (static) power of logic and SRAM per mm^2, W.
        floor_w_per_mm2: dynamic power of a running chip with no work (clock distribution,
            uncore, idle cores) per mm^2 at the nominal clock and voltage, W; it scales as
            ``f V^2``.
        memory_path_j_per_byte: energy of the on-die path of an external-memory byte (memory
            controller, PHY, network on chip, caches into the units) at the nominal voltage,
            J/byte, on top of the memory device's own ``hbm_j_per_byte`` / ``lpddr_j_per_byte``.
        nominal_clock_hz: clock at which ``flop_j`` holds, Hz.
        threshold_voltage_fraction: ``a`` in ``V/V_nom = a + (1 - a) f/f_nom``.
        wafer_usd, defect_density_per_mm2: wafer price, USD, and defect density, 1/mm^2.
        hbm_*: one HBM stack: capacity bytes, bandwidth bytes/s, J/byte, idle W, PHY area and
            interposer footprint mm^2, USD/byte.
        lpddr_*: one x16 LPDDR channel: the same figures (no interposer footprint).
        serdes_mm2_per_byte_per_s: link area per byte/s per direction, mm^2.
        link_j_per_byte: link energy per byte sent, J/byte.
        reticle_mm2, wafer_diameter_mm: lithography field and wafer size.
        interposer_usd_per_mm2, test_assembly_usd: 2.5D packaging cost per mm^2 of die and
            HBM footprint, and the fixed test/assembly cost per package, USD.
    """

    matrix_mm2_per_flop_per_cycle: Float[Array, ""]
    int_mm2_per_op_per_cycle: Float[Array, ""]
    sram_mm2_per_byte: Float[Array, ""]
    sram_bytes_per_cycle_per_byte: Float[Array, ""]
    fp32_per_bf16: Float[Array, ""]
    tf32_per_bf16: Float[Array, ""]
    fp8_per_bf16: Float[Array, ""]
    int8_per_bf16: Float[Array, ""]
    int4_per_int8: Float[Array, ""]
    flop_j: Float[Array, "8"]
    sram_j_per_byte: Float[Array, ""]
    leakage_w_per_mm2: Float[Array, ""]
    floor_w_per_mm2: Float[Array, ""]
    memory_path_j_per_byte: Float[Array, ""]
    nominal_clock_hz: Float[Array, ""]
    threshold_voltage_fraction: Float[Array, ""]
    wafer_usd: Float[Array, ""]
    defect_density_per_mm2: Float[Array, ""]
    hbm_capacity_bytes: Float[Array, ""]
    hbm_bandwidth_bytes_per_s: Float[Array, ""]
    hbm_j_per_byte: Float[Array, ""]
    hbm_idle_w: Float[Array, ""]
    hbm_phy_mm2: Float[Array, ""]
    hbm_footprint_mm2: Float[Array, ""]
    hbm_usd_per_byte: Float[Array, ""]
    lpddr_capacity_bytes: Float[Array, ""]
    lpddr_bandwidth_bytes_per_s: Float[Array, ""]
    lpddr_j_per_byte: Float[Array, ""]
    lpddr_idle_w: Float[Array, ""]
    lpddr_phy_mm2: Float[Array, ""]
    lpddr_usd_per_byte: Float[Array, ""]
    serdes_mm2_per_byte_per_s: Float[Array, ""]
    link_j_per_byte: Float[Array, ""]
    reticle_mm2: Float[Array, ""]
    wafer_diameter_mm: Float[Array, ""]
    interposer_usd_per_mm2: Float[Array, ""]
    test_assembly_usd: Float[Array, ""]


def technology_path() -> Path:
    """The built-in technology file."""
    return specs_dir() / "codesign" / "technology.toml"


def check_technology(path: Path, wanted: tuple[tuple[str, str], ...] = ()) -> dict[str, Any]:
    """Every table of a technology file, checked by the one spec checker
    (:class:`~diffcost._inputs.checker.Checker`) against the tables of
    :mod:`diffcost._inputs.schema` (``TECHNOLOGY_*``): known keys only, each a positive finite
    number (a chip's figures: >= 0), each with its source string; a chip's ``node``, ``hbm`` and
    ``lpddr`` name existing tables; and every ``(table, name)`` of ``wanted`` exists.

    Returns the values in the file's units: ``{"node": {"n4": {...}, ...}, ..., "formats":
    {...}, ...}``.

    Raises:
        SpecError: every problem of the file at once, each naming file, key and reason.
    """
    doc, ck = read_toml(path), Checker(str(path))
    top = ck.table({k: v for k, v in doc.items() if not isinstance(v, dict)}, S.TECHNOLOGY_TOP, "")
    if top.get("schema_version", 1) != 1:
        ck.add("schema_version", f"unsupported version {top['schema_version']} (expected 1)")
    tables = {**S.TECHNOLOGY_NAMED, **S.TECHNOLOGY_SINGLE}
    for name, sub in doc.items():
        if isinstance(sub, dict) and name not in tables and name != "source":
            ck.add(name, f"unknown table (allowed: {', '.join([*tables, 'source'])})")
    source = doc.get("source")
    if not isinstance(source, dict):
        ck.add("source", "missing [source] table: every value needs a source string")
        source = {}
    for name in source:
        if name not in tables:
            ck.add(f"source.{name}", f"unknown table (allowed: {', '.join(tables)})")
    values: dict[str, Any] = {}
    for name, schema in S.TECHNOLOGY_NAMED.items():
        if name not in doc:
            if name != "chip":  # only reference_chip needs the catalogue chips
                ck.add(name, "missing required table")
            values[name] = {}
            continue
        values[name] = members = ck.named_tables(doc[name], schema, name)
        src = source.get(name)
        if name == "chip":
            ck.key_sources(src, members, "source.chip")
            continue
        for member in members:
            sub = src.get(member) if isinstance(src, dict) else None
            ck.key_sources(sub, schema, f"source.{name}.{member}")
        for member in src if isinstance(src, dict) else ():
            if member not in members:
                ck.add(f"source.{name}.{member}", f"no [{name}.{member}] table to source")
    for name, schema in S.TECHNOLOGY_SINGLE.items():
        if name not in doc:
            ck.add(name, "missing required table")
            values[name] = {}
            continue
        values[name] = ck.table(doc[name], schema, name + ".")
        ck.key_sources(source.get(name), schema, f"source.{name}")
    for chip, table in values["chip"].items():
        for key in ("node", "hbm", "lpddr"):
            if key in table and table[key] not in values[key]:
                known = ", ".join(values[key])
                ck.add(f"chip.{chip}.{key}", f"no [{key}.{table[key]}] table (known: {known})")
    for table, name in wanted:
        if name not in values[table]:
            known = ", ".join(sorted(values[table]))
            if table == "chip":
                ck.add(f"chip.{name}", f"no such chip (known: {known})")
            else:
                ck.add(f"[{table}.{name}]", f"table missing (known: {known})")
    ck.raise_if_any()
    return values


def read_technology_values(
    node: str, hbm: str, lpddr: str, path: Path | None = None
) -> dict[str, dict[str, float]]:
    """Checked values of the chosen tables in the module's units, by table name (node, hbm,
    lpddr, formats, links, package)."""
    path = technology_path() if path is None else Path(path)
    chosen = {"node": node, "hbm": hbm, "lpddr": lpddr}
    values = check_technology(path, tuple(chosen.items()))
    factors = {
        "node": NODE_KEYS,
        "hbm": HBM_KEYS,
        "lpddr": LPDDR_KEYS,
        "formats": FORMAT_KEYS,
        "links": LINK_KEYS,
        "package": PACKAGE_KEYS,
    }
    out = {}
    for name, keys in factors.items():
        table = values[name][chosen[name]] if name in chosen else values[name]
        out[name] = {key: float(table[key]) * factor for key, factor in keys.items()}
    return out


def _flop_j(node: dict[str, float], fmt: dict[str, float]) -> Array:
    """Energy per op by :data:`FORMATS`: tf32 at bf16 power and half rate; fp4 runs at the fp8
    rate (no fp4 units), int4 at the int8 arrays' power and ``int4_per_int8`` times the rate."""
    bf16, fp8, int8 = node["bf16_pj_per_flop"], node["fp8_pj_per_flop"], node["int8_pj_per_flop"]
    tf32 = bf16 / fmt["tf32_per_bf16"]
    int4 = int8 / fmt["int4_per_int8"]
    return jnp.asarray([node["fp32_pj_per_flop"], tf32, bf16, bf16, fp8, int8, fp8, int4])


def load_technology(
    node: str = "n4", *, hbm: str = "hbm3e", lpddr: str = "lpddr5x", path: Path | None = None
) -> Technology:
    """The :class:`Technology` of ``node`` with the ``hbm`` and ``lpddr`` generations.

    Raises:
        SpecError: naming file, key and reason for every missing table, missing, unknown,
            non-numeric, non-positive or unsourced value.
    """
    v = read_technology_values(node, hbm, lpddr, path)
    n, f, h, d, k, p = (v[t] for t in ("node", "formats", "hbm", "lpddr", "links", "package"))
    a = jnp.asarray
    return Technology(
        matrix_mm2_per_flop_per_cycle=a(n["matrix_mm2_per_tflop_per_s_per_ghz"]),
        int_mm2_per_op_per_cycle=a(n["int_mm2_per_tflop_per_s_per_ghz"]),
        sram_mm2_per_byte=a(n["sram_mm2_per_mb"]),
        sram_bytes_per_cycle_per_byte=a(n["sram_gb_per_s_per_mb_per_ghz"]),
        **{key: a(f[key]) for key in FORMAT_KEYS},
        flop_j=_flop_j(n, f),
        sram_j_per_byte=a(n["sram_pj_per_byte"]),
        leakage_w_per_mm2=a(n["leakage_w_per_mm2"]),
        floor_w_per_mm2=a(n["floor_w_per_mm2"]),
        memory_path_j_per_byte=a(n["memory_path_pj_per_byte"]),
        nominal_clock_hz=a(n["nominal_clock_ghz"]),
        threshold_voltage_fraction=a(n["threshold_voltage_fraction"]),
        wafer_usd=a(n["wafer_usd"]),
        defect_density_per_mm2=a(n["defect_density_per_cm2"]),
        **{f"hbm_{_name(key)}": a(h[key]) for key in HBM_KEYS},
        **{f"lpddr_{_name(key)}": a(d[key]) for key in LPDDR_KEYS},
        serdes_mm2_per_byte_per_s=a(k["serdes_mm2_per_gb_per_s"]),
        link_j_per_byte=a(k["pj_per_byte"]),
        **{key: a(p[key]) for key in PACKAGE_KEYS},
    )


#: File key of a memory figure -> the module's (SI) name suffix.
_MEMORY_NAMES = {
    "capacity_gb": "capacity_bytes",
    "bandwidth_gb_per_s": "bandwidth_bytes_per_s",
    "pj_per_byte": "j_per_byte",
    "idle_w": "idle_w",
    "phy_mm2": "phy_mm2",
    "footprint_mm2": "footprint_mm2",
    "usd_per_gb": "usd_per_byte",
}


def _name(key: str) -> str:
    return _MEMORY_NAMES[key]


def reference_chip(name: str, path: Path | None = None) -> dict[str, Any]:
    """The ``[chip.<name>]`` table (non-negative numbers; 0 = not published), checked with the
    whole file (:func:`check_technology`).

    Raises:
        SpecError: unknown chip (listing the known ones), or a missing / bad key.
    """
    path = technology_path() if path is None else Path(path)
    return dict(check_technology(path, (("chip", name),))["chip"][name])


def reference_technology(name: str, path: Path | None = None) -> Technology:
    """The technology a catalogue chip is built in (its node, HBM and LPDDR tables)."""
    ref = reference_chip(name, path)
    return load_technology(ref["node"], hbm=ref["hbm"], lpddr=ref["lpddr"], path=path)


__all__ = [
    "Technology",
    "load_technology",
    "reference_chip",
    "reference_technology",
    "technology_path",
]
