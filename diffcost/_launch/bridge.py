"""Megatron-Bridge (NeMo) launch lines: a recipe with ``KEY=VALUE`` overrides of its
``ConfigContainer``.

Checked against NVIDIA-NeMo/Megatron-Bridge at commit 067f987df03b (``scripts/training/
run_recipe.py``: ``--model STEM --mode pretrain --dataset mock``, then Hydra-style overrides;
the recipe is ``<STEM>_pretrain_config`` of ``megatron.bridge.recipes``) and the Megatron-Core
config fields the overrides set (``ModelParallelConfig``, ``TransformerConfig``,
``DistributedDataParallelConfig``).

**Memory differs from Megatron-LM's line.**  Every bf16 and fp8 mixed-precision preset of the
Bridge keeps ``grad_reduce_in_fp32=True`` (``training/mixed_precision.py``: ``bf16_mixed``,
``bf16_with_fp8_delayed_scaling_mixed``) and applies it to the DDP config over any override, so
a Bridge run holds fp32 gradients (4 bytes per parameter; fp16 presets: 2).
:func:`bridge_allocated` says so, and the CLI re-evaluates the plan with them: it refuses the
line when the job no longer fits, and otherwise prints the memory and step time it predicts.
"""

from dataclasses import replace
from typing import Any

import equinox as eqx

from .._core.exported import EXACT
from .._inputs.hardware import strong_float
from .._train.cost import TrainCost
from .._train.plan import TRAIN_FIELDS, train_plan
from .command import Launch, tokens
from .megatron import env_for, megatron_refusals, torchrun

BRIDGE_COMMIT = "067f987df03b8355b03192d88d70f1709fedf51a"

#: Recipe stems of the built-in models (``megatron.bridge.recipes`` exports
#: ``<stem>_pretrain_config``; Llama 3 405B is published as Llama 3.1).
RECIPES = {
    "llama-2-7b": "llama2_7b",
    "llama-3-8b": "llama3_8b",
    "llama-3-70b": "llama3_70b",
    "llama-3.1-8b": "llama31_8b",
    "llama-3.1-70b": "llama31_70b",
    "llama-3-405b": "llama31_405b",
    "qwen3-30b-a3b": "qwen3_30b_a3b",
    "qwen3-235b-a22b": "qwen3_235b_a22b",
    "deepseek-v3": "deepseek_v3",
    "gpt-oss-120b": "gpt_oss_120b",
}
#: Mixed-precision presets by training precision, and the gradient bytes each keeps.
PRESETS = {"bf16": "bf16_mixed", "fp16": "fp16_mixed", "fp8": "bf16_with_fp8_delayed_scaling_mixed"}
PRESET_GRAD_BYTES = {"bf16": 4.0, "fp8": 4.0, "fp16": 2.0}
_FIELD = {f.name: f for f in TRAIN_FIELDS}


def _bool(x: Any) -> str:
    return "true" if x else "false"


def key(name: str) -> str:
    """Megatron-Bridge's recipe key for a training plan field, as the field declares it
    (:attr:`~diffcost._core.options.PlanField.launch`)."""
    spelled = _FIELD[name].launch_flag("bridge")
    assert spelled is not None, f"{name} declares no Megatron-Bridge key"
    return spelled


def _value(x: Any) -> str:
    """A value as a recipe override writes it (``true``/``false`` for a switch)."""
    return _bool(x) if isinstance(x, bool) else str(getattr(x, "value", x))


#: Fields :func:`overrides` places itself (by a rule: only when it differs from the recipe's,
#: ``null`` for the default); any other field that declares a Bridge key and differs from its
#: default is written by :func:`declared_overrides`.
_PLACED = ("tp", "pp", "cp", "virtual_stages", "ep", "sequence_parallel", "micro_batch")
_PLACED += ("global_batch", "seq_len", "overlap_grad_reduce", "expert_tp")


def declared_overrides(plan: dict[str, Any]) -> list[str]:
    """``KEY=VALUE`` of every other field of the plan that declares a Bridge key and differs
    from its default (in declaration order): a new field with a recipe key needs no change
    here."""
    return [
        f"{spelled}={_value(plan[f.name])}"
        for f in TRAIN_FIELDS
        if f.name not in _PLACED and plan.get(f.name, f.default) != f.default
        for spelled in [f.launch_flag("bridge")]
        if spelled is not None
    ]


def overrides(plan: dict[str, Any]) -> list[str]:
    """``KEY=VALUE`` overrides for the plan's layout, batch, recomputation, sharding and
    precision (``null`` resets a recipe's value)."""
    v, recompute, zero = int(plan["virtual_stages"]), str(plan["recompute"]), int(plan["zero"])
    ogr = plan.get("overlap_grad_reduce", True)
    out = [
        f"{key('tp')}={plan['tp']}",
        f"{key('pp')}={plan['pp']}",
        f"{key('cp')}={plan['cp']}",
        f"{key('virtual_stages')}={v if v > 1 else 'null'}",
        f"{key('ep')}={plan.get('ep', 1)}",
        f"{key('sequence_parallel')}={_bool(plan['sequence_parallel'])}",
        f"model.recompute_granularity={'null' if recompute == 'none' else recompute}",
        f"model.recompute_method={'uniform' if recompute == 'full' else 'null'}",
        f"model.recompute_num_layers={1 if recompute == 'full' else 'null'}",
        f"{key('micro_batch')}={plan['micro_batch']}",
        f"{key('global_batch')}={plan['global_batch']}",
        "train.train_iters=100",
        f"{key('seq_len')}={plan['seq_len']}",
        f"ddp.use_distributed_optimizer={_bool(zero == 1)}",
        f"{key('overlap_grad_reduce')}={_bool(ogr)}",
        f"ddp.overlap_param_gather={_bool(zero >= 1 and ogr)}",
        f"mixed_precision={PRESETS.get(str(plan.get('precision', 'bf16')), 'bf16_mixed')}",
    ]
    if plan.get("expert_tp") is not None:
        out.append(f"{key('expert_tp')}={plan['expert_tp']}")
    if zero >= 2:
        strategy = "optim_grads" if zero == 2 else "optim_grads_params"
        out += [
            "ddp.use_megatron_fsdp=true",
            f"ddp.data_parallel_sharding_strategy={strategy}",
            "checkpoint.ckpt_format=fsdp_dtensor",
        ]
    return out + declared_overrides(plan)


def bridge_refusals(plan: dict[str, Any], name: str, model: Any, spec: dict[str, Any]) -> list:
    """Why the Bridge line cannot run the plan as predicted (before the memory check)."""
    why = [r for r in megatron_refusals(plan, model, spec) if "LoRA" not in r]
    if name not in RECIPES:
        why.append(f"no Megatron-Bridge pretraining recipe for {name}")
    if str(plan.get("precision", "bf16")) not in PRESETS:
        why.append(f"no Megatron-Bridge mixed-precision preset for {plan['precision']}")
    if int(plan.get("lora_rank", 0)):
        why.append("LoRA (--mode lora) recipes are not emitted")
    if plan.get("first_stage_layers") or plan.get("last_stage_layers"):
        why.append("an uneven pipeline split is not emitted as Bridge overrides")
    return why


def bridge_launch(
    plan: dict[str, Any], name: str, model: Any, spec: dict[str, Any], chips_per_node: int
) -> Launch:
    """The Megatron-Bridge command of a training plan (``plan``:
    :func:`~diffcost._launch.megatron.train_launch_plan`; ``name``: the built-in model)."""
    refused = bridge_refusals(plan, name, model, spec)
    program, chips, _ = torchrun(plan, chips_per_node, "scripts/training/run_recipe.py")
    args = tokens(("--model", RECIPES.get(name, name)), ("--mode", "pretrain"))
    args += tokens(("--dataset", "mock"), *overrides(plan))
    notes = (f"Megatron-Bridge {BRIDGE_COMMIT[:12]}, from its checkout, on {chips} GPUs",)
    env = tuple(env_for(plan))
    return Launch("Megatron-Bridge", program, tuple(args), env, notes, "; ".join(refused))


def bridge_allocated(plan: dict[str, Any]) -> dict[str, Any]:
    """The plan as a Bridge run allocates it: the preset's gradient bytes (module docstring)."""
    grad = PRESET_GRAD_BYTES.get(str(plan.get("precision", "bf16")), 4.0)
    return {**plan, "grad_bytes_per_param": grad}


def with_memory_check(line: Launch, plan: dict[str, Any], system: Any, model: Any) -> Launch:
    """The Bridge line refused when the job no longer fits with the preset's gradient bytes
    (:func:`bridge_allocated`, evaluated with the exact model at the plan's chip count), else
    with a note of the memory and step time predicted for that run."""
    if line.refused:
        return line

    names = {f.name for f in TRAIN_FIELDS}
    fields = {k: v for k, v in bridge_allocated(plan).items() if k in names}
    chips = float(
        plan.get("chips", int(plan["tp"]) * int(plan["pp"]) * int(plan["cp"]) * plan["dp"])
    )
    system = eqx.tree_at(lambda s: s.num_chips, system, strong_float(chips))
    out = EXACT(TrainCost(system, model), train_plan(**fields))
    need, cap = float(out.memory.total_bytes) / 1e9, float(out.capacity_bytes) / 1e9
    grads = fields["grad_bytes_per_param"]
    if need > cap:
        why = f"its preset keeps {grads:g}-byte gradients: {need:.1f} GB per GPU > {cap:.1f} GB"
        return replace(line, refused=why)
    note = (
        f"the preset keeps {grads:g}-byte gradients: predicted {need:.1f} GB of {cap:.1f} GB per "
        f"GPU, step {float(out.step_time_s):.3f} s"
    )
    return replace(line, notes=(*line.notes, note))


__all__ = [
    "BRIDGE_COMMIT",
    "RECIPES",
    "bridge_allocated",
    "bridge_launch",
    "overrides",
    "with_memory_check",
]
