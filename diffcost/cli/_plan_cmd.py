"""``diffcost plan train|serve``: search for the best plan, verified with the exact model."""

import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import equinox as eqx
import jax.numpy as jnp
import typer
from rich.table import Table

from .._analysis.coverage import (
    coverage,
    coverage_lines,
    formats_of,
    job_chip,
    mfu_check,
    plan_features,
    unmodelled_regimes,
)
from .._analysis.uncertainty import intervals
from .._core.errors import Problem, SpecError
from .._core.options import ServeObjective, TrainObjective, coerce
from .._inputs.hardware import FORMATS
from .._inputs.loader import load_model, load_spec, load_system
from .._launch import (
    Launch,
    RunSettings,
    bridge_launch,
    megatron_launch,
    serving_launches,
    train_launch_plan,
)
from .._launch.bridge import with_memory_check
from .._search.core import SearchResult, settings
from .._search.serve import ServeSearchSpace, search_serve
from .._search.train import TrainSearchSpace, search_train
from .._serve.cost import ServeCost
from .._serve.formats import format_note, weight_only
from .._serve.plan import SERVE_FIELDS, engine_values
from .._train.cost import TrainCost
from .._train.plan import RECOMPUTE, TRAIN_FIELDS, TRAINING_PRECISIONS, ZERO_STAGES
from ._app import app
from ._common import (
    EXIT_INFEASIBLE,
    NO_LIMIT,
    JsonFlag,
    console,
    cv_problems,
    friendly_errors,
    positive_problems,
    print_json,
    stage,
    to_python,
)
from ._options import Collective
from ._plausible import plausible_search, set_aside_line
from ._pools import pools_report
from ._resolve import apply_collective, job_chip_formats

plan_app = typer.Typer(help="Search for the best training or serving plan.", no_args_is_help=True)
app.add_typer(plan_app, name="plan")


def _csv(
    text: str, where: str, allowed: tuple[Any, ...], cast: Callable[[str], Any] = str
) -> tuple[Any, ...]:
    """``"a, b"`` -> ``(cast("a"), cast("b"))``, every item in ``allowed`` (else an error)."""
    try:
        items = tuple(cast(x.strip()) for x in text.split(",") if x.strip())
    except ValueError:
        items = ()
    bad = [x for x in items if x not in allowed]
    if bad or not items:
        raise SpecError(
            [
                Problem(
                    "<arguments>",
                    where,
                    f"must be a comma-separated subset of "
                    f"{', '.join(map(str, allowed))}; got {text!r}",
                )
            ]
        )
    return items


#: Column headings of plan fields in the result table (their declarations' ``short``).
SHORT = {f.name: f.short for f in (*TRAIN_FIELDS, *SERVE_FIELDS) if f.short}


def print_result(
    result: SearchResult,
    title: str,
    fmt_objective,
    launch: list[Launch],
    space: Any = None,
    notes: tuple[str, ...] = (),
) -> None:
    """Readable search report shared by training and serving (``space``: its settings, the
    defaulted ones included, are echoed under the title; ``notes``: lines about the best plan,
    printed under what binds it)."""
    console.print(
        f"{title}  ({result.method}; {result.evaluated:,} exact evaluations, "
        f"{result.feasible_count:,} feasible, {result.wall_s:.2f} s)",
        highlight=False,
    )
    if space is not None:
        given = settings(space)
        text = " ".join(f"{k}={_setting(v)}" for k, v in given.items() if v not in ("", None, []))
        console.print(f"settings: {text}", highlight=False, markup=False, style="dim")
    if result.best is None:
        console.print(f"no feasible plan: {result.binding}", style="bold red")
        for s in result.suggestions:
            console.print(f"  - {s}", highlight=False)
        return
    table = Table(title="best plan and runners-up", title_justify="left")
    plain = result.rows()
    keys = [k for k in plain[0] if k not in ("global_batch", "seq_len")]
    table.add_column("#")
    for k in keys:
        table.add_column(SHORT.get(k, k))
    table.add_column(result.objective_name, justify="right")
    values = [result.best_objective, *(v for _, v in result.alternatives)]
    for i, (row, value) in enumerate(zip(plain, values, strict=True)):
        table.add_row(str(i + 1), *[str(row[k]) for k in keys], fmt_objective(value))
    console.print(table)
    console.print(f"binding: {result.binding}", highlight=False)
    for note in notes:
        console.print(note, highlight=False, markup=False)
    for line in launch:
        console.print(f"launch ({line.framework}):", highlight=False)
        console.print(line.text(), highlight=False, markup=False, soft_wrap=True)


def result_json(result: SearchResult, launch: list[Launch], space: Any = None) -> dict:
    """The ``--json`` object of a search: every setting of the space (defaults included), the
    best plan and the runners-up, each with its full exact breakdown."""
    parts = [to_python(b) for b in result.breakdowns]
    parts += [None] * (len(result.alternatives) + 1 - len(parts))
    why: dict[str, str] = {}
    name = result.objective_name

    def bounded(value: float | None, key: str) -> float | None:
        """``value``, or ``None`` with its reason under ``null_reasons`` when infinite."""
        if value is None or math.isfinite(value):
            return value
        why[key] = (
            f"unbounded: {name} = {value} (no arrival rate meets the limits)"
            if name == "chips_per_goodput_qps"
            else f"unbounded: {name} = {value} overflows float"
        )
        return None

    best = bounded(result.best_objective, "best_objective") if result.best is not None else None
    plain = result.rows()  # the plans as plain values: made here, at the JSON boundary
    return {
        "settings": settings(space) if space is not None else None,
        "feasible": result.best is not None,
        "best_plan": plain[0] if plain else None,
        "objective": name,
        "best_objective": best,
        "best_breakdown": parts[0] if result.best is not None else None,
        "binding": result.binding,
        "alternatives": [
            {"plan": p, "objective_value": bounded(v, f"alternatives[{i}]"), "breakdown": b}
            for i, (p, (_, v), b) in enumerate(
                zip(plain[1:], result.alternatives, parts[1:], strict=False)
            )
        ],
        "method": result.method,
        "evaluated": result.evaluated,
        "feasible_count": result.feasible_count,
        "search_wall_s": result.wall_s,
        "relaxed_objective": bounded(result.relaxed_objective, "relaxed_objective"),
        "suggestions": result.suggestions,
        "launch": [line.to_json() for line in launch],
        "null_reasons": why,
    }


def _setting(value: Any) -> str:
    """A setting as the title echoes it: lists comma-separated, pairs (an MFU ceiling) as
    ``name:value``."""
    if isinstance(value, list):
        return ",".join(
            ":".join(f"{x:.3f}" if isinstance(x, float) else str(x) for x in v)
            if isinstance(v, list)
            else str(v)
            for v in value
        )
    return str(value)


_UNITS = {
    "time": ("step_time_s", lambda v: f"{v:.3f} s"),
    "p90": ("step_time_s_p90", lambda v: f"{v:.3f} s"),
    "cost": ("cost_usd_per_token", lambda v: f"${v * 1e6:.3f}/Mtok"),
    "energy": ("energy_j_per_token", lambda v: f"{v:.3f} J/tok"),
}

PlanModel = Annotated[str, typer.Option(help="Built-in model, model TOML or HF config.json.")]
PlanSystem = Annotated[str | None, typer.Option(help="Built-in system or system TOML.")]
PlanChip = Annotated[str | None, typer.Option(help="Built-in chip or chip TOML.")]
Exhaustive = Annotated[
    bool | None,
    typer.Option(
        "--exhaustive/--relaxed",
        help="Enumerate the whole discrete space, or run the relaxed gradient search "
        "(default: enumerate spaces of at most 50,000,000 training plans, on device, or "
        "2,000,000 serving plans; search larger ones).",
        show_default=False,
    ),
]
Runners = Annotated[int, typer.Option(help="Runners-up to show.", min=0)]


def _load_system(
    system: str | None, chip: str | None, chips: int | None, collective: str | None
) -> tuple[Any, str]:
    """The system to plan on (``dgx-h100`` when neither is given), with the collective
    algorithm ``--collective`` names, and its name as typed."""
    if system is None and chip is None:
        system = "dgx-h100"
    name = system or chip
    assert name is not None
    return apply_collective(load_system(system, chip=chip, chips=chips), collective), name


def _finish(
    result: SearchResult,
    launch: list[Launch],
    model: str,
    chips: int,
    json_out: bool,
    show: tuple[str, Callable[[float], str]],
    checks: dict[str, Any] | None = None,
    space: Any = None,
    risk: tuple[dict[str, Any] | None, str] = (None, "step_time_s"),
    formats: dict[str, Any] | None = None,
) -> None:
    """Print the search result (``show``: title and objective formatter), the checks of the
    chosen plan (``checks``: a training plan's MFU plausibility and unmodelled regimes), a
    p90 search's mean-vs-p90 comparison (``risk``: it and the output it compares) and a serving
    plan's formats on its chip (``formats``, :func:`_best_formats`); exit 1 when no plan is
    feasible."""
    if json_out:
        extra = {} if checks is None else {"checks": checks}
        extra |= {} if risk[0] is None else {"risk": risk[0]}
        extra |= {} if formats is None else {"formats": formats}
        print_json({"model": model, "chips": chips, **result_json(result, launch, space), **extra})
    else:
        notes = (f"formats: {formats['note']}",) if formats and formats["note"] else ()
        print_result(result, show[0], show[1], launch, space, notes)
        for line in [] if checks is None else coverage_lines(checks):
            console.print(line, highlight=False, markup=False)
        if risk[0] is not None:
            print_risk(risk[0], risk[1])
    if result.best is None:
        raise typer.Exit(EXIT_INFEASIBLE)


def _train_checks(system: Any, chip: str, result: SearchResult) -> dict[str, Any] | None:
    """The chosen training plan against what is published: the coverage of its chip, its MFU
    (from the search's exact breakdown) against the best published on that chip
    (:func:`~diffcost._analysis.coverage.mfu_check`) and the unmodelled regimes it is in."""
    plan = result.best
    if plan is None:
        return None
    mfu = float(result.breakdowns[0].mfu)
    fmt = formats_of(plan, "train")
    out = coverage(chip, "train", fmt, features=plan_features("train", result.row(plan)))
    out["mfu"] = mfu_check(chip, fmt[0], mfu)
    out["unmodelled"] = unmodelled_regimes("train", plan, system)
    return out


def _train_launches(
    result: SearchResult, space: Any, model: str, system: Any, run: RunSettings | None = None
) -> list:
    """The Megatron-LM and Megatron-Bridge commands of the best plan (none without a plan;
    ``run``: the Megatron-LM line's data and schedule); the Bridge line re-checked with its
    preset's fp32 gradients."""
    if result.best is None:
        return []
    best = result.row(result.best)
    spec = load_spec("model", model)
    plan, model_ = train_launch_plan(best, space), load_model(model)
    per_node = _chips_per_node(system)
    lines = [
        megatron_launch(plan, model_, spec.values, per_node, run or RunSettings()),
        bridge_launch(plan, spec.info.name, model_, spec.values, per_node),
    ]
    if float(system.chip.architecture[0]) < 1.0:
        return [
            replace(x, refused=f"{x.framework} runs on GPUs; this chip is not one") for x in lines
        ]
    return [lines[0], with_memory_check(lines[1], plan, system, model_)]


def _chips_per_node(system: Any) -> int:
    """GPUs per host for the launchers: the scale-up domain, at most 8 (an NVL72 rack's
    domain spans 18 hosts of 4 GPUs; then 4)."""
    domain = int(system.scale_up_domain_chips)
    return domain if domain <= 8 else 4 if domain % 4 == 0 else 1


@plan_app.command("train")
@friendly_errors
def plan_train(
    model: PlanModel = "llama-3-70b",
    system: PlanSystem = None,
    chip: PlanChip = None,
    chips: Annotated[
        int | None, typer.Option(help="Chip count (the system's default if omitted).")
    ] = None,
    collective: Collective = None,
    global_batch: Annotated[int, typer.Option(help="Sequences per step.", min=1)] = 512,
    seq_len: Annotated[int, typer.Option(help="Tokens per sequence.", min=1)] = 4096,
    objective: Annotated[
        str, typer.Option(help="time | cost | energy (per token) | p90 (upper quantile of time).")
    ] = "time",
    search_chips: Annotated[
        bool, typer.Option(help="Also search the chip count (powers of two up to --chips).")
    ] = False,
    recompute: Annotated[
        str, typer.Option(help="Allowed recomputation modes.")
    ] = "none,selective,full",
    zero: Annotated[str, typer.Option(help="Allowed ZeRO stages.")] = "0,1,2,3",
    precision: Annotated[str, typer.Option(help="Allowed GEMM precisions.")] = "bf16",
    max_cp: Annotated[int, typer.Option(help="Largest context-parallel degree.", min=1)] = 8,
    exhaustive: Exhaustive = None,
    top: Runners = 5,
    data_path: Annotated[
        str | None,
        typer.Option(help="Launch line: Megatron's indexed-dataset prefix (default: --mock-data)."),
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            help="Launch line: Hugging Face tokenizer name or folder (default: NullTokenizer)."
        ),
    ] = None,
    train_iters: Annotated[int, typer.Option(help="Launch line: optimizer steps.")] = 100,
    lr: Annotated[float, typer.Option(help="Launch line: peak learning rate.")] = 1e-4,
    min_lr: Annotated[float, typer.Option(help="Launch line: final learning rate.")] = 0.0,
    lr_decay_style: Annotated[
        str, typer.Option(help="Launch line: constant, linear, cosine, inverse-square-root or WSD.")
    ] = "constant",
    lr_warmup_iters: Annotated[int, typer.Option(help="Launch line: warm-up steps.")] = 0,
    plausible: Annotated[
        bool,
        typer.Option(
            "--plausible/--any-mfu",
            help="Return the best plan whose predicted MFU is within the best published MFU of "
            "its chip and precision, reporting a faster one above it (default), or the fastest.",
        ),
    ] = True,
    json_out: JsonFlag = False,
) -> None:
    """Find the fastest (or cheapest) training plan, checked with the exact model."""
    run = RunSettings(
        data_path, tokenizer, train_iters, lr, min_lr, lr_decay_style, lr_warmup_iters
    )
    if run.problems():
        raise SpecError(run.problems())
    objective = coerce(TrainObjective, objective, "objective").value
    sys_, hw_name = _load_system(system, chip, chips, collective)
    n = int(sys_.num_chips)
    counts = tuple(2**k for k in range(n.bit_length()) if 2**k <= n) if search_chips else (n,)
    space = TrainSearchSpace(
        global_batch=global_batch,
        seq_len=seq_len,
        chips=counts,
        recompute=_csv(recompute, "recompute", RECOMPUTE),
        zero=_csv(zero, "zero", ZERO_STAGES, int),
        precision=_csv(precision, "precision", TRAINING_PRECISIONS),
        max_cp=max_cp,
        objective=objective,
        chip=_chip_name(system, chip),
    )
    model_ = load_model(model)
    with stage(f"searching training plans for {n} chips (compiling, then evaluating)"):
        result, space, aside = plausible_search(sys_, model_, space, exhaustive, plausible)
    result.keep(top)
    launch = _train_launches(result, space, model, sys_, run)
    name = load_spec("model", model).info.display_name
    label, fmt = _UNITS[objective]
    title = f"{name} on {n}x {hw_name}: minimise {label}"
    with stage("checking the chosen plan against published measurements"):
        checks = _train_checks(sys_, space.chip, result)
        risk = _risk(sys_, model_, space, result, exhaustive)
    if checks is not None and aside is not None:
        checks["set_aside"] = aside | {"line": set_aside_line(aside, fmt)}
    _finish(result, launch, model, n, json_out, (title, fmt), checks, space, (risk, "step_time_s"))


def _risk(system: Any, model: Any, space: TrainSearchSpace, result: SearchResult, exhaustive):
    """For a p90 search that found a plan, the mean-optimal plan beside it
    (:func:`risk_comparison`); None otherwise."""
    if space.objective != "p90" or result.best is None:
        return None
    mean = search_train(system, model, replace(space, objective="time"), exhaustive=exhaustive)
    return risk_comparison(system, model, space.chip, mean, result)


def _chip_refs(system: str | None, chip: str | None) -> dict[str, str | None]:
    """The system or chip arguments as a job's references (``dgx-h100`` when neither)."""
    return {"system": system, "chip": chip} if system or chip else {"system": "dgx-h100"}


def _chip_name(system: str | None, chip: str | None) -> str:
    """The chip of a system or chip argument (the posterior's basis and regime)."""
    return job_chip(_chip_refs(system, chip))


def _train_interval(system: Any, model: Any, chip: str, plan: Any, row: dict) -> dict[str, Any]:
    """p10/p50/p90 of the step time of a searched plan (``row``: its plain values) and its
    variance per term (:func:`diffcost._analysis.uncertainty.intervals`)."""

    sys_ = eqx.tree_at(lambda s: s.num_chips, system, jnp.asarray(float(row["chips"])))
    iv = intervals(TrainCost(sys_, model), plan, chip, "default", "train")
    assert iv is not None  # a p90 search already required the posterior
    return _quantiles(iv, "step_time_s", row)


def _serve_interval(system: Any, model: Any, space: Any, plan: Any, row: dict) -> dict[str, Any]:
    """p10/p50/p90 of the TPOT of a searched serving plan (``row``: its plain values; the
    default engine's regime, as the search ranks it) and its variance per term."""
    iv = intervals(ServeCost(system, model), plan, space.chip, space.calibration, "serve")
    assert iv is not None  # a p90 search already required the posterior
    return _quantiles(iv, "tpot_s", row)


def _quantiles(iv: dict[str, Any], name: str, row: dict) -> dict[str, Any]:
    """The p10/p50/p90 of output ``name`` of an interval object, its regime and its log
    variance per term (constants and model discrepancy)."""
    out = iv["interval"]["outputs"][name]
    var = out["log_sigma"] ** 2
    p10, p90 = iv[f"{name}_p10"], iv[f"{name}_p90"]
    return {
        "plan": row,
        f"{name}_p10": p10,
        f"{name}_p50": math.sqrt(p10 * p90),
        f"{name}_p90": p90,
        "regime": iv["interval"]["regime"],
        "log_variance": {k: v * var for k, v in out["log_variance_shares"].items()},
    }


def risk_comparison(
    system: Any, model: Any, chip: str, mean: SearchResult, p90: SearchResult
) -> dict[str, Any]:
    """The mean-optimal and the p90-optimal training plans (the best of the searches ``mean``
    and ``p90``) with their p10/p50/p90 step times and, when they differ, the reason
    (:func:`compare_risk`)."""
    return compare_risk(
        lambda plan, row: _train_interval(system, model, chip, plan, row), mean, p90
    )


def compare_risk(
    interval_of: Callable[[Any, dict], dict], mean_result: SearchResult, p90: SearchResult
) -> dict[str, Any]:
    """The mean-optimal and the p90-optimal plans (the best of each search) with their
    quantiles (``interval_of(plan, row)``) and, when they differ, the reason: the term (a
    constant or the model discrepancy) of the log variance
    (:func:`diffcost._analysis.uncertainty.variance_shares`) whose contribution differs most
    between the two plans."""
    assert p90.best is not None
    mean_row = mean_result.row(mean_result.best) if mean_result.best is not None else None
    p90_row = p90.row(p90.best)
    mean = interval_of(mean_result.best, mean_row) if mean_row else None
    best = interval_of(p90.best, p90_row)
    differ = mean is not None and mean_row != p90_row
    reason = None
    if differ and mean is not None:
        terms = set(mean["log_variance"]) | set(best["log_variance"])
        gap = {
            t: mean["log_variance"].get(t, 0.0) - best["log_variance"].get(t, 0.0) for t in terms
        }
        top = max(gap, key=lambda t: gap[t])
        reason = (
            f"{top}: log variance {mean['log_variance'].get(top, 0.0):.4f} for the mean-optimal "
            f"plan ({mean['regime']}) vs {best['log_variance'].get(top, 0.0):.4f} for the "
            f"p90-optimal one ({best['regime']})"
        )
    return {"mean_optimal": mean, "p90_optimal": best, "differ": differ, "reason": reason}


def print_risk(risk: dict[str, Any], name: str = "step_time_s") -> None:
    """The mean-optimal and p90-optimal plans side by side (their ``name`` quantiles), when
    they differ."""
    if not risk["differ"]:
        console.print("the p90-optimal plan is also the mean-optimal one", highlight=False)
        return
    table = Table(title="mean-optimal vs p90-optimal", title_justify="left")
    table.add_column("")
    for col in ("plan", "regime", "p10 s", "p50 s", "p90 s"):
        table.add_column(col)
    for label in ("mean_optimal", "p90_optimal"):
        r = risk[label]
        p = r["plan"]
        if "micro_batch" in p:
            desc = f"tp{p['tp']} pp{p['pp']} dp{p['dp']} mb{p['micro_batch']} zero{p['zero']}"
        else:
            desc = f"tp{p['tp']} pp{p['pp']} batch{p['batch']} {p['weight_format']}"
        nums = (r[f"{name}_p10"], r[f"{name}_p50"], r[f"{name}_p90"])
        table.add_row(label.replace("_", "-"), desc, r["regime"], *(f"{v:.4g}" for v in nums))
    console.print(table)
    console.print(f"why they differ: {risk['reason']}", highlight=False)


_SERVE_UNITS = {
    "throughput": ("chip_s_per_output_token", lambda v: f"{1 / v:,.0f} tok/s/chip"),
    "latency": ("request_latency_s", lambda v: f"{v:.3f} s"),
    "cost": ("usd_per_million_tokens", lambda v: f"${v:.3f}/Mtok"),
    "p90": ("tpot_s_p90", lambda v: f"{v * 1e3:.2f} ms"),
    "tpot": ("tpot_s", lambda v: f"{v * 1e3:.2f} ms"),
    "goodput": ("chips_per_goodput_qps", lambda v: f"{1 / v:.3f} req/s/chip"),
}


TtftSlo = Annotated[float | None, typer.Option(help="Time-to-first-token limit, ms.")]
TtftP99 = Annotated[
    float | None, typer.Option(help="p99 TTFT limit under load, ms (--objective goodput).")
]
TpotP99 = Annotated[
    float | None, typer.Option(help="p99 TPOT limit under load, ms (--objective goodput).")
]


def _p99_problems(
    objective: str,
    ttft_slo_ms: float | None,
    tpot_slo_ms: float | None,
    ttft_p99_ms: float | None,
    tpot_p99_ms: float | None,
) -> list[Problem]:
    """``--ttft-p99-ms`` / ``--tpot-p99-ms`` are limits under load: only the goodput objective
    has a load, and each limit is given once (as a p99 or as the ``--*-slo-ms`` it stands for
    under that objective)."""
    bad = []
    for name, p99, slo in (("ttft", ttft_p99_ms, ttft_slo_ms), ("tpot", tpot_p99_ms, tpot_slo_ms)):
        if p99 is None:
            continue
        if objective != "goodput":
            why = "a p99 limit under load applies to --objective goodput or --qps only"
            bad.append(Problem("<arguments>", f"{name}_p99_ms", f"{why} (got {objective})"))
        elif slo is not None:
            bad.append(
                Problem("<arguments>", f"{name}_p99_ms", f"give it or --{name}-slo-ms, not both")
            )
    return bad


ArrivalCv = Annotated[
    float,
    typer.Option(help="goodput: coefficient of variation of the arrival gaps (1: Poisson).", min=0),
]
InputCv = Annotated[
    float, typer.Option(help="goodput: coefficient of variation of the prompt lengths.", min=0)
]
TpotSlo = Annotated[float | None, typer.Option(help="Time-per-output-token limit, ms.")]
AccuracyCosts = Annotated[
    str,
    typer.Option(
        help="Per-format accuracy cost, e.g. 'int4=0.05,fp8=0.01'; "
        "multiplies the objective by 1 + cost."
    ),
]


def _accuracy_costs(text: str) -> tuple[tuple[str, float], ...]:
    """``"int4=0.05,fp8=0.01"`` -> ``(("fp8", 0.01), ("int4", 0.05))``; an unknown format or a
    negative or missing number is an error."""
    costs: dict[str, float] = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        name, _, value = item.partition("=")
        try:
            costs[name] = float(value)
        except ValueError:
            costs[name] = -1.0
        if name not in FORMATS or costs[name] < 0:
            reason = f"expected FORMAT=non-negative number, got {item!r}"
            raise SpecError([Problem("<arguments>", "accuracy_cost", reason)])
    return tuple(sorted(costs.items()))


def _serve_risk(system: Any, model: Any, space: Any, result: SearchResult, exhaustive):
    """For a p90 serving search that found a plan, the median-TPOT optimum beside it
    (:func:`compare_risk`); None otherwise."""
    if space.objective != "p90" or result.best is None:
        return None
    mean = search_serve(system, model, replace(space, objective="tpot"), exhaustive=exhaustive)
    interval_of = lambda plan, row: _serve_interval(system, model, space, plan, row)  # noqa: E731
    return compare_risk(interval_of, mean, result)


@plan_app.command("serve")
@friendly_errors
def plan_serve(
    model: PlanModel = "llama-2-70b",
    system: PlanSystem = None,
    chip: PlanChip = None,
    chips: Annotated[
        int | None, typer.Option(help="Chips available (the system's default if omitted).")
    ] = None,
    collective: Collective = None,
    input_len: Annotated[int, typer.Option(help="Prompt tokens per request.", min=1)] = 2048,
    output_len: Annotated[int, typer.Option(help="Generated tokens per request.", min=1)] = 256,
    objective: Annotated[
        str,
        typer.Option(
            help="throughput (per chip) | latency | cost (per Mtok) | tpot (median) | p90 "
            "(of TPOT) | goodput (chips per request/s whose p99 TTFT and TPOT under load "
            "meet --ttft-p99-ms / --tpot-p99-ms)."
        ),
    ] = "throughput",
    ttft_slo_ms: TtftSlo = None,
    tpot_slo_ms: TpotSlo = None,
    ttft_p99_ms: TtftP99 = None,
    tpot_p99_ms: TpotP99 = None,
    weight_formats: Annotated[str, typer.Option(help="Allowed weight formats.")] = "bf16,fp8",
    kv_formats: Annotated[str, typer.Option(help="Allowed KV-cache formats.")] = "bf16,fp8",
    max_batch: Annotated[
        int, typer.Option(help="Largest concurrent batch per instance.", min=1)
    ] = 1024,
    accuracy_cost: AccuracyCosts = "",
    arrival_cv: ArrivalCv = 1.0,
    input_cv: InputCv = 0.0,
    exhaustive: Exhaustive = None,
    top: Runners = 5,
    json_out: JsonFlag = False,
    qps: Annotated[
        float | None,
        typer.Option(
            help="Arrival rate, requests/s: the fewest chips serving it within the p99 limits, "
            "aggregated against disaggregated prefill/decode pools (xPyD), side by side."
        ),
    ] = None,
) -> None:
    """Find the best serving plan under latency limits; every answer is checked exactly.

    ``--objective goodput`` ranks plans by chips per request/s of goodput: the largest Poisson
    arrival rate whose p99 TTFT and p99 TPOT under load meet ``--ttft-p99-ms`` and
    ``--tpot-p99-ms`` (the names ``diffcost serve --qps`` gives them; ``--ttft-slo-ms`` and
    ``--tpot-slo-ms`` are read as those p99 limits too), found by enumerating every plan (per
    chip and per dollar rank alike on one system)."""
    objective = coerce(ServeObjective, objective, "objective").value
    loaded = "goodput" if qps is not None else objective  # --qps: the limits are under load
    bad = _p99_problems(loaded, ttft_slo_ms, tpot_slo_ms, ttft_p99_ms, tpot_p99_ms)
    limits = {  # each under the flag that gave it, for the problem's key
        "ttft_slo_ms": ttft_slo_ms if ttft_p99_ms is None else None,
        "ttft_p99_ms": ttft_p99_ms,
        "tpot_slo_ms": tpot_slo_ms if tpot_p99_ms is None else None,
        "tpot_p99_ms": tpot_p99_ms,
    }
    ttft_slo_ms = ttft_slo_ms if ttft_p99_ms is None else ttft_p99_ms
    tpot_slo_ms = tpot_slo_ms if tpot_p99_ms is None else tpot_p99_ms
    bad += positive_problems(limits, "milliseconds", NO_LIMIT, 1e-3)
    bad += cv_problems({"arrival_cv": arrival_cv, "input_cv": input_cv})
    if max_batch < 1:
        bad.append(Problem("<arguments>", "max_batch", "must be a positive integer"))
    if qps is not None and not (math.isfinite(qps) and qps > 0):
        bad.append(Problem("<arguments>", "qps", f"must be a positive rate, got {qps}"))
    if bad:
        raise SpecError(bad)
    costs = _accuracy_costs(accuracy_cost)
    sys_, hw_name = _load_system(system, chip, chips, collective)
    n = int(sys_.num_chips)
    if qps is not None:
        shape: dict[str, Any] = {"input_len": input_len, "output_len": output_len, "chips": n}
        shape |= {"arrival_cv": arrival_cv, "input_cv": input_cv}
        shape["formats"] = _csv(weight_formats, "weight_formats", FORMATS)
        limits = (ttft_slo_ms, tpot_slo_ms)
        pools_report(sys_, _chip_name(system, chip), model, shape, qps, limits, json_out)
        return
    space = ServeSearchSpace(
        input_len=input_len,
        output_len=output_len,
        chips=n,
        objective=objective,
        ttft_slo_s=float("inf") if ttft_slo_ms is None else ttft_slo_ms / 1e3,
        tpot_slo_s=float("inf") if tpot_slo_ms is None else tpot_slo_ms / 1e3,
        weight_formats=_csv(weight_formats, "weight_formats", FORMATS),
        kv_formats=_csv(kv_formats, "kv_formats", FORMATS),
        max_batch=max_batch,
        accuracy_cost=costs,
        chip=_chip_name(system, chip),
        arrival_cv=arrival_cv,
        input_cv=input_cv,
        compute_formats=job_chip_formats(_chip_refs(system, chip))[1],
    )
    if objective == "goodput" and exhaustive is None:
        exhaustive = True  # the relaxed search has no goodput: enumerate
    _serve_report(sys_, hw_name, model, space, (exhaustive, top, json_out))


def _serve_launch_plan(best: dict[str, Any], space: Any) -> dict[str, Any]:
    """A searched serving row with what the search kept fixed: lengths, batching mode and the
    default engine's chunk, KV block and CUDA graphs (:func:`diffcost.serve_plan`)."""
    engine = engine_values({}, None, "search")
    fixed = {"input_len": space.input_len, "output_len": space.output_len, "mode": str(space.mode)}
    return {"prefill_chunk": 2048, "kv_block": 16, **engine, **fixed, **best}


def _model_arg(model: str) -> str:
    """The checkpoint the servers load: the model file's ``hf_id``, the folder of a Hugging
    Face ``config.json``, or a placeholder path."""
    spec = load_spec("model", model)
    if spec.values.get("hf_id"):
        return str(spec.values["hf_id"])
    path = Path(spec.info.path)
    return str(path.parent) if path.name == "config.json" else f"./{spec.info.name}"


def _serve_report(
    system: Any, hw_name: str, model: str, space: Any, how: tuple[bool | None, int, bool]
) -> None:
    """Search a serving space and print (or JSON) the answer, with the p90 comparison."""
    exhaustive, top, json_out = how
    n = int(system.num_chips)
    model_ = load_model(model)
    if float(model_.experts) > 0:  # a mixture of experts: try both expert layouts
        space = replace(space, expert_parallel=(False, True))
    with stage(f"searching serving plans for {n} chips (compiling, then evaluating)"):
        result = search_serve(system, model_, space, exhaustive=exhaustive)
    result.keep(top)
    info = load_spec("model", model).info
    launch = (
        serving_launches(
            _serve_launch_plan(result.row(result.best), space),
            _model_arg(model),
            info.name,
            _chips_per_node(system),
        )
        if result.best is not None
        else []
    )
    label, fmt = _SERVE_UNITS[str(space.objective)]
    title = f"{info.display_name} on {n}x {hw_name}: serve, objective {label}"
    risk = _serve_risk(system, model_, space, result, exhaustive)
    formats = _best_formats(result, space)
    _finish(
        result, launch, model, n, json_out, (title, fmt), None, space, (risk, "tpot_s"), formats
    )
    if space.objective == "goodput" and result.best is not None and not json_out:
        _print_goodput(system, n, float(result.best_objective))


def _best_formats(result: SearchResult, space: Any) -> dict[str, Any] | None:
    """The best serving plan's weight and GEMM formats on the chip: whether the weights run
    weight-only and, when the chip has no rate for their own format, why
    (:func:`~diffcost._serve.formats.format_note`); ``None`` without a plan."""
    if result.best is None:
        return None
    row = result.row(result.best)
    weight, compute = str(row["weight_format"]), str(row["compute_format"])
    formats = tuple(map(str, space.compute_formats))
    return {
        "weight_format": weight,
        "compute_format": compute,
        "weight_only": weight_only(weight, compute),
        "chip_formats": list(formats),
        "note": format_note(weight, compute, space.chip or "the chip", formats),
    }


def _print_goodput(system: Any, n: int, chips_per_qps: float) -> None:
    """The best plan's goodput, per chip and (with a price) per dollar."""
    per_chip = 1.0 / chips_per_qps
    line = f"goodput: {per_chip * n:.2f} requests/s on {n} chips ({per_chip:.3f} per chip"
    price = float(system.price_usd_per_chip_hour)
    if price > 0:
        line += f"; ${price * chips_per_qps / 3.6:.3f} per 1,000 requests at ${price:.2f}/chip-hour"
    console.print(line + ")", highlight=False)
