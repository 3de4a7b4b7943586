"""``diffcost serve --qps``: the serving prediction under an arrival rate (percentiles, the
steady state of continuous batching, and goodput at p99 limits; :mod:`diffcost._serve.load`)."""

import math
from collections.abc import Callable
from typing import Annotated, Any

import jax.numpy as jnp

from .._core.errors import Problem, SpecError
from .._serve.load import workload
from ._common import NO_LIMIT, console, cv_problems, positive_problems
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


def load_flag_problems(flags: dict[str, Any]) -> list[Problem]:
    """Every bad load flag: the rate and the limits positive and within the loader's bound
    (products with the model's times stay inside float32), the coefficients of variation
    finite and >= 0."""
    why = "an arrival rate of 0 or less offers no load; leave --qps out to predict without one"
    bad = positive_problems({"qps": flags["qps"]}, "requests/s", why)
    limits = {key: flags[key] for key in ("ttft_p99_ms", "tpot_p99_ms")}
    bad += positive_problems(limits, "milliseconds", NO_LIMIT, 1e-3)
    return bad + cv_problems({key: flags[key] for key in ("arrival_cv", "input_cv")})


def goodput(system, model, plan, arrival_cv: float, input_cv: float, limits_s) -> float:
    """Largest requests/s to the deployment whose p99 TTFT and TPOT meet ``limits_s`` (0 if
    none; :func:`~diffcost._serve.load.goodput_qps`); with no limits (``inf``), the largest
    rate the deployment serves stably."""
    args = (arrival_cv, input_cv, min(limits_s[0], 1e30), min(limits_s[1], 1e30))
    return float(GOODPUT_QPS(system, model, plan, *(jnp.asarray(float(x)) for x in args)))


#: Outputs that a queue in steady state bounds: beyond saturation it grows without limit.
QUEUE_KEYS = ("wait_s", "ttft_mean_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s")
#: Outputs of the steady state of the running engine: beyond saturation there is none (the
#: fixed point's iteration shrinks as 1 / qps, a value that describes no engine).
STEADY_KEYS = (
    *("running", "prompt_tokens_per_iteration", "iteration_s", "kv_occupancy"),
    *("preemption_risk", "tpot_s", "tpot_p90_s", "tpot_p99_s"),
)
#: The ``load`` block's keys of the p99 limits (seconds).
LIMIT_KEYS = ("ttft_p99_limit_s", "tpot_p99_limit_s")


def load_summary(
    system, model, plan, flags: dict[str, Any], caps: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """The ``load`` block of ``diffcost serve`` (None without ``--qps``); ``plan`` the one the
    server runs under load and ``caps`` where its sequence cap and token budget come from
    (:func:`~diffcost._serve.caps.caps_summary`, kept as the block's ``caps``).

    Beyond saturation (``stable`` false) there is no steady state: the waits, so the TTFTs,
    grow without limit, and ``max_stable_qps`` says the rate the deployment serves.  A value
    without a bound or a steady state (or a limit not given) is ``None`` and ``null_reasons``
    says why, by key (``unbounded: ...`` for a wait, a TTFT or a limit): the JSON holds no NaN
    or infinity."""
    bad = load_flag_problems(flags)
    if bad:
        raise SpecError(bad)
    if flags["qps"] is None:
        return None
    qps, cvs = flags["qps"], (flags["arrival_cv"], flags["input_cv"])
    out = _under_load(system, model, plan, workload(qps, *cvs))
    res: dict[str, Any] = {
        "qps": qps,
        "arrival_cv": cvs[0],
        "input_cv": cvs[1],
        **{k: float(v) for k, v in out._asdict().items()},
    }
    res["stable"] = bool(out.stable)
    res["batch_cap"], res["token_budget"] = float(plan.batch), float(plan.prefill_chunk)
    if caps is not None:
        res["caps"] = caps
    why: dict[str, str] = {}
    if not res["stable"]:
        res["max_stable_qps"] = goodput(system, model, plan, *cvs, (math.inf, math.inf))
        cause = _saturation(res)
        why |= {key: f"unbounded: {cause}, so the queue grows without limit" for key in QUEUE_KEYS}
        why |= {key: f"no steady state: {cause}" for key in STEADY_KEYS}
    limits = (flags["ttft_p99_ms"], flags["tpot_p99_ms"])
    if any(x is not None for x in limits):
        lim = tuple(math.inf if x is None else x * 1e-3 for x in limits)
        res["meets_limits"] = bool(
            res["stable"] and res["ttft_p99_s"] <= lim[0] and res["tpot_p99_s"] <= lim[1]
        )
        res["goodput_qps"] = goodput(system, model, plan, *cvs, lim)
        flags_ = ("--ttft-p99-ms", "--tpot-p99-ms")
        for key, flag, limit in zip(LIMIT_KEYS, flags_, lim, strict=True):
            res[key] = limit
            if limit == math.inf:
                why[key] = f"unbounded: no {flag} limit given"
    for key, value in res.items():
        if isinstance(value, float) and not math.isfinite(value) and key not in why:
            why[key] = f"unbounded: {_saturation(res)}"
    for key in why:
        res[key] = None
    res["null_reasons"] = why
    return res


def caps_line(res: dict[str, Any]) -> str:
    """``running at most 1,024 sequences, 8,192 tokens per iteration (vllm-0.10: the larger
    caps for chips of >= 70 GiB not named a100; --batch, --prefill-chunk override)``."""
    n = res["batch_cap"]
    head = (
        f"running at most {n:,.0f} sequence{'' if n == 1 else 's'}, "
        f"{res['token_budget']:,.0f} tokens per iteration"
    )
    caps = res.get("caps")
    if caps is None:
        return head + " (the plan's batch and prefill_chunk)"
    flags = {"batch": "--batch", "prefill_chunk": "--prefill-chunk"}
    cap_of = {"batch": "max_seqs", "prefill_chunk": "token_budget"}
    mine = [f for k, f in flags.items() if caps[f"{k}_from"] == "engine"]
    given = [k for k in flags if caps[f"{k}_from"] == "plan" and caps[cap_of[k]] is not None]
    unset = [k for k in flags if caps[f"{k}_from"] == "plan" and caps[cap_of[k]] is None]
    parts = []
    if mine:
        parts.append(f"{caps['engine']}: {caps['rule']}; {', '.join(mine)} override")
    if given:
        parts.append(f"{' and '.join(given)} as given")
    if unset:
        parts.append(f"{' and '.join(unset)} from the plan: {caps['engine']} sets no default")
    return f"{head} ({'; '.join(parts)})"


def _saturation(res: dict[str, Any]) -> str:
    """Why a load is beyond what the deployment serves, for a message: the utilisation and the
    largest stable rate, or that it serves no request at all."""
    most = res.get("max_stable_qps")
    if most is None or most <= 0 or not math.isfinite(res["utilisation"]):
        return (
            f"arrivals of {res['qps']:g} requests/s meet an instance that serves none (no "
            "sequence fits in memory beside the weights)"
        )
    return (
        f"utilisation {res['utilisation']:.3g} >= 1: arrivals of {res['qps']:g} requests/s "
        f"exceed the {most:.3g} requests/s the deployment serves"
    )


def load_problems(res: dict[str, Any] | None) -> list[str]:
    """Why a prediction under load is infeasible: the queue is saturated (no steady state)."""
    if res is None or res["stable"]:
        return []
    return [f"saturated under load: {_saturation(res)}; the waits grow without limit"]


def print_load(res: dict[str, Any] | None) -> None:
    """Plain-text lines of the ``load`` block (``unbounded`` where a value has no bound)."""
    if res is None:
        return

    def show(key: str, fmt: Callable[[float], str]) -> str:
        if res[key] is not None:
            return fmt(res[key])
        return "unbounded" if res["null_reasons"][key].startswith("unbounded") else "n/a"

    ms = lambda key: show(key, lambda v: f"{v * 1e3:.1f} ms")  # noqa: E731
    pct = lambda key: show(key, lambda v: f"{v:.0%}")  # noqa: E731
    if res["stable"]:
        state = "stable"
    else:
        state = f"SATURATED: serves at most {res['max_stable_qps']:.3g} requests/s"
    running = show("running", lambda v: f"{v:.1f}")
    risk = show("preemption_risk", lambda v: f"{v:.1%}")
    lines = [
        f"under load: {res['qps']:g} requests/s (arrival CV {res['arrival_cv']:g}), "
        f"utilisation {pct('utilisation')} ({state}), {running} sequences "
        "decoding per instance",
        f"  KV cache {pct('kv_occupancy')} full on average, preemption risk {risk}",
        f"  TTFT p50 {ms('ttft_p50_s')}, p90 {ms('ttft_p90_s')}, p99 {ms('ttft_p99_s')} "
        f"(mean wait {ms('wait_s')}); TPOT mean {ms('tpot_s')}, p90 {ms('tpot_p90_s')}, "
        f"p99 {ms('tpot_p99_s')}",
    ]
    lines.append("  " + caps_line(res))
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
