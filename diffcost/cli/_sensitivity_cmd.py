"""``diffcost sensitivity train|serve``: ranked elasticities of a prediction; tornado charts."""

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from .._analysis.coverage import job_chip
from .._analysis.sensitivity import (
    HARDWARE_GROUPS,
    PRIMARY,
    SERVE_METRICS,
    TRAIN_METRICS,
    Sensitivity,
    sensitivity,
)
from .._analysis.uncertainty import intervals, knowledge
from .._core.errors import Problem, SpecError
from .._serve.cost import ServeCost, serve_problems
from .._serve.engine import DEFAULT_ENGINE
from .._serve.plan import ServePlan
from .._train.cost import TrainCost
from .._train.plan import TrainPlan
from .._train.problems import train_problems
from ._app import app
from ._common import (
    EXIT_INFEASIBLE,
    CalibrationOpt,
    JsonFlag,
    Opt,
    check_outputs,
    console,
    friendly_errors,
    plan_line,
    print_json,
    print_problems,
    spec_infos,
    stage,
)
from ._options import (
    Chips,
    Flags,
    SystemChips,
    report_flags,
    serve_mode_flags,
    serve_shape_flags,
    spec_refs,
    train_optimizer_flag,
    train_parallel_flags,
    with_options,
)
from ._programs import PREDICT
from ._resolve import Job, resolve_job

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
    "tokens_per_s": "tok/s",
    "energy_j": "J/step",
    "cost_usd": "$/step",
    "output_tokens_per_s": "tok/s",
    "request_latency_s": "request latency",
    "cost_per_million_tokens_usd": "$/1M tok",
}
GROUPS = {
    "hardware": HARDWARE_GROUPS,
    "model": ("model",),
    "efficiency": ("efficiency",),
    "all": None,
}


def _check(metrics: tuple[str, ...] | dict[str, Any], kind: str, report: Flags) -> str:
    """The metric to rank by; a clear error for an unknown metric or group."""
    group, metric = report["group"], report["metric"] or PRIMARY[kind]
    problems = []
    if group not in GROUPS:
        problems.append(Problem("<flags>", "--group", f"must be one of {', '.join(GROUPS)}"))
    if metric not in metrics:
        reason = f"{metric!r} is not available here; choose from {', '.join(metrics)}"
        problems.append(Problem("<flags>", "--metric", reason))
    if problems:
        raise SpecError(problems)
    return metric


def _report_json(
    kind: str, sens: Sensitivity, metric: str, ranked: Any, job: Job, names: tuple[str, str]
) -> dict[str, Any]:
    """The ``--json`` object: identities, plan, ranked rows, most elastic numbers, all
    elasticities."""
    most = {m: sens.most_elastic(m) for m in sens.metrics}
    return {
        "job": kind,
        "model": names[0],
        "hardware": names[1],
        "plan": job.values,
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
            m: {"parameter": p, "elasticity": sens.elasticity(m, p)} for m, p in most.items()
        },
        "elasticities": {
            m: dict(zip(g.parameter, g.elasticity, strict=True))
            for m, g in sens.table.groupby("metric", sort=False)
        },
    }


def _table(sens: Sensitivity, metric: str, ranked: Any, groups: tuple[str, ...] | None) -> Table:
    """Ranked parameters (rows) by metrics (columns), with the metric values last."""
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
            r.parameter,
            r.group,
            f"{value_of[r.parameter]:.3g}",
            *[f"{row[m]:+.2f}" for m in cols],
        )
    table.add_row("metric value", "", "", *[f"{sens.metrics[m]:.3g}" for m in cols])
    return table


def _knowledge(kind: str, job: Job, linearised: Any) -> dict[str, Any] | None:
    """Which calibrated constant's uncertainty each headline output's 80% interval comes from,
    and the measurement to make next (:func:`diffcost._analysis.uncertainty.knowledge`); None
    when the calibration has no posterior.  ``linearised``: the prediction's (:data:`PREDICT`)."""
    if kind == "train":
        cost: Any = TrainCost(job.system, job.model)
        engine = None
    else:
        cost = ServeCost(job.system, job.model)
        engine = job.values.get("engine") or DEFAULT_ENGINE
    chip = job_chip(job.refs)
    iv = intervals(cost, job.plan, chip, job.calibration, kind, engine, linearised)
    return None if iv is None else knowledge(iv)


def _knowledge_table(know: dict[str, Any]) -> Table:
    """Per output: the interval's half-width, the discrepancy's share, the top constant."""
    table = Table(
        title="what each 80% interval comes from (shares of its log variance)",
        title_justify="left",
    )
    for name in ("output", "p90 vs p50", "model discrepancy", "largest constant", "its share"):
        table.add_column(
            name, justify="left" if name in ("output", "largest constant") else "right"
        )
    for name, r in know["outputs"].items():
        table.add_row(
            SHORT.get(name, name),
            f"+{r['half_width']:.0%}",
            f"{r['discrepancy_share']:.0%}",
            r["top_constant"],
            f"{r['top_share']:.0%}",
        )
    return table


def _problems(kind: str, job: Job) -> tuple[list[str], Any]:
    """Why the plan is infeasible (memory, degrees, chip count), by the exact model: the
    elasticities of a plan that cannot run are reported, but never as a feasible answer; with
    the prediction's linearisation for :func:`_knowledge` (one program: :data:`PREDICT`)."""
    chips = float(job.system.num_chips)
    if kind == "train":
        assert isinstance(job.plan, TrainPlan)
        out, lin = PREDICT["train"](TrainCost(job.system, job.model), job.plan)
        return train_problems(job.model, job.plan, out, chips), lin
    assert isinstance(job.plan, ServePlan)
    out, lin = PREDICT["serve"](ServeCost(job.system, job.model), job.plan)
    return serve_problems(job.model, job.plan, out, chips), lin


def _report(kind: str, job: Job, report: Flags, json_out: bool) -> None:
    """Rank, chart and print the elasticities of one job; exit 1 when its plan is infeasible."""
    check_outputs({"tornado": report["tornado"]}, plots=("tornado",))
    _check(TRAIN_METRICS if kind == "train" else SERVE_METRICS, kind, report)
    problems, linearised = _problems(kind, job)
    with stage("differentiating the cost model (compiling the gradients)"):
        sens = sensitivity(kind, job.system, job.model, job.plan)
    metric = _check(sens.metrics, kind, report)
    groups = GROUPS[report["group"]]
    ranked = sens.ranked(metric, groups)
    ranked = ranked[ranked.elasticity != 0.0].head(report["top"])
    model_info, hw_info = spec_infos(job.refs)
    names = (model_info.display_name, hw_info.display_name)
    know = _knowledge(kind, job, linearised)
    tornado: Path | None = report["tornado"]
    if tornado is not None:
        # imported here: the plots import matplotlib and pandas (~1 s), only --tornado needs them
        from .._analysis.plots import save
        from .._analysis.plots import tornado as tornado_chart

        swings = sens.swings(metric, list(ranked.parameter))
        save(tornado_chart(swings, metric, title=f"{names[0]} on {names[1]}: {metric}"), tornado)
    if json_out:
        obj = _report_json(kind, sens, metric, ranked, job, names)
        obj |= {"knowledge": know, "feasible": not problems, "problems": problems}
        print_json({**obj, **({"tornado": str(tornado)} if tornado else {})})
    else:
        _print_report(sens, metric, ranked, groups, job, names, tornado)
        _print_knowledge(know)
        print_problems(problems)
    if problems:
        raise typer.Exit(EXIT_INFEASIBLE)


def _print_report(
    sens: Sensitivity,
    metric: str,
    ranked: Any,
    groups: tuple[str, ...] | None,
    job: Job,
    names: tuple[str, str],
    tornado: Path | None,
) -> None:
    """The table and the most elastic hardware number of each metric."""
    console.print(f"{names[0]} on {names[1]}", style="bold")
    console.print(f"plan: {plan_line(job.values)}", highlight=False)
    console.print(_table(sens, metric, ranked, groups))
    for m in sens.metrics:
        p = sens.most_elastic(m)
        console.print(
            f"most elastic hardware number for {m}: {p} ({sens.elasticity(m, p):+.3f})",
            highlight=False,
        )
    if tornado is not None:
        console.print(f"tornado chart: {tornado}", highlight=False)


def _print_knowledge(know: dict[str, Any] | None) -> None:
    """The knowledge table and the measurement to make next."""
    if know is None:
        console.print("no interval: the calibration has no posterior", highlight=False)
        return
    console.print(_knowledge_table(know))
    first = know["ranked_constants"][0]
    console.print(
        f"measure next: {first['constant']} (up to {first['largest_share']:.0%} of an "
        f"interval's variance): {first['measure']}",
        highlight=False,
        markup=False,
    )


@sens_app.command("train")
@friendly_errors
@with_options(
    refs=spec_refs,
    parallel=train_parallel_flags,
    optimizer=train_optimizer_flag,
    report=report_flags,
)
def sensitivity_train(
    *,
    scenario: Annotated[str | None, Opt("Scenario file or name (default: default-train).")] = None,
    refs: Flags,
    chips: Chips = None,
    parallel: Flags,
    zero: Annotated[int | None, Opt("ZeRO stage 0-3.")] = None,
    precision: Annotated[str | None, Opt("GEMM precision: bf16|fp16|fp8|tf32|fp32.")] = None,
    optimizer: Flags,
    calibration: CalibrationOpt = "default",
    report: Flags,
    json_out: JsonFlag = False,
) -> None:
    """Elasticities of step time, MFU, tokens/s/chip, headroom, cost and energy per token."""
    flags = {**parallel, "zero": zero, "precision": precision, **optimizer}
    refs_flags = {**refs, "chips": chips}
    job = resolve_job("train", scenario, refs_flags, flags, calibration, "sensitivity train")
    _report("train", job, report, json_out)


@sens_app.command("serve")
@friendly_errors
@with_options(
    refs=spec_refs, shape=serve_shape_flags, batching=serve_mode_flags, report=report_flags
)
def sensitivity_serve(
    *,
    scenario: Annotated[str | None, Opt("Scenario file or name (default: default-serve).")] = None,
    refs: Flags,
    chips: SystemChips = None,
    shape: Flags,
    compute_format: Annotated[str | None, Opt("GEMM/activation format.")] = None,
    kv_format: Annotated[str | None, Opt("KV-cache format.")] = None,
    batching: Flags,
    calibration: CalibrationOpt = "default",
    report: Flags,
    json_out: JsonFlag = False,
) -> None:
    """Elasticities of TTFT, TPOT, tokens/s/chip, headroom, cost per token and capacity metrics."""
    flags = {**shape, "compute_format": compute_format, "kv_format": kv_format, **batching}
    refs_flags = {**refs, "chips": chips}
    job = resolve_job("serve", scenario, refs_flags, flags, calibration, "sensitivity serve")
    _report("serve", job, report, json_out)
