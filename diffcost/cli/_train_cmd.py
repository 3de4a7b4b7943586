"""``diffcost train``: predict one training step."""

from pathlib import Path
from typing import Annotated

import equinox as eqx
import typer

from .._inputs.loader import load_model, load_spec, load_system
from .._train.cost import TrainCost
from .._train.plan import train_plan
from .._train.problems import train_problems
from . import app
from ._common import (
    EXIT_INFEASIBLE,
    CalibrationOpt,
    JsonFlag,
    Opt,
    console,
    fmt_bytes,
    fmt_time,
    friendly_errors,
    kv_table,
    merge_inputs,
    prediction_json,
    print_json,
    spec_infos,
)

DEFAULT_SCENARIO = "default-train"
_predict = eqx.filter_jit(lambda cost, plan: cost(plan))


@app.command()
@friendly_errors
def train(
    scenario: Annotated[
        str | None,
        typer.Option(
            help="Scenario file or built-in name (defaults: "
            f"{DEFAULT_SCENARIO} when no model given)."
        ),
    ] = None,
    model: Annotated[
        str | None, Opt("Built-in model name, model TOML or Hugging Face config.json.")
    ] = None,
    system: Annotated[str | None, Opt("Built-in system name or system TOML.")] = None,
    chip: Annotated[
        str | None, Opt("Built-in chip name or chip TOML (its default node and network).")
    ] = None,
    chips: Annotated[int | None, Opt("Number of chips.")] = None,
    tp: Annotated[int | None, Opt("Tensor-parallel degree.")] = None,
    pp: Annotated[int | None, Opt("Pipeline-parallel degree.")] = None,
    dp: Annotated[int | None, Opt("Data-parallel degree (default: chips / (tp*pp*cp)).")] = None,
    cp: Annotated[int | None, Opt("Context-parallel degree.")] = None,
    micro_batch: Annotated[int | None, Opt("Sequences per micro-batch.")] = None,
    global_batch: Annotated[int | None, Opt("Sequences per optimizer step.")] = None,
    seq_len: Annotated[int | None, Opt("Tokens per sequence.")] = None,
    virtual_stages: Annotated[int | None, Opt("Interleaved pipeline chunks per rank.")] = None,
    recompute: Annotated[str | None, Opt("none | selective | full.")] = None,
    zero: Annotated[int | None, Opt("ZeRO stage 0-3 (3 = FSDP).")] = None,
    precision: Annotated[
        str | None, Opt("GEMM precision: bf16 | fp16 | fp8 | tf32 | fp32.")
    ] = None,
    optimizer: Annotated[str | None, Opt("adam | adam_no_master | sgd | sgd_no_master.")] = None,
    sequence_parallel: Annotated[
        bool | None,
        typer.Option(
            "--sequence-parallel/--no-sequence-parallel",
            help="Shard norm/dropout activations over TP.",
            show_default=False,
        ),
    ] = None,
    flash_attention: Annotated[
        bool | None,
        typer.Option(
            "--flash-attention/--no-flash-attention",
            help="Fused attention kernel.",
            show_default=False,
        ),
    ] = None,
    calibration: CalibrationOpt = "default",
    json_out: JsonFlag = False,
) -> None:
    """Predict one training step: time, throughput, MFU/HFU, memory per chip, energy and cost."""
    flags = dict(
        tp=tp,
        pp=pp,
        dp=dp,
        cp=cp,
        micro_batch=micro_batch,
        global_batch=global_batch,
        seq_len=seq_len,
        virtual_stages=virtual_stages,
        recompute=recompute,
        zero=zero,
        precision=precision,
        optimizer=optimizer,
        sequence_parallel=sequence_parallel,
        flash_attention=flash_attention,
    )
    refs_flags = {"model": model, "system": system, "chip": chip, "chips": chips}
    refs, values, scenario = merge_inputs("train", scenario, DEFAULT_SCENARIO, refs_flags, flags)

    sys_ = load_system(
        refs["system"], chip=refs["chip"], chips=refs["chips"], calibration=calibration
    )
    n_chips = int(sys_.num_chips)
    if "dp" not in values:
        others = values.get("tp", 1) * values.get("pp", 1) * values.get("cp", 1)
        values["dp"] = max(1, n_chips // others)
    if "seq_len" not in values:
        values["seq_len"] = min(int(load_spec("model", refs["model"]).values["max_seq_len"]), 2048)
    plan = train_plan(**values, source=Path(scenario).name if scenario else "<flags>")
    model_ = load_model(refs["model"])
    out = _predict(TrainCost(sys_, model_), plan)
    problems = train_problems(model_, plan, out, float(sys_.num_chips))

    if json_out:
        print_json(prediction_json(out, refs, {"chips": n_chips}, values, problems))
    else:
        model_info, hw_info = spec_infos(refs)
        _print_table(out, model_info.display_name, hw_info.display_name, n_chips, values, problems)
    if problems:
        raise typer.Exit(EXIT_INFEASIBLE)


def _print_table(out, model_name, hw_name, n_chips, values, problems) -> None:
    g = lambda x: float(x)
    plan_str = ", ".join(f"{k}={v}" for k, v in values.items())
    rows = [
        ("step time", fmt_time(g(out.step_time_s))),
        ("  compute (fwd+bwd)", fmt_time(g(out.compute_time_s))),
        ("  recompute", fmt_time(g(out.recompute_time_s))),
        ("  tensor-parallel comm", fmt_time(g(out.tp_comm_time_s))),
        ("  context-parallel comm (exposed)", fmt_time(g(out.cp_comm_time_s))),
        ("  pipeline bubble", fmt_time(g(out.pp_bubble_time_s))),
        ("  pipeline p2p", fmt_time(g(out.pp_p2p_time_s))),
        ("  data-parallel comm (exposed)", fmt_time(g(out.dp_comm_time_s))),
        ("  optimizer update", fmt_time(g(out.optimizer_time_s))),
        ("tokens / s", f"{g(out.tokens_per_s):,.0f}"),
        ("tokens / s / chip", f"{g(out.tokens_per_s) / n_chips:,.1f}"),
        ("model TFLOP/s / chip", f"{g(out.model_flop_per_s_per_chip) / 1e12:.1f}"),
        ("MFU (bf16 dense peak)", f"{g(out.mfu):.1%}"),
        ("HFU (with recompute)", f"{g(out.hfu):.1%}"),
        ("micro-batches per step", f"{g(out.micro_batches):g}"),
        ("memory / chip: weights", fmt_bytes(g(out.memory.weights_bytes))),
        ("  gradients", fmt_bytes(g(out.memory.gradients_bytes))),
        ("  optimizer state", fmt_bytes(g(out.memory.optimizer_bytes))),
        ("  activations", fmt_bytes(g(out.memory.activations_bytes))),
        ("  runtime reserve", fmt_bytes(g(out.memory.reserved_bytes))),
        (
            "  total / capacity",
            f"{fmt_bytes(g(out.memory.total_bytes))} / {fmt_bytes(g(out.capacity_bytes))}",
        ),
        ("energy / step", f"{g(out.energy_j) / 3.6e6:.2f} kWh (at TDP)"),
        ("cost / step", f"${g(out.cost_usd):.2f}" if g(out.cost_usd) > 0 else "n/a (no price)"),
    ]
    console.print(f"[bold]{model_name}[/] on [bold]{n_chips}x[/] {hw_name}")
    console.print(f"plan: {plan_str}", highlight=False)
    console.print(kv_table("training step", rows))
    if problems:
        console.print("[bold red]infeasible:[/]")
        for p in problems:
            console.print(f"  - {p}", highlight=False)
    else:
        console.print("[green]feasible[/]: fits in memory, degrees divide.")
