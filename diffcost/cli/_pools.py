"""``diffcost plan serve --qps Q``: the aggregated and the disaggregated (xPyD) deployment that
serve ``Q`` requests/s within the p99 limits on the fewest chips, side by side
(:mod:`diffcost._search.pools`)."""

import math
import time
from typing import Any

from .._inputs.hardware import System
from .._inputs.loader import load_model
from .._search.pools import PoolAnswer, answer_row, size_pools_formats, verdict
from .._serve.caps import capped_plan, engine_caps
from .._serve.plan import serve_plan
from ._common import console, print_json


def _better(a: PoolAnswer, b: PoolAnswer) -> PoolAnswer:
    """The answer with fewer chips (a found one before none)."""
    if b.chips is None:
        return a
    if a.chips is None or b.chips < a.chips:
        return b
    return a


def pools_report(
    system: System,
    chip: str,
    model_name: str,
    shape: dict[str, Any],
    qps: float,
    limits_ms: tuple[float | None, float | None],
    json_out: bool,
) -> None:
    """Size both layouts for ``qps`` and print them (or their JSON).  ``shape``: ``input_len``,
    ``output_len``, ``arrival_cv``, ``input_cv``, ``chips`` and ``formats`` (weight = KV
    format, each tried); the engine's default caps on the chip (:func:`capped_plan`)."""
    start = time.perf_counter()
    model = load_model(model_name)
    ttft, tpot = (math.inf if x is None else x * 1e-3 for x in limits_ms)
    limits = (ttft, tpot)
    memory, context = float(system.chip.memory_capacity_bytes), float(model.max_seq_len)
    caps = engine_caps(None, chip, memory, context)
    plans = []
    for fmt in shape["formats"]:
        plan = serve_plan(
            input_len=shape["input_len"],
            output_len=shape["output_len"],
            mode="continuous",
            weight_format=fmt,
            kv_format=fmt,
        )
        plans.append(capped_plan(plan, caps)[0])
    cvs = (shape["arrival_cv"], shape["input_cv"])
    found_all = size_pools_formats(system, model, plans, qps, limits, shape["chips"], *cvs)
    best: dict[str, tuple[PoolAnswer, str]] = {}
    for fmt, found in zip(shape["formats"], found_all, strict=True):
        for ans in found:
            kept = best.get(ans.kind)
            if kept is None or _better(kept[0], ans) is ans and ans is not kept[0]:
                best[ans.kind] = (ans, fmt)
    agg, dis = best["aggregated"], best["disaggregated"]
    seconds = time.perf_counter() - start
    rows = [answer_row(a) | {"format": f} for a, f in (agg, dis)]
    obj = {"qps": qps, "limits_ms": list(limits_ms), "answers": rows}
    obj |= {"verdict": verdict(agg[0], dis[0]), "seconds": seconds}
    if json_out:
        print_json(obj)
        return
    console.print(
        f"serving {qps:g} requests/s within p99 TTFT {_ms(limits[0])} and TPOT {_ms(limits[1])} "
        f"on at most {shape['chips']} chips ({seconds:.1f} s):",
        highlight=False,
    )
    for row in rows:
        console.print("  " + _line(row), highlight=False, markup=False)
    console.print(obj["verdict"], highlight=False)


def _ms(limit_s: float) -> str:
    return "(none)" if limit_s == math.inf else f"{limit_s * 1e3:g} ms"


def _line(row: dict[str, Any]) -> str:
    """One layout: chips, layout, latencies at the rate."""
    if row["chips"] is None:
        return f"{row['kind']}: no layout meets the limits"
    lay, lat = row["layout"], row["latency"]
    if "tp" in lay:
        what = f"{lay['replicas']} x tp{lay['tp']}"
    else:
        what = (
            f"{lay['prefill_instances']}P (tp{lay['prefill_tp']}) + "
            f"{lay['decode_instances']}D (tp{lay['decode_tp']})"
        )
    ms = lambda k: "n/a" if lat[k] is None else f"{lat[k] * 1e3:.1f} ms"  # noqa: E731
    return (
        f"{row['kind']}: {row['chips']} chips, {what}, {row['format']}; TTFT p50 "
        f"{ms('ttft_p50_s')} p99 {ms('ttft_p99_s')}, TPOT {ms('tpot_s')} p99 {ms('tpot_p99_s')}"
    )


__all__ = ["pools_report"]
