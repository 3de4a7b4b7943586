"""``diffcost serve``: predict serving latency, throughput, memory and cost."""

import math
from typing import Annotated, Any, NamedTuple

import typer

from .._analysis.coverage import coverage_lines, job_chip, job_coverage
from .._analysis.uncertainty import Z80, intervals
from .._core.errors import Problem, SpecError
from .._core.options import ServeMode
from .._serve.behaviours import ENGINE_BEHAVIOURS
from .._serve.caps import capped_plan, caps_summary, engine_caps
from .._serve.cost import ServeBreakdown, ServeCost, serve_problems
from .._serve.engine import DEFAULT_ENGINE, engine_names, load_engine
from .._serve.plan import SERVE_FIELDS, ServePlan
from .._terms.energy import energy_basis
from ._app import app
from ._common import (
    EXIT_INFEASIBLE,
    NO_LIMIT,
    CalibrationOpt,
    JsonFlag,
    Opt,
    check_finite,
    console,
    fmt_bytes,
    fmt_time,
    friendly_errors,
    interval_text,
    kv_table,
    plan_line,
    positive_problems,
    prediction_json,
    print_json,
    print_problems,
    spec_infos,
)
from ._load import load_flag_problems, load_flags, load_problems, load_summary, print_load
from ._options import (
    Flags,
    SystemChips,
    serve_plan_flags,
    spec_refs,
    with_options,
)
from ._programs import AT_SLO, PREDICT
from ._resolve import DEFAULT_SCENARIO as _DEFAULTS
from ._resolve import Job, resolve_job, serve_format_summary

DEFAULT_SCENARIO = _DEFAULTS["serve"]
#: The prediction and its interval's linearisation, from one trace of the model.
_predict = PREDICT["serve"]
_at_slo = AT_SLO


def _accuracy_costs(items: list[str] | None) -> dict[str, float] | None:
    """``["int4=0.3", "fp8=0.05"]`` -> ``{"int4": 0.3, "fp8": 0.05}`` (bad items are errors)."""
    if not items:
        return None
    out, problems = {}, []
    for item in items:
        name, sep, value = item.partition("=")
        try:
            if not sep:
                raise ValueError
            out[name.strip()] = float(value)
        except ValueError:
            problems.append(
                Problem(
                    "<flags>",
                    "--accuracy-cost",
                    f"expected FORMAT=NUMBER (e.g. int4=0.3), got {item!r}",
                )
            )
    if problems:
        raise SpecError(problems)
    return out


def serve_only_flags(
    engine: Annotated[
        str | None,
        Opt(
            f"Serving engine profile: {', '.join(engine_names())} or a file "
            f"(default: {DEFAULT_ENGINE}); sets the kernel flags and kv-block defaults."
        ),
    ] = None,
    accuracy_cost: Annotated[
        list[str] | None, Opt("Accuracy cost of a format, FORMAT=NUMBER (repeatable).")
    ] = None,
) -> None:
    """Option group: what a serving job sets besides its plan's fields: the engine profile and
    accuracy costs."""


def _plan_flags(plan: Flags, extra: Flags) -> Flags:
    """Command-line flags -> ``serve_plan`` keywords (``None``: not given): the plan's fields
    in declaration order, then the accuracy costs and the engine."""
    return {
        **plan,
        "accuracy_cost": _accuracy_costs(extra["accuracy_cost"]),
        "engine": extra["engine"],
    }


def _at_slo_summary(
    cost: ServeCost, plan: ServePlan, ttft_slo_ms: float | None, tpot_slo_ms: float | None
) -> dict[str, Any] | None:
    """The best batch under the latency limits (``None`` when neither limit is given; each
    given one positive, checked with the flags)."""
    if ttft_slo_ms is None and tpot_slo_ms is None:
        return None
    inf = float("inf")
    ttft = inf if ttft_slo_ms is None else ttft_slo_ms * 1e-3
    tpot = inf if tpot_slo_ms is None else tpot_slo_ms * 1e-3
    res = _at_slo(cost, plan, ttft, tpot)
    b = res.breakdown
    return {
        "ttft_slo_s": ttft if ttft_slo_ms is not None else None,
        "tpot_slo_s": tpot if tpot_slo_ms is not None else None,
        "limits_s": (ttft, tpot),
        "feasible": bool(res.feasible),
        "batch": int(res.batch),
        "output_tokens_per_s_per_chip": float(b.output_tokens_per_s_per_chip)
        if res.feasible
        else 0.0,
        "output_tokens_per_s": float(b.output_tokens_per_s) if res.feasible else 0.0,
        "ttft_s": float(b.ttft_s),
        "tpot_s": float(b.tpot_s),
    }


def _slo_interval(
    cost: ServeCost, plan: ServePlan, limits_s: tuple[float, float], iv: dict[str, Any] | None
) -> dict[str, Any]:
    """p10/p90 of the deployment's output tokens/s at the latency limits.  The interval of a
    throughput at a limit is not the delta method at a fixed batch: a slower chip meets the
    same TTFT/TPOT limit only at a smaller batch.  If every time is ``k`` times the prediction
    (``k = exp(+-Z80 sigma)``, ``sigma`` the larger log sigma of the limited latencies), the
    best batch is the one the limits divided by ``k`` allow and its throughput is divided by
    ``k``: p10 with ``k > 1``, p90 with ``k < 1``.  A uniform time scale is the leading mode of
    the delta method here (the constants' and the discrepancy's shares move every time of a
    decode step together); empty without a posterior."""
    if iv is None or not iv["interval"]["outputs"]:
        return {}
    sig = iv["interval"]["outputs"]
    limited = [n for n, lim in zip(("ttft_s", "tpot_s"), limits_s, strict=True) if lim < math.inf]
    sigmas = [sig[n]["log_sigma"] for n in limited if n in sig]
    if not sigmas:
        return {}
    out = {}
    for key, k in (("p10", math.exp(Z80 * max(sigmas))), ("p90", math.exp(-Z80 * max(sigmas)))):
        res = _at_slo(cost, plan, limits_s[0] / k, limits_s[1] / k)
        ok, b = bool(res.feasible), res.breakdown
        out[f"output_tokens_per_s_{key}"] = float(b.output_tokens_per_s) / k if ok else 0.0
        per_chip = float(b.output_tokens_per_s_per_chip) / k if ok else 0.0
        out[f"output_tokens_per_s_per_chip_{key}"] = per_chip
    return out


@app.command()
@friendly_errors
@with_options(refs=spec_refs, plan=serve_plan_flags, extra=serve_only_flags, load=load_flags)
def serve(
    *,
    scenario: Annotated[
        str | None,
        Opt(
            f"Scenario file or built-in name (default: {DEFAULT_SCENARIO} when no model is given)."
        ),
    ] = None,
    refs: Flags,
    chips: SystemChips = None,
    plan: Flags,
    extra: Flags,
    load: Flags,
    ttft_slo_ms: Annotated[float | None, Opt("TTFT limit, ms: also find the best batch.")] = None,
    tpot_slo_ms: Annotated[float | None, Opt("TPOT limit, ms: also find the best batch.")] = None,
    calibration: CalibrationOpt = "default",
    json_out: JsonFlag = False,
) -> None:
    """Predict serving: TTFT, TPOT, throughput per chip, memory per chip, energy and cost."""
    flags = _plan_flags(plan, extra)  # plan: every plan option, from SERVE_FIELDS
    # the load and latency-limit flags with the plan's, all at once, before any work
    limits = {"ttft_slo_ms": ttft_slo_ms, "tpot_slo_ms": tpot_slo_ms}
    early = load_flag_problems(load) + positive_problems(limits, "milliseconds", NO_LIMIT, 1e-3)
    try:
        job = resolve_job("serve", scenario, {**refs, "chips": chips}, flags, calibration)
    except SpecError as err:
        raise SpecError(early + err.problems) from None
    if early:
        raise SpecError(early)
    a = serve_answer(job, load, (ttft_slo_ms, tpot_slo_ms))
    if json_out:
        print_json(a.json)
    else:
        model_info, hw_info = spec_infos(job.refs)
        names = (model_info.display_name, job.hardware_name(hw_info.display_name))
        _print_table(a.out, names, job, a.interval)
        notes = [f"formats: {a.formats['note']}"] if a.formats["note"] else []
        for line in (*notes, engine_line(a.engine), *coverage_lines(a.coverage)):
            console.print(line, highlight=False, markup=False)
        if a.interval is not None:
            console.print(
                f"interval: {a.interval['interval']['note']}", highlight=False, markup=False
            )
        _print_slo(a.slo)
        print_load(a.load)
        print_problems(a.problems)
    if a.problems:
        raise typer.Exit(EXIT_INFEASIBLE)


class ServeAnswer(NamedTuple):
    """One serving prediction as every front end shows it (the table, ``--json``, the web
    explorer): the exact breakdown, why the request cannot be served, coverage, engine, the
    80% interval, the best batch under the latency limits, the prediction under load, the
    formats, and the ``--json`` object built from them."""

    out: ServeBreakdown
    problems: list[str]
    coverage: dict[str, Any]
    engine: dict[str, Any]
    interval: dict[str, Any] | None
    slo: dict[str, Any] | None
    load: dict[str, Any] | None
    formats: dict[str, Any]
    json: dict[str, Any]


def serve_answer(
    job: Job, load: Flags, limits_ms: tuple[float | None, float | None] = (None, None)
) -> ServeAnswer:
    """Predict serving for a resolved job: the exact breakdown and its interval (one compiled
    program), the best batch within ``limits_ms`` (TTFT, TPOT; ``None``: no limit), the
    prediction under ``load`` (the load flags: ``qps`` ``None`` for none), feasibility and the
    ``--json`` object.  The flags must have been checked (:func:`load_flag_problems`,
    :func:`positive_problems`).

    Raises:
        SpecError: the prediction is not finite (:func:`check_finite`).
    """
    assert isinstance(job.plan, ServePlan)
    ttft_slo_ms, tpot_slo_ms = limits_ms
    calibration = job.calibration
    cost = ServeCost(job.system, job.model)
    out, linearised = _predict(cost, job.plan)
    check_finite(out, "serving", job.system, job.model, job.inputs())
    slo = _at_slo_summary(cost, job.plan, ttft_slo_ms, tpot_slo_ms)
    problems = serve_problems(job.model, job.plan, out, float(job.system.num_chips))
    problems += _slo_problems(slo)
    cov = job_coverage("serve", job.refs, job.plan, calibration, values=job.values)
    engine = engine_summary(job.values.get("engine"), job.plan)
    iv = intervals(
        cost, job.plan, job_chip(job.refs), calibration, "serve", engine["name"], linearised
    )
    if slo is not None:
        slo.update(_slo_interval(cost, job.plan, slo.pop("limits_s"), iv))
    loaded, caps = _loaded_plan(job, load["qps"] is not None)
    under = load_summary(job.system, job.model, loaded, load, caps)
    problems += load_problems(under)
    formats = serve_format_summary(job)
    extra_keys: dict[str, Any] = {"slo": slo} if slo is not None else {}
    extra_keys |= {"load": under, "coverage": cov, "engine": engine, "formats": formats}
    extra_keys.update(iv or {"interval": None})
    if job.collective is not None:  # the default output stays as it was
        extra_keys["collective"] = job.collective
    counts = {"system_chips": job.chips}
    obj = prediction_json(out, job.refs, counts, job.values, problems, **extra_keys)
    return ServeAnswer(out, problems, cov, engine, iv, slo, under, formats, obj)


def _loaded_plan(job: Job, loaded: bool) -> tuple[ServePlan, dict[str, Any] | None]:
    """The plan the server runs under load (:func:`~diffcost._serve.caps.capped_plan`): the
    engine's sequence cap and token budget on this chip for this model, except where the
    scenario or a flag gave ``batch`` or ``prefill_chunk``; and the ``caps`` block saying
    which.  Without a load, the plan itself and ``None``."""
    assert isinstance(job.plan, ServePlan)
    if not loaded:
        return job.plan, None
    memory = float(job.system.chip.memory_capacity_bytes)
    context = float(job.model.max_seq_len)
    caps = engine_caps(job.values.get("engine"), job_chip(job.refs), memory, context)
    plan, origin = capped_plan(job.plan, caps, given=set(job.values))
    return plan, caps_summary(caps, origin)


def engine_summary(name: str | None, plan: ServePlan) -> dict[str, Any]:
    """The engine a prediction was made for: its profile and the kernel flags the plan used
    (a flag given explicitly overrides the profile)."""
    profile = load_engine(DEFAULT_ENGINE if name is None else name)
    return {
        "name": profile.name,
        "display_name": profile.display_name,
        "default": name is None,
        "attention_kernel": profile.attention_kernel,
        **{name: bool(getattr(plan, name)) for name in ENGINE_BEHAVIOURS},
    }


def engine_line(engine: dict[str, Any]) -> str:
    """``engine: vllm-0.10 (default; ...): GQA-aware decode, fused dequant, CUDA graphs``: each
    behaviour of :data:`~diffcost._serve.behaviours.ENGINE_BEHAVIOURS` as it names itself."""
    flags = [b.shown[0 if engine[name] else 1] for name, b in ENGINE_BEHAVIOURS.items()]
    default = " (default; --engine NAME to change)" if engine["default"] else ""
    return f"engine: {engine['name']}{default}: {', '.join(flags)}"


def _rows(out: ServeBreakdown, basis: str) -> list[tuple[str, str]]:
    """The serving prediction as (quantity, formatted value) rows."""
    g = float
    price = g(out.cost_per_million_tokens_usd)
    mem = out.memory
    return [
        ("time to first token (TTFT)", fmt_time(g(out.ttft_s))),
        ("time per output token (TPOT)", fmt_time(g(out.tpot_s))),
        ("request latency", fmt_time(g(out.request_latency_s))),
        ("output tokens / s (deployment)", f"{g(out.output_tokens_per_s):,.0f}"),
        ("output tokens / s / chip", f"{g(out.output_tokens_per_s_per_chip):,.1f}"),
        ("output tokens / s / user", f"{g(out.output_tokens_per_s_per_user):,.1f}"),
        ("decode step", fmt_time(g(out.decode_step_s))),
        ("  draft passes", fmt_time(g(out.decode_draft_s))),
        ("  GEMMs", fmt_time(g(out.decode_gemm_s))),
        ("  attention", fmt_time(g(out.decode_attention_s))),
        ("  memory-bound kernels", fmt_time(g(out.decode_memory_s))),
        ("  kernel launches", fmt_time(g(out.decode_launch_s))),
        ("  tensor-parallel all-reduce", fmt_time(g(out.decode_tp_comm_s))),
        (
            "  pipeline hand-offs + waits",
            fmt_time(g(out.decode_pp_comm_s) + g(out.decode_pipeline_wait_s)),
        ),
        ("decode memory-bound fraction", f"{g(out.decode_memory_bound_fraction):.0%}"),
        ("tokens per decode step", f"{g(out.tokens_per_step):.2f}"),
        ("critical batch (compute-bound above)", f"{g(out.critical_batch):,.0f}"),
        ("memory / chip: weights", fmt_bytes(g(mem.weights_bytes))),
        (
            "  KV cache (block waste)",
            f"{fmt_bytes(g(mem.kv_cache_bytes))} ({fmt_bytes(g(mem.kv_block_waste_bytes))})",
        ),
        ("  activations", fmt_bytes(g(mem.activations_bytes))),
        ("  runtime reserve", fmt_bytes(g(mem.reserved_bytes))),
        (
            "  total / capacity",
            f"{fmt_bytes(g(mem.total_bytes))} / {fmt_bytes(g(out.capacity_bytes))}",
        ),
        ("largest batch that fits", f"{max(g(out.max_batch), 0.0):,.0f}"),
        ("chips for the weights alone", f"{g(out.min_chips_for_weights):.2f}"),
        ("energy / output token", f"{g(out.energy_per_token_j):.3f} J ({basis})"),
        ("cost / 1M output tokens", f"${price:.3f}" if price > 0 else "n/a (no price)"),
        ("accuracy cost (user-set)", f"{g(out.accuracy_cost):g}"),
    ]


def _print_table(
    out: ServeBreakdown,
    names: tuple[str, str],
    job: Job,
    iv: dict[str, Any] | None,
) -> None:
    """Identities, plan and the serving table, with the 80% interval of TTFT, TPOT and the
    throughputs; the energy row says how it was computed (:func:`energy_basis`)."""
    model_name, hw_name = names
    n_chips, values = job.chips, job.values
    basis = energy_basis(job.system, job_chip(job.refs))
    chips_used = float(out.chips)
    console.print(f"{model_name} on {chips_used:.0f} of {n_chips}x {hw_name}", style="bold")
    console.print(f"plan: {plan_line(values)}", highlight=False)
    count = lambda v: f"{v:,.0f}"  # noqa: E731
    bands = {
        "time to first token (TTFT)": interval_text(iv, "ttft_s", fmt_time),
        "time per output token (TPOT)": interval_text(iv, "tpot_s", fmt_time),
        "output tokens / s (deployment)": interval_text(iv, "output_tokens_per_s", count),
        "output tokens / s / chip": interval_text(
            iv, "output_tokens_per_s_per_chip", lambda v: f"{v:,.1f}"
        ),
        "request latency": interval_text(iv, "request_latency_s", fmt_time),
        "energy / output token": interval_text(iv, "energy_per_token_j", lambda v: f"{v:.3f} J"),
        "cost / 1M output tokens": interval_text(
            iv, "cost_per_million_tokens_usd", lambda v: f"${v:.3f}"
        ),
    }
    console.print(kv_table("serving", _rows(out, basis), bands if iv is not None else None))
    note = closed_loop_note(job.plan)
    if note:
        console.print(note, highlight=False, markup=False)


def closed_loop_note(plan: Any) -> str | None:
    """What continuous batching's TTFT stands for (:func:`diffcost._serve.modes.
    continuous_mode`): a closed loop of ``batch`` clients, whose first-token iteration holds the
    prompts of a cohort up to the token budget; None for another mode or one client."""
    if not isinstance(plan, ServePlan):
        return None
    names = ("mode", "disaggregated", "batch", "input_len", "prefill_chunk")
    value = {f.name: f.read(getattr(plan, f.name)) for f in SERVE_FIELDS if f.name in names}
    batch, n_in, chunk = value["batch"], value["input_len"], value["prefill_chunk"]
    if value["mode"] != ServeMode.CONTINUOUS or value["disaggregated"] or batch <= 1:
        return None
    cohort = min(chunk, batch * n_in)
    return (
        f"TTFT (continuous batching): a closed loop of {batch:,} clients, as concurrency "
        f"benchmarks run; the iteration that finishes a prompt holds {cohort:,} prompt tokens "
        f"(its cohort, up to the {chunk:,}-token budget); arrivals at a rate: --qps"
    )


def _slo_problems(slo: dict[str, Any] | None) -> list[str]:
    """Why no batch meets the latency limits (the request is then infeasible): the latencies
    at batch 1, the floor of TTFT and TPOT over batches, against the limits."""
    if slo is None or slo["feasible"]:
        return []
    ms = lambda s: f"{s * 1e3:.4g} ms"  # noqa: E731
    limits = [
        f"{name} <= {ms(slo[key + '_slo_s'])} (batch 1 gives {ms(slo[key + '_s'])})"
        for name, key in (("TTFT", "ttft"), ("TPOT", "tpot"))
        if slo[key + "_slo_s"] is not None
    ]
    return [f"no batch meets {' and '.join(limits)} and fits in memory"]


def _print_slo(slo: dict[str, Any] | None) -> None:
    """The best batch under the latency limits, or that none meets them."""
    if slo is None:
        return
    if slo["feasible"]:
        key = "output_tokens_per_s_per_chip"
        band = (
            f" (p10-p90 {slo[key + '_p10']:,.1f} - {slo[key + '_p90']:,.1f})"
            if (key + "_p10" in slo)
            else ""
        )
        console.print(
            f"at the SLO: batch {slo['batch']}, {slo[key]:,.1f} output tokens/s/chip{band} "
            f"(TTFT {fmt_time(slo['ttft_s'])}, TPOT {fmt_time(slo['tpot_s'])})",
            highlight=False,
        )
    else:
        console.print("no batch meets the SLO (and fits in memory)", style="bold red")
