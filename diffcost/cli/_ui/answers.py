"""What the web explorer shows, computed by the functions the command line prints from.

Every number of a page comes from :func:`~diffcost.cli._train_cmd.train_answer` or
:func:`~diffcost.cli._serve_cmd.serve_answer` (the ``--json`` objects of ``diffcost train`` and
``diffcost serve`` for the same inputs), from :func:`~diffcost._analysis.sensitivity.sensitivity`
(the elasticities of ``diffcost sensitivity``) or from the relaxed plan gradient below; the
page only draws them.  A request is one JSON object: ``model``, ``system`` or ``chip``,
``chips``, ``collective`` and ``plan`` (plan field -> value, as the command-line flags); a
serving request adds ``qps`` (the load), ``ttft_slo_ms``/``tpot_slo_ms`` (the best batch within
them) and ``ttft_p99_ms``/``tpot_p99_ms`` (goodput's limits under load).  Bad input raises
:class:`~diffcost._core.errors.SpecError` with the command line's own reasons, each naming the
page control (``control tp``) instead of the flag.
"""

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ..._analysis.coverage import coverage_lines
from ..._analysis.sensitivity import HARDWARE_GROUPS, PRIMARY, sensitivity
from ..._core.errors import Problem, SpecError
from ..._core.options import PlanField
from ..._core.smooth import RELAXED
from ..._inputs.checker import builtin_names
from ..._inputs.hardware import FORMATS
from ..._inputs.loader import load_spec
from ..._serve.cost import ServeCost, serve_problems
from ..._serve.plan import SERVE_FIELDS, ServePlan
from ..._train.cost import TrainCost
from ..._train.plan import TRAIN_FIELDS
from .._common import NO_LIMIT, positive_problems
from .._load import load_flag_problems
from .._programs import PREDICT
from .._resolve import Job, resolve_job
from .._serve_cmd import serve_answer
from .._train_cmd import train_answer

#: The plan controls of each tab, in the order the page shows them (issue 45: tp, pp, cp, dp,
#: virtual stages, micro-batch, recomputation, ZeRO, precision; serving: the instance, batch,
#: request lengths, formats and batching mode).
KNOBS = {
    "train": (
        *("tp", "pp", "cp", "dp", "virtual_stages", "micro_batch", "global_batch", "seq_len"),
        *("recompute", "zero", "precision"),
    ),
    "serve": (
        *("tp", "pp", "replicas", "batch", "input_len", "output_len"),
        *("weight_format", "kv_format", "mode", "prefill_chunk"),
    ),
}
#: Plan inputs whose elasticity the tornado shows beside the hardware's: the degrees, batch and
#: lengths (continuous in the relaxed model; the other degrees held, so the chip count moves).
PLAN_AXES = {
    "train": ("tp", "pp", "dp", "cp", "micro_batch", "global_batch", "seq_len"),
    "serve": ("tp", "batch", "input_len", "output_len"),
}
#: Request keys besides the plan.
REFS = ("model", "system", "chip", "chips", "collective")
SERVE_EXTRAS = ("qps", "ttft_slo_ms", "tpot_slo_ms", "ttft_p99_ms", "tpot_p99_ms")
#: Rows of the tornado chart: the hardware numbers with the largest elasticities.
TOP_HARDWARE = 10

_FIELDS = {"train": {f.name: f for f in TRAIN_FIELDS}, "serve": {f.name: f for f in SERVE_FIELDS}}


def knob(field: PlanField) -> dict[str, Any]:
    """A plan field as the page's control: name, kind, default, meaning, choices, minimum and
    unit, from the field's declaration (:class:`~diffcost._core.options.PlanField`)."""
    return {
        "name": field.name,
        "kind": field.kind,
        "default": field.default if not callable(field.default) else None,
        "doc": field.doc,
        "options": [str(o) if not isinstance(o, int) else o for o in field.options()],
        "minimum": field.minimum,
        "unit": field.unit,
        "short": field.short or field.name,
    }


def _named(kind: str, names: list[str]) -> list[dict[str, str]]:
    """Built-in specs of ``kind`` with their display names."""
    return [{"name": n, "display_name": load_spec(kind, n).info.display_name} for n in names]


def meta() -> dict[str, Any]:
    """What the page's controls offer: built-in models, systems and chips, the plan controls
    of each tab and the default job of each (the ``default-train``/``default-serve``
    scenarios, as ``diffcost train``/``serve`` without flags)."""
    out: dict[str, Any] = {
        "models": _named("model", builtin_names("model")),
        "systems": _named("system", builtin_names("system")),
        "chips": _named("chip", builtin_names("chip")),
        "formats": list(FORMATS),
        "knobs": {k: [knob(_FIELDS[k][n]) for n in names] for k, names in KNOBS.items()},
        "defaults": {},
    }
    for kind in ("train", "serve"):
        job = resolve_job(kind, None, dict.fromkeys(REFS), {}, "default")
        plan = {k: job.values[k] for k in KNOBS[kind] if k in job.values}
        refs = {k: job.refs[k] for k in ("model", "system", "chip", "chips")}
        out["defaults"][kind] = {**refs, "chips": job.chips, "plan": plan}
    return out


def _page_problem(problem: Problem) -> Problem:
    """A problem with a value the page sent (the command line's ``<arguments>``) names the
    page's control instead; problems inside a file keep naming the file."""
    if problem.file in ("<arguments>", "<flags>"):
        return Problem(
            "page", f"control {problem.key.lstrip('-').replace('-', '_')}", problem.reason
        )
    return problem


def _number(value: Any, key: str, problems: list[Problem]) -> float | None:
    """A number the page sent (``None`` or ``""``: not given)."""
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        problems.append(Problem("page", f"control {key}", f"must be a number, got {value!r}"))
        return None
    return float(value)


def job_of(kind: str, request: dict[str, Any]) -> Job:
    """The job of a page request, read as the command line reads its flags
    (:func:`~diffcost.cli._resolve.resolve_job`).

    Raises:
        SpecError: every problem at once (unknown keys, bad values, unknown model or system),
            each naming the page control or the file.
    """
    problems: list[Problem] = []
    allowed = {*REFS, "plan", *(SERVE_EXTRAS if kind == "serve" else ())}
    for key in request:
        if key not in allowed:
            problems.append(Problem("page", key, f"unknown input; expected {sorted(allowed)}"))
    plan = request.get("plan") or {}
    if not isinstance(plan, dict):
        raise SpecError([Problem("page", "plan", "must be an object of plan controls")])
    fields = _FIELDS[kind]
    for key in plan:
        if key not in fields:
            problems.append(Problem("page", f"control {key}", f"not a {kind} plan field"))
    flags = {k: v for k, v in plan.items() if k in fields and v not in (None, "")}
    refs = {k: (request.get(k) or None) for k in REFS}
    if refs["model"] is None:
        problems.append(Problem("page", "control model", "choose a model"))
    chips = refs["chips"]
    if chips is not None and (isinstance(chips, bool) or not isinstance(chips, int)):
        problems.append(Problem("page", "control chips", f"must be a whole number, got {chips!r}"))
        refs["chips"] = None
    try:
        job = resolve_job(kind, None, refs, flags, "default")
    except SpecError as err:
        raise SpecError(problems + [_page_problem(p) for p in err.problems]) from None
    if problems:
        raise SpecError(problems)
    return job


def _serve_load(
    request: dict[str, Any],
) -> tuple[dict[str, Any], tuple[float | None, float | None]]:
    """The load flags and latency limits of a serving request, checked as the command line
    checks them.

    Raises:
        SpecError: a rate or limit that is not a positive number.
    """
    problems: list[Problem] = []
    qps = _number(request.get("qps"), "qps", problems)
    limits = (
        _number(request.get("ttft_slo_ms"), "ttft_slo_ms", problems),
        _number(request.get("tpot_slo_ms"), "tpot_slo_ms", problems),
    )
    load = {"qps": qps, "arrival_cv": 1.0, "input_cv": 0.0}
    for key in ("ttft_p99_ms", "tpot_p99_ms"):  # goodput's limits under load
        load[key] = _number(request.get(key), key, problems)
    named: dict[str, float | None] = {"ttft_slo_ms": limits[0], "tpot_slo_ms": limits[1]}
    flag_problems = load_flag_problems(load)
    flag_problems += positive_problems(named, "milliseconds", NO_LIMIT, 1e-3)
    problems += [_page_problem(p) for p in flag_problems]
    if problems:
        raise SpecError(problems)
    return load, limits


def plan_elasticities_of(cost: Any, plan: Any, metric: str, axes: tuple[str, ...]) -> Any:
    """``d log metric / d log x`` for each plan input ``x`` of ``axes`` (the other fields held),
    by the relaxed model's gradient (:data:`~diffcost._core.smooth.RELAXED`: equal to the exact
    model at integer plans, smooth between them).  ``cost`` is the relaxed cost model."""

    def log_metric(values: list[Any]) -> Any:
        moved = eqx.tree_at(lambda p: [getattr(p, n) for n in axes], plan, values)
        return jnp.log(getattr(cost(moved), metric))

    values = [getattr(plan, n) for n in axes]
    grads = jax.grad(log_metric)(values)
    return jnp.stack([g * v for g, v in zip(grads, values, strict=True)])


#: One compiled program per kind: the plan elasticities of its headline time.
_plan_elasticities = eqx.filter_jit(plan_elasticities_of, donate="none")


def elasticities(kind: str, job: Job, metric: str | None = None) -> dict[str, Any]:
    """The tornado chart's rows: the :data:`TOP_HARDWARE` hardware numbers whose elasticity
    on ``metric`` (default: step time, TPOT) is largest (``diffcost sensitivity``), and the
    plan inputs' elasticities (:func:`plan_elasticities_of`); non-finite values are dropped."""
    metric = metric or PRIMARY[kind]
    sens = sensitivity(kind, job.system, job.model, job.plan)
    ranked = sens.ranked(metric, HARDWARE_GROUPS)
    ranked = ranked[ranked.elasticity != 0.0].head(TOP_HARDWARE)
    hardware = [
        {"parameter": str(p), "group": str(g), "value": float(v), "elasticity": float(e)}
        for p, g, v, e in zip(
            ranked.parameter, ranked.group, ranked.value, ranked.elasticity, strict=True
        )
    ]
    cls: Callable[..., Any] = TrainCost if kind == "train" else ServeCost
    relaxed = cls(job.system, job.model, smoothing=RELAXED)
    axes = PLAN_AXES[kind]
    values = np.asarray(_plan_elasticities(relaxed, job.plan, metric, axes))
    plan_rows = [
        {"parameter": f"plan.{n}", "group": "plan", "elasticity": float(v)}
        for n, v in zip(axes, values, strict=True)
        if np.isfinite(v)
    ]
    return {"metric": metric, "hardware": hardware, "plan": plan_rows}


def train(request: dict[str, Any]) -> dict[str, Any]:
    """The training tab: the ``diffcost train --json`` object of the request, the lines the
    table prints under it (coverage, MFU plausibility, the interval's note) and the
    elasticities.

    Raises:
        SpecError: a bad request (every problem at once).
    """
    job = job_of("train", request)
    answer = train_answer(job)
    notes = coverage_lines(answer.coverage)
    if answer.interval is not None:
        notes.append(f"interval: {answer.interval['interval']['note']}")
    return {"answer": answer.json, "notes": notes, "elasticities": elasticities("train", job)}


def serve(request: dict[str, Any]) -> dict[str, Any]:
    """The serving tab: the ``diffcost serve --json`` object of the request (with ``--qps``
    and the latency limits when given), its notes, the rooflines and the elasticities.

    Raises:
        SpecError: a bad request (every problem at once).
    """
    load, limits = _serve_load(request)
    job = job_of("serve", request)
    answer = serve_answer(job, load, limits)
    notes = coverage_lines(answer.coverage)
    if answer.formats["note"]:
        notes.insert(0, f"formats: {answer.formats['note']}")
    if answer.interval is not None:
        notes.append(f"interval: {answer.interval['interval']['note']}")
    return {
        "answer": answer.json,
        "notes": notes,
        "roofline": roofline(job, answer.json),
        "elasticities": elasticities("serve", job),
    }


def roofline(job: Job, answer: dict[str, Any]) -> dict[str, Any]:
    """The chip's roofline (Williams, Waterman and Patterson, CACM 52(4), 2009) and the
    operating points of decode and prefill on one chip of the instance.

    Roofs: the dense peak of the plan's GEMM format, FLOP/s, and the memory bandwidth, bytes/s
    (the datasheet numbers; the model's achievable fractions are the calibrated efficiency).

    - Decode (one step of the whole batch): FLOP and bytes are the roofline floors of the
      prediction (``decode_compute_s`` times the achievable peak; ``decode_weight_read_s +
      decode_kv_read_s`` times the achievable bandwidth), attained over ``decode_step_s``.
    - Prefill (one prompt of ``input_len`` tokens): the forward FLOP of the model
      (:meth:`~diffcost._inputs.model.Model.forward_flop`: ``2 N`` per token, Kaplan et al.
      2020, plus attention) over the weights each chip reads once (``memory_bytes.
      weights_bytes``); attained over the prompt's share of the first-token time, ``ttft_s``
      times ``input_len`` over the tokens the first-token iteration holds (all ``batch``
      prompts in static batching; the cohort, at most the token budget, in continuous
      batching).

    Intensities in FLOP/byte, attained rates in FLOP/s per chip.
    """
    plan = job.plan
    assert isinstance(plan, ServePlan)
    system, model = job.system, job.model
    values = job.values
    fmt = str(values.get("compute_format") or answer["formats"]["compute_format"])
    peak = float(system.chip.peak_flop_per_s[FORMATS.index(fmt)])
    bandwidth = float(system.chip.memory_bandwidth_bytes_per_s)
    eff = system.efficiency
    achievable_peak = peak * float(eff.matmul_peak_fraction)
    achievable_bw = bandwidth * float(eff.memory_bandwidth_fraction)
    decode_flop = answer["decode_compute_s"] * achievable_peak
    decode_bytes = (answer["decode_weight_read_s"] + answer["decode_kv_read_s"]) * achievable_bw
    chips = float(values.get("tp", 1)) * float(values.get("pp", 1))
    n_in, batch = float(values.get("input_len", 1)), float(values.get("batch", 1))
    prompt_flop = float(model.forward_flop(1.0, n_in)) / chips
    weights = answer["memory_bytes"]["weights_bytes"]
    mode = str(values.get("mode", "static"))
    held = batch * n_in
    if mode == "continuous":
        held = min(float(values.get("prefill_chunk", 2048)), held)
    prompt_s = answer["ttft_s"] * min(1.0, n_in / max(held, 1.0))
    points = [
        {
            "name": "decode",
            "intensity": decode_flop / decode_bytes if decode_bytes > 0 else None,
            "attained_flop_per_s": decode_flop / answer["decode_step_s"],
        },
        {
            "name": "prefill",
            "intensity": prompt_flop / weights if weights > 0 else None,
            "attained_flop_per_s": prompt_flop / prompt_s if prompt_s > 0 else None,
        },
    ]
    return {
        "format": fmt,
        "peak_flop_per_s": peak,
        "memory_bandwidth_bytes_per_s": bandwidth,
        "ridge_flop_per_byte": peak / bandwidth,
        "points": [p for p in points if p["intensity"] and p["attained_flop_per_s"]],
    }


#: Headline numbers of the compare view, per job: key, label, unit, better when lower.
COMPARED = {
    "train": (
        ("step_time_s", "step time", "s", True),
        ("tokens_per_s", "tokens / s", "tok/s", False),
        ("mfu", "MFU", "", False),
        ("memory_bytes.total_bytes", "memory / chip", "B", True),
        ("capacity_bytes", "capacity / chip", "B", False),
        ("cost_usd", "cost / step", "$", True),
    ),
    "serve": (
        ("ttft_s", "TTFT", "s", True),
        ("tpot_s", "TPOT", "s", True),
        ("output_tokens_per_s_per_chip", "tokens / s / chip", "tok/s", False),
        ("output_tokens_per_s_per_user", "tokens / s / user", "tok/s", False),
        ("memory_bytes.total_bytes", "memory / chip", "B", True),
        ("cost_per_million_tokens_usd", "cost / 1M tokens", "$", True),
    ),
}


def _lookup(obj: dict[str, Any], key: str) -> Any:
    for part in key.split("."):
        obj = obj[part]
    return obj


def compare(request: dict[str, Any]) -> dict[str, Any]:
    """Two jobs of one kind side by side (``{"kind", "a", "b"}``, each a tab's request): their
    headline numbers and feasibility, each from the same answer as its tab.

    Raises:
        SpecError: a bad request, the side (``a.`` or ``b.``) named in each problem's key.
    """
    kind = request.get("kind")
    if kind not in ("train", "serve"):
        raise SpecError([Problem("page", "kind", f"must be train or serve, got {kind!r}")])
    sides, problems = {}, []
    for side in ("a", "b"):
        try:
            job = job_of(kind, request.get(side) or {})
            if kind == "train":
                obj = train_answer(job).json
            else:
                load, limits = _serve_load({})
                obj = serve_answer(job, load, limits).json
            sides[side] = obj
        except SpecError as err:
            problems += [Problem(p.file, f"{side}.{p.key}", p.reason) for p in err.problems]
    if problems:
        raise SpecError(problems)
    rows = [
        {
            "key": key,
            "label": label,
            "unit": unit,
            "lower_is_better": lower,
            "a": _lookup(sides["a"], key),
            "b": _lookup(sides["b"], key),
        }
        for key, label, unit, lower in COMPARED[kind]
    ]
    heads = {
        s: {k: sides[s][k] for k in ("model", "system", "plan", "feasible", "problems")}
        for s in sides
    }
    return {"kind": kind, "rows": rows, **heads}


#: Hardware numbers the "why different chips" view compares (parameter-name prefixes of
#: :func:`~diffcost._analysis.sensitivity.parameter_names` grouped as a hardware architect
#: would name them).
WHY_GROUPS = {
    "compute (peak FLOP/s)": ("chip.peak_flop_per_s",),
    "memory bandwidth": ("chip.memory_bandwidth_bytes_per_s",),
    "memory capacity": ("chip.memory_capacity_bytes",),
    "power limit (TDP)": ("chip.tdp_w",),
    "scale-up links": ("system.scale_up_bandwidth", "system.scale_up_latency"),
    "scale-out network": ("system.scale_out_bandwidth", "system.scale_out_latency"),
}


def why(request: dict[str, Any]) -> dict[str, Any]:
    """Why training and serving want different chips, on the request's system: the summed
    elasticity of the training step time and of serving's TTFT and TPOT (the default plans of
    each tab on that model and system, as sent) with respect to each group of hardware numbers
    (:data:`WHY_GROUPS`).  A step time that falls as FLOP/s rises while TPOT follows the memory
    bandwidth is the divergence that TPUs, LPUs and wafer-scale chips are built around.

    Raises:
        SpecError: a bad request (``{"train": ..., "serve": ...}``, each a tab's request).
    """
    problems, sens = [], {}
    for kind in ("train", "serve"):
        try:
            job = job_of(kind, request.get(kind) or {})
            sens[kind] = sensitivity(kind, job.system, job.model, job.plan)
        except SpecError as err:
            problems += [Problem(p.file, f"{kind}.{p.key}", p.reason) for p in err.problems]
    if problems:
        raise SpecError(problems)
    metrics = (("train", "step_time_s"), ("serve", "ttft_s"), ("serve", "tpot_s"))
    rows = []
    for group, prefixes in WHY_GROUPS.items():
        row: dict[str, Any] = {"group": group}
        for kind, metric in metrics:
            table = sens[kind].table
            sel = table[(table.metric == metric) & table.parameter.str.startswith(prefixes)]
            row[f"{kind}.{metric}"] = float(sel.elasticity.sum())
        rows.append(row)
    return {"metrics": [f"{k}.{m}" for k, m in metrics], "rows": rows}


#: Batches of the serving front: powers of two, as benchmark sweeps of concurrency are run.
FRONT_BATCHES = tuple(2**k for k in range(11))
#: Plan keys of a searched serving row that fix a layout (the batch is swept).
LAYOUT_KEYS = ("tp", "pp", "weight_format", "kv_format", "compute_format", "expert_parallel")


def pareto(request: dict[str, Any]) -> dict[str, Any]:
    """The serving front of a search's plans: each distinct layout among ``plans`` (its
    :data:`LAYOUT_KEYS`) at every batch of :data:`FRONT_BATCHES`, by the exact model
    (``diffcost serve``'s answer without interval), as output tokens/s per user against output
    tokens/s per chip; a point is on the Pareto front when it runs (fits, divides) and no other
    running point is at least as good on both and better on one.  ``request``: ``model``,
    ``system`` or ``chip``, ``chips``, ``input_len``, ``output_len``, ``mode`` and ``plans``
    (the search's rows).

    Raises:
        SpecError: a bad request.
    """
    plans = request.get("plans")
    if not isinstance(plans, list) or not plans:
        raise SpecError([Problem("page", "plans", "give the search's plans (a list of rows)")])
    refs = {k: request.get(k) for k in REFS}
    shape = {k: request.get(k) for k in ("input_len", "output_len", "mode")}
    layouts = list(
        dict.fromkeys(tuple((k, row.get(k)) for k in LAYOUT_KEYS if k in row) for row in plans)
    )
    points = []
    for layout in layouts:
        for batch in FRONT_BATCHES:
            plan = {**shape, **dict(layout), "batch": batch}
            job = job_of("serve", {**refs, "plan": plan})
            assert isinstance(job.plan, ServePlan)
            out, _ = PREDICT["serve"](ServeCost(job.system, job.model), job.plan)
            problems = serve_problems(job.model, job.plan, out, float(job.system.num_chips))
            points.append(
                {
                    "plan": plan,
                    "runs": not problems,
                    "tokens_per_s_per_user": float(out.output_tokens_per_s_per_user),
                    "tokens_per_s_per_chip": float(out.output_tokens_per_s_per_chip),
                }
            )
    running = [p for p in points if p["runs"]]
    for p in points:
        u, c = p["tokens_per_s_per_user"], p["tokens_per_s_per_chip"]
        p["front"] = p["runs"] and not any(
            q["tokens_per_s_per_user"] >= u
            and q["tokens_per_s_per_chip"] >= c
            and (q["tokens_per_s_per_user"] > u or q["tokens_per_s_per_chip"] > c)
            for q in running
        )
    return {"points": points}


def warm(info: dict[str, Any]) -> None:
    """Compile every program the page calls (each tab's answer with its elasticities, serving
    under load and within latency limits, the why view), so that a control change answers at
    once; ``info``: :func:`meta` (its default jobs are the ones compiled)."""
    requests = {}
    for kind in ("train", "serve"):
        d = info["defaults"][kind]
        requests[kind] = {"model": d["model"], "system": d["system"], "plan": d["plan"]}
    train(requests["train"])
    serve({**requests["serve"], "qps": 1.0, "tpot_slo_ms": 100.0})
    why(requests)


__all__ = [
    "KNOBS",
    "PLAN_AXES",
    "compare",
    "pareto",
    "elasticities",
    "job_of",
    "meta",
    "roofline",
    "serve",
    "train",
    "warm",
    "why",
]
