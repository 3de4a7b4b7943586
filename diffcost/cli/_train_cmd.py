"""``diffcost train``: predict one training step."""

from typing import Annotated, Any, NamedTuple

import typer

from .._analysis.coverage import coverage_lines, job_chip, job_coverage
from .._analysis.uncertainty import intervals
from .._terms.energy import energy_basis
from .._train.cost import TrainBreakdown, TrainCost
from .._train.plan import TrainPlan
from .._train.problems import train_problems
from ._app import app
from ._common import (
    EXIT_INFEASIBLE,
    CalibrationOpt,
    JsonFlag,
    Opt,
    check_finite,
    console,
    fmt_bytes,
    fmt_time,
    friendly_errors,
    interval_text,
    kv_table,
    plan_line,
    prediction_json,
    print_json,
    print_problems,
    spec_infos,
)
from ._options import Chips, Collective, Flags, System, train_plan_flags, with_options
from ._programs import PREDICT
from ._resolve import DEFAULT_SCENARIO as _DEFAULTS
from ._resolve import Job, resolve_job

DEFAULT_SCENARIO = _DEFAULTS["train"]
#: The prediction and its interval's linearisation, from one trace of the model.
_predict = PREDICT["train"]


@app.command()
@friendly_errors
@with_options(plan=train_plan_flags)
def train(
    *,
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
    system: System = None,
    chip: Annotated[
        str | None, Opt("Built-in chip name or chip TOML (its default node and network).")
    ] = None,
    chips: Chips = None,
    collective: Collective = None,
    plan: Flags,
    calibration: CalibrationOpt = "default",
    json_out: JsonFlag = False,
) -> None:
    """Predict one training step: time, throughput, MFU/HFU, memory per chip, energy and cost."""
    # ``plan``: every plan option, derived from the field declarations (TRAIN_FIELDS)
    flags = plan
    refs_flags = {"model": model, "system": system, "chip": chip, "chips": chips}
    refs_flags["collective"] = collective
    job = resolve_job("train", scenario, refs_flags, flags, calibration)
    answer = train_answer(job)
    if json_out:
        print_json(answer.json)
    else:
        model_info, hw_info = spec_infos(job.refs)
        names = (model_info.display_name, job.hardware_name(hw_info.display_name))
        basis = energy_basis(job.system, job_chip(job.refs))
        out, problems, cov, iv = answer.out, answer.problems, answer.coverage, answer.interval
        _print_table(out, names, job.chips, job.values, problems, cov, iv, basis)
    if answer.problems:
        raise typer.Exit(EXIT_INFEASIBLE)


class TrainAnswer(NamedTuple):
    """One training prediction as every front end shows it (the table, ``--json``, the web
    explorer): the exact breakdown, why the plan cannot run, what measurements stand behind it,
    the 80% interval and the ``--json`` object built from them."""

    out: TrainBreakdown
    problems: list[str]
    coverage: dict[str, Any]
    interval: dict[str, Any] | None
    json: dict[str, Any]


def train_answer(job: Job) -> TrainAnswer:
    """Predict the training step of a resolved job: the exact breakdown and its interval
    (one compiled program, :data:`_predict`), feasibility, coverage and the ``--json`` object.

    Raises:
        SpecError: the prediction is not finite (:func:`check_finite`).
    """
    assert isinstance(job.plan, TrainPlan)
    cost = TrainCost(job.system, job.model)
    out, linearised = _predict(cost, job.plan)
    check_finite(out, "training", job.system, job.model, job.inputs())
    problems = train_problems(job.model, job.plan, out, float(job.system.num_chips))
    calibration = job.calibration
    cov = job_coverage(
        "train", job.refs, job.plan, calibration, float(out.mfu), job.system, job.values
    )
    iv = intervals(cost, job.plan, job_chip(job.refs), calibration, "train", linearised=linearised)
    counts = {"chips": job.chips}
    extra = {"coverage": cov, **(iv or {"interval": None})}
    if job.collective is not None:  # the default output stays as it was
        extra["collective"] = job.collective
    obj = prediction_json(out, job.refs, counts, job.values, problems, **extra)
    return TrainAnswer(out, problems, cov, iv, obj)


def _reliability_rows(out: TrainBreakdown) -> list[tuple[str, str]]:
    """Jitter, throughput and goodput rows (:mod:`diffcost._terms.reliability`)."""
    g = float
    interval = g(out.checkpoint_interval_s)
    return [
        ("  jitter (wait for last rank)", fmt_time(g(out.jitter_time_s))),
        ("tokens / s", f"{g(out.tokens_per_s):,.0f}"),
        (
            "goodput tokens / s",
            f"{g(out.goodput_tokens_per_s):,.0f} ({g(out.goodput_fraction):.1%})",
        ),
        (
            "checkpoint interval (Young)",
            fmt_time(interval) if interval > 0 else "n/a (no failure rate)",
        ),
    ]


def _print_table(
    out: TrainBreakdown,
    names: tuple[str, str],
    n_chips: int,
    values: dict[str, Any],
    problems: list[str],
    cov: dict[str, Any],
    iv: dict[str, Any] | None,
    basis: str,
) -> None:
    """The training step as a table: time by term, throughput, memory by kind, energy, cost,
    the 80% interval of step time, throughput and MFU; under it what measurements stand
    behind it (and an MFU above the best published)."""
    model_name, hw_name = names
    g = float
    rows = [
        ("step time", fmt_time(g(out.step_time_s))),
        ("  compute (fwd+bwd)", fmt_time(g(out.compute_time_s))),
        ("  recompute", fmt_time(g(out.recompute_time_s))),
        ("  tensor-parallel comm", fmt_time(g(out.tp_comm_time_s))),
        ("  context-parallel comm (exposed)", fmt_time(g(out.cp_comm_time_s))),
        ("  expert-parallel all-to-all", fmt_time(g(out.ep_comm_time_s))),
        ("  pipeline bubble", fmt_time(g(out.pp_bubble_time_s))),
        ("  pipeline p2p", fmt_time(g(out.pp_p2p_time_s))),
        ("  data-parallel comm (exposed)", fmt_time(g(out.dp_comm_time_s))),
        ("  optimizer update", fmt_time(g(out.optimizer_time_s))),
        *_reliability_rows(out),
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
        ("energy / step", f"{g(out.energy_j) / 3.6e6:.2f} kWh ({basis})"),
        ("cost / step", f"${g(out.cost_usd):.2f}" if g(out.cost_usd) > 0 else "n/a (no price)"),
    ]
    console.print(f"{model_name} on {n_chips}x {hw_name}", style="bold")
    console.print(f"plan: {plan_line(values)}", highlight=False)
    bands = {
        "step time": interval_text(iv, "step_time_s", fmt_time),
        "tokens / s": interval_text(iv, "tokens_per_s", lambda v: f"{v:,.0f}"),
        "tokens / s / chip": interval_text(iv, "tokens_per_s", lambda v: f"{v / n_chips:,.1f}"),
        "MFU (bf16 dense peak)": interval_text(iv, "mfu", lambda v: f"{v:.1%}"),
        "energy / step": interval_text(iv, "energy_j", lambda v: f"{v / 3.6e6:.2f} kWh"),
        "cost / step": interval_text(iv, "cost_usd", lambda v: f"${v:.2f}"),
    }
    console.print(kv_table("training step", rows, bands if iv is not None else None))
    for line in coverage_lines(cov):
        console.print(line, highlight=False, markup=False)
    if iv is not None:
        console.print(f"interval: {iv['interval']['note']}", highlight=False, markup=False)
    print_problems(problems)
