"""Scheduler caps as the engines set them (diffcost._serve.caps): every profile gives them or
says why not, the device and model rules resolve as the engines' code does, a bad value is an
error naming file, key and reason, and the plan under load takes them unless the user gave
``batch`` / ``prefill_chunk``.  The load model on that plan: tests/test_serve_load.py."""

import jax
import jax.numpy as jnp
import pytest

import diffcost as dc
from diffcost import SpecError
from diffcost.testing import engine_names, load_engine

GIB = 2.0**30
CAP_SOURCES = ("max_seqs", "token_budget", "prefill_chunk", "preemption")


def _chip(name):
    """A built-in chip's name and memory capacity (bytes), as the command line reads them."""
    return name, float(dc.load_chip(name).memory_capacity_bytes)


@pytest.mark.parametrize("name", engine_names())
def test_every_profile_gives_its_caps_or_says_why_not(name):
    profile = load_engine(name)
    for key in CAP_SOURCES:  # a source per cap, present or not (then it says why)
        assert len(profile.source[key].split()) >= 5, (name, key)
    for chip in ("l4", "a100-sxm-80gb", "h100-sxm", "mi300x"):
        caps = dc.engine_caps(name, *_chip(chip), context_tokens=4096)
        assert caps.engine == name
        for value in (caps.max_seqs, caps.token_budget, caps.prefill_chunk):
            assert value is None or (isinstance(value, int) and value >= 1)
        if caps.prefill_chunk is not None:
            assert caps.token_budget is not None and caps.prefill_chunk <= caps.token_budget
        assert caps.preemption in (None, "recompute", "swap", "none")
        assert set(caps.source) >= set(CAP_SOURCES)


def test_the_serving_engines_all_cap_their_running_batch():
    """The engines a server runs set a sequence cap and a token budget; the 2022 static-batching
    libraries and NIM (backend not stated) have none and keep the plan's values."""
    for name in ("vllm-0.6", "vllm-0.10", "trtllm-1.3", "sglang-0.4"):
        caps = dc.engine_caps(name, *_chip("h100-sxm"), context_tokens=4096)
        assert caps.max_seqs is not None and caps.token_budget is not None, name
    for name in ("deepspeed-inference-2022", "hf-accelerate-2022", "gpt-fast", "nim-llm-1.8"):
        caps = dc.engine_caps(name, *_chip("h100-sxm"), context_tokens=4096)
        assert caps.max_seqs is None and caps.token_budget is None, name


@pytest.mark.parametrize(
    "chip,seqs,budget",
    [
        ("h100-sxm", 1024, 8192),  # 80 GB = 74.5 GiB >= 70 GiB
        ("h200", 1024, 8192),
        ("mi300x", 1024, 8192),
        ("a100-sxm-80gb", 256, 2048),  # >= 70 GiB, but vLLM excludes A100 (PR #17885)
        ("a100-sxm-40gb", 256, 2048),
        ("l40s", 256, 2048),  # 48 GB
    ],
)
def test_vllm_v1_defaults_follow_device_memory_and_name(chip, seqs, budget):
    caps = dc.engine_caps("vllm-0.10", *_chip(chip), context_tokens=4096)
    assert (caps.max_seqs, caps.token_budget, caps.prefill_chunk) == (seqs, budget, budget)
    assert caps.preemption == "recompute"
    large = "the larger caps for chips of >= 70 GiB not named a100"
    base = "the base caps (the larger ones need chips of >= 70 GiB not named a100)"
    assert caps.rule == (large if seqs == 1024 else base)


def test_the_device_rule_is_a_threshold_on_memory():
    """vLLM's rule at its edge: 70 GiB exactly is large, one byte less is not."""
    on = dc.engine_caps("vllm-0.10", "some-gpu", 70 * GIB, 4096)
    off = dc.engine_caps("vllm-0.10", "some-gpu", 70 * GIB - 1, 4096)
    assert (on.max_seqs, off.max_seqs) == (1024, 256)
    sglang = [dc.engine_caps("sglang-0.4", "x", m * 2.0**20, 4096) for m in (24999, 25000)]
    assert [c.token_budget for c in sglang] == [2048, 8192]  # gpu_mem < 25_000 MiB


def test_vllm_v0_budget_covers_the_model_context():
    """vLLM 0.6 without chunked prefill: max(max_model_len, 2048) tokens per iteration."""
    short = dc.engine_caps("vllm-0.6", *_chip("h100-sxm"), context_tokens=1024)
    long = dc.engine_caps("vllm-0.6", *_chip("h100-sxm"), context_tokens=8192)
    assert (short.token_budget, long.token_budget) == (2048, 8192)
    assert short.prefill_chunk is None and long.iteration_tokens == 8192
    assert short.max_seqs == long.max_seqs == 256


def test_trtllm_reserves_whole_requests_and_does_not_chunk_by_default():
    caps = dc.engine_caps("trtllm-1.3", *_chip("h100-sxm"), context_tokens=4096)
    assert (caps.max_seqs, caps.token_budget, caps.prefill_chunk) == (2048, 8192, None)
    assert caps.preemption == "none" and caps.iteration_tokens == 8192


def test_capped_plan_takes_the_caps_unless_given():
    caps = dc.engine_caps("vllm-0.10", *_chip("h100-sxm"), context_tokens=4096)
    plan = dc.serve_plan(tp=8)
    capped, origin = dc.capped_plan(plan, caps)
    assert (float(capped.batch), float(capped.prefill_chunk)) == (1024.0, 8192.0)
    assert origin == {"batch": "engine", "prefill_chunk": "engine"}
    assert capped.batch.dtype == plan.batch.dtype and capped.batch.shape == plan.batch.shape
    assert float(capped.input_len) == float(plan.input_len)  # nothing else moves
    kept, origin = dc.capped_plan(plan, caps, given={"batch"})
    assert (float(kept.batch), float(kept.prefill_chunk)) == (1.0, 8192.0)
    assert origin == {"batch": "plan", "prefill_chunk": "engine"}
    stacked = jax.tree.map(lambda a, b: jnp.stack([a, b]), plan, dc.serve_plan(tp=4, batch=8))
    both, _ = dc.capped_plan(stacked, caps)
    assert both.batch.tolist() == [1024.0, 1024.0] and both.tp.tolist() == [8.0, 4.0]
    none = dc.engine_caps("gpt-fast", *_chip("h100-sxm"), context_tokens=4096)
    same, origin = dc.capped_plan(plan, none)
    assert same is plan and origin == {"batch": "plan", "prefill_chunk": "plan"}


GOOD = """schema_version = 1
kind = "engine"
name = "bad-caps"
display_name = "bad caps"
framework = "x"
version = "1"
gqa_decode_kernel = true
fused_dequant = true
cuda_graphs = true
moe_native_gemm = true
attention_kernel = "x"
{caps}
[source]
gqa_decode_kernel = "s"
fused_dequant = "s"
cuda_graphs = "s"
moe_native_gemm = "s"
attention_kernel = "s"
{sources}
"""


def _write(tmp_path, caps, sources):
    path = tmp_path / "bad-caps.toml"
    path.write_text(GOOD.format(caps=caps, sources=sources))
    return path


def test_a_bad_cap_is_an_error_naming_file_key_and_reason_all_at_once(tmp_path):
    caps = """max_seqs = 0
token_budget = 2048
prefill_chunk = 4096
preemption = "evict"

[large_device]
excluded_chips = ["a100"]
max_seqs = 1e9
token_budget = 8192
"""
    path = _write(tmp_path, caps, 'max_seqs = "s"\ntoken_budget = "s"\nprefill_chunk = "s"')
    with pytest.raises(SpecError) as err:
        load_engine(path)
    problems = {p.key: p.reason for p in err.value.problems}
    assert all(p.file == str(path) for p in err.value.problems)
    assert problems["max_seqs"] == "must be positive, got 0"
    assert problems["preemption"] == "must be one of recompute, swap, none; got 'evict'"
    assert problems["prefill_chunk"] == "must be at most token_budget = 2048, got 4096"
    assert problems["large_device.max_seqs"] == "must be an integer, got 1000000000.0"
    assert problems["large_device.min_memory"].startswith("missing required key (with a unit")
    assert problems["source.preemption"] == "missing required key"
    assert problems["source.large_device"].startswith("missing: say where the caps of")


def test_an_implausible_cap_names_its_range(tmp_path):
    sources = "\n".join(f'{k} = "s"' for k in CAP_SOURCES)
    path = _write(tmp_path, "max_seqs = 10000000\n", sources)
    with pytest.raises(SpecError) as err:
        load_engine(path)
    (problem,) = err.value.problems
    assert problem.key == "max_seqs"
    assert "outside the plausible range of an engine's running-sequence cap" in problem.reason


def test_a_profile_file_with_caps_loads_and_resolves(tmp_path):
    sources = "\n".join(f'{k} = "s"' for k in CAP_SOURCES) + '\nlarge_device = "s"'
    caps = """max_seqs = 64
token_budget = 512
preemption = "swap"

[large_device]
min_memory_gb = 100
max_seqs = 128
"""
    path = _write(tmp_path, caps, sources)
    small = dc.engine_caps(str(path), "x", 99e9, 4096)
    large = dc.engine_caps(str(path), "x", 100e9, 4096)
    assert (small.max_seqs, large.max_seqs) == (64, 128)
    assert small.token_budget == large.token_budget == 512  # not overridden
    assert large.preemption == "swap" and large.prefill_chunk is None


def test_the_vllm_v1_defaults_match_a_published_run_that_used_them():
    """The vLLM 0.8.3 (V1) ShareGPT runs on 8x A100-40GB were served without scheduler flags;
    their logs show max_num_batched_tokens 2048 and the default max_num_seqs (256), recorded
    in specs/measurements/load/vllm-sharegpt-a100-70b.toml: what the V1 rule gives on that
    system (40 GB < 70 GiB)."""
    from diffcost.testing import load_load_measurements

    points = [m for m in load_load_measurements() if m.id.startswith("vllm083_a100x8")]
    assert points
    for m in points:
        assert m.system is not None
        system = dc.load_system(m.system, chips=m.chips)
        model = dc.load_model(m.model)
        memory, context = float(system.chip.memory_capacity_bytes), float(model.max_seq_len)
        chip = dc.load_spec("system", m.system).values["chip"]
        assert "a100" in chip
        caps = dc.engine_caps("vllm-0.10", chip, memory, context)
        assert (caps.max_seqs, caps.iteration_tokens) == (m.plan["batch"], m.plan["prefill_chunk"])
