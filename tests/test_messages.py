"""One fixture per message kind: the exact text a user reads for each kind of bad input.

Each spec-file kind is a one-line change to the built-in H100 chip file, written under its own
name; the message must name the file, the key and the reason.  The command-line kinds run the
``diffcost`` command in process.  (The fuzz suite, tests/test_fuzz.py, checks that every input
ends in one of these messages; this file pins what each message says.)
"""

from pathlib import Path

import pytest
from typer.testing import CliRunner

import diffcost as dc
from diffcost.cli import app

H100 = (Path(dc.specs_dir()) / "chips" / "h100-sxm.toml").read_text()

#: kind -> (text replaced, replacement, the message after "<file>: ")
SPEC_MESSAGES = {
    "missing key": ("capacity_mib = 81559\n", "", "memory.capacity: missing required key"),
    "unknown key": (
        "tdp_w = 700",
        "tdp_w = 700\ncolour = 1",
        "power.colour: unknown key (allowed: tdp_<unit>)",
    ),
    "missing unit": (
        "tdp_w = 700",
        "tdp = 700",
        "power.tdp: missing unit suffix: write tdp_w",
    ),
    "wrong type": ("tdp_w = 700", 'tdp_w = "700"', "power.tdp_w: must be a number, got '700'"),
    "not finite": ("tdp_w = 700", "tdp_w = nan", "power.tdp_w: must be a finite number, got nan"),
    "not positive": ("tdp_w = 700", "tdp_w = -1", "power.tdp_w: must be positive, got -1"),
    "not an integer": (
        "scale_up_domain_chips = 8",
        "scale_up_domain_chips = 8.5",
        "interconnect.scale_up_domain_chips: must be an integer, got 8.5",
    ),
    "below physical": (
        "tdp_w = 700",
        "tdp_w = 1e-300",
        "power.tdp_w: 1e-300 is below any physical input (at least 1e-15 in SI units, or 0 "
        "where allowed; smaller values vanish in float32)",
    ),
    "not a flag": (
        "on_chip_sram = false",
        'on_chip_sram = "false"',
        "memory.on_chip_sram: must be true or false, got 'false'",
    ),
    "wrong kind": ('kind = "chip"', 'kind = "model"', "kind: expected 'chip' for a file in chips/"),
    "name not file name": (
        'name = "h100-sxm"',
        'name = "h100"',
        "name: must equal the file name 'h100-sxm', got 'h100'",
    ),
    "unsupported version": (
        "schema_version = 1",
        "schema_version = 2",
        "schema_version: unsupported version 2 (expected 1)",
    ),
    "invalid TOML": ("tdp_w = 700", "tdp_w = = 700", "not valid TOML: Invalid value (at line"),
}


def _first_problem(path: Path) -> str:
    with pytest.raises(dc.SpecError) as err:
        dc.load_spec("chip", path)
    return str(err.value.problems[0])


@pytest.mark.parametrize("kind", SPEC_MESSAGES)
def test_spec_message(tmp_path, kind):
    old, new, message = SPEC_MESSAGES[kind]
    assert old in H100
    path = tmp_path / "h100-sxm.toml"
    path.write_text(H100.replace(old, new, 1))
    assert _first_problem(path).startswith(f"{path}: {message}")


@pytest.mark.parametrize(
    ("kind", "content", "message"),
    [
        ("binary", b"\x00\x01\xff", "is a binary file, not TOML text"),
        ("not UTF-8", b'name = "caf\xe9"', "is not UTF-8 text (byte 0xe9 at offset 11)"),
    ],
)
def test_file_message(tmp_path, kind, content, message):
    path = tmp_path / "h100-sxm.toml"
    path.write_bytes(content)
    assert _first_problem(path).startswith(f"{path}: {message}")


runner = CliRunner()


@pytest.mark.parametrize(
    ("kind", "args", "code", "message"),
    [
        ("unknown name", ["train", "--chip", "h10"], 2, "command line: --chip: unknown chip 'h10'"),
        ("flag value", ["train", "--tp", "0"], 2, "command line: --tp: must be a positive"),
        ("flag range", ["sweep", "x.toml", "--chunk", "0"], 2, "Invalid value for '--chunk'"),
        ("usage", ["train", "--bogus"], 2, "No such option: --bogus"),
        (
            "output path",
            ["validate", "--plot", "."],
            2,
            "line: --plot: . is a folder; give a file name",
        ),
        (
            "SLO limit",
            ["serve", "--ttft-slo-ms", "-1"],
            2,
            "command line: --ttft-slo-ms: must be a positive number of milliseconds, got -1.0",
        ),
        (
            "infeasible",
            ["serve", "--model", "llama-3-405b", "--chip", "h100-sxm", "--chips", "1"],
            1,
            "does not fit in memory: needs",
        ),
    ],
)
def test_command_message(kind, args, code, message):
    result = runner.invoke(app, args)
    assert result.exit_code == code, result.output
    assert message in result.output
    assert "╭" not in result.output and "Traceback" not in result.output


def test_sweep_output_path_from_the_file_names_the_file(tmp_path):
    """An output path the sweep file gives (written with ``--write``) is a problem of its
    [output] table; a name longer than the file system allows is refused before the work (it
    was an OSError)."""
    text = (Path(dc.specs_dir()) / "sweeps" / "decode-what-if.toml").read_text()
    path = tmp_path / "decode-what-if.toml"
    path.write_text(text + f'\n[output]\ncsv = "{"x" * 300}.csv"\n')
    result = runner.invoke(app, ["sweep", str(path), "--no-progress", "--write"])
    assert result.exit_code == 2
    assert f"  - {path}: output.csv: a name in xxx" in result.stderr
    assert "is longer than 255 bytes" in result.stderr
