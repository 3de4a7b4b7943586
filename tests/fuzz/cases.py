"""The fuzz cases: every built-in spec file and Hugging Face config mutated, every flag of every
command given every edge value, each run through the command a user would run.

``spec_cases()`` and ``hf_cases()`` and ``flag_cases()`` enumerate deterministically (the
release profile runs them all; the CI profile every k-th); ``flag_combinations`` is the
hypothesis strategy for several flags at once.
"""

import json
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from . import oracle
from .harness import Case
from .mutate import all_mutations, json_bytes, toml_bytes

ROOT = Path(__file__).resolve().parents[2]
SPECS = ROOT / "specs"
HF_FIXTURES = ROOT / "tests" / "fixtures" / "hf"

F = "{dir}/%s"
_TRAIN = ("train", "--json")
_SERVE = ("serve", "--json")
_SMALL = ("--model", "llama-2-7b")


def _commands(kind: str, rel: str, doc: dict[str, Any]) -> list[tuple[str, ...]]:
    """The command lines that read a spec file of ``kind`` written at ``{dir}/rel``."""
    path = F % rel
    if kind == "chip":
        return [
            (*_TRAIN, "--chip", path, "--chips", "8", *_SMALL),
            ("serve", "--chip", path, *_SMALL),
        ]
    if kind == "system":
        return [(*_TRAIN, "--system", path, *_SMALL), (*_SERVE, "--system", path, *_SMALL)]
    if kind == "model":
        return [
            (*_TRAIN, "--model", path, "--chip", "h100-sxm", "--chips", "64", "--tp", "8"),
            ("serve", "--model", path, "--chip", "h100-sxm", "--chips", "8", "--tp", "8"),
        ]
    if kind == "calibration":
        return [(*_TRAIN, "--calibration", path), (*_SERVE, "--calibration", path)]
    if kind == "scenario":
        job = str(doc["kind"]) if doc.get("kind") in ("train", "serve") else "train"
        return [(job, "--json", "--scenario", path)]
    if kind == "measurements":
        return [("validate", "--json", "--measurements", path)]
    if kind == "sweep":
        return [("sweep", path, "--json", "--no-progress", "--csv", F % "out.csv")]
    raise ValueError(kind)


#: Spec folders and the kind of file they hold.
SPEC_FOLDERS = {
    "chips": "chip",
    "systems": "system",
    "models": "model",
    "measurements/models": "model",
    "calibration": "calibration",
    "scenarios": "scenario",
    "measurements": "measurements",
    "sweeps": "sweep",
}


def _companions(kind: str, src: Path) -> tuple[tuple[str, bytes], ...]:
    """Files a spec refers to by relative path (a measurement file's ``models/``)."""
    if kind != "measurements":
        return ()
    return tuple(
        (f"models/{m.name}", m.read_bytes()) for m in sorted((src.parent / "models").glob("*.toml"))
    )


def spec_cases() -> Iterator[Case]:
    """Every built-in spec file, every mutation, every command that reads it."""
    for folder, kind in SPEC_FOLDERS.items():
        for src in sorted((SPECS / folder).glob("*.toml")):
            raw = src.read_bytes()
            doc = tomllib.loads(raw.decode())
            extra = _companions(kind, src)
            commands = _commands(kind, src.name, doc)
            for (label, path, old, new), content in all_mutations(doc, raw, toml_bytes):
                if path:
                    valid = oracle.spec_valid(kind, path, label, old, new, doc)
                else:
                    valid = oracle.BYTE_VALID[label]
                for argv in commands:
                    yield Case(
                        f"spec:{kind}",
                        f"{folder}/{src.name}: {label} | {argv[0]}",
                        argv,
                        ((src.name, content), *extra),
                        (src.name,),
                        valid=valid,
                    )


def hf_cases() -> Iterator[Case]:
    """Every Hugging Face config fixture, every mutation, read by ``train`` and ``serve``."""
    for src in sorted(HF_FIXTURES.glob("*-config.json")):
        if src.name.startswith("broken"):
            continue
        raw = src.read_bytes()
        doc = json.loads(raw)
        path = F % "m/config.json"
        commands = [
            (*_TRAIN, "--model", path, "--chip", "h100-sxm", "--chips", "8"),
            (*_SERVE, "--model", path, "--chip", "h100-sxm", "--chips", "1"),
        ]
        for (label, path, old, new), content in all_mutations(doc, raw, json_bytes):
            if path:
                valid = oracle.hf_valid(path, label, old, new)
            else:  # a truncated JSON document does not parse
                valid = False if label.startswith("truncated") else oracle.BYTE_VALID[label]
            for argv in commands:
                yield Case(
                    "hf-config",
                    f"{src.name}: {label} | {argv[0]}",
                    argv,
                    (("m/config.json", content),),
                    ("config.json",),
                    valid=valid,
                )


# --- flags ------------------------------------------------------------------------------------
#: Values tried for a flag, by the flag's Python type.
FLAG_VALUES: dict[Any, tuple[str, ...]] = {
    int: ("0", "-1", "1", "3", "7", "1000000000", "1.5", "x", "", "nan"),
    float: ("0", "-1", "nan", "inf", "-inf", "1e300", "1e-300", "0.5", "x", ""),
    str: ("", "x", "[/x]", "bf16", "none", "fp4", "{dir}", "{dir}/afile", "{dir}/no.toml"),
    list[str]: ("int4=nan", "int4=-1", "int4", "=1", "fp8=0.01", "x=1", ""),
    Path: ("{dir}", "{dir}/afile", "{dir}/afile/x.png", "{dir}/new/x.png", "{dir}/x.txt"),
}
#: Command lines each flag is added to.  ``plan``, ``sensitivity`` and ``calibrate`` only get
#: values meant to be refused (an accepted value would start a search, a fit, or compile a new
#: gradient; ``train`` and ``serve`` read the same flags through the same code).
FLAG_BASES: dict[tuple[str, ...], tuple[str, ...]] = {
    ("train",): ("--json",),
    ("serve",): ("--json",),
    ("sensitivity", "train"): ("--json",),
    ("sensitivity", "serve"): ("--json",),
    ("plan", "train"): ("--json", "--model", "llama-2-7b", "--chip", "h100-sxm", "--chips", "8"),
    ("plan", "serve"): ("--json", "--model", "llama-2-7b", "--chip", "h100-sxm", "--chips", "1"),
    ("sweep",): (str(SPECS / "sweeps" / "decode-what-if.toml"), "--json", "--no-progress"),
    ("validate",): ("--json", "--source", "megatron-readme"),
    ("calibrate",): ("--steps", "1", "--rounds", "1", "--no-loso"),
}
_REFUSED_ONLY = {
    ("plan", "train"),
    ("plan", "serve"),
    ("calibrate",),
    ("sensitivity", "train"),
    ("sensitivity", "serve"),
}
#: Flags a command refuses beside its base arguments, whatever their value: ``validate
#: --kernels`` reads specs/kernels and refuses the base's ``--source`` (``diffcost validate``);
#: ``plan serve``'s p99 limits belong to ``--objective goodput``, which the base does not set.
_CONFLICTS: dict[tuple[str, ...], frozenset[str]] = {
    ("validate",): frozenset({"--kernels"}),
    ("plan", "serve"): frozenset({"--ttft-p99-ms", "--tpot-p99-ms"}),
}
_BAD = {"0", "-1", "x", "", "nan", "1.5", "-inf", "{dir}", "{dir}/afile", "{dir}/afile/x.png"}
_SKIP = {"--json", "--help", "--progress", "--loso", "--exhaustive", "--search-chips"}
#: SLO flags: a feasible answer must meet them (checked by the harness).
_LIMITS = {"--ttft-slo-ms": "ttft_s", "--tpot-slo-ms": "tpot_s"}


@cache
def command_options(path: tuple[str, ...]) -> list[tuple[str, Any, bool]]:
    """``(flag, python type, is_flag)`` of every option of a command, read from the CLI."""
    import typer

    from diffcost.cli import app

    cmd: Any = typer.main.get_command(app)
    for name in path:
        cmd = cmd.commands[name]
    out = []
    for p in cmd.params:
        if p.param_type_name != "option" or p.opts[0] in _SKIP:
            continue
        kind = p.bare_type() if callable(p.bare_type) else p.bare_type
        out.append((p.opts[0], kind, bool(p.is_flag)))
    return out


def _values(path: tuple[str, ...], kind: Any, flag: str) -> tuple[str, ...]:
    if flag in ("--csv", "--parquet", "--plots", "--plot", "--tornado", "--write"):
        kind = Path
    if flag == "--write-scenarios":
        kind = Path
    values = FLAG_VALUES.get(kind, FLAG_VALUES[str])
    if path in _REFUSED_ONLY:
        values = tuple(v for v in values if v in _BAD)
    return values


def flag_case(
    path: tuple[str, ...], pairs: list[tuple[str, str | None]], valid: bool | None = None
) -> Case:
    """One command line: the command's base arguments and ``(flag, value)`` pairs.  A refusal
    must name one of the flags as typed (``--tp``), or a path given (the file it names).
    ``valid``: the oracle's verdict, by default that of each flag's value
    (:func:`fuzz.oracle.flag_valid`)."""
    argv: list[str] = [*path, *FLAG_BASES[path]]
    limits = []
    for flag, value in pairs:
        argv += [flag] if value is None else [flag, value]
        if flag in _LIMITS and value is not None:
            try:
                limits.append((_LIMITS[flag], float(value) * 1e-3))
            except ValueError:
                pass
    if valid is None:
        kinds = {f: k for f, k, _ in command_options(path)}
        valid = oracle.line_valid([oracle.flag_valid(f, kinds[f], v) for f, v in pairs])
        if any(f in _CONFLICTS.get(path, ()) for f, _ in pairs):
            valid = False
    return Case(
        "flags:" + " ".join(path),
        " ".join(argv),
        tuple(argv),
        (("afile", b"x"),),
        (*(f for f, _ in pairs), *(v for _, v in pairs if v and "/" in v)),
        tuple(limits),
        valid=valid,
    )


def flag_cases() -> Iterator[Case]:
    """Every flag of every command, one at a time, with every value of its type."""
    for path in FLAG_BASES:
        for flag, kind, is_flag in command_options(path):
            if is_flag:
                yield flag_case(path, [(flag, None)])
                continue
            for value in _values(path, kind, flag):
                yield flag_case(path, [(flag, value)])


@st.composite
def flag_combinations(draw: st.DrawFn) -> Case:
    """Two to four flags of one prediction command at once (the combinations that
    single-flag cases cannot reach: tp*pp over the chips, a batch against a small chip)."""
    path = draw(st.sampled_from([("train",), ("serve",)]))
    options = command_options(path)
    chosen = draw(st.lists(st.sampled_from(options), min_size=2, max_size=4, unique=True))
    pairs: list[tuple[str, str | None]] = []
    for flag, kind, is_flag in chosen:
        value = None if is_flag else draw(st.sampled_from(_values(path, kind, flag)))
        pairs.append((flag, value))
    return flag_case(path, pairs)


#: Degree flags tried against ``--chips 8`` (train) and ``--chips 8`` (serve), with values
#: that divide it, do not, or are no degree at all.
_DEGREE_LINES: dict[tuple[str, ...], tuple[str, ...]] = {
    ("train",): ("train", "--json", "--model", "llama-3-8b", "--chip", "h100-sxm"),
    ("serve",): ("serve", "--json", "--model", "llama-3-8b", "--chip", "h100-sxm"),
}
_DEGREE_FLAGS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("train",): ("--tp", "--pp", "--dp", "--cp"),
    ("serve",): ("--tp", "--pp", "--replicas"),
}
_DEGREE_VALUES = ("0", "-1", "1", "2", "8", "3", "16")
_CHIPS_VALUES = ("8", "0", "-2")


def degree_cases() -> Iterator[Case]:
    """Flag combinations single flags cannot reach: a degree against the chip count
    (``train --tp 0 --chips 8``), and two degrees whose product is or is not the chips."""
    for path, base in _DEGREE_LINES.items():
        flags = _DEGREE_FLAGS[path]
        for chips in _CHIPS_VALUES:
            for flag in flags:
                for d in _DEGREE_VALUES:
                    argv = (*base, "--chips", chips, flag, d)
                    valid = oracle.degree_valid(d, int(chips))
                    names = ("--chips", flag) if int(chips) <= 0 else (flag,)
                    yield Case("flags:degrees", " ".join(argv), argv, (), names, valid=valid)
        for a, b in zip(flags, flags[1:], strict=False):
            for da, db in (("2", "4"), ("4", "4"), ("0", "8"), ("8", "-1"), ("2", "2")):
                argv = (*base, "--chips", "8", a, da, b, db)
                va, vb = oracle.degree_valid(da, 8), oracle.degree_valid(db, 8)
                product = int(da) * int(db)
                valid = oracle.line_valid([va, vb]) if product != 16 else (va and vb and None)
                yield Case("flags:degrees", " ".join(argv), argv, (), (a, b), valid=valid)


#: Spec folders whose unit-suffixed keys get one-character typos, with the command that reads
#: a file of that kind.
_TYPO_COMMANDS = {
    "chips": (*_TRAIN, "--chips", "8", *_SMALL, "--chip"),
    "systems": (*_TRAIN, *_SMALL, "--system"),
}


def key_typos(key: str) -> Iterator[str]:
    """Every one-character deletion and adjacent swap of ``key``, each new key once."""
    seen = {key}
    typos = [key[:i] + key[i + 1 :] for i in range(len(key))]
    typos += [key[:i] + key[i + 1] + key[i] + key[i + 2 :] for i in range(len(key) - 1)]
    for new in typos:
        if new not in seen:
            seen.add(new)
            yield new


def _rename_line(raw: str, table: str, key: str, new: str) -> str:
    """``raw`` with the line ``key = ...`` of ``[table]`` (``""``: top level) renamed."""
    lines, current = raw.split("\n"), ""
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("[") and not stripped.startswith("[["):
            current = stripped.strip("[]").strip()
        elif current == table and stripped.split("=", 1)[0].strip() == key:
            lines[i] = line.replace(key, new, 1)
            return "\n".join(lines)
    raise KeyError(f"{table}.{key}")


def unit_typo_cases() -> Iterator[Case]:
    """Every one-character deletion and adjacent swap of the unit suffix (and the rest) of
    every unit-suffixed key of every built-in chip and system (the unit-typo census of issue
    39: ``bf16_tflop_per_s`` -> ``bf16_flop_per_s`` reads a peak 1e12 times too small)."""
    for folder, command in _TYPO_COMMANDS.items():
        for src in sorted((SPECS / folder).glob("*.toml")):
            raw = src.read_text()
            doc = tomllib.loads(raw)
            tables = [("", doc)] + [(k, v) for k, v in doc.items() if isinstance(v, dict)]
            for table, content in tables:
                if table == "source":
                    continue
                for key, value in content.items():
                    if isinstance(value, dict) or oracle.split_unit(key) is None:
                        continue
                    for new in key_typos(key):
                        text = _rename_line(raw, table, key, new)
                        valid = oracle.unit_typo_valid(key, new, value, set(content))
                        where = f"{table}." if table else ""
                        yield Case(
                            f"unit-typo:{folder}",
                            f"{folder}/{src.name}: {where}{key} -> {new}",
                            (*command, F % src.name),
                            ((src.name, text.encode()),),
                            (src.name,),
                            valid=valid,
                            keys=(new, key) if valid is False else (),
                        )


def all_cases() -> Iterator[Case]:
    """Every deterministic case: spec files, Hugging Face configs, single flags, degree
    combinations, unit-suffix typos."""
    yield from spec_cases()
    yield from hf_cases()
    yield from flag_cases()
    yield from degree_cases()
    yield from unit_typo_cases()
