"""``diffcost validate`` and ``diffcost calibrate``: the model against published measurements."""

import shlex
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from .._analysis import uncertainty
from .._analysis.calibrate import calibrate as fit_constants
from .._analysis.calibrate import calibration_toml, report, write_calibration
from .._analysis.calibrate_kernels import fit_kernels, kernel_note
from .._analysis.plans import load_load_measurements, load_measurements
from .._analysis.validate import prepare, scenario_toml
from .._analysis.validate import validate as run
from .._analysis.validate_kernels import error_lines as kernel_error_lines
from .._analysis.validate_kernels import validate_kernels
from .._analysis.validate_load import error_table, validate_load
from .._core.errors import Problem, SpecError
from .._inputs.kernel_measurements import read_kernel_measurements
from .._inputs.loader import is_builtin, specs_dir
from .._inputs.measurements import METRIC_LABELS
from ._app import app
from ._common import (
    CalibrationOpt,
    JsonFlag,
    Opt,
    check_outputs,
    console,
    friendly_errors,
    naming_flag,
    print_json,
    stage,
)


def _points(measurements: list[str] | None, sources: list[str] | None):
    if measurements and not all(measurements):
        reason = "needs a measurement file path, got ''"
        raise SpecError([Problem("<flags>", "--measurements", reason)])
    try:
        points = load_measurements(measurements or None)
    except SpecError as err:
        raise naming_flag("--measurements", err, list(measurements or [])) from None
    if sources:
        known = sorted({m.source for m in points})
        unknown = [s for s in sources if s not in known]
        if unknown:
            raise SpecError(
                [
                    Problem(
                        "<flags>", "--source", f"unknown source {s!r} (known: {', '.join(known)})"
                    )
                    for s in unknown
                ]
            )
        points = [m for m in points if m.source in sources]
    return points


def _fmt(metric: str, x: float) -> str:
    if metric in ("ttft", "token_latency"):
        return f"{x * 1e3:.2f} ms"
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


def _summary_table(title: str, summary: dict[str, Any]) -> Table:
    t = Table(title=title, title_justify="left")
    for col in ("metric", "points", "n", "median |err|", "p90 |err|", "median err"):
        t.add_column(col, justify="left" if col in ("metric", "points") else "right")
    for metric, s in summary.items():
        groups = [("all", s["all"])]
        if s.get("modelled") and s["modelled"]["n"] != s["all"]["n"]:
            groups.append(("without unmodelled effects", s["modelled"]))
        groups += [(f"  {src}", v) for src, v in s["by_source"].items()]
        for i, (name, v) in enumerate(groups):
            t.add_row(
                metric if i == 0 else "",
                name,
                str(v["n"]),
                f"{v['median_abs_error']:.1%}",
                f"{v['p90_abs_error']:.1%}",
                f"{v['median_error']:+.1%}",
            )
    return t


_SHORT = {
    "train_throughput": "train tok/s",
    "serve_throughput": "out tok/s/chip",
    "ttft": "TTFT",
    "token_latency": "token latency",
}


def _rows_table(rows: list[dict[str, Any]]) -> Table:
    t = Table(
        title="predicted vs measured (error = predicted / measured - 1)", title_justify="left"
    )
    t.add_column("point", no_wrap=True)
    t.add_column("metric", no_wrap=True)
    for col in ("measured", "predicted", "error"):
        t.add_column(col, justify="right", no_wrap=True)
    t.add_column("notes", overflow="fold")
    for r in rows:
        notes = []
        if r.get("chosen_by_rule"):
            notes.append("rule: " + ", ".join(f"{k}={r['plan'][k]}" for k in r["chosen_by_rule"]))
        if r.get("fits") is False:
            notes.append("does not fit")
        if r.get("unmodelled"):
            notes.append("unmodelled effect")
        t.add_row(
            r["id"],
            _SHORT[r["metric"]],
            _fmt(r["metric"], r["measured"]),
            _fmt(r["metric"], r["predicted"]),
            f"{r['error']:+.1%}",
            "; ".join(notes),
        )
    return t


def plot_validation(rows: list[dict[str, Any]], path: str | Path, title: str = "") -> None:
    """Predicted vs measured, log-log, one panel per metric (matplotlib, Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    metrics = [m for m in METRIC_LABELS if any(r["metric"] == m for r in rows)]
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 4.4), squeeze=False)
    sources = sorted({r["source"] for r in rows})
    colors = {s: plt.cm.tab10(i % 10) for i, s in enumerate(sources)}
    for ax, metric in zip(axes[0], metrics, strict=True):
        sel = [r for r in rows if r["metric"] == metric]
        for src in sorted({r["source"] for r in sel}):
            for unmodelled in (False, True):
                pts = [
                    r for r in sel if r["source"] == src and bool(r.get("unmodelled")) == unmodelled
                ]
                if pts:
                    ax.scatter(
                        [r["measured"] for r in pts],
                        [r["predicted"] for r in pts],
                        s=22,
                        label=src if not unmodelled else f"{src} (unmodelled effect)",
                        facecolors="none" if unmodelled else colors[src],
                        edgecolors=colors[src],
                    )
        values = [v for r in sel for v in (r["measured"], r["predicted"])]
        lo, hi = min(values) / 1.5, max(values) * 1.5
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        for f in (0.75, 1.25):
            ax.plot([lo, hi], [lo * f, hi * f], "k:", lw=0.6)
        ax.set(
            xscale="log",
            yscale="log",
            xlim=(lo, hi),
            ylim=(lo, hi),
            xlabel="measured",
            ylabel="predicted",
            title=METRIC_LABELS[metric],
        )
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.title.set_fontsize(9)
        ax.legend(fontsize=6, loc="upper left")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)


#: ``--load``: the measurements under load instead (:mod:`diffcost._analysis.validate_load`).
LoadFlag = Annotated[
    bool,
    Opt(
        "Validate the serving measurements taken under an arrival rate instead "
        "(specs/measurements/load: TTFT and TPOT percentiles, goodput; none is fitted)."
    ),
]

#: ``--kernels``: the kernel terms against per-kernel timings
#: (:mod:`diffcost._analysis.validate_kernels`).
KernelsFlag = Annotated[
    bool,
    Opt(
        "Check the cost model's kernel terms (GEMM roofline, with and without one launch) against "
        "published per-kernel timings instead (specs/kernels; --measurements: kernel files)."
    ),
]


@app.command()
@friendly_errors
def validate(
    calibration: CalibrationOpt = "default",
    source: Annotated[list[str] | None, Opt("Only this source (repeatable).")] = None,
    measurements: Annotated[
        list[str] | None,
        Opt("Measurement file (repeatable; default: every specs/measurements/*.toml)."),
    ] = None,
    point: Annotated[str | None, Opt("Show one point in detail, with its scenario file.")] = None,
    plot: Annotated[Path | None, Opt("Write a predicted-vs-measured log-log plot here.")] = None,
    write_scenarios: Annotated[
        Path | None,
        Opt("Write every point as a scenario file (diffcost train|serve --scenario) here."),
    ] = None,
    load: LoadFlag = False,
    kernels: KernelsFlag = False,
    json_out: JsonFlag = False,
) -> None:
    """Predict every published measurement and report the errors (median, 90th percentile)."""
    if kernels and load:
        raise SpecError(
            [Problem("<flags>", "--kernels", "give at most one of --kernels and --load")]
        )
    if kernels:
        given = {"--source": source, "--point": point, "--plot": plot}
        given["--write-scenarios"] = write_scenarios
        if unused := [flag for flag, value in given.items() if value]:
            reason = f"{', '.join(unused)}: not used with --kernels (it reads specs/kernels)"
            raise SpecError([Problem("<flags>", "--kernels", reason)])
        _validate_kernels(calibration, measurements, json_out)
        return
    if load:
        _validate_load(calibration, measurements, json_out)
        return

    check_outputs(
        {"plot": plot, "write_scenarios": write_scenarios},
        folders=("write_scenarios",),
        plots=("plot",),
    )
    points = _points(measurements, source)
    if point is not None:
        if point not in {m.id for m in points}:
            raise SpecError([Problem("<flags>", "--point", f"unknown point {point!r}")])
        points = [m for m in points if m.id == point]
    with stage(f"predicting {len(points)} published measurements (compiling, then evaluating)"):
        result = run(points, calibration)
    by_id = {m.id: m for m in points}
    if write_scenarios is not None:
        write_scenarios.mkdir(parents=True, exist_ok=True)
        for r in result.rows:
            (write_scenarios / f"{r['id']}.toml").write_text(scenario_toml(r, by_id[r["id"]]))
    if plot is not None:
        plot_validation(result.rows, plot, f"diffcost validate (calibration: {calibration})")
    if json_out:
        print_json(
            {
                "calibration": calibration,
                "points": result.rows,
                "excluded": result.excluded,
                "summary": result.summary,
            }
        )
        return
    if point is not None:
        _print_point(result, by_id[point])
        return
    console.print(_rows_table(result.rows))
    if result.excluded:
        console.print(
            f"not predicted: {', '.join(e['id'] for e in result.excluded)} "
            "(see their 'excluded' reason)",
            highlight=False,
        )
    console.print(_summary_table(f"errors (calibration: {calibration})", result.summary))


def _validate_load(calibration: str, files: list[str] | None, json_out: bool) -> None:
    """``diffcost validate --load``: :mod:`diffcost._analysis.validate_load`."""
    result = validate_load(load_load_measurements(files or None), calibration)
    if json_out:
        print_json({"calibration": calibration, **result})
        return
    for line in error_table(result):
        console.print(line, highlight=False, markup=False)


def _validate_kernels(calibration: str, files: list[str] | None, json_out: bool) -> None:
    """``diffcost validate --kernels``: :mod:`diffcost._analysis.validate_kernels`."""
    try:
        points = read_kernel_measurements(files or None)
    except SpecError as err:
        raise naming_flag("--measurements", err, list(files or [])) from None
    result = validate_kernels(points, calibration)
    if json_out:
        print_json({"calibration": calibration, **result})
        return
    for line in kernel_error_lines(result):
        console.print(line, highlight=False, markup=False)


def _print_point(result, m) -> None:
    if not result.rows:
        console.print(f"{m.id} is not predicted: {m.excluded}", highlight=False)
        return
    r = result.rows[0]
    lines = [
        f"{m.id} ({m.source}, {m.path})",
        f"as published: {r['as_published']}",
        f"{r['metric']}: measured {_fmt(r['metric'], r['measured'])}, predicted "
        f"{_fmt(r['metric'], r['predicted'])}, error {r['error']:+.1%}",
        f"chosen by the rule: {', '.join(r['chosen_by_rule']) or 'nothing'}; fits: {r['fits']}",
        *(f"flag: {f}" for f in r["flags"]),
        *([f"unmodelled effect: {m.unmodelled}"] if m.unmodelled else []),
        f"conventions: {m.source_info.get('conventions', '')}",
        "",
        f"scenario (save as FILE.toml; run: diffcost {m.kind} --scenario FILE.toml):",
        "",
    ]
    for line in lines:
        console.print(line, highlight=False, soft_wrap=True)
    sys.stdout.write(scenario_toml(r, m))


@app.command()
@friendly_errors
def calibrate(
    steps: Annotated[int, typer.Option(help="Adam steps per round.", min=1)] = 150,
    rounds: Annotated[int, typer.Option(help="Rounds of (choose plans, fit).", min=1)] = 3,
    loso: Annotated[
        bool, typer.Option("--loso/--no-loso", help="Also fit one fold per held-out source.")
    ] = True,
    calibration: Annotated[
        str,
        typer.Option(
            help="Calibration to report on and to keep the unfitted (memory) constants of."
        ),
    ] = "default",
    measurements: Annotated[
        list[str] | None,
        Opt("Measurement file (repeatable; default: every specs/measurements/*.toml)."),
    ] = None,
    write: Annotated[
        str | None,
        typer.Option(
            "--write",
            metavar="PATH",
            show_default=False,
            help="Write the fitted constants (with their provenance) as a calibration file at "
            "PATH (its name is PATH's stem); use it with --calibration PATH.  The built-in "
            "calibrations are read-only.",
        ),
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Fit the efficiency constants to the measurements (optax, through the model's gradients);
    report errors with the priors, after the fit (in sample) and leave-one-source-out."""
    if steps < 1 or rounds < 1:
        raise SpecError([Problem("<flags>", "--steps/--rounds", "must be positive")])
    if write is not None:
        _check_write_target(write)
    prep = prepare(_points(measurements, None), calibration)
    kernel_points = read_kernel_measurements()
    with stage(f"fitting the kernel constants on {len(kernel_points)} per-kernel timings"):
        kernel = fit_kernels(kernel_points, calibration)
    fit = fit_constants(prep, steps=steps, rounds=rounds, loso=loso, kernel=kernel.constants)
    summary = report(fit)
    written = None
    if write is not None:
        flags = dict(steps=steps, rounds=rounds, loso=loso, measurements=measurements)
        note = kernel_note(kernel, kernel_points)
        written = _write_fit(fit, prep, summary, calibration, write, flags, note)
    if json_out:
        print_json(_fit_json(fit, summary, written))
        return
    _print_fit(summary)
    if written:
        console.print(f"wrote {written}", highlight=False)


def _check_write_target(write: str) -> None:
    """``--write`` needs a path outside the (read-only) built-in specs."""
    if not write or write.startswith("-"):
        reason = f"needs a PATH to write the calibration file to, got {write!r}"
        raise SpecError([Problem("<flags>", "--write", reason)])
    if is_builtin(write):
        reason = (
            f"{write} is inside the built-in specs ({specs_dir()}), which are read-only: write "
            "to another path and use it with --calibration PATH"
        )
        raise SpecError([Problem("<flags>", "--write", reason)])
    check_outputs({"--write": write})


def _write_fit(
    fit, prep, summary, calibration: str, write: str, flags: dict[str, Any], note: str
) -> str:
    """Write the fit as a calibration file at ``write``, its command in the provenance, and,
    when the leave-one-source-out folds ran (the model discrepancy is estimated from them), its
    posterior (:mod:`diffcost._analysis.uncertainty`) beside it as ``<stem>.posterior.json``;
    without them the calibration has no posterior and predictions carry no interval."""
    command = f"diffcost calibrate --steps {flags['steps']} --rounds {flags['rounds']}"
    command += "" if flags["loso"] else " --no-loso"
    command += "".join(f" --measurements {shlex.quote(m)}" for m in flags["measurements"] or [])
    command += "" if calibration == "default" else f" --calibration {shlex.quote(calibration)}"
    command += f" --write {shlex.quote(write)}"
    name = Path(write).stem if Path(write).suffix == ".toml" else Path(write).name
    text = calibration_toml(fit, prep, summary, command, calibration, name=name, kernel_note=note)
    written = write_calibration(text, write)
    if flags["loso"]:
        uncertainty.write_posterior(fit, prep, uncertainty.posterior_path(written), command)
    return str(written)


def _fit_json(fit, summary: dict[str, Any], written: str | None) -> dict[str, Any]:
    points = []
    loso_rows = {r["id"]: r for r in fit.loso_rows}
    for r, prior in zip(fit.fit_rows, fit.prior_rows, strict=True):
        points.append(
            {
                **r,
                "prior_predicted": prior["predicted"],
                "loso_predicted": loso_rows.get(r["id"], {}).get("predicted"),
            }
        )
    return {"folds": fit.folds, **summary, "points": points, "written": written}


def _print_fit(summary: dict[str, Any]) -> None:
    console.print(
        _summary_table("priors (microbenchmark constants, before the fit)", summary["priors"])
    )
    console.print(
        _summary_table("after, in sample (fit on every source)", summary["after_in_sample"])
    )
    if summary["leave_one_source_out"]:
        console.print(
            _summary_table(
                "leave-one-source-out (each source predicted by a fit that never saw it)",
                summary["leave_one_source_out"],
            )
        )
    t = Table(title="fitted constants", title_justify="left")
    t.add_column("constant")
    for group in summary["constants"]:
        t.add_column(group, justify="right")
    for name in summary["constants"]["global"]:
        scale, unit = (1e6, " us") if name.endswith("_s") else (1.0, "")
        t.add_row(name, *(f"{v[name] * scale:.4g}{unit}" for v in summary["constants"].values()))
    console.print(t)
