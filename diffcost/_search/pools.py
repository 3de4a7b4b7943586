"""Aggregated against disaggregated serving at one arrival rate (issue 43, ``plan serve --qps``).

For a rate ``Q``, p99 TTFT and TPOT limits and a chip budget, the fewest chips that serve ``Q``
within the limits:

* aggregated: ``r`` replicas of a colocated continuous-batching instance of tensor parallelism
  ``tp`` (:func:`diffcost.under_load`), every ``tp`` in ``tps`` and ``r tp <= chips``;
* disaggregated (xPyD): ``x`` prefill instances of ``tp_p`` chips and ``y`` decode instances of
  ``tp_d`` (:func:`~diffcost._serve.disagg_load.disaggregated_under_load`), every pair with
  ``x tp_p + y tp_d <= chips``.

Every candidate is evaluated exactly, both kinds and every number format in one program
(:data:`POOLS`, one compilation per model, system and chip budget): each group of ``count``
instances of ``tp`` chips is evaluated once as a colocated deployment (also its prefill-pool
state) and once as a decode pool, and a disaggregated row combines two groups arithmetically;
and the two answers are printed side by side with which needs fewer chips and
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
from .._core.smooth import EXACT
from .._inputs.hardware import System
from .._inputs.model import Model
from .._serve.disagg_load import (
    DisaggregatedLoad,
    _decode_side,
    _join,
    _Prefill,
    _result,
    transfer_s,
)
from .._serve.load import Z99, Workload, _load_state, _mixture_quantile, sequence_cap
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


def _aggregated_row(ls: Any) -> dict[str, Any]:
    """What :func:`diffcost.under_load` reports of one colocated deployment, read from its
    load state (the same expressions; pinned to it by the tests)."""
    return {
        "stable": jnp.where(ls.rho < 1.0, 1.0, 0.0),
        "utilisation": ls.rho,
        "ttft_p50_s": _mixture_quantile(0.5, ls.parts),
        "ttft_p99_s": _mixture_quantile(0.99, ls.parts),
        "tpot_s": ls.st.t_s,
        "tpot_p99_s": ls.tpot_quantile(Z99),
    }


def _disaggregated_row(out: DisaggregatedLoad) -> dict[str, Any]:
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


def _pools(system, model, plans, pools, pairs, load) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both kinds for every format of ``plans`` (stacked on a leading axis) in one program.

    ``pools = (tp, count)``: the ``K`` instance groups; ``pairs = (k_prefill, k_decode)``:
    the disaggregated rows as indices into them.  A group's colocated load state serves both
    its aggregated answer (``count`` replicas) and, with one output token, its use as a prefill
    pool (one ``vmap`` over ``2 K`` plans: one copy of the queue model in the program); each
    group is evaluated once as a decode pool; a row is arithmetic on its two pools' states
    (:func:`~diffcost._serve.disagg_load._join`).  Outputs: ``(formats, K)`` and
    ``(formats, rows)`` arrays."""
    tps, counts = pools

    def per_format(base: ServePlan):
        k = tps.shape[0]
        first = jnp.concatenate([jnp.zeros(k), jnp.ones(k)])

        def colocated(tp, r, prefill):
            plan = _with(base, tp, r)
            out = jnp.where(prefill > 0, jnp.ones_like(plan.output_len), plan.output_len)
            return eqx.tree_at(lambda p: p.output_len, plan, out)

        def state(plan, cap_fit):
            return _load_state(system, model, plan, load, EXACT, cap_fit)

        # the sequence caps once per plan: a group's colocated cap is its decode pool's too
        plans = jax.vmap(colocated)(jnp.tile(tps, 2), jnp.tile(counts, 2), first)
        caps = jax.vmap(lambda p: sequence_cap(system, model, p, EXACT))(plans)
        both = jax.vmap(state)(plans, caps)
        agg, pre = jax.tree.map(lambda x: x[:k], both), jax.tree.map(lambda x: x[k:], both)
        transfer = jax.vmap(lambda tp, r: transfer_s(system, model, _with(base, tp, r), EXACT))
        prefill = _Prefill(pre.parts, pre.rho, transfer(tps, counts))

        def side(tp, r, cap):
            return _decode_side(system, model, _with(base, tp, r), load, EXACT, cap)

        decode = jax.vmap(side)(tps, counts, caps[0][:k])

        def row(kp, kd):
            p, d = (jax.tree.map(lambda x, i=i: x[i], s) for s, i in ((prefill, kp), (decode, kd)))
            return _disaggregated_row(_result(_join(p, d, EXACT)))

        return jax.vmap(_aggregated_row)(agg), jax.vmap(row)(*pairs)

    return jax.vmap(per_format)(plans)


#: The evaluation compiled once per model structure and candidate count and kept on disk by
#: the command line (:class:`~diffcost._core.exported.ExportedProgram`): a later
#: ``plan serve --qps`` reads it.  It runs once per question, in milliseconds, so it is
#: compiled quickly (LLVM -O0): 17 -> 3.5 s on 2 cores for 8 chips and two formats.
POOLS = ExportedProgram(_pools, "serve-pools", quick=True)


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
    system: System, model: Model, base: ServePlan, *args: Any, **kwargs: Any
) -> tuple[PoolAnswer, PoolAnswer]:
    """The aggregated and the disaggregated answer for one plan ``base``; the other arguments
    as :func:`size_pools_formats`'."""
    return size_pools_formats(system, model, [base], *args, **kwargs)[0]


def size_pools_formats(
    system: System,
    model: Model,
    bases: list[ServePlan],
    qps: float,
    limits_s: tuple[float, float],
    chips: int,
    arrival_cv: float = 1.0,
    input_cv: float = 0.0,
    tps: tuple[int, ...] = TPS,
) -> list[tuple[PoolAnswer, PoolAnswer]]:
    """The aggregated and the disaggregated answer at ``qps`` requests/s (module docstring) for
    each of ``bases`` (plans of one structure, e.g. one per number format: everything but the
    degrees and counts), all in one evaluation of one program (:data:`POOLS`)."""
    load = Workload(*(jnp.asarray(float(v)) for v in (qps, arrival_cv, input_cv)))
    tps = tuple(t for t in tps if t <= chips)
    groups = [(t, r) for t in tps for r in range(1, chips // t + 1)]
    index = {g: i for i, g in enumerate(groups)}
    rows = [
        (tp * x + td * y, tp, x, td, y)
        for tp in tps
        for x in range(1, chips // tp + 1)
        for td in tps
        for y in range(1, (chips - tp * x) // td + 1)
    ]
    pairs = [(index[(tp, x)], index[(td, y)]) for _, tp, x, td, y in rows] or [(0, 0)]
    agg = np.array([(t * r, t, r) for t, r in groups], float).T
    plans = jax.tree.map(lambda *xs: jnp.stack(xs), *bases)
    pools = (jnp.asarray(agg[1]), jnp.asarray(agg[2]))
    kp, kd = (jnp.asarray(np.array(c, np.int32)) for c in zip(*pairs, strict=True))
    out_agg, out_dis = POOLS(system, model, plans, pools, (kp, kd), load)
    names = ("prefill_tp", "prefill_instances", "decode_tp", "decode_instances")
    dis = np.array(rows, float).T
    out_agg, out_dis = ({k: np.asarray(v) for k, v in o.items()} for o in (out_agg, out_dis))
    found = []
    for f in range(len(bases)):
        row = {k: v[f] for k, v in out_agg.items()}
        aggregated = _best("aggregated", agg, row, limits_s, ("tp", "replicas"))
        if not rows:
            found.append((aggregated, PoolAnswer("disaggregated", None, None, None, 0)))
            continue
        row = {k: v[f] for k, v in out_dis.items()}
        found.append((aggregated, _best("disaggregated", dis, row, limits_s, names)))
    return found


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


__all__ = ["PoolAnswer", "TPS", "answer_row", "size_pools", "size_pools_formats", "verdict"]
