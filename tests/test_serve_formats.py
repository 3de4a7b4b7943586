"""The formats a chip has (diffcost._serve.formats): which format a serving plan's GEMMs run in
on a chip, the weight-only fallback when the chip has no rate for the weights' format, and
refusals of what nothing runs; the CLI and the search apply the same rule."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

import diffcost as dc
from diffcost import (
    BYTES_PER_ELEMENT,
    FORMATS,
    ServeSearchSpace,
    builtin_names,
    load_spec,
    search_serve,
)
from diffcost import testing as t
from diffcost.cli import app

runner = CliRunner()
CHIPS = builtin_names("chip")


def _peak_keys(chip: str) -> set[str]:
    return {k.removesuffix("_flop_per_s") for k in load_spec("chip", chip).values["compute"]}


@pytest.mark.parametrize("chip", CHIPS)
def test_chip_formats_are_the_rates_its_file_lists(chip):
    formats = t.chip_formats(chip)
    assert set(formats) == _peak_keys(chip) and formats
    assert list(formats) == [f for f in FORMATS if f in formats]


@pytest.mark.parametrize("chip", CHIPS)
def test_gemm_format_is_one_the_chip_has_and_the_weights_own_when_it_can(chip):
    """Every weight format on every catalogue chip: the GEMMs run in a format the chip has a
    rate for, the weights' own whenever the chip has it, else weight-only in 16 bits (never a
    rate the chip's file does not give); a 16-bit-or-wider format without a rate runs nowhere."""
    formats = t.chip_formats(chip)
    for weight in FORMATS:
        gemm = t.compute_format_on(weight, formats)
        own = t.compute_format_on(weight, FORMATS)  # the chip-less rule: bf16 for int8/int4
        assert own is not None
        if t.has_format(own, formats):
            assert gemm == own
        elif BYTES_PER_ELEMENT[weight] < 2.0:
            assert gemm in t.WEIGHT_ONLY_COMPUTE and t.has_format(gemm, formats)
            assert t.weight_only(weight, gemm)
        else:
            assert gemm is None


def test_fp4_weights_on_hopper_run_weight_only_in_bf16_and_natively_on_blackwell():
    assert t.compute_format_on("fp4", t.chip_formats("h100-sxm")) == "bf16"
    assert t.compute_format_on("fp8", t.chip_formats("a100-sxm-80gb")) == "bf16"
    assert t.compute_format_on("fp4", t.chip_formats("b200")) == "fp4"
    assert (
        t.compute_format_on("fp8", t.chip_formats("cerebras-wse3")) == "fp16"
    )  # its one 16-bit rate
    note = t.format_note("fp4", "bf16", "h100-sxm", t.chip_formats("h100-sxm"))
    assert "weight-only (W4A16)" in note and "h100-sxm has no fp4 rate" in note
    assert t.format_note("fp4", "fp4", "b200", t.chip_formats("b200")) == ""
    assert t.format_note("int4", "bf16", "h100-sxm", t.chip_formats("h100-sxm")) == ""


def test_format_problems_name_the_key_the_format_the_chip_and_its_formats():
    h100 = t.chip_formats("h100-sxm")
    (p,) = t.format_problems(
        {"weight_format": "fp4", "compute_format": "fp4"}, "h100-sxm", h100, "s"
    )
    assert (p.file, p.key) == ("s", "compute_format")
    assert "h100-sxm has no fp4 rate (its chip file lists fp32, tf32, bf16, fp16, fp8, int8)" in (
        p.reason
    )
    assert "leave it out to run fp4 weights in bf16" in p.reason
    assert t.format_problems({"weight_format": "fp4"}, "h100-sxm", h100, "s") == []
    (p,) = t.format_problems({"weight_format": "fp32"}, "h200", t.chip_formats("h200"), "s")
    assert p.key == "weight_format" and "cannot run weight-only" in p.reason


def _serve(*args: str) -> dict:
    base = ["serve", "--model", "llama-2-7b", "--chip", "h100-sxm", "--chips", "1", "--json"]
    result = runner.invoke(app, [*base, *args])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_cli_serve_fp4_on_h100_is_weight_only_and_priced_as_w4a16():
    """Issue 44's command: ``diffcost serve --model llama-2-7b --chip h100-sxm --chips 1
    --weight-format fp4`` was priced at the fp8 peak as an fp4 GEMM; it now runs its GEMMs in
    bf16 (what vLLM's Marlin kernel does on Hopper), says so, and costs what the same plan with
    int4 weights (W4A16, the same bytes) costs."""
    fp4 = _serve("--weight-format", "fp4")
    assert fp4["plan"]["compute_format"] == "bf16"
    f = fp4["formats"]
    assert f["weight_format"] == "fp4" and f["compute_format"] == "bf16" and f["weight_only"]
    assert "fp4" not in f["chip_formats"] and "h100-sxm has no fp4 rate" in f["note"]
    int4 = _serve("--weight-format", "int4")
    assert int4["formats"]["note"] == "" and int4["formats"]["weight_only"]
    for key in ("tpot_s", "ttft_s", "decode_gemm_s", "output_tokens_per_s_per_chip"):
        assert fp4[key] == pytest.approx(int4[key], rel=1e-6)


def test_cli_serve_refuses_a_compute_format_the_chip_has_no_rate_for():
    args = ["serve", "--model", "llama-2-7b", "--chip", "h100-sxm", "--chips", "1"]
    result = runner.invoke(app, [*args, "--weight-format", "fp4", "--compute-format", "fp4"])
    assert result.exit_code == 2
    assert "command line: --compute-format: h100-sxm has no fp4 rate" in result.stderr
    assert "fp32, tf32, bf16, fp16, fp8, int8" in result.stderr


def test_search_never_returns_a_compute_format_the_chip_lacks():
    """The same rule in the search: fp4 weights on one H100 run weight-only in bf16 in every
    plan returned; a chip-less search (no rule) keeps the old fp4 label."""
    system, model = dc.load_system(chip="h100-sxm", chips=1), dc.load_model("llama-2-7b")
    kw: dict = dict(input_len=512, output_len=64, chips=1, weight_formats=("fp4",), max_batch=16)
    space = ServeSearchSpace(**kw, chip="h100-sxm")
    assert "fp4" not in space.compute_formats
    result = search_serve(system, model, space, exhaustive=True)
    rows = result.rows()
    assert rows and all(r["compute_format"] == "bf16" for r in rows)
    bare = search_serve(system, model, ServeSearchSpace(**kw), exhaustive=True)
    assert bare.rows()[0]["compute_format"] == "fp4"
    # priced at the bf16 peak: slower GEMMs than the fallback fp8 peak the bare search used
    assert np.isfinite(result.best_objective)
    assert result.best_objective > bare.best_objective


def test_search_refuses_weights_that_run_nowhere_on_the_chip():
    system, model = dc.load_system(chip="h200", chips=1), dc.load_model("llama-2-7b")
    kw: dict = dict(
        input_len=8, output_len=8, chips=1, weight_formats=("fp32", "bf16"), chip="h200"
    )
    space = ServeSearchSpace(**kw)
    with pytest.raises(dc.SpecError, match="weight_formats: h200 has no rate for fp32"):
        search_serve(system, model, space, exhaustive=True)


def test_cli_plan_serve_fp4_on_h100_names_the_fallback_in_table_json_and_launch():
    """Issue 44's command: ``diffcost plan serve --model llama-2-7b --chip h100-sxm --chips 1
    --weight-formats fp4,bf16``: no plan with an fp4 GEMM, the weight-only fallback named in
    the JSON and the text, the vLLM line says it runs weight-only (Marlin W4A16) and the
    TensorRT-LLM line is refused (its FP4 recipes need Blackwell)."""
    args = ["plan", "serve", "--model", "llama-2-7b", "--chip", "h100-sxm", "--chips", "1"]
    args += ["--weight-formats", "fp4,bf16"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    plans = [out["best_plan"], *(a["plan"] for a in out["alternatives"])]
    assert all(p["compute_format"] in t.chip_formats("h100-sxm") for p in plans)
    assert out["best_plan"]["weight_format"] == "fp4" and out["formats"]["weight_only"]
    vllm, trt = out["launch"]
    assert not vllm["refused"] and any("weight-only" in n for n in vllm["notes"])
    assert "Blackwell" in trt["refused"] and "NVFP4" not in " ".join(trt["notes"])
    text = runner.invoke(app, args)
    assert text.exit_code == 0, text.output
    assert "formats: fp4 weights run weight-only (W4A16): h100-sxm has no fp4 rate" in (
        " ".join(text.output.split())
    )
