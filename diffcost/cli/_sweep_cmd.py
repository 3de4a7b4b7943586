"""``diffcost sweep SPEC_FILE``: evaluate a sweep file, write the table and its plots."""

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.table import Table

from .._analysis.sweep import Sweep, SweepResult, load_sweep, run_sweep
from .._core.errors import Problem, SpecError
from . import app
from ._common import console, friendly_errors, output_problems, print_json

#: ``--intervals/--no-intervals``: the p10/p90 columns of the headline outputs.
IntervalsFlag = Annotated[
    bool,
    typer.Option(
        "--intervals/--no-intervals",
        help="Add <output>_p10 / <output>_p90 columns for the headline outputs (the "
        "calibration's posterior; none when it has none).",
    ),
]
#: Column to rank by, and whether larger is better, per job.
BEST = {"train": ("step_time_s", False), "serve": ("output_tokens_per_s_per_chip", True)}
_SHOW = {
    "train": ["step_time_s", "mfu", "tokens_per_s_per_chip", "memory_total_bytes"],
    "serve": ["output_tokens_per_s_per_chip", "ttft_s", "tpot_s", "memory_total_bytes"],
}


def best_rows(result: SweepResult, job: str, k: int = 5):
    """The ``k`` best feasible rows by the job's headline metric."""
    col, larger = BEST[job]
    rows = result.table.loc[result.table["feasible"]]
    return rows.sort_values(col, ascending=not larger).head(k)


def band_axes(result: SweepResult, job: str, varying: list[str]) -> tuple[str, str, str | None]:
    """What the interval plot draws, ``(x, y, hue)``, or ``("", y, hue)`` when nothing fits:
    the job's headline metric (:data:`BEST`) along a numeric swept input (serving: the batch
    first), one line per swept system, chip or model."""
    table, y = result.table, BEST[job][0]
    hue = next((c for c in ("system", "chip", "model") if c in varying), None)
    numeric = [
        c
        for c in varying
        if c in table and table[c].dtype.kind in "if" and np.unique(table[c].to_numpy()).size > 1
    ]
    numeric.sort(key=lambda c: c != "batch")
    return (numeric[0] if numeric and f"{y}_p10" in table else ""), y, hue


def write_plots(result: SweepResult, job: str, varying: list[str], folder: Path) -> list[Path]:
    """The plots a sweep supports: MFU heatmap (train, TP and PP swept), Pareto front (serve),
    memory bars of the best plans, and the headline metric with its p10-p90 band
    (:func:`band_axes`) when the sweep has interval columns."""
    from .._analysis import plots as _plots

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    table = result.table
    best = best_rows(result, job, 8)
    cols = set(table.columns)
    if job == "train" and {"tp", "pp"} <= set(varying) and "mfu" in cols:
        written.append(_plots.save(_plots.mfu_heatmap(table), folder / "mfu_heatmap.png"))
    if job == "serve" and {"output_tokens_per_s_per_user", "output_tokens_per_s_per_chip"} <= cols:
        hue = next((c for c in ("system", "chip", "model") if c in varying), None)
        written.append(_plots.save(_plots.pareto(table, hue=hue), folder / "pareto.png"))
    if len(best) and "memory_weights_bytes" in cols:
        labels = [", ".join(f"{c}={row[c]}" for c in varying[:4]) for _, row in best.iterrows()]
        fig = _plots.memory_bars(best, labels, title="memory per chip of the best plans")
        written.append(_plots.save(fig, folder / "memory.png"))
    if "qps" in varying and "load_ttft_p99_s" in cols:
        hue = next((c for c in ("system", "chip", "model") if c in varying), None)
        fig = _plots.latency_vs_load(table, hue=hue)
        written.append(_plots.save(fig, folder / "latency_vs_load.png"))
    x, y, hue = band_axes(result, job, varying)
    if x:
        fig = _plots.interval_band(table, x, y, hue=hue, maximize=BEST[job][1])
        written.append(_plots.save(fig, folder / f"{y}_interval.png"))
    return written


@app.command()
@friendly_errors
def sweep(
    spec_file: Annotated[Path, typer.Argument(help="Sweep file (see specs/SCHEMA.md, 'Sweep').")],
    csv: Annotated[
        Path | None,
        typer.Option(help="Write the table as CSV (overrides the file's).", show_default=False),
    ] = None,
    parquet: Annotated[
        Path | None, typer.Option(help="Write the table as Parquet.", show_default=False)
    ] = None,
    plots: Annotated[
        Path | None, typer.Option(help="Folder for the plots.", show_default=False)
    ] = None,
    chunk: Annotated[
        int | None,
        typer.Option(
            help="Points per chunk (default: sized to memory).", show_default=False, min=1
        ),
    ] = None,
    progress: Annotated[
        bool, typer.Option("--progress/--no-progress", help="Show a progress bar.")
    ] = True,
    top: Annotated[int, typer.Option(help="Best feasible points to show.", min=0)] = 5,
    intervals: IntervalsFlag = True,
    calibration: Annotated[
        str | None,
        typer.Option(help="Calibration file or name (default: the sweep file's, else default)."),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON summary.")] = False,
) -> None:
    """Evaluate every point of a sweep file with the exact model (vmapped, in chunks sharded
    over all devices) and write a tidy table (CSV / Parquet) and plots."""
    spec = load_sweep(spec_file)
    sw = replace(spec.sweep, calibration=calibration) if calibration else spec.sweep
    from_file = {
        k for k, flag in (("csv", csv), ("parquet", parquet), ("plots", plots)) if not flag
    }
    csv, parquet, plots = csv or spec.csv, parquet or spec.parquet, plots or spec.plots
    problems = output_problems({"csv": csv, "parquet": parquet, "plots": plots}, ("plots",))
    if problems:
        # a path the sweep file gave is a problem of its [output] table, not of a flag
        where = lambda p: Problem(str(sw.source), f"output.{p.key}", p.reason)  # noqa: E731
        raise SpecError([where(p) if p.key in from_file else p for p in problems])
    result = run_sweep(sw, progress=progress and not json_out, chunk=chunk, intervals=intervals)
    files = {"csv": csv, "parquet": parquet}
    varying = [*sw.grid, *sw.zip]
    written = _write_outputs(result, sw, varying, files, plots)
    best = best_rows(result, sw.job, top)
    show = _shown_columns(result, sw.job, varying)
    if json_out:
        print_json(_summary_json(sw, result, best[show], files, written))
        return
    _print_summary(spec.display_name, sw.job, result, best, show)
    console.print(f"intervals: {result.interval_note}", highlight=False)
    for label, path in files.items():
        if path is not None:
            console.print(f"{label}: {path}", highlight=False)
    for p in written:
        console.print(f"plot: {p}", highlight=False)


def _shown_columns(result: SweepResult, job: str, varying: list[str]) -> list[str]:
    """The columns of the best-points table: the swept inputs, the job's outputs, the
    headline's p10 and p90 next to it."""
    show = [c for c in [*varying, *_SHOW[job]] if c in result.table]
    head = BEST[job][0]
    if head in show:
        at = show.index(head) + 1
        show[at:at] = [c for c in (f"{head}_p10", f"{head}_p90") if c in result.table]
    return show


def _write_outputs(
    result: SweepResult, sw: Sweep, varying: list[str], files: dict[str, Any], plots: Any
) -> list[Path]:
    """Write the table (CSV / Parquet where asked) and the plots; return the plots written."""
    for path, write in ((files["csv"], result.to_csv), (files["parquet"], result.to_parquet)):
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            write(path)
    return write_plots(result, sw.job, varying, Path(plots)) if plots is not None else []


def _summary_json(
    sw: Sweep, result: SweepResult, best: Any, files: dict[str, Any], written: list[Path]
) -> dict[str, Any]:
    """The ``--json`` summary: size, timing, the best rows and the files written."""
    return {
        "sweep": sw.name,
        "job": sw.job,
        "points": len(result.table),
        "feasible": int(result.table.feasible.sum()),
        "devices": result.devices,
        "chunk": result.chunk,
        "chunks": result.chunks,
        "compile_s": result.compile_s,
        "run_s": result.run_s,
        "points_per_s": result.points_per_s,
        "calibration": sw.calibration,
        "interval": result.interval_note,
        "best": best.to_dict(orient="records"),
        **{key: str(path) if path else None for key, path in files.items()},
        "plots": [str(p) for p in written],
    }


def _print_summary(title: str, job: str, result: SweepResult, best: Any, show: list[str]) -> None:
    """Size and timing of the sweep, then the ``show`` columns of its best feasible points (each
    row read whole, so integer columns stay integers)."""
    feasible = int(result.table.feasible.sum())
    console.print(
        f"{title}: {len(result.table):,} points, {feasible:,} "
        f"feasible; {result.devices} device(s), {result.chunks} chunk(s) of "
        f"{result.chunk:,}; compile {result.compile_s:.2f} s, evaluate "
        f"{result.run_s:.3f} s ({result.points_per_s:,.0f} points/s)",
        highlight=False,
    )
    table = Table(title=f"best feasible points by {BEST[job][0]}", title_justify="left")
    for c in show:
        table.add_column(c, justify="right")
    for _, row in best.iterrows():
        table.add_row(
            *[f"{row[c]:.4g}" if isinstance(row[c], float) else str(row[c]) for c in show]
        )
    console.print(table)
