"""``diffcost sweep SPEC_FILE...``: evaluate sweep files (one shard of each, or over several
processes), write the tables and their plots."""

import contextlib
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.table import Table

from .._analysis.distributed import is_writer, join
from .._analysis.sweep import Sweep, SweepFile, SweepResult, load_sweep, run_sweep
from .._analysis.sweep_shard import parse_shard, shard_range, stamp, sweep_digest, write_table
from .._core.errors import Problem, SpecError
from .._inputs.loader import load_spec
from ._app import app
from ._common import console, friendly_errors, naming_flag, output_problems, print_json
from ._sweep_paths import output_paths, unwritten

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
    # imported here: the plots import matplotlib and pandas (~1 s), only --plots needs them
    from .._analysis import plots as _plots

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    table = result.table
    name = _plots.sweep_title(table, job)
    best = best_rows(result, job, 8)
    cols = set(table.columns)
    if job == "train" and {"tp", "pp"} <= set(varying) and "mfu" in cols:
        written.append(
            _plots.save(
                _plots.mfu_heatmap(table, title=f"best MFU over TP x PP: {name}"),
                folder / "mfu_heatmap.png",
            )
        )
    if job == "serve" and {"output_tokens_per_s_per_user", "output_tokens_per_s_per_chip"} <= cols:
        hue = next((c for c in ("system", "chip", "model") if c in varying), None)
        written.append(
            _plots.save(_plots.pareto(table, hue=hue, title=name), folder / "pareto.png")
        )
    if len(best) and "memory_weights_bytes" in cols:
        labels = [", ".join(f"{c}={row[c]}" for c in varying[:4]) for _, row in best.iterrows()]
        fig = _plots.memory_bars(best, labels, title=f"memory per chip of the best plans: {name}")
        written.append(_plots.save(fig, folder / "memory.png"))
    if "qps" in varying and "load_ttft_p99_s" in cols:
        hue = next((c for c in ("system", "chip", "model") if c in varying), None)
        fig = _plots.latency_vs_load(table, hue=hue, title=name)
        written.append(_plots.save(fig, folder / "latency_vs_load.png"))
    x, y, hue = band_axes(result, job, varying)
    if x:
        fig = _plots.interval_band(table, x, y, hue=hue, maximize=BEST[job][1], title=name)
        written.append(_plots.save(fig, folder / f"{y}_interval.png"))
    return written


_SWEEP_HELP = """Evaluate every point of one or more sweep files with the exact model (vmapped,
in chunks sharded over all devices) and write a tidy table (CSV / Parquet, a ``point`` column
first: the flat point index) and plots.

Nothing is written unless asked: --csv/--parquet/--plots, or --write for the paths the sweep
file's [output] table names (relative to the current folder); the paths written are printed in
full, and those of an [output] table not written are named.

Several files run in turn.  Output paths: a flag overrides the file's [output] path; {name} in
a path is the sweep's name, {shard} the shard (I-of-N).  With several files a flag path without
{name} is a folder (<name>.csv, <name>.parquet, plots in <name>/ inside it); a file name there
is an error.

--shard I/N evaluates only shard I (from 0) of N, a contiguous range of point indices, and
stamps its table with the sweep's name, a hash of the sweep and the shard (shard_* columns);
table paths from the sweep file get .shard-I-of-N before the suffix.  Join the shards'
tables, checked (same sweep, no point missing or twice), with diffcost sweep-merge, which also
draws the plots.

--distributed joins processes with jax.distributed (flags or the environment, as JAX detects
SLURM, Open MPI, Kubernetes): one evaluation sharded over every process's devices; process 0
writes and prints.  Rates are the points this run evaluated per second of evaluation."""


@app.command(help=_SWEEP_HELP)
@friendly_errors
def sweep(
    spec_files: Annotated[
        list[Path], typer.Argument(help="Sweep files (see specs/SCHEMA.md, 'Sweep').")
    ],
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
    write: Annotated[
        bool,
        typer.Option(
            "--write",
            help="Also write the outputs the sweep file's [output] table names (paths from the "
            "current folder; a flag still overrides its own).",
        ),
    ] = False,
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
    shard: Annotated[
        str | None,
        typer.Option(help="Evaluate only shard I of N (I/N, I from 0).", show_default=False),
    ] = None,
    distributed: Annotated[
        bool, typer.Option("--distributed", help="Join processes with jax.distributed.")
    ] = False,
    coordinator: Annotated[
        str | None, typer.Option(help="HOST:PORT of process 0 (--distributed).")
    ] = None,
    num_processes: Annotated[
        int | None, typer.Option(help="Process count (--distributed).", min=1)
    ] = None,
    process_id: Annotated[
        int | None, typer.Option(help="This process, from 0 (--distributed).", min=0)
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON summary.")] = False,
) -> None:
    _join(distributed, coordinator, num_processes, process_id)
    shard_of = parse_shard(shard) if shard is not None else None
    specs, problems = [], []
    for f in spec_files:  # every file's problems at once
        try:
            specs.append(load_sweep(f))
        except SpecError as err:
            problems += err.problems
    if problems:
        raise SpecError(problems)
    flags = {"csv": csv, "parquet": parquet, "plots": plots}
    paths = output_paths(specs, flags, shard_of, write)
    skipped = [{} if write else unwritten(spec, flags) for spec in specs]
    for spec, where in zip(specs, paths, strict=True):
        _check_paths(spec, where, {k for k, v in flags.items() if v is None})
    if calibration:
        try:
            load_spec("calibration", calibration)
        except SpecError as err:
            raise naming_flag("--calibration", err, [calibration]) from None
    summaries = []
    for spec, where, skip in zip(specs, paths, skipped, strict=True):
        sw = replace(spec.sweep, calibration=calibration) if calibration else spec.sweep
        summaries.append(
            _run_one(
                spec,
                sw,
                (where, skip),
                shard_of,
                json_out,
                progress=progress,
                chunk=chunk,
                intervals=intervals,
                top=top,
            )
        )
    if json_out and is_writer():
        print_json(summaries[0] if len(summaries) == 1 else {"sweeps": summaries})


def _join(distributed: bool, coordinator, num_processes, process_id) -> None:
    """Join the processes (``--distributed``); the joining flags alone are an error."""
    given = {"coordinator": coordinator, "num-processes": num_processes, "process-id": process_id}
    if distributed:
        join(coordinator, num_processes, process_id)
        return
    alone = [f"--{k}" for k, v in given.items() if v is not None]
    if alone:
        reason = "only joins processes with --distributed"
        raise SpecError([Problem("command line", "/".join(alone), reason)])


def _check_paths(spec: SweepFile, paths: dict[str, Any], from_file: set[str]) -> None:
    """Every output path writable; a path the sweep file gave is a problem of its [output]
    table, not of a flag."""
    problems = output_problems(paths, ("plots",))
    if problems:
        where = lambda p: Problem(spec.sweep.source, f"output.{p.key}", p.reason)  # noqa: E731
        raise SpecError([where(p) if p.key in from_file else p for p in problems])


def _run_one(
    spec: SweepFile,
    sw: Sweep,
    outputs: tuple[dict[str, Any], dict[str, Path]],
    shard: tuple[int, int] | None,
    json_out: bool,
    *,
    progress: bool,
    chunk: int | None,
    intervals: bool,
    top: int,
) -> dict[str, Any]:
    """Run one sweep (one shard of it), write its outputs (process 0; ``outputs``: the paths
    to write, and those its file's ``[output]`` names that are not written), print its summary
    with the full path of every file written unless ``json_out``; return its JSON summary."""
    paths, skipped = outputs
    points = shard_range(sw.size(), *shard) if shard else range(sw.size())
    show = progress and not json_out and is_writer()
    if not len(points):
        reason = f"this shard is empty: {sw.name} has only {sw.size()} points (use fewer shards)"
        raise SpecError([Problem("<flags>", "shard", reason)])
    result = run_sweep(sw, progress=show, chunk=chunk, intervals=intervals, points=points)
    varying = [*sw.grid, *sw.zip]
    files = {"csv": paths["csv"], "parquet": paths["parquet"]}
    written: list[Path] = []
    if is_writer():
        with _writing(show):
            table = result.table
            if shard:
                table = stamp(table, sw, sweep_digest(sw, intervals), *shard)
            for path in files.values():
                if path is not None:
                    write_table(table, path)
            if paths["plots"] is not None:
                written = write_plots(result, sw.job, varying, Path(paths["plots"]))
    best = best_rows(result, sw.job, top)
    cols = _shown_columns(result, sw.job, varying)
    summary = _summary_json(sw, result, best[cols], files, written)
    summary["not_written"] = {key: str(path) for key, path in skipped.items()}
    if shard:
        summary |= {"shard": list(shard), "point_range": [points.start, points.stop]}
    if not json_out and is_writer():
        title = spec.display_name
        if shard:
            title += f" [shard {shard[0]}/{shard[1]}: points {points.start}-{points.stop - 1}]"
        _print_summary(title, sw.job, result, best, cols)
        console.print(f"intervals: {result.interval_note}", highlight=False)
        for label, path in files.items():
            if path is not None:
                console.print(f"wrote {label}: {Path(path).resolve()}", highlight=False)
        for p in written:
            console.print(f"wrote plot: {Path(p).resolve()}", highlight=False)
        if skipped:
            named = ", ".join(f"{key} {path}" for key, path in skipped.items())
            console.print(
                f"not written: {spec.sweep.source} [output] names {named}; add --write to "
                "write them (from the current folder), or give --csv/--parquet/--plots PATH",
                highlight=False,
            )
    return summary


def _writing(enabled: bool):
    """A spinner on stderr while the outputs are written (nothing when not ``enabled``)."""
    if not enabled:
        return contextlib.nullcontext()
    from rich.console import Console

    return Console(stderr=True).status("writing the table and plots")


def _shown_columns(result: SweepResult, job: str, varying: list[str]) -> list[str]:
    """The columns of the best-points table: the swept inputs, the job's outputs, the
    headline's p10 and p90 next to it."""
    show = [c for c in [*varying, *_SHOW[job]] if c in result.table]
    head = BEST[job][0]
    if head in show:
        at = show.index(head) + 1
        show[at:at] = [c for c in (f"{head}_p10", f"{head}_p90") if c in result.table]
    return show


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
        **{key: str(Path(path).resolve()) if path else None for key, path in files.items()},
        "plots": [str(Path(p).resolve()) for p in written],
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
    _print_best(job, best, show)


def _print_best(job: str, best: Any, show: list[str]) -> None:
    """The ``show`` columns of the best feasible points (each row read whole, so integer
    columns stay integers)."""
    table = Table(title=f"best feasible points by {BEST[job][0]}", title_justify="left")
    for c in show:
        table.add_column(c, justify="right")
    for _, row in best.iterrows():
        table.add_row(
            *[f"{row[c]:.4g}" if isinstance(row[c], float) else str(row[c]) for c in show]
        )
    console.print(table)
