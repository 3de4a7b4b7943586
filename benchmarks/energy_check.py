"""Predicted vs published wall power and energy per token (issue 16): a check, not a fit.

Reads ``specs/power/mlperf-power.toml`` (MLPerf Inference v4.0 DGX-H100 MaxQ Llama-2-70B
offline and server, MLPerf Training v4.0 Llama-2-70B LoRA on one 8x H100 node), predicts each
point with the library calls the CLI makes (``diffcost serve`` / ``diffcost train``: the
built-in system and model, the exact cost model on the recorded plan) and prints predicted vs
measured node power and J/output token with the % error, next to the pre-activity bound
``chips * TDP + node overhead`` (the TDP model with the same system overhead).

The activity model counts the chips' arithmetic and DRAM/link traffic above a running chip's
floor (``specs/chips/h100-sxm.toml`` [energy], measured on an H100 with
``benchmarks/power_check.py``, not fitted to these points) plus the node's low-load floor; host
and fan power above that floor is not counted, and MaxQ runs lower the GPUs' power limits (not
recorded), so the error has both signs.  Run: ``python benchmarks/energy_check.py`` (writes
``benchmarks/results/energy-check.txt``).
"""

import tomllib
from pathlib import Path
from typing import Any

import diffcost as dc

ROOT = Path(__file__).resolve().parents[1]
POINTS = ROOT / "specs" / "power" / "mlperf-power.toml"
RESULT = ROOT / "benchmarks" / "results" / "energy-check.txt"


def predict(point: dict[str, Any]) -> dict[str, float]:
    """Predicted node power (W), tokens/s and J/token of one point, and the TDP bound (W)."""
    system = dc.load_system(point["system"], chips=point["chips"])
    model = dc.load_model(point["model"])
    chips = float(point["chips"])
    bound_w = chips * float(system.chip.tdp_w) + float(system.overhead_w(chips))
    if point["job"] == "serve":
        out = dc.ServeCost(system, model)(dc.serve_plan(**point["plan"]))
        tokens_per_s = float(out.output_tokens_per_s)
        power_w = float(out.energy_per_token_j) * tokens_per_s
        fits = bool(out.fits())
    else:
        out = dc.TrainCost(system, model)(dc.train_plan(**point["plan"]))
        tokens_per_s = float(out.tokens_per_s)
        power_w = float(out.energy_j / out.step_time_s)
        fits = bool(out.fits())
    return dict(
        power_w=power_w,
        tokens_per_s=tokens_per_s,
        j_per_token=power_w / tokens_per_s,
        bound_w=bound_w,
        fits=float(fits),
    )


def rows() -> list[tuple[dict[str, Any], dict[str, float]]]:
    """Every recorded point with its prediction."""
    points = tomllib.loads(POINTS.read_text())["point"]
    return [(p, predict(p)) for p in points]


def _pct(pred: float, meas: float) -> str:
    return f"{100.0 * (pred - meas) / meas:+.0f}%"


def report() -> str:
    """The comparison table as text."""
    lines = [
        f"# predicted (activity model) vs measured wall power; source {POINTS.relative_to(ROOT)}",
        "# bound = chips x TDP + node overhead (the TDP model); J/token measured = power / "
        "measured tokens/s, predicted = predicted power / predicted tokens/s",
        f"{'point':48s} {'P pred W':>9s} {'P meas W':>9s} {'err':>6s} {'bound W':>8s} "
        f"{'J/tok pred':>10s} {'J/tok meas':>10s} {'err':>6s} {'tok/s pred':>10s} "
        f"{'tok/s meas':>10s}",
    ]
    for p, r in rows():
        meas_tps = p.get("tokens_per_s", float("nan"))
        meas_jt = p["power_w"] / meas_tps if "tokens_per_s" in p else float("nan")
        jt_err = _pct(r["j_per_token"], meas_jt) if "tokens_per_s" in p else "-"
        lines.append(
            f"{p['id']:48s} {r['power_w']:9.0f} {p['power_w']:9.0f} "
            f"{_pct(r['power_w'], p['power_w']):>6s} {r['bound_w']:8.0f} "
            f"{r['j_per_token']:10.3f} {meas_jt:10.3f} {jt_err:>6s} "
            f"{r['tokens_per_s']:10.0f} {meas_tps:10.0f}"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    text = report()
    print(text, end="")
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(text)
