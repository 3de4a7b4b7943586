"""``diffcost sweep-merge OUT FILES...``: join the tables of a sweep's shards into its table."""

from pathlib import Path
from typing import Annotated

import typer

from .._analysis.sweep import OUTPUTS, SweepResult
from .._analysis.sweep_shard import merge_tables, read_table, write_table
from ._app import app
from ._common import check_outputs, console, friendly_errors, print_json
from ._sweep_cmd import _print_best, _shown_columns, best_rows, write_plots


def varying_inputs(table, job: str) -> list[str]:
    """The input columns of a sweep table that take more than one value (the swept ones)."""
    outputs = set(OUTPUTS[job])
    return [
        c
        for c in table.columns
        if c != "point"
        and c not in outputs
        and not c.endswith(("_p10", "_p90"))
        and table[c].nunique() > 1
    ]


@app.command("sweep-merge")
@friendly_errors
def sweep_merge(
    out: Annotated[Path, typer.Argument(help="Merged table: .parquet, else CSV.")],
    files: Annotated[
        list[Path], typer.Argument(help="The shards' tables (diffcost sweep --shard I/N).")
    ],
    plots: Annotated[
        Path | None, typer.Option(help="Folder for the plots.", show_default=False)
    ] = None,
    top: Annotated[int, typer.Option(help="Best feasible points to show.", min=0)] = 5,
    json_out: Annotated[bool, typer.Option("--json", help="Print a JSON summary.")] = False,
) -> None:
    """Join the tables of the shards of one sweep (CSV or Parquet, any order) into its table,
    sorted by point index: refused when they come from different sweeps (name, hash of the
    sweep, shard count), when a shard or a point is missing or given twice.  Prints the best
    points like diffcost sweep and draws the plots."""
    check_outputs({"out": out, "plots": plots}, ("plots",))
    table, info = merge_tables([read_table(f) for f in files], [str(f) for f in files])
    write_table(table, out)
    job = info["job"]
    varying = varying_inputs(table, job)
    result = SweepResult(
        table, devices=0, chunk=0, chunks=0, compile_s=0.0, run_s=0.0, memory_bytes=0
    )
    written = write_plots(result, job, varying, plots) if plots is not None else []
    best = best_rows(result, job, top)
    show = _shown_columns(result, job, varying)
    feasible = int(table["feasible"].to_numpy().sum())
    if json_out:
        print_json(
            {
                "sweep": info["name"],
                "job": job,
                "hash": info["hash"],
                "shards": info["count"],
                "points": len(table),
                "feasible": feasible,
                "best": best[show].to_dict(orient="records"),
                "out": str(out),
                "plots": [str(p) for p in written],
            }
        )
        return
    console.print(
        f"{info['name']}: {info['count']} shard(s) merged, {len(table):,} points, "
        f"{feasible:,} feasible -> {out}",
        highlight=False,
    )
    _print_best(job, best, show)
    for p in written:
        console.print(f"plot: {p}", highlight=False)
