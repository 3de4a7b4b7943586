"""Sweeps leave one machine: shards of contiguous point ranges merge into the unsharded table
row for row; bad shards and incomplete merges are refused by name; several sweep files get
one output each; two processes joined by jax.distributed write the single-process table."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from diffcost import SpecError, load_sweep
from diffcost.cli import app
from diffcost.testing import STAMP, output_paths, parse_shard, shard_range, unwritten

SWEEPS = Path(__file__).resolve().parents[1] / "specs" / "sweeps"
SMALL = SWEEPS / "decode-what-if.toml"  # 32 points
runner = CliRunner()


def _sweep(*args: str):
    """``diffcost sweep`` in this process (the compiled chunk is shared: same ``--chunk``)."""
    result = runner.invoke(app, ["sweep", *args, "--no-progress", "--chunk", "16"])
    return result


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> pd.DataFrame:
    out = tmp_path_factory.mktemp("full") / "full.csv"
    result = _sweep(str(SMALL), "--csv", str(out))
    assert result.exit_code == 0, result.output
    return pd.read_csv(out)


def test_shard_ranges_are_contiguous_balanced_and_cover_every_point():
    for points, n in [(32, 3), (7, 7), (5, 8), (1000, 6)]:
        ranges = [shard_range(points, i, n) for i in range(n)]
        assert [p for r in ranges for p in r] == list(range(points))
        assert max(map(len, ranges)) - min(map(len, ranges)) <= 1


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("3/3", "the shard index I must be in 0..2 (counted from 0), got 3"),
        ("-1/3", "the shard index I must be in 0..2 (counted from 0), got -1"),
        ("0/0", "the shard count N must be >= 1, got 0"),
        ("1-3", "must be I/N (shard I of N, counted from 0, e.g. 0/4), got '1-3'"),
        ("a/b", "must be I/N (shard I of N, counted from 0, e.g. 0/4), got 'a/b'"),
    ],
)
def test_bad_shards_name_the_flag_and_the_reason(text, reason):
    with pytest.raises(SpecError) as err:
        parse_shard(text)
    assert err.value.problems[0].key == "shard" and err.value.problems[0].reason == reason
    assert parse_shard(" 2 / 3 ") == (2, 3)


def test_cli_bad_shard_and_lone_distributed_flags_are_input_errors():
    result = _sweep(str(SMALL), "--shard", "3/3")
    assert result.exit_code == 2
    assert "command line: --shard: the shard index I must be in 0..2" in result.output
    result = _sweep(str(SMALL), "--num-processes", "2")
    assert result.exit_code == 2
    assert "--num-processes: only joins processes with --distributed" in result.output
    result = _sweep(str(SMALL), "--shard", "0/2", "--plots", "p")
    assert result.exit_code == 2 and "diffcost sweep-merge --plots" in result.output


def test_three_shards_merge_into_the_unsharded_table(full, tmp_path):
    parts = []
    for i in (2, 0, 1):  # any order
        path = tmp_path / f"s{i}.parquet" if i == 1 else tmp_path / f"s{i}.csv"
        result = _sweep(
            str(SMALL), "--shard", f"{i}/3", "--csv" if i != 1 else "--parquet", str(path)
        )
        assert result.exit_code == 0, result.output
        assert f"[shard {i}/3: points" in result.output
        parts.append(path)
    shard = pd.read_csv(tmp_path / "s0.csv")
    assert list(shard.point) == list(shard_range(32, 0, 3))
    assert list(shard.columns[-len(STAMP) :]) == list(STAMP)
    assert (shard.shard_sweep == "decode-what-if").all() and (shard.shard_count == 3).all()
    out = tmp_path / "merged.csv"
    result = runner.invoke(app, ["sweep-merge", str(out), *map(str, parts), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["points"] == 32 and summary["shards"] == 3
    pd.testing.assert_frame_equal(pd.read_csv(out), full)
    # a shard missing, one given twice, a shard of another sweep: refused, every reason named
    result = runner.invoke(app, ["sweep-merge", str(out), str(parts[0]), str(parts[1])])
    assert result.exit_code == 2
    assert "missing shards (of 3): 1" in result.output
    assert "missing points (of 32): 10, 11," in result.output
    result = runner.invoke(app, ["sweep-merge", str(out), *map(str, parts), str(parts[1])])
    assert result.exit_code == 2 and "shards given twice (of 3): 0" in result.output
    other = pd.read_csv(parts[0]).assign(shard_hash="0123456789abcdef")
    other.to_csv(tmp_path / "other.csv", index=False)
    result = runner.invoke(
        app, ["sweep-merge", str(out), str(parts[1]), str(tmp_path / "other.csv")]
    )
    assert result.exit_code == 2 and "shard_hash: hash '0123456789abcdef' differs" in result.output


def test_several_files_write_one_output_each_and_ambiguous_paths_are_errors(tmp_path):
    knee = load_sweep(SWEEPS / "serving-knee.toml")
    small = load_sweep(SMALL)
    flags = {"csv": tmp_path / "tables", "parquet": None, "plots": tmp_path / "plots"}
    paths = output_paths([small, knee], flags, None)
    assert paths[0]["csv"] == tmp_path / "tables" / "decode-what-if.csv"
    assert paths[1]["plots"] == tmp_path / "plots" / "serving-knee"
    named = {"csv": tmp_path / "{name}-{shard}.csv", "parquet": None, "plots": None}
    assert (
        output_paths([small, knee], named, (1, 4))[1]["csv"] == tmp_path / "serving-knee-1-of-4.csv"
    )
    with pytest.raises(SpecError, match="names one file but several sweep files were given"):
        output_paths(
            [small, knee], {"csv": tmp_path / "t.csv", "parquet": None, "plots": None}, None
        )
    with pytest.raises(SpecError, match="would both write"):
        output_paths([small, small], flags, None)


def test_a_files_output_table_is_written_only_when_asked(tmp_path):
    """The built-in train-parallelism.toml names sweep-results/... in its [output] table: not
    written (only named) without ``write``; a flag path is written either way."""
    spec = load_sweep(SWEEPS / "train-parallelism.toml")
    none: dict[str, Path | None] = {"csv": None, "parquet": None, "plots": None}
    assert output_paths([spec], none, None, write=False) == [none]
    named = unwritten(spec, none)
    assert set(named) == {"csv", "parquet", "plots"}
    assert named["parquet"] == Path("sweep-results/train-parallelism.parquet")
    asked = output_paths([spec], none, None, write=True)[0]
    assert asked == named
    flags = none | {"csv": tmp_path / "t.csv"}
    assert output_paths([spec], flags, None, write=False)[0]["csv"] == tmp_path / "t.csv"
    assert set(unwritten(spec, flags)) == {"parquet", "plots"}


@pytest.mark.slow  # two runs of a 32-point sweep: 8-15 s on 2 cores
def test_cli_sweep_writes_nothing_unasked_and_prints_where_it_wrote(tmp_path, monkeypatch):
    """A sweep file with an [output] table, run from a folder: without --write nothing lands
    there and the paths are named; with --write the files are written there and their full
    paths printed."""
    path = tmp_path / "decode-what-if.toml"
    path.write_text(
        SMALL.read_text() + '\n[output]\ncsv = "res/t.csv"\nparquet = "res/t.parquet"\n'
    )
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    result = runner.invoke(app, ["sweep", str(path), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert list(work.iterdir()) == []
    text = " ".join(result.output.split())
    assert "not written:" in text and "names csv res/t.csv, parquet res/t.parquet" in text
    assert "add --write" in text
    result = runner.invoke(app, ["sweep", str(path), "--no-progress", "--write"])
    assert result.exit_code == 0, result.output
    assert (work / "res" / "t.csv").is_file() and (work / "res" / "t.parquet").is_file()
    assert f"wrote parquet: {work / 'res' / 't.parquet'}" in result.output
    assert "not written" not in result.output


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow  # two processes compiling the sweep: 20-40 s on 2 cores
def test_two_processes_joined_by_jax_distributed_write_the_single_process_table(full, tmp_path):
    port, out = _free_port(), tmp_path / "dist.csv"
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "JAX_ENABLE_X64": "1",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
    }
    args = [sys.executable, "-m", "diffcost", "sweep", str(SMALL), "--csv", str(out)]
    args += ["--distributed", "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2"]
    procs = [
        subprocess.Popen(
            [*args, "--process-id", str(k), "--no-progress"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in (0, 1)
    ]
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=240))
    finally:
        for p in procs:
            p.kill()
    for p, (_, stderr) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, stderr[-3000:]
    assert "4 device(s)" in outputs[0][0] and "best feasible" not in outputs[1][0]
    pd.testing.assert_frame_equal(pd.read_csv(out), full, check_exact=False, rtol=1e-12)


def test_joining_after_a_computation_is_an_input_error_naming_the_flag():
    import jax.numpy as jnp

    from diffcost.testing import distributed

    float(jnp.ones(()))  # the backend is running now
    with pytest.raises(SpecError, match="distributed: JAX already started its devices"):
        distributed.join("127.0.0.1:1", 2, 0)
