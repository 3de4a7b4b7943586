"""``diffcost codesign``: a chip designed by gradient for a built-in workload under budgets."""

from typing import Annotated, Any

import numpy as np
import typer
from rich.table import Table

from .._codesign.design import design_chip, memory_figures
from .._codesign.multistart import codesign as run
from .._codesign.multistart import default_starts
from .._codesign.optimize import DEFAULT_BUDGETS, budget_excess
from .._codesign.technology import load_technology
from .._core.errors import Problem, SpecError
from .._inputs.hardware import FORMATS
from ._app import app
from ._common import JsonFlag, console, friendly_errors, positive_problems, print_json, stage

UNITS = {
    "matrix_area_mm2": "mm^2",
    "int_area_mm2": "mm^2",
    "sram_mb": "MB",
    "hbm_stacks": "stacks",
    "lpddr_channels": "channels",
    "scale_up_gb_per_s": "GB/s",
    "scale_out_gb_per_s": "GB/s",
    "clock_ghz": "GHz",
}
WORKLOAD_CHOICES = ("train", "serve", "latency", "edge", "mix")


def chip_numbers(result: Any) -> dict[str, Any]:
    """The designed chip's datasheet: peaks by format (TFLOP/s), memory (GB, TB/s), links."""
    chip = design_chip(result.design, result.problem.tech)
    full_bw = memory_figures(result.design, result.problem.tech)[1]
    peaks = np.asarray(chip.peak_flop_per_s) / 1e12
    return {
        "peak_tflop_per_s": {f: float(p) for f, p in zip(FORMATS, peaks, strict=True)},
        "memory_gb": float(chip.memory_capacity_bytes) / 1e9,
        "memory_tb_per_s": float(full_bw) / 1e12,  # a full memory over both levels
        "external_memory_tb_per_s": float(chip.memory_bandwidth_bytes_per_s) / 1e12,
        "sram_tb_per_s": float(chip.near_memory.bandwidth_bytes_per_s) / 1e12,
        "scale_up_gb_per_s": float(result.design.scale_up_gb_per_s),
        "scale_out_gb_per_s": float(result.design.scale_out_gb_per_s),
        "full_activity_power_w": float(chip.tdp_w),  # every unit at full rate at once
    }


def result_json(result: Any) -> dict[str, Any]:
    """The JSON object of ``diffcost codesign --json``."""
    return {
        "design": {k: float(getattr(result.design, k)) for k in UNITS},
        "chip": chip_numbers(result),
        "objective_relaxed": result.objectives,
        "objective_exact": result.exact,
        "used": result.used,
        "budgets": result.budgets,
        "binding": list(result.binding),
        "multipliers": result.multipliers,
        "evaluations": result.evaluations,
        "starts": result.starts,
        "nearest_chips": [{"chip": n, "log_distance": d} for n, d in result.nearest],
        "buildable": {
            "hbm_stacks": float(result.built.hbm_stacks),
            "lpddr_channels": float(result.built.lpddr_channels),
            "matrix_area_mm2": float(result.built.matrix_area_mm2),  # shrunk to fit area, cost
            "clock_ghz": float(result.built.clock_ghz),  # lowered to fit power
            "used": result.built_used,
            "over": budget_excess(result.built_used, result.budgets),
            "within_budgets": not budget_excess(result.built_used, result.budgets),
        },
    }


def print_result(out: dict[str, Any]) -> None:
    """Human-readable tables of :func:`result_json`."""
    table = Table(title="design")
    for col in ("leaf", "value", "unit"):
        table.add_column(col)
    for k, unit in UNITS.items():
        table.add_row(k, f"{out['design'][k]:.4g}", unit)
    console.print(table)
    chip = out["chip"]
    peaks = ", ".join(f"{f} {v:.4g}" for f, v in chip["peak_tflop_per_s"].items())
    console.print(f"peak TFLOP/s: {peaks}")
    console.print(
        f"memory {chip['memory_gb']:.4g} GB at {chip['memory_tb_per_s']:.4g} TB/s when full "
        f"(external {chip['external_memory_tb_per_s']:.4g}, SRAM {chip['sram_tb_per_s']:.4g} "
        "TB/s); links "
        f"{chip['scale_up_gb_per_s']:.4g} / {chip['scale_out_gb_per_s']:.4g} GB/s; "
        f"{chip['full_activity_power_w']:.4g} W with every unit at full rate (no workload "
        "reaches it; the power budget is the workloads' own power)"
    )
    for name, value in out["objective_relaxed"].items():
        ex = out["objective_exact"][name]
        console.print(
            f"{name}: relaxed {value:.5g}, exact {ex['objective']:.5g} "
            f"({'feasible' if ex['feasible'] else 'INFEASIBLE'}; plan {ex['plan']}; "
            f"{ex['power_w']:.4g} W per chip)"
        )
    for b, used in out["used"].items():
        mark = "binds" if b in out["binding"] else "slack"
        if used > 1.001 * out["budgets"][b]:
            mark = f"OVER by {100 * (used / out['budgets'][b] - 1):.1f}%: more --steps"
        console.print(
            f"{b}: {used:.4g} of {out['budgets'][b]:.4g} ({mark}; "
            f"d log objective / d log budget = {-out['multipliers'][b]:.3g})"
        )
    print_buildable(out)
    near = ", ".join(f"{c['chip']} {c['log_distance']:.2f}" for c in out["nearest_chips"][:3])
    console.print(f"nearest existing chips (RMS log distance): {near}")
    count = len(out["starts"])
    each = f" in each of {count} starts" if count > 1 else ""
    console.print(f"{out['evaluations']} gradient evaluations{each}")
    print_starts(out["starts"])


def print_starts(starts: list[dict[str, Any]]) -> None:
    """With several starts: every start's exact objectives, the kept one marked."""
    if len(starts) < 2:
        return
    for i, s in enumerate(starts):
        objs = ", ".join(f"{n} {v:.5g}" for n, v in s["objective_exact"].items())
        verdict = "within budgets, feasible" if s["ok"] else "over a budget or infeasible"
        mark = "  <- kept" if s["kept"] else ""
        console.print(f"start {i}: exact {objs} ({verdict}){mark}")


def print_buildable(out: dict[str, Any]) -> None:
    """The buildable chip's budgets, and a plain verdict: every exceeded budget by how much, and
    every workload whose plan is infeasible on the EXACT model."""
    built = out["buildable"]
    console.print(
        f"buildable: {built['hbm_stacks']:.0f} HBM stacks, {built['lpddr_channels']:.0f} LPDDR "
        f"channels, matrix {built['matrix_area_mm2']:.4g} mm^2, clock {built['clock_ghz']:.4g} "
        "GHz (the exact objective above is this design's): "
        + ", ".join(f"{b} {v:.4g}" for b, v in built["used"].items())
    )
    over = ", ".join(
        f"{b} {built['used'][b]:.4g} of {out['budgets'][b]:.4g} (over by {100 * x:.2f}%)"
        for b, x in built["over"].items()
    )
    bad = [n for n, ex in out["objective_exact"].items() if not ex["feasible"]]
    if over:
        console.print(f"NOT WITHIN BUDGET: no buildable design found within {over}", style="red")
    if bad:
        console.print(f"INFEASIBLE on the exact model: {', '.join(bad)}", style="red")
    if not over and not bad:
        console.print("within budgets, every workload feasible on the exact model")


@app.command()
@friendly_errors
def codesign(
    workload: Annotated[str, typer.Option(help="train, serve, latency, edge or mix.")] = "train",
    area_mm2: Annotated[float | None, typer.Option(help="Die-area budget, mm^2.")] = None,
    power_w: Annotated[
        float | None, typer.Option(help="Power budget, W: each workload's mean chip power.")
    ] = None,
    cost_usd: Annotated[float | None, typer.Option(help="Manufacturing-cost budget, USD.")] = None,
    node: Annotated[str, typer.Option(help="Process node (n3, n4, n5, n7, n14).")] = "n4",
    steps: Annotated[int, typer.Option(help="Adam steps (one gradient evaluation each).")] = 200,
    starts: Annotated[
        int | None,
        typer.Option(
            help="Starting points (the reference chip, then perturbed ones); the one whose "
            "buildable chip the exact model ranks best is kept. Default 8 (mix: 4)."
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the perturbed starting points.")] = 0,
    json_out: JsonFlag = False,
) -> None:
    """Design a chip by gradient for a built-in workload, its parallel plan optimised jointly."""
    problems = []
    if workload not in WORKLOAD_CHOICES:
        reason = f"expected one of {', '.join(WORKLOAD_CHOICES)}, got {workload!r}"
        problems.append(Problem("<arguments>", "workload", reason))
    given = (area_mm2, power_w, cost_usd)
    why = "no chip fits a budget of 0 or less; leave the flag out for the workload's default"
    for key, value, unit, to_si in zip(
        ("area_mm2", "power_w", "cost_usd"),
        given,
        ("mm^2", "W", "USD"),
        (1e-6, 1.0, 1.0),
        strict=True,
    ):
        problems += positive_problems({key: value}, unit, why, to_si)
    if steps < 1:
        problems.append(Problem("<arguments>", "steps", f"must be at least 1, got {steps}"))
    if starts is not None and starts < 1:
        problems.append(Problem("<arguments>", "starts", f"must be at least 1, got {starts}"))
    if problems:
        raise SpecError(problems)
    budgets = tuple(
        d if v is None else float(v) for v, d in zip(given, DEFAULT_BUDGETS[workload], strict=True)
    )

    starts = default_starts(workload) if starts is None else starts
    runs = f"{steps} steps" + (f" from each of {starts} starts" if starts > 1 else "")
    with stage(f"co-designing for {workload} (compiling, then {runs})"):
        result = run(workload, load_technology(node), budgets, steps, starts, seed)  # type: ignore[arg-type]
    out = result_json(result)
    print_json(out) if json_out else print_result(out)
