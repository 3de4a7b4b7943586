"""Aggregated against disaggregated serving at one arrival rate (issue 43, ``plan serve --qps``).

For a rate ``Q``, p99 TTFT and TPOT limits and a chip budget, the fewest chips that serve ``Q``
within the limits:

* aggregated: ``r`` replicas of a colocated continuous-batching instance of tensor parallelism
  ``tp`` (:func:`diffcost.under_load`), every ``tp`` in ``tps`` and ``r tp <= chips``;
* disaggregated (xPyD): ``x`` prefill instances of ``tp_p`` chips and ``y`` decode instances of
  ``tp_d`` (:func:`~diffcost._serve.disagg_load.disaggregated_under_load`), every pair with
  ``x tp_p + y tp_d <= chips``.

Every candidate is evaluated exactly, all of one kind in one ``vmap`` (one compilation per
model and system), and the two answers are printed side by side with which needs fewer chips and
by how much; ties go to the aggregated one (one pool to run).
"""

import math
from dataclasses import dataclass
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._core.exported import ExportedProgram
from .._inputs.hardware import System
from .._inputs.model import Model
from .._serve.disagg_load import disaggregated_under_load
from .._serve.load import Workload, under_load
from .._serve.plan import ServePlan

#: Tensor-parallel degrees tried for each pool (powers of two, pp = 1).
TPS = (1, 2, 4, 8)


@dataclass(frozen=True)
class PoolAnswer:
    """The fewest-chip deployment of one kind that meets the limits at the rate, or ``None``
    fields when none within the budget does.  ``layout``: ``{"tp", "replicas"}`` or
    ``{"prefill_tp", "prefill_instances", "decode_tp", "decode_instances"}``; ``latency``:
    its TTFT p50/p99 and TPOT mean/p99 (s) and utilisation(s) at the rate."""

    kind: str
    chips: int | None
    layout: dict[str, int] | None
    latency: dict[str, float] | None
    candidates: int


def _with(base: ServePlan, tp: Any, replicas: Any) -> ServePlan:
    return eqx.tree_at(lambda p: (p.tp, p.replicas), base, (tp, replicas))


def _aggregated(system, model, base, tps, replicas, load) -> dict[str, Any]:
    def one(tp, r):
        out = under_load(system, model, _with(base, tp, r), load)
        return {
            "stable": out.stable,
            "utilisation": out.utilisation,
            "ttft_p50_s": out.ttft_p50_s,
            "ttft_p99_s": out.ttft_p99_s,
            "tpot_s": out.tpot_s,
            "tpot_p99_s": out.tpot_p99_s,
        }

    return jax.vmap(one)(tps, replicas)


def _disaggregated(system, model, base, layout, load) -> dict[str, Any]:
    def one(tp_p, x, tp_d, y):
        prefill, decode = _with(base, tp_p, x), _with(base, tp_d, y)
        out = disaggregated_under_load(system, model, prefill, decode, load)
        return {
            "stable": out.stable,
            "prefill_utilisation": out.prefill_utilisation,
            "decode_utilisation": out.decode_utilisation,
            "kv_transfer_s": out.kv_transfer_s,
            "ttft_p50_s": out.ttft_p50_s,
            "ttft_p99_s": out.ttft_p99_s,
            "tpot_s": out.tpot_s,
            "tpot_p99_s": out.tpot_p99_s,
        }

    return jax.vmap(one)(*layout)


#: The two evaluations compiled once per model structure and kept on disk by the command line
#: (:class:`~diffcost._core.exported.ExportedProgram`): a later ``plan serve --qps`` reads them.
AGGREGATED = ExportedProgram(_aggregated, "serve-pools-aggregated")
DISAGGREGATED = ExportedProgram(_disaggregated, "serve-pools-disaggregated")


def _best(
    kind: str, chips: np.ndarray, out: dict[str, Any], limits: tuple[float, float], names
) -> PoolAnswer:
    """The feasible candidate with the fewest chips (then the lowest p99 TTFT)."""
    got = {k: np.asarray(v) for k, v in out.items()}
    ok = (got["stable"] > 0) & (got["ttft_p99_s"] <= limits[0]) & (got["tpot_p99_s"] <= limits[1])
    ok &= np.isfinite(got["ttft_p99_s"]) & np.isfinite(got["tpot_p99_s"])
    if not ok.any():
        return PoolAnswer(kind, None, None, None, len(ok))
    order = np.lexsort((got["ttft_p99_s"], np.where(ok, chips[0], np.inf)))
    i = int(order[0])
    layout = {name: int(col[i]) for name, col in zip(names, chips[1:], strict=True)}
    latency = {k: float(v[i]) for k, v in got.items() if k != "stable"}
    return PoolAnswer(kind, int(chips[0][i]), layout, latency, len(ok))


def size_pools(
    system: System,
    model: Model,
    base: ServePlan,
    qps: float,
    limits_s: tuple[float, float],
    chips: int,
    arrival_cv: float = 1.0,
    input_cv: float = 0.0,
    tps: tuple[int, ...] = TPS,
) -> tuple[PoolAnswer, PoolAnswer]:
    """The aggregated and the disaggregated answer at ``qps`` requests/s (module docstring);
    ``base`` gives everything but the degrees and counts (lengths, caps, formats, engine)."""
    load = Workload(*(jnp.asarray(float(v)) for v in (qps, arrival_cv, input_cv)))
    tps = tuple(t for t in tps if t <= chips)
    agg = np.array([(t * r, t, r) for t in tps for r in range(1, chips // t + 1)], float).T
    out = AGGREGATED(system, model, base, jnp.asarray(agg[1]), jnp.asarray(agg[2]), load)
    aggregated = _best("aggregated", agg, out, limits_s, ("tp", "replicas"))
    rows = [
        (tp * x + td * y, tp, x, td, y)
        for tp in tps
        for x in range(1, chips // tp + 1)
        for td in tps
        for y in range(1, (chips - tp * x) // td + 1)
    ]
    if not rows:
        return aggregated, PoolAnswer("disaggregated", None, None, None, 0)
    dis = np.array(rows, float).T
    out = DISAGGREGATED(system, model, base, tuple(jnp.asarray(c) for c in dis[1:]), load)
    names = ("prefill_tp", "prefill_instances", "decode_tp", "decode_instances")
    return aggregated, _best("disaggregated", dis, out, limits_s, names)


def verdict(aggregated: PoolAnswer, disaggregated: PoolAnswer) -> str:
    """Which needs fewer chips, by how much, or that neither meets the limits."""
    a, d = aggregated.chips, disaggregated.chips
    if a is None and d is None:
        return "neither layout meets the limits at this rate within the chips"
    if a is not None and (d is None or a <= d):
        more = "" if d is None else f" ({d} disaggregated, {d / a - 1:.0%} more)"
        return f"aggregated wins: {a} chips{more}"
    assert d is not None
    more = "" if a is None else f" ({a} aggregated, {a / d - 1:.0%} more)"
    return f"disaggregated wins: {d} chips{more}"


def answer_row(ans: PoolAnswer) -> dict[str, Any]:
    """A JSON-ready row (``None`` where no layout meets the limits; finite numbers only)."""
    lat = None
    if ans.latency is not None:
        lat = {k: (v if math.isfinite(v) else None) for k, v in ans.latency.items()}
    return {"kind": ans.kind, "chips": ans.chips, "layout": ans.layout, "latency": lat}


__all__ = ["PoolAnswer", "TPS", "answer_row", "size_pools", "verdict"]
