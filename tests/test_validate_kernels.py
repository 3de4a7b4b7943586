"""Per-kernel timings (specs/kernels) and ``diffcost validate --kernels``: the reader refuses bad
files with file, key and reason (every problem at once), the error of a hand-made point is the
term's own, and the command runs."""

import dataclasses
import json

import jax.numpy as jnp
import pytest
from typer.testing import CliRunner

import diffcost as dc
from diffcost.cli import app
from diffcost.testing import (
    DATA_PARALLEL_TILE,
    WARM_L2,
    AttentionShape,
    GemmFormat,
    all_reduce_s,
    burst,
    decode_attention,
    format_index,
    gemm_time_s,
    kernel_rows,
    kernel_table,
    kernels_dir,
    prefill_attention,
    read_kernel_measurements,
    validate_kernels,
    wave_fill,
)

runner = CliRunner()

HEAD = """schema_version = 1
kind = "kernel-measurements"
name = "{name}"
display_name = "test"
timing = "{timing}"

[source]
reference = "a test"
conventions = "2 m n k / t"
hardware = "h100-sxm"
data = "hand-made"
"""
GEMM = """
[[kernel]]
id = "{id}"
op = "gemm"
chip = "h100-sxm"
dtype = "bf16"
m = 4096
n = 4096
k = 4096
{value}
as_published = "x"
verified = true
"""


def _file(tmp_path, name: str, *kernels: str, timing: str = "kernel") -> str:
    path = tmp_path / f"{name}.toml"
    path.write_text(HEAD.format(name=name, timing=timing) + "".join(kernels))
    return str(path)


def test_every_builtin_file_reads_and_is_not_an_end_to_end_point():
    points = read_kernel_measurements()
    assert points and all(p.time_s > 0 for p in points)
    # specs/kernels is not under specs/measurements: `diffcost validate` never reads it
    assert not kernels_dir().is_relative_to(dc.specs_dir() / "measurements")
    assert {p.source for p in points} == {p.stem for p in kernels_dir().glob("*.toml")}


def test_bad_files_name_file_key_and_reason_all_at_once(tmp_path):
    bad = _file(
        tmp_path,
        "bad",
        GEMM.format(id="a", value="time_us = 10\nachieved_tflop_per_s = 500"),
        GEMM.format(id="b", value="time_parsec = 3").replace('"h100-sxm"', '"h999"'),
        GEMM.format(id="c", value="time_us = 1e9"),
        GEMM.format(id="d", value="").replace('op = "gemm"', 'op = "conv"'),
    )
    other = _file(tmp_path, "other", GEMM.format(id="a", value="time_us = 10"))
    missing = str(tmp_path / "nope.toml")
    with pytest.raises(dc.SpecError) as err:
        read_kernel_measurements([bad, other, missing])
    got = {(p.file, p.key): p.reason for p in err.value.problems}
    assert "exactly one of time_<unit> and achieved_<unit>" in got[(bad, "kernel[a].time")]
    assert "unknown key" in got[(bad, "kernel[b].time_parsec")]
    assert "unknown chip 'h999'" in got[(bad, "kernel[b].chip")]
    assert "plausible range of one kernel's time" in got[(bad, "kernel[c].time_us")]
    assert "must be one of gemm" in got[(bad, "kernel[d].op")]
    assert got[(missing, "")] == "file not found"
    # the second file is read although the first has problems; its id is unique so far
    assert all(f in (bad, missing) for f, _ in got)


DECODE = """
[[kernel]]
id = "{id}"
op = "attention_decode"
chip = "h200"
dtype = "bf16"
batch = 8
q_len = 1
kv_len = 8192
heads = 64
kv_heads = 8
head_dim = 128
{extra}
time_ms = 0.072
as_published = "x"
verified = true
"""


def test_shape_keys_belong_to_their_op(tmp_path):
    bad = _file(
        tmp_path,
        "ops",
        DECODE.format(id="a", extra="m = 4"),
        DECODE.format(id="b", extra="").replace("heads = 64\n", ""),
        DECODE.format(id="c", extra="").replace("time_ms = 0.072", "achieved_tflop_per_s = 30"),
        GEMM.format(id="d", value="time_us = 10\ncausal = true"),
    )
    with pytest.raises(dc.SpecError) as err:
        read_kernel_measurements([bad])
    got = {p.key: p.reason for p in err.value.problems}
    assert "not a key of op 'attention_decode'" in got["kernel[a].m"]
    assert "needs batch, q_len, kv_len, heads, kv_heads, head_dim" in got["kernel[b].heads"]
    assert "only a gemm may give achieved FLOP/s" in got["kernel[c].achieved"]
    assert "not a key of op 'gemm'" in got["kernel[d].causal"]


def test_attention_points_are_the_serving_terms(tmp_path):
    prefill = (
        DECODE.format(id="p", extra="causal = true")
        .replace("attention_decode", "attention_prefill")
        .replace("q_len = 1", "q_len = 8192")
        .replace("batch = 8", "batch = 1")
    )
    path = _file(tmp_path, "attn", DECODE.format(id="d", extra=""), prefill, timing="call")
    decode_row, prefill_row = kernel_rows(read_kernel_measurements([path]))
    # timed alone in a short loop: the top clock (no power limit)
    system = burst(dc.load_system(chip="h200"))
    peak = system.chip.peak_flop_per_s[format_index("bf16")]
    one = lambda x: jnp.asarray(float(x))  # noqa: E731
    shape = AttentionShape(
        one(64), one(8), one(128), one(2), one(2), one(128), one(8 * 256), one(256)
    )
    want = decode_attention(8.0, 1.0, 8192.0, shape, 0.0, peak, system, dc.EXACT).time_s
    assert decode_row["term_s"] == pytest.approx(float(want), rel=1e-6)
    # causal prefill of s tokens over themselves: each attends s / 2 keys on average
    want = prefill_attention(8192.0, 8192.0, 4096.0, shape, peak, system, dc.EXACT).time_s
    assert prefill_row["term_s"] == pytest.approx(float(want), rel=1e-6)
    # host-side timing around the call: the whole per-kernel cost is in it
    whole = float(system.efficiency.kernel_launch_s)
    assert decode_row["fixed_s"] == pytest.approx(whole, rel=1e-6)
    assert prefill_row["predicted_s"] == pytest.approx(float(want) + whole, rel=1e-6)
    assert (decode_row["regime"], prefill_row["regime"]) == ("long", "long")


def test_latent_kv_decode_is_the_mla_models_decode_term(tmp_path):
    """A ``latent_kv`` point (one cached latent serves as K and V, as FlashMLA runs MLA) is
    charged the cache and dims the steps charge an MLA model: DeepSeek-V3's latent and rotary
    key (512 + 64) read once per token, scored and weighted over 576 + 512; without the key
    the same shape reads K and V apart, 576 + 512 elements per token."""
    model = dc.load_model("deepseek-v3")
    cached = float(model.kv_cache_elements(1.0))
    e, ev = int(cached), int(model.kv_lora_rank)
    point = DECODE.format(id="{id}", extra=f"v_head_dim = {ev}\n{{latent}}")
    point = point.replace("kv_heads = 8", "kv_heads = 1").replace(
        "head_dim = 128", f"head_dim = {e}"
    )
    path = _file(
        tmp_path,
        "mla",
        point.format(id="latent", latent="latent_kv = true"),
        point.format(id="apart", latent=""),
        timing="call",
    )
    latent, apart = kernel_rows(read_kernel_measurements([path]))
    system = burst(dc.load_system(chip="h200"))
    peak = system.chip.peak_flop_per_s[format_index("bf16")]
    one = lambda x: jnp.asarray(float(x))  # noqa: E731
    shape = AttentionShape(
        one(64),
        one(1),
        one(e),
        one(2),
        one(2),
        one(ev),
        model.kv_cache_elements(1.0),
        model.decode_attention_dim(),
    )
    want = decode_attention(8.0, 1.0, 8192.0, shape, 0.0, peak, system, dc.EXACT).time_s
    assert latent["term_s"] == pytest.approx(float(want), rel=1e-6)
    assert float(model.decode_attention_dim()) == e + ev
    # without the key: K and V apart, e + e_v cached elements per token, a longer read
    shape = shape._replace(kv_elements=one(e + ev))
    want = decode_attention(8.0, 1.0, 8192.0, shape, 0.0, peak, system, dc.EXACT).time_s
    assert apart["term_s"] == pytest.approx(float(want), rel=1e-6)
    assert apart["term_s"] > 1.8 * latent["term_s"]


def test_duplicate_ids_across_files(tmp_path):
    one = _file(tmp_path, "one", GEMM.format(id="a", value="time_us = 10"))
    two = _file(tmp_path, "two", GEMM.format(id="a", value="time_us = 20"))
    with pytest.raises(dc.SpecError) as err:
        read_kernel_measurements([one, two])
    assert [(p.file, p.key) for p in err.value.problems] == [(two, "kernel[a]")]
    assert "duplicate id (also in" in err.value.problems[0].reason


def test_error_of_a_hand_made_point_is_the_gemm_term(tmp_path):
    path = _file(
        tmp_path,
        "hand",
        GEMM.format(id="t", value="time_us = 200"),
        GEMM.format(id="f", value="achieved_tflop_per_s = 687.2"),
    )
    points = read_kernel_measurements([path])
    # achieved FLOP/s converted once, in the reader: 2 m n k / X
    assert points[1].time_s == pytest.approx(2 * 4096**3 / 687.2e12)
    system = dc.load_system(chip="h100-sxm")
    fmt = GemmFormat(system.chip.peak_flop_per_s[format_index("bf16")], 2.0)
    term = float(gemm_time_s(4096.0, 4096.0, 4096.0, fmt, burst(system), dc.EXACT))
    rows = kernel_rows(points)
    assert rows[0]["term_s"] == pytest.approx(term, rel=1e-6)
    # a profiler's kernel time: the GPU-side share of the per-kernel cost
    eff = system.efficiency
    fixed = float(eff.kernel_launch_s * eff.graph_kernel_fraction)
    assert rows[0]["fixed_s"] == pytest.approx(fixed, rel=1e-6)
    assert rows[0]["predicted_s"] == pytest.approx(term + fixed, rel=1e-6)
    assert rows[0]["error"] == pytest.approx((term + fixed) / 200e-6 - 1, rel=1e-6)
    assert rows[0]["held_out_s"] is None  # one source: nothing held out
    table = kernel_table(rows)
    (group,) = table["by_group"]
    assert (group["chip"], group["dtype"], group["regime"], group["n"]) == (
        "h100-sxm",
        "bf16",
        "large",
        2,
    )
    errs = sorted(abs(r["error"]) for r in rows)
    assert group["median_abs_error"] == pytest.approx(sum(errs) / 2)
    assert table["by_source"]["hand"]["n"] == 2


def test_a_point_under_a_lowered_power_limit_runs_at_the_clock_it_sustains(tmp_path):
    """``power_limit_w``: the GEMM term at the sustained clock of a board capped at that limit
    (the power law of the steps, with the chip's J/FLOP), slower the lower the limit, and the
    top clock where the limit does not bind."""
    kernels = [GEMM.format(id="top", value="time_us = 200")] + [
        GEMM.format(id=f"w{w}", value=f"time_us = 200\npower_limit_w = {w}")
        for w in (300, 500, 5000)
    ]
    rows = kernel_rows(read_kernel_measurements([_file(tmp_path, "pw", *kernels)]))
    system = dc.load_system(chip="h100-sxm")
    capped = dataclasses.replace(
        system, chip=dataclasses.replace(system.chip, tdp_w=jnp.asarray(500.0))
    )
    fmt = GemmFormat(
        system.chip.peak_flop_per_s[format_index("bf16")],
        2.0,
        flop_j=system.chip.energy.flop_j[format_index("bf16")],
    )
    want = float(gemm_time_s(4096.0, 4096.0, 4096.0, fmt, capped, dc.EXACT))
    top, w300, w500, w5000 = (r["term_s"] for r in rows)
    assert w500 == pytest.approx(want, rel=1e-6)
    assert w300 > w500 > top
    assert w5000 == pytest.approx(top, rel=1e-6)  # a limit that does not bind


def test_power_limit_is_a_gemm_key(tmp_path):
    bad = _file(
        tmp_path,
        "pwbad",
        _all_reduce().replace("time_us = 20", "time_us = 20\npower_limit_w = 500"),
    )
    with pytest.raises(dc.SpecError) as err:
        read_kernel_measurements([bad])
    assert any(p.key.endswith("power_limit_w") for p in err.value.problems)


@pytest.mark.parametrize(
    "m,regime", [(1, "small"), (64, "small"), (65, "medium"), (1024, "medium"), (1025, "large")]
)
def test_regimes_by_rows(tmp_path, m, regime):
    kernel = GEMM.format(id="r", value="time_us = 100").replace("m = 4096", f"m = {m}")
    (row,) = kernel_rows(read_kernel_measurements([_file(tmp_path, "r", kernel)]))
    assert row["regime"] == regime


def test_builtin_table_is_finite():
    result = validate_kernels()
    assert all(abs(r["error"]) < 10 for r in result["rows"])
    assert result["summary"]["by_group"]


def test_cli_kernels_table_and_json(tmp_path):
    res = runner.invoke(app, ["validate", "--kernels"])
    assert res.exit_code == 0, res.output
    assert "med |err|" in res.output and "by source" in res.output
    path = _file(tmp_path, "cli", GEMM.format(id="t", value="time_us = 200"))
    res = runner.invoke(app, ["validate", "--kernels", "--measurements", path, "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert set(out) == {"calibration", "rows", "summary"} and out["rows"][0]["id"] == "t"


def test_cli_kernels_bad_file_is_a_message(tmp_path):
    res = runner.invoke(app, ["validate", "--kernels", "--measurements", str(tmp_path / "x.toml")])
    assert res.exit_code == 2
    assert "--measurements" in res.output and "Traceback" not in res.output
    res = runner.invoke(app, ["validate", "--kernels", "--load"])
    assert res.exit_code == 2 and "at most one of --kernels and --load" in res.output
    res = runner.invoke(app, ["validate", "--kernels", "--source", "megatron-readme"])
    assert res.exit_code == 2 and "--source: not used with --kernels" in res.output


def test_a_data_parallel_file_is_charged_its_last_wave(tmp_path):
    """A file of ``tiling = "data_parallel"`` kernels: its GEMM term is the steps' with the
    family's output tile (:func:`wave_fill` over the chip's multiprocessors); the default
    (balanced) file is the steps' term itself; a tiling outside the list is refused."""
    gemm = GEMM.format(id="{id}", value="time_us = 20").replace("m = 4096", "m = 512")
    plain = _file(tmp_path, "plain", gemm.format(id="b"))
    tiled = tmp_path / "tiled.toml"
    tiled.write_text(
        (HEAD + gemm.format(id="d"))
        .format(name="tiled", timing="kernel")
        .replace('timing = "kernel"', 'timing = "kernel"\ntiling = "data_parallel"')
    )
    points = read_kernel_measurements([plain, str(tiled)])
    assert [p.tiling for p in points] == ["balanced", "data_parallel"]
    balanced, parallel = kernel_rows(points, loso=False)
    system = burst(dc.load_system(chip="h100-sxm"))
    peak = system.chip.peak_flop_per_s[format_index("bf16")]
    tile = DATA_PARALLEL_TILE["hopper"]
    for row, fmt in (
        (balanced, GemmFormat(peak, 2.0)),
        (parallel, GemmFormat(peak, 2.0, tile=tile)),
    ):
        want = float(gemm_time_s(512.0, 4096.0, 4096.0, fmt, system, dc.EXACT))
        assert row["term_s"] == pytest.approx(want, rel=1e-6)
    # 512 x 4096 in 64 x 64 tiles: 512 blocks in 4 waves of 132
    fill = float(wave_fill(512.0, 4096.0, *tile, 132.0, dc.EXACT))
    assert fill == pytest.approx(512 / 528)
    text = tiled.read_text().replace("data_parallel", "diagonal").replace("tiled", "bad")
    assert "balanced, data_parallel" in _refusals(tmp_path, text)["tiling"]


def _refusals(tmp_path, text: str) -> dict[str, str]:
    """The reasons by key with which reading a kernel file of ``text`` is refused."""
    bad = tmp_path / "bad.toml"
    bad.write_text(text)
    with pytest.raises(dc.SpecError) as err:
        read_kernel_measurements([str(bad)])
    return {p.key: p.reason for p in err.value.problems}


def test_reused_operands_within_l2_stream_from_it(tmp_path):
    """A file of ``reused`` operands: a memory-bound GEMM whose working set fits the chip's L2
    (:data:`WARM_L2`) reads it at the L2's bandwidth; a larger one, a ``fresh`` file and a
    chip without an entry read from memory; a bad value is refused."""
    gemm = GEMM.format(id="{id}", value="time_us = 9").replace("h100-sxm", "{chip}")
    gemm = gemm.replace("m = 4096", "m = 16").replace("n = 4096", "n = {n}")
    body = "".join(
        gemm.format(id=f"{c}-{n}", chip=c, n=n) for c in ("b200", "h100-sxm") for n in (4096, 65536)
    )
    reused = tmp_path / "reused.toml"
    reused.write_text(
        (HEAD + body)
        .format(name="reused", timing="kernel")
        .replace('timing = "kernel"', 'timing = "kernel"\noperands = "reused"')
    )
    fresh = _file(tmp_path, "fresh", gemm.format(id="f", chip="b200", n=4096))
    points = read_kernel_measurements([str(reused), fresh])
    rows = {r["id"]: r for r in kernel_rows(points, loso=False)}
    capacity, l2_bytes_per_s = WARM_L2["b200"]
    working = 2.0 * (16 * 4096 + 4096 * 4096 + 16 * 4096)
    assert working < capacity < 2.0 * 4096 * 65536
    assert rows["b200-4096"]["term_s"] == pytest.approx(working / l2_bytes_per_s, rel=1e-6)
    for other, system in (("f", "b200"), ("b200-65536", "b200"), ("h100-sxm-4096", "h100-sxm")):
        n = 65536.0 if other.endswith("65536") else 4096.0
        loaded = burst(dc.load_system(chip=system))
        fmt = GemmFormat(loaded.chip.peak_flop_per_s[format_index("bf16")], 2.0)
        want = float(gemm_time_s(16.0, n, 4096.0, fmt, loaded, dc.EXACT))
        assert rows[other]["term_s"] == pytest.approx(want, rel=1e-6)
    assert rows["b200-4096"]["term_s"] < 0.8 * rows["f"]["term_s"]
    text = reused.read_text().replace('"reused"', '"warm"').replace("reused", "bad")
    assert "fresh, reused" in _refusals(tmp_path, text)["operands"]


def test_timing_is_required_and_checked(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text(HEAD.format(name="t", timing="wall") + GEMM.format(id="a", value="time_us = 9"))
    text = path.read_text().replace('timing = "wall"\n', "")
    other = tmp_path / "u.toml"
    other.write_text(text.replace('name = "t"', 'name = "u"'))
    with pytest.raises(dc.SpecError) as err:
        read_kernel_measurements([path, other])
    got = {(p.file, p.key): p.reason for p in err.value.problems}
    assert "kernel, call" in got[(str(path), "timing")]
    assert "missing" in got[(str(other), "timing")]


def test_builtin_table_has_held_out_errors_where_a_family_has_several_sources():
    result = validate_kernels()
    by_op = result["summary"]["by_op"]
    assert by_op["gemm"]["n_held_out"] > 0 and by_op["attention_prefill"]["n_held_out"] > 0
    assert by_op["attention_decode"]["n_held_out"] == 0


ALL_REDUCE = """
[[kernel]]
id = "{id}"
op = "all_reduce"
chip = "h100-sxm"
dtype = "bf16"
ranks = {ranks}
message_{unit} = {size}
implementation = "{impl}"
cuda_graph = true
time_us = 20
as_published = "x"
verified = true
"""


def _all_reduce(id="a", ranks=8, size=1, unit="mib", impl="nccl") -> str:
    return ALL_REDUCE.format(id=id, ranks=ranks, size=size, unit=unit, impl=impl)


def test_all_reduce_point_is_the_all_reduce_term(tmp_path):
    path = _file(
        tmp_path,
        "ar",
        _all_reduce(),
        _all_reduce(id="b", ranks=2, size=64),
        _all_reduce(id="c", impl="custom"),
    )
    points = read_kernel_measurements([path])
    assert points[0].shape == {
        "ranks": 8,
        "message_bytes": 2**20,
        "implementation": "nccl",
        "cuda_graph": True,
        "staged_copy": False,
    }
    rows = kernel_rows(points)
    for point, row in zip(points, rows, strict=True):
        # each timing is checked against the algorithm that ran it
        algorithm = {"nccl": "nccl", "custom": "custom"}[point.shape["implementation"]]
        system = dc.with_collective(dc.load_system(chip="h100-sxm"), algorithm)
        s = point.shape
        want = all_reduce_s(float(s["message_bytes"]), float(s["ranks"]), 1.0, system, dc.EXACT)
        assert row["term_s"] == pytest.approx(float(want), rel=1e-6)
        assert row["measured_s"] == pytest.approx(20e-6)
        # replayed in a CUDA graph: NCCL's kernel the GPU-side share of the launch; the
        # engines' kernel nothing beyond its term (its fixed cost is the whole call's)
        eff = system.efficiency
        graph_share = float(eff.kernel_launch_s * eff.graph_kernel_fraction)
        custom = point.shape["implementation"] == "custom"
        assert row["fixed_s"] == pytest.approx(0.0 if custom else graph_share, rel=1e-6, abs=0)
    assert [r["regime"] for r in rows] == ["small", "large", "small"]
    # the default's choice, on the node, is the faster of the two (1 MiB over 8 ranks)
    node = dc.load_system(chip="h100-sxm")
    assert float(all_reduce_s(2.0**20, 8.0, 1.0, node, dc.EXACT)) == pytest.approx(
        min(r["term_s"] for r in rows[::2]), rel=1e-6
    )


def test_staged_copy_adds_a_copy_kernel(tmp_path):
    """vLLM's custom all-reduce on an unregistered input copies it into the registered buffer
    first: one more kernel's GPU-side fixed cost plus reading and writing the message."""
    plain = _all_reduce(id="a", impl="custom", size=4)
    staged = _all_reduce(id="b", impl="custom", size=4).replace(
        "cuda_graph = true\n", "cuda_graph = true\nstaged_copy = true\n"
    )
    a, b = kernel_rows(read_kernel_measurements([_file(tmp_path, "st", plain, staged)]))
    system = dc.load_system(chip="h100-sxm")
    eff = system.efficiency
    bandwidth = float(system.chip.memory_bandwidth_bytes_per_s * eff.memory_bandwidth_fraction)
    copy_s = 2.0 * 4 * 2**20 / bandwidth
    assert b["term_s"] - a["term_s"] == pytest.approx(copy_s, rel=1e-5)
    assert b["fixed_s"] - a["fixed_s"] == pytest.approx(
        float(eff.kernel_launch_s * eff.graph_kernel_fraction), rel=1e-6
    )


@pytest.mark.parametrize(
    "size,unit,regime", [(1024, "bytes", "small"), (1, "mib", "small"), (1048577, "bytes", "large")]
)
def test_all_reduce_regimes_by_message(tmp_path, size, unit, regime):
    path = _file(tmp_path, "r", _all_reduce(size=size, unit=unit))
    (row,) = kernel_rows(read_kernel_measurements([path]))
    assert row["regime"] == regime


def test_all_reduce_keys_are_checked(tmp_path):
    bad = _file(
        tmp_path,
        "arbad",
        _all_reduce(id="a").replace("ranks = 8\n", ""),
        _all_reduce(id="b", impl="mpi"),
        _all_reduce(id="c", ranks=1),
        _all_reduce(id="d") + "m = 4\n",
        GEMM.format(id="e", value="time_us = 10").replace('"bf16"', '"fp32"'),
    )
    with pytest.raises(dc.SpecError) as err:
        read_kernel_measurements([bad])
    got = {p.key: p.reason for p in err.value.problems}
    assert "needs ranks, message_<unit>, implementation" in got["kernel[a].ranks"]
    assert "must be one of nccl, custom" in got["kernel[b].implementation"]
    assert "plausible range of a collective's group" in got["kernel[c].ranks"]
    assert "not a key of op 'all_reduce'" in got["kernel[d].m"]
    assert "fp32 is an all_reduce format only" in got["kernel[e].dtype"]
