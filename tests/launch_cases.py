"""Varied launch lines for the parser checks: Megatron-LM lines of searched training plans and
hand-picked layouts (every ZeRO stage, fp8, fp32, MoE, latent attention, context parallelism,
interleaving, an uneven split), and vLLM / TensorRT-LLM lines of serving plans (every weight
format, fp8 KV, replicas on one and several nodes, expert parallelism, speculation).

``python tests/launch_cases.py > lines.json`` writes them for ``.ci/parsers/check_lines.py``
(the real parsers; ``.ci/parsers/run``); ``tests/test_launch_parsers.py`` checks them against
the parsers' flag tables in ``tests/data/launch/``.
"""

import json
import sys
from functools import cache

import diffcost as dc
from diffcost import TrainSearchSpace, load_spec, search_train
from diffcost.testing import Launch, megatron_launch, serving_launches, train_launch_plan

_BASE = dict(cp=1, micro_batch=1, seq_len=4096, virtual_stages=1, sequence_parallel=True)
_BASE |= dict(recompute="selective", zero=1, precision="bf16")
#: (model, row changes, chips): hand-picked layouts the searches may not reach.
TRAIN_LAYOUTS = [
    ("llama-3-70b", dict(tp=8, pp=4, dp=2, global_batch=512, virtual_stages=5, zero=0), 64),
    ("llama-3-70b", dict(tp=8, pp=1, dp=8, global_batch=512, zero=2, recompute="full"), 64),
    ("llama-3-70b", dict(tp=4, pp=2, dp=8, global_batch=512, zero=3, precision="fp8"), 64),
    ("llama-3-8b", dict(tp=2, pp=1, cp=4, dp=2, global_batch=64, seq_len=32768), 16),
    ("llama-3-8b", dict(tp=1, pp=1, dp=8, global_batch=64, precision="fp32"), 8),
    ("llama-3-8b", dict(tp=1, pp=1, dp=8, global_batch=64, recompute="none", zero=1), 8),
    ("gpt3-175b", dict(tp=8, pp=16, dp=8, global_batch=1536, virtual_stages=3), 1024),
    ("mixtral-8x7b", dict(tp=2, pp=2, dp=4, ep=4, global_batch=256), 16),
    ("deepseek-v3", dict(tp=2, pp=1, dp=256, ep=32, global_batch=4096, ep_dedup=True), 512),
    ("qwen3-30b-a3b", dict(tp=1, pp=1, dp=8, ep=8, global_batch=64, zero=3), 8),
    ("llama-3-405b", dict(tp=8, pp=16, dp=4, global_batch=512), 512),
]
#: (model, system, chips, global batch): searched plans (the best and two runners-up each).
TRAIN_SEARCHES = [
    ("llama-3-8b", "dgx-h100", 8, 64),
    ("llama-3-70b", "dgx-h100", 64, 512),
    ("mixtral-8x7b", "dgx-h100", 16, 128),
]


def _megatron(model: str, row: dict, space: TrainSearchSpace | None = None) -> Launch:
    space = space or TrainSearchSpace(global_batch=row["global_batch"], seq_len=4096, chips=(8,))
    plan = train_launch_plan(row, space)
    return megatron_launch(plan, dc.load_model(model), load_spec("model", model).values, 8)


@cache
def train_layout_lines() -> list[tuple[str, Launch, int]]:
    """(name, Megatron-LM launch, world size) for the hand-picked layouts (no search: cheap)."""
    out = []
    for model, change, chips in TRAIN_LAYOUTS:
        row = {**_BASE, **change}
        if model == "llama-3-405b":  # the published uneven split: 126 layers over 16 stages
            space = TrainSearchSpace(
                global_batch=512, seq_len=4096, chips=(chips,), first_stage_layers=7,
                last_stage_layers=7,
            )  # fmt: skip
            out.append((f"{model} uneven", _megatron(model, row, space), chips))
        else:
            out.append((f"{model} {change}", _megatron(model, row), chips))
    return out


@cache
def train_search_lines(index: int) -> list[tuple[str, Launch, int]]:
    """(name, Megatron-LM launch, world size) of the best plan and two runners-up of
    ``TRAIN_SEARCHES[index]`` (one exact search: seconds)."""
    model, system, chips, batch = TRAIN_SEARCHES[index]
    space = TrainSearchSpace(global_batch=batch, seq_len=4096, chips=(chips,), max_cp=2)
    result = search_train(dc.load_system(system, chips=chips), dc.load_model(model), space)
    result.keep(2)
    out = []
    for i, row in enumerate(result.rows()):
        out.append((f"{model} searched #{i + 1}", _megatron(model, row, space), chips))
    return out


def train_lines() -> list[tuple[str, Launch, int]]:
    """(name, Megatron-LM launch, world size) for the layouts and the searched plans."""
    searched = [line for i in range(len(TRAIN_SEARCHES)) for line in train_search_lines(i)]
    return train_layout_lines() + searched


_SERVE = dict(tp=1, pp=1, batch=64, weight_format="bf16", kv_format="bf16", replicas=1)
_SERVE |= dict(input_len=1024, output_len=256, prefill_chunk=2048, kv_block=16)
SERVE_PLANS = [
    ("llama-3-8b", dict(tp=1, replicas=8)),
    ("llama-3-70b", dict(tp=4, replicas=2, weight_format="fp8", kv_format="fp8")),
    ("llama-3-70b", dict(tp=8, replicas=4)),
    ("llama-3-70b", dict(tp=2, pp=2, weight_format="int4", batch=256)),
    ("llama-3-8b", dict(weight_format="int8", kv_block=32)),
    ("llama-3-8b", dict(weight_format="fp4", cuda_graphs=False)),
    ("mixtral-8x7b", dict(tp=4, expert_parallel=True)),
    ("llama-3-70b", dict(tp=4, draft_len=4)),
]


@cache
def serve_lines() -> list[tuple[str, Launch]]:
    """(name, launch) of vLLM and TensorRT-LLM for :data:`SERVE_PLANS`."""
    out = []
    for model, change in SERVE_PLANS:
        hf = load_spec("model", model).values["hf_id"]
        for line in serving_launches({**_SERVE, **change}, hf, model, 8):
            if not line.refused:
                out.append((f"{model} {change}", line))
    return out


def as_json() -> list[dict]:
    """Every case as an input item of ``.ci/parsers/check_lines.py``."""
    items = [
        {"name": n, "framework": "megatron", "line": x.text(), "world_size": w, "strict": True}
        for n, x, w in train_lines()
    ]
    items += [
        {"name": n, "framework": "vllm", "line": x.text()}
        for n, x in serve_lines()
        if x.framework == "vLLM"
    ]
    return items


if __name__ == "__main__":
    json.dump(as_json(), sys.stdout, indent=1)
