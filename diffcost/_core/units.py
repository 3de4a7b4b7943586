"""Unit suffixes of spec files, converted to SI in exactly one place.

Spec files name every number with its unit (``capacity_gb``, ``bandwidth_gb_per_s``); the code
works in SI only (bytes, seconds, FLOP/s, bytes/s, watts).  ``_gb`` is always 1e9 bytes and
``_gib`` always 2**30 bytes; networking "Gb/s" is written ``_gbit_per_s`` (1e9/8 bytes/s).
Energies per operation are written in picojoules, ``_pj_per_flop`` and ``_pj_per_byte`` (or
``_pj_per_bit``, x 8, as memory and link energies are usually quoted).
"""

# dimension -> {suffix: factor to SI}
UNITS: dict[str, dict[str, float]] = {
    "flop_per_s": {"_tflop_per_s": 1e12, "_pflop_per_s": 1e15, "_flop_per_s": 1.0},
    "bytes": {"_gb": 1e9, "_gib": 2.0**30, "_mb": 1e6, "_mib": 2.0**20, "_bytes": 1.0},
    "bytes_per_s": {
        "_gb_per_s": 1e9,
        "_tb_per_s": 1e12,
        "_gbit_per_s": 1e9 / 8,
        "_bytes_per_s": 1.0,
    },
    "s": {"_s": 1.0, "_ms": 1e-3, "_us": 1e-6, "_ns": 1e-9},
    "w": {"_w": 1.0, "_kw": 1e3},
    "usd_per_hour": {"_usd_per_hour": 1.0},
    "j_per_flop": {"_pj_per_flop": 1e-12, "_j_per_flop": 1.0},
    "j_per_byte": {"_pj_per_byte": 1e-12, "_pj_per_bit": 8e-12, "_j_per_byte": 1.0},
}

SI_SUFFIX = {
    "flop_per_s": "_flop_per_s",
    "bytes": "_bytes",
    "bytes_per_s": "_bytes_per_s",
    "s": "_s",
    "w": "_w",
    "usd_per_hour": "_usd_per_hour",
    "j_per_flop": "_j_per_flop",
    "j_per_byte": "_j_per_byte",
}

# Longest suffix first, so "_gb_per_s" is not read as "_s".
_ALL_SUFFIXES = sorted(
    ((suffix, dim, factor) for dim, table in UNITS.items() for suffix, factor in table.items()),
    key=lambda item: -len(item[0]),
)


def split_unit(key: str) -> tuple[str, str, float] | None:
    """Split ``"capacity_gb"`` into ``("capacity", "bytes", 1e9)``; None if no known suffix."""
    for suffix, dim, factor in _ALL_SUFFIXES:
        if key.endswith(suffix) and len(key) > len(suffix):
            return key[: -len(suffix)], dim, factor
    return None


def accepted_suffixes(dim: str) -> str:
    """Human-readable list of the suffixes accepted for a dimension (for error messages)."""
    return ", ".join(UNITS[dim])
