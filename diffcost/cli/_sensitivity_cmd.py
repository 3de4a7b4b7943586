"""``diffcost sensitivity train|serve``: ranked elasticities of a prediction; tornado charts."""

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from .._analysis.sensitivity import HARDWARE_GROUPS, PRIMARY, Sensitivity, sensitivity
from .._core.errors import Problem, SpecError
from .._inputs.loader import load_model, load_spec, load_system
from .._serve.plan import serve_plan
from .._train.plan import train_plan
from . import app
from ._common import (
    CalibrationOpt,
    JsonFlag,
    Opt,
    console,
    friendly_errors,
    merge_inputs,
    print_json,
)

sens_app = typer.Typer(
    help="Elasticities of a prediction w.r.t. every hardware and model number.",
    no_args_is_help=True,
)
app.add_typer(sens_app, name="sensitivity")

SHORT = {
    "step_time_s": "step time",
    "mfu": "MFU",
    "tokens_per_s_per_chip": "tok/s/chip",
    "memory_headroom_bytes": "headroom",
    "cost_per_token_usd": "$/tok",
    "energy_per_token_j": "J/tok",
    "ttft_s": "TTFT",
    "tpot_s": "TPOT",
    "output_tokens_per_s_per_chip": "tok/s/chip",
    "max_batch": "max batch",
    "chips_needed": "chips needed",
    "min_deployment_tokens_per_s_per_chip": "min-deploy tok/s/chip",
}
GROUPS = {
    "hardware": HARDWARE_GROUPS,
    "model": ("model",),
    "efficiency": ("efficiency",),
    "all": None,
}


def _inputs(kind: str, scenario, refs_flags: dict, flags: dict, default_scenario: str):
    """Scenario + flags -> (system, model, plan values, names), as ``diffcost train|serve``."""
    refs, values, scenario = merge_inputs(
        kind, scenario, default_scenario, refs_flags, flags, f"sensitivity {kind}"
    )
    system = load_system(
        refs["system"],
        chip=refs["chip"],
        chips=refs["chips"],
        calibration=refs_flags["calibration"],
    )
    n = int(system.num_chips)
    source = Path(scenario).name if scenario else "<flags>"
    if kind == "train":
        if "dp" not in values:
            others = values.get("tp", 1) * values.get("pp", 1) * values.get("cp", 1)
            values["dp"] = max(1, n // others)
        if "seq_len" not in values:
            max_len = int(load_spec("model", refs["model"]).values["max_seq_len"])
            values["seq_len"] = min(max_len, 2048)
        plan = train_plan(**values, source=source)
    else:
        if "replicas" not in values:
            inst = values.get("tp", 1) * values.get("pp", 1)
            per = inst
            if values.get("disaggregated"):
                per = values.get("prefill_chips", inst) + values.get("decode_chips", inst)
            values["replicas"] = max(1, n // per) if isinstance(per, int) and per > 0 else 1
        plan = serve_plan(**values, source=source)
    model = load_model(refs["model"])
    names = (
        load_spec("model", refs["model"]).info.display_name,
        load_spec(
            "system" if refs["system"] else "chip", refs["system"] or refs["chip"]
        ).info.display_name,
    )
    return system, model, plan, values, names


def _report(
    kind: str,
    sens: Sensitivity,
    metric: str | None,
    group: str,
    top: int,
    tornado: Path | None,
    json_out: bool,
    values: dict,
    names: tuple[str, str],
) -> None:
    if group not in GROUPS:
        raise SpecError([Problem("<flags>", "--group", f"must be one of {', '.join(GROUPS)}")])
    metric = metric or PRIMARY[kind]
    if metric not in sens.metrics:
        raise SpecError(
            [
                Problem(
                    "<flags>",
                    "--metric",
                    f"{metric!r} is not available here; choose from {', '.join(sens.metrics)}",
                )
            ]
        )
    groups = GROUPS[group]
    ranked = sens.ranked(metric, groups)
    ranked = ranked[ranked.elasticity != 0.0].head(top)
    most = {m: sens.most_elastic(m) for m in sens.metrics}
    if tornado is not None:
        from .._analysis.plots import save
        from .._analysis.plots import tornado as tornado_chart

        swings = sens.swings(metric, list(ranked.parameter))
        save(tornado_chart(swings, metric, title=f"{names[0]} on {names[1]}: {metric}"), tornado)
    if json_out:
        print_json(
            {
                "job": kind,
                "model": names[0],
                "hardware": names[1],
                "plan": values,
                "metrics": sens.metrics,
                "ranked_by": metric,
                "ranked": [
                    {
                        "parameter": r.parameter,
                        "group": r.group,
                        "value": r.value,
                        "elasticity": r.elasticity,
                    }
                    for r in ranked.itertuples()
                ],
                "most_elastic_hardware": {
                    m: {"parameter": p, "elasticity": sens.elasticity(m, p)}
                    for m, p in most.items()
                },
                "elasticities": {
                    m: dict(zip(g.parameter, g.elasticity, strict=True))
                    for m, g in sens.table.groupby("metric", sort=False)
                },
                **({"tornado": str(tornado)} if tornado else {}),
            }
        )
        return
    console.print(f"[bold]{names[0]}[/] on {names[1]}")
    console.print("plan: " + ", ".join(f"{k}={v}" for k, v in values.items()), highlight=False)
    wide = sens.wide(groups)
    cols = list(sens.metrics)
    table = Table(
        title=f"elasticities d log(metric) / d log(parameter), ranked by |{metric}|",
        title_justify="left",
    )
    table.add_column("parameter", style="bold", no_wrap=True)
    table.add_column("group", no_wrap=True)
    table.add_column("value", justify="right", no_wrap=True)
    for m in cols:
        table.add_column(SHORT.get(m, m), justify="right", min_width=6)
    value_of = dict(zip(sens.table.parameter, sens.table.value, strict=False))
    for r in ranked.itertuples():
        row = wide.loc[(r.parameter, r.group)]
        table.add_row(
            escape(r.parameter),
            r.group,
            f"{value_of[r.parameter]:.3g}",
            *[f"{row[m]:+.2f}" for m in cols],
        )
    table.add_row("[dim]metric value[/]", "", "", *[f"{sens.metrics[m]:.3g}" for m in cols])
    console.print(table)
    for m in cols:
        p = most[m]
        console.print(
            f"most elastic hardware number for {m}: [bold]{escape(p)}[/] "
            f"({sens.elasticity(m, p):+.3f})",
            highlight=False,
        )
    if tornado is not None:
        console.print(f"tornado chart: {tornado}", highlight=False)


_common_help = dict(
    metric="Metric to rank by (default: step_time_s for train, tpot_s for serve).",
    group="Parameters shown: hardware | model | efficiency | all.",
    top="Rows to show.",
    tornado="Write a tornado chart (exact change for x0.5 and x2 of each parameter) to this PNG.",
)


@sens_app.command("train")
@friendly_errors
def sensitivity_train(
    scenario: Annotated[str | None, Opt("Scenario file or name (default: default-train).")] = None,
    model: Annotated[str | None, Opt("Built-in model name, model TOML or HF config.json.")] = None,
    system: Annotated[str | None, Opt("Built-in system name or system TOML.")] = None,
    chip: Annotated[str | None, Opt("Built-in chip name or chip TOML.")] = None,
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
    zero: Annotated[int | None, Opt("ZeRO stage 0-3.")] = None,
    precision: Annotated[str | None, Opt("GEMM precision: bf16|fp16|fp8|tf32|fp32.")] = None,
    optimizer: Annotated[str | None, Opt("adam | adam_no_master | sgd | sgd_no_master.")] = None,
    calibration: CalibrationOpt = "default",
    metric: Annotated[str | None, Opt(_common_help["metric"])] = None,
    group: Annotated[str, typer.Option(help=_common_help["group"])] = "all",
    top: Annotated[int, typer.Option(help=_common_help["top"])] = 15,
    tornado: Annotated[Path | None, Opt(_common_help["tornado"])] = None,
    json_out: JsonFlag = False,
) -> None:
    """Elasticities of step time, MFU, tokens/s/chip, headroom, cost and energy per token."""
    refs = dict(model=model, system=system, chip=chip, chips=chips, calibration=calibration)
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
    )
    sys_, model_, plan, values, names = _inputs("train", scenario, refs, flags, "default-train")
    sens = sensitivity("train", sys_, model_, plan)
    _report("train", sens, metric, group, top, tornado, json_out, values, names)


@sens_app.command("serve")
@friendly_errors
def sensitivity_serve(
    scenario: Annotated[str | None, Opt("Scenario file or name (default: default-serve).")] = None,
    model: Annotated[str | None, Opt("Built-in model name, model TOML or HF config.json.")] = None,
    system: Annotated[str | None, Opt("Built-in system name or system TOML.")] = None,
    chip: Annotated[str | None, Opt("Built-in chip name or chip TOML.")] = None,
    chips: Annotated[int | None, Opt("Number of chips in the system.")] = None,
    tp: Annotated[int | None, Opt("Tensor-parallel degree of one instance.")] = None,
    pp: Annotated[int | None, Opt("Pipeline-parallel degree of one instance.")] = None,
    replicas: Annotated[int | None, Opt("Replicas (default: chips / chips per replica).")] = None,
    batch: Annotated[int | None, Opt("Concurrent sequences per instance.")] = None,
    input_len: Annotated[int | None, Opt("Prompt tokens per request.")] = None,
    output_len: Annotated[int | None, Opt("Generated tokens per request.")] = None,
    weight_format: Annotated[str | None, Opt("Weights: bf16|fp16|fp8|int8|int4|fp4|...")] = None,
    compute_format: Annotated[str | None, Opt("GEMM/activation format.")] = None,
    kv_format: Annotated[str | None, Opt("KV-cache format.")] = None,
    mode: Annotated[str | None, Opt("static | continuous.")] = None,
    prefill_chunk: Annotated[int | None, Opt("Prompt tokens per iteration (continuous).")] = None,
    calibration: CalibrationOpt = "default",
    metric: Annotated[str | None, Opt(_common_help["metric"])] = None,
    group: Annotated[str, typer.Option(help=_common_help["group"])] = "all",
    top: Annotated[int, typer.Option(help=_common_help["top"])] = 15,
    tornado: Annotated[Path | None, Opt(_common_help["tornado"])] = None,
    json_out: JsonFlag = False,
) -> None:
    """Elasticities of TTFT, TPOT, tokens/s/chip, headroom, cost per token and capacity metrics."""
    refs = dict(model=model, system=system, chip=chip, chips=chips, calibration=calibration)
    flags = dict(
        tp=tp,
        pp=pp,
        replicas=replicas,
        batch=batch,
        input_len=input_len,
        output_len=output_len,
        weight_format=weight_format,
        compute_format=compute_format,
        kv_format=kv_format,
        mode=mode,
        prefill_chunk=prefill_chunk,
    )
    sys_, model_, plan, values, names = _inputs("serve", scenario, refs, flags, "default-serve")
    sens = sensitivity("serve", sys_, model_, plan)
    _report("serve", sens, metric, group, top, tornado, json_out, values, names)
