"""``diffcost serve --qps``: the serving prediction under an arrival rate (percentiles, the
steady state of continuous batching, and goodput at p99 limits; :mod:`diffcost._serve.load`)."""

import math
from typing import Annotated, Any

import jax.numpy as jnp

from .._core.errors import Problem, SpecError
from .._serve.load import workload
from ._common import console
from ._options import Opt
from ._programs import GOODPUT_QPS, UNDER_LOAD


def load_flags(
    qps: Annotated[
        float | None, Opt("Arrival rate, requests/s to the deployment: predict under load.")
    ] = None,
    arrival_cv: Annotated[
        float, Opt("Coefficient of variation of the gaps between arrivals (1: Poisson).")
    ] = 1.0,
    input_cv: Annotated[float, Opt("Coefficient of variation of the prompt lengths.")] = 0.0,
    ttft_p99_ms: Annotated[float | None, Opt("p99 TTFT limit under load, ms (goodput).")] = None,
    tpot_p99_ms: Annotated[float | None, Opt("p99 TPOT limit under load, ms (goodput).")] = None,
) -> None:
    """Option group: the offered load and its percentile limits."""


_under_load = UNDER_LOAD


def _check(flags: dict[str, Any]) -> None:
    bad = [
        Problem("<arguments>", key, f"must be a positive number, got {flags[key]!r}")
        for key in ("qps", "ttft_p99_ms", "tpot_p99_ms")
        if flags[key] is not None and not (math.isfinite(flags[key]) and flags[key] > 0)
    ]
    bad += [
        Problem("<arguments>", key, f"must be a non-negative number, got {flags[key]!r}")
        for key in ("arrival_cv", "input_cv")
        if not (math.isfinite(flags[key]) and flags[key] >= 0)
    ]
    if bad:
        raise SpecError(bad)


def goodput(system, model, plan, arrival_cv: float, input_cv: float, limits_s) -> float:
    """Largest requests/s to the deployment whose p99 TTFT and TPOT meet ``limits_s`` (0 if
    none; :func:`~diffcost._serve.load.goodput_qps`)."""
    args = (arrival_cv, input_cv, min(limits_s[0], 1e30), min(limits_s[1], 1e30))
    return float(GOODPUT_QPS(system, model, plan, *(jnp.asarray(float(x)) for x in args)))


def load_summary(system, model, plan, flags: dict[str, Any]) -> dict[str, Any] | None:
    """The ``load`` block of ``diffcost serve`` (None without ``--qps``)."""
    _check(flags)
    if flags["qps"] is None:
        return None
    out = _under_load(
        system, model, plan, workload(flags["qps"], flags["arrival_cv"], flags["input_cv"])
    )
    res: dict[str, Any] = {
        "qps": flags["qps"],
        "arrival_cv": flags["arrival_cv"],
        "input_cv": flags["input_cv"],
        **{k: float(v) for k, v in out._asdict().items()},
    }
    res["stable"] = bool(out.stable)
    limits = (flags["ttft_p99_ms"], flags["tpot_p99_ms"])
    if any(x is not None for x in limits):
        lim = tuple(math.inf if x is None else x * 1e-3 for x in limits)
        res["ttft_p99_limit_s"], res["tpot_p99_limit_s"] = lim
        res["meets_limits"] = bool(
            res["stable"] and res["ttft_p99_s"] <= lim[0] and res["tpot_p99_s"] <= lim[1]
        )
        res["goodput_qps"] = goodput(
            system, model, plan, flags["arrival_cv"], flags["input_cv"], lim
        )
    return res


def print_load(res: dict[str, Any] | None) -> None:
    """Plain-text lines of the ``load`` block."""
    if res is None:
        return
    ms = lambda key: f"{res[key] * 1e3:.1f} ms"  # noqa: E731
    state = "stable" if res["stable"] else "SATURATED: arrivals exceed what the instance serves"
    lines = [
        f"under load: {res['qps']:g} requests/s (arrival CV {res['arrival_cv']:g}), "
        f"utilisation {res['utilisation']:.0%} ({state}), {res['running']:.1f} sequences "
        "decoding per instance",
        f"  KV cache {res['kv_occupancy']:.0%} full on average, preemption risk "
        f"{res['preemption_risk']:.1%}",
        f"  TTFT p50 {ms('ttft_p50_s')}, p90 {ms('ttft_p90_s')}, p99 {ms('ttft_p99_s')} "
        f"(mean wait {ms('wait_s')}); TPOT mean {ms('tpot_s')}, p90 {ms('tpot_p90_s')}, "
        f"p99 {ms('tpot_p99_s')}",
    ]
    if "goodput_qps" in res:
        verdict = "meets" if res["meets_limits"] else "MISSES"
        lines.append(
            f"  {verdict} the p99 limits; goodput (largest rate meeting them): "
            f"{res['goodput_qps']:.2f} requests/s"
        )
    lines.append(
        "  (analytic queue: continuous batching's steady state and a Kingman/Pollaczek-"
        "Khinchine prefill queue; checked against a SimPy simulation in tests/test_serve_load.py)"
    )
    for line in lines:
        console.print(line, highlight=False, markup=False)
