"""Built-in co-design workloads: a differentiable objective of a chip design, its plan joint.

Each workload maps ``(design, technology, plan parameters)`` to ``log(objective) + penalty``
with the relaxed cost models (smoothing=RELAXED); the plan parameters are the relaxed search
variables of :mod:`diffcost._search` (log2 degrees, softmax logits) and the penalties are that
search's own (memory over capacity, latency limits, bounds, divisibility), reused, not copied:

- ``train``: Llama-3-70B pre-training on 1,024 chips (global batch 1,024 x 8,192 tokens,
  selective recomputation, ZeRO-1, bf16), objective the step time, s; plan: tp, pp,
  micro-batch (Narayanan et al. SC'21 for the space).
- ``serve``: Llama-3-70B on 8 chips (bf16 weights, fp8 KV) at TPOT <= 50 ms and TTFT <= 2 s
  (2,048 in, 256 out tokens), objective chip capex per output token/s: design cost (USD) x
  chip-seconds per output token; plan: tp, pp, batch.
- ``latency``: Llama-3-70B on 8 chips (bf16 weights, fp8 KV), one interactive stream (batch 1)
  at TTFT <= 2 s, objective the TPOT (s): the data-centre latency-bound case; plan: tp, pp.
- ``edge``: Llama-3-8B int4 weights, batch 1, one chip, objective the per-token latency
  (TPOT, s) of decode; the plan is fixed (tp = pp = batch = 1).

A mix is a weighted sum of the workloads' log objectives.  The verified answer makes the plan
whole (each log2 degree floored or ceiled, i.e. the powers of two around it) and re-evaluates
every such plan with the EXACT model, keeping the best feasible one (:func:`exact_objective`).
"""

import itertools
import math
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._core.smooth import EXACT, RELAXED, Smoothing
from .._inputs.hardware import System
from .._inputs.loader import load_model, load_system
from .._inputs.model import Model
from .._search.serve import ServeSearchSpace, relaxed_serve_penalty, relaxed_serve_plan
from .._search.train import (
    TrainSearchSpace,
    _layout,
    _structure,
    axes_for,
    relaxed_loss_and_out,
    relaxed_plan,
    valid,
)
from .._serve.cost import ServeCost
from .._serve.plan import serve_plan
from .._train.cost import TrainCost
from .design import ChipDesign, design_cost_usd, design_system, energy_scale
from .technology import Technology

WORKLOADS: tuple[str, ...] = ("train", "serve", "latency", "edge")
#: Softmax temperature of the relaxed plans' (single-option) categorical choices.
PLAN_TAU = 0.02


@dataclass(frozen=True)
class Workload:
    """One built-in workload: the template system whose chip the design replaces, the model,
    and the relaxed plan's parameters (initial values, log2 bounds, traced sizes)."""

    name: str
    kind: str  # "train" or "serve"
    like: System = field(repr=False)
    model: Model = field(repr=False)
    space: Any = field(repr=False)  # TrainSearchSpace or ServeSearchSpace
    theta0: np.ndarray = field(repr=False)
    lo: np.ndarray = field(repr=False)
    hi: np.ndarray = field(repr=False)
    sizes: np.ndarray = field(repr=False)
    unit: str = "s"
    description: str = ""


def _train() -> Workload:
    model, chips = load_model("llama-3-70b"), 1024
    space = TrainSearchSpace(
        global_batch=1024, seq_len=8192, chips=(chips,), recompute=("selective",), zero=(1,),
        sequence_parallel=(True,), max_micro_batch=8, max_virtual_stages=1,
    )  # fmt: skip
    axes, _ = axes_for(model, space)
    lo = np.asarray([math.log2(min(a.values)) for a in axes])
    hi = np.asarray([math.log2(max(a.values)) for a in axes])
    theta0 = np.zeros(_layout(space)["size"].start)
    theta0[:7] = np.clip(np.asarray([3.0, 2.0, 0.0, 0.0, 0.0, 10.0, 0.0]), lo, hi)
    return Workload(
        "train", "train", load_system("dgx-h100", chips=chips), model, space, theta0, lo, hi,
        np.asarray([1024.0, 8192.0, chips]), "s/step",
        "Llama-3-70B training step, 1,024 chips, 8M tokens/step",
    )  # fmt: skip


#: The serving workloads' settings: model, chips, prompt length, weight and KV formats, TTFT
#: and TPOT limits (s), log2 upper bounds of tp, pp, batch, template system, objective.
SERVE_SETTINGS: dict[str, dict[str, Any]] = {
    "serve": dict(
        model="llama-3-70b", chips=8, input_len=2048, weights="bf16", kv="fp8", ttft=2.0,
        tpot=0.05, hi=(3.0, 3.0, 10.0), like="dgx-h100", objective="capex",
        description="Llama-3-70B on 8 chips, TPOT <= 50 ms, TTFT <= 2 s",
    ),
    "latency": dict(
        model="llama-3-70b", chips=8, input_len=2048, weights="bf16", kv="fp8", ttft=2.0,
        tpot=math.inf, hi=(3.0, 3.0, 0.0), like="dgx-h100", objective="tpot",
        description="Llama-3-70B on 8 chips, one stream (batch 1): TPOT, TTFT <= 2 s",
    ),
    "edge": dict(
        model="llama-3-8b", chips=1, input_len=128, weights="int4", kv="bf16", ttft=math.inf,
        tpot=math.inf, hi=(0.0, 0.0, 0.0), like="jetson-agx-orin-devkit", objective="tpot",
        description="Llama-3-8B int4, batch-1 decode on one chip",
    ),
}  # fmt: skip


def _serve(name: str) -> Workload:
    c = SERVE_SETTINGS[name]
    space = ServeSearchSpace(
        input_len=c["input_len"], output_len=256, chips=c["chips"],
        weight_formats=(c["weights"],), kv_formats=(c["kv"],),
        ttft_slo_s=c["ttft"], tpot_slo_s=c["tpot"],
    )  # fmt: skip
    hi = np.asarray(c["hi"])
    # an unbounded limit is stored as 1e9 s (the penalty and the exact check compare with it)
    sizes = np.asarray([c["chips"], min(c["ttft"], 1e9), min(c["tpot"], 1e9)])
    theta0 = np.zeros(6)
    theta0[:3] = np.minimum(np.asarray([3.0, 0.0, 5.0]), hi)
    unit = "s/token" if c["objective"] == "tpot" else "USD s/token"
    return Workload(
        name, "serve", load_system(c["like"]), load_model(c["model"]), space, theta0,
        np.zeros(3), hi, sizes, unit, c["description"],
    )  # fmt: skip


@cache
def builtin_workload(name: str) -> Workload:
    """The built-in workload ``name`` (one of :data:`WORKLOADS`)."""
    if name not in WORKLOADS:
        raise ValueError(f"workload: expected one of {', '.join(WORKLOADS)}, got {name!r}")
    return _train() if name == "train" else _serve(name)


def serve_template(w: Workload):
    """The serve workload's fixed plan fields (prompt and output lengths) as a ServePlan."""
    sp = w.space
    return serve_plan(input_len=sp.input_len, output_len=sp.output_len, source="codesign")


def serve_out(w: Workload, design, tech, theta, sm: Smoothing):
    """The serve workload on ``design`` at the plan ``theta`` (log2 degrees and batch):
    ``(ServeBreakdown, System)``, relaxed or exact by ``sm``."""
    system = design_system(design, tech, w.like)
    structure = serve_structure(w)
    plan = relaxed_serve_plan(theta, PLAN_TAU, serve_template(w), structure, w.sizes[0])
    if not sm.relaxed:  # a whole plan: 2^theta exactly whole (float rounding aside)
        plan = eqx.tree_at(lambda p: (p.tp, p.pp, p.batch), plan, (
            jnp.round(plan.tp), jnp.round(plan.pp), jnp.round(plan.batch)
        ))  # fmt: skip
    return ServeCost(system, w.model, sm)(plan), system


def serve_structure(w: Workload) -> ServeSearchSpace:
    """The workload's serve search space without its chip count, SLOs and batch cap (those are
    the objective's and the penalty's business, not the plan's)."""
    return ServeSearchSpace(
        **{**w.space.__dict__, "chips": 0, "ttft_slo_s": 0.0, "tpot_slo_s": 0.0, "max_batch": 0}
    )


def serve_objective(w: Workload, out, design, tech, sm: Smoothing) -> jax.Array:
    """TPOT (s) for a latency objective (``edge``, ``latency``); else design cost (USD) x
    chip-seconds per output token."""
    if w.unit == "s/token":
        return out.tpot_s
    return design_cost_usd(design, tech, sm) / out.output_tokens_per_s_per_chip


def relaxed_objective(
    w: Workload, design: ChipDesign, tech: Technology, theta: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(log objective, plan penalty, chip power W)`` of the relaxed model (the first two
    dimensionless).  Training folds its penalty into the first
    (:func:`diffcost._search.train.relaxed_loss`, one trace of the training model);
    :func:`relaxed_value` gives the bare objective.  The power is :func:`chip_power_w`."""
    lo, hi, sizes = jnp.asarray(w.lo), jnp.asarray(w.hi), jnp.asarray(w.sizes)
    if w.kind == "train":
        system = design_system(design, tech, w.like)
        structure = _structure(w.space)
        # one trace of the (large) training model: the search's loss, penalty included
        total, out = relaxed_loss_and_out(
            theta, jnp.asarray(PLAN_TAU), system, w.model, structure, lo, hi, sizes
        )
        return total, jnp.zeros_like(total), chip_power_w(w, out, system, design, tech)
    out, system = serve_out(w, design, tech, theta, RELAXED)
    log_obj = jnp.log(serve_objective(w, out, design, tech, RELAXED))
    penalty = relaxed_serve_penalty(out, theta, lo, hi, sizes)
    return log_obj, penalty, chip_power_w(w, out, system, design, tech)


def chip_power_w(w: Workload, out, system: System, design: ChipDesign, tech: Technology):
    """Mean power of one chip running the workload, W: the cost model's activity energy
    (:func:`diffcost._terms.energy.activity_energy_j`: running floor, FLOP, memory and link
    bytes at the chip's per-operation energies) per chip-second, less the system's power
    besides the chips (hosts, switches: ``System.overhead_w``, not the chip's budget).  A
    training step: ``E_step / (chips t_step)``; serving: ``E_token x tokens/s per chip``.
    The design's chip names its full-activity power as its limit
    (:func:`~diffcost._codesign.design.design_chip`), which no workload reaches, so the
    energy is uncapped and this is the power the chip must be built to deliver.

    The value is exact; its gradient is the design's through the running floor, the work's
    rate (``1 / t_step``, tokens/s) and the voltage (``(V/V_nom)^2`` of the dynamic energy),
    with the dynamic energy per unit of work otherwise held (``stop_gradient``): it changes
    with the plan's activity counts, which the cost model's own gradient would carry through
    its memory and link accounting, and that doubled the compile time of the co-design
    gradient (edge 25 -> 41 s, train ~33 -> 60 s)."""
    idle = system.chip.energy.idle_w
    scale = energy_scale(design, tech)
    if w.kind == "train":
        chips = jnp.asarray(w.sizes[2])
        rate = 1.0 / (out.step_time_s * chips)  # steps per chip-second
        work_j = out.energy_j - (system.overhead_w(chips) + chips * idle) * out.step_time_s
    else:
        rate = out.output_tokens_per_s_per_chip  # tokens per chip-second
        work_j = out.energy_per_token_j - (system.overhead_w(1.0) + idle) / rate
    return idle + jax.lax.stop_gradient(work_j / scale) * scale * rate


def relaxed_value(w: Workload, design: ChipDesign, tech: Technology, theta: jax.Array) -> float:
    """The relaxed objective in the workload's unit (no penalty)."""
    if w.kind == "train":
        system = design_system(design, tech, w.like)
        plan, _ = relaxed_plan(
            theta, jnp.asarray(PLAN_TAU), _structure(w.space), jnp.asarray(w.sizes)
        )
        return float(TrainCost(system, w.model, RELAXED)(plan).step_time_s)
    out, _ = serve_out(w, design, tech, theta, RELAXED)
    return float(serve_objective(w, out, design, tech, RELAXED))


def rounded_plan(w: Workload, theta: np.ndarray) -> np.ndarray:
    """Plan parameters with the log2 degrees rounded to integers inside their bounds."""
    th = np.array(theta, dtype=float)
    n = len(w.lo)
    th[:n] = np.clip(np.round(th[:n]), w.lo, w.hi)
    return th


def plan_neighbours(w: Workload, theta: np.ndarray) -> list[np.ndarray]:
    """The whole plans around a relaxed one: each log2 degree floored or ceiled (inside its
    bounds), every combination, the rounded plan (:func:`rounded_plan`) first."""
    th = np.asarray(theta, dtype=float)
    n = len(w.lo)
    options = [
        sorted({float(np.clip(np.floor(v), lo, hi)), float(np.clip(np.ceil(v), lo, hi))})
        for v, lo, hi in zip(th[:n], w.lo, w.hi, strict=True)
    ]
    first = rounded_plan(w, th)
    out = [first]
    for combo in itertools.product(*options):
        cand = th.copy()
        cand[:n] = combo
        if not np.array_equal(cand, first):
            out.append(cand)
    return out


def exact_objective(
    w: Workload, design: ChipDesign, tech: Technology, theta: np.ndarray
) -> dict[str, Any]:
    """The relaxed plan made whole and verified with the EXACT model: objective, feasibility,
    plan.  Every whole plan around it (:func:`plan_neighbours`, each degree floored or ceiled:
    a fractional optimum between two plans may round to one that does not fit) is evaluated;
    the best feasible one is the answer, else the rounded plan's (infeasible) result."""
    results = [exact_at(w, design, tech, th) for th in plan_neighbours(w, theta)]
    if w.kind == "serve" and w.hi[2] > w.lo[2]:  # a batch to choose
        results += largest_batches(w, design, tech, results)
    feasible = [r for r in results if r["feasible"]]
    return min(feasible, key=lambda r: r["objective"]) if feasible else results[0]


#: Batch resolution of :func:`largest_batches`: within 1/32 (3%) of the largest feasible one.
BATCH_RESOLUTION = 1.0 / 32.0


def largest_batches(
    w: Workload, design: ChipDesign, tech: Technology, results: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """For each (tp, pp) of a feasible result, the EXACT result at the largest feasible whole
    batch up to the workload's bound (to within :data:`BATCH_RESOLUTION`, by bisection).

    A serving batch is any whole number of sequences (vLLM ``max_num_seqs``, TensorRT-LLM
    ``max_batch_size``), not a power of two, and at a fixed (tp, pp) the objective (capex per
    token/s) falls with the batch while the KV cache, TPOT and TTFT grow with it, so the best
    whole plan is at the largest batch within memory and the SLOs.  The relaxed plan's batch
    alone can miss it: measured on a serve optimum whose relaxed plan was tp 3.9, pp 1.2,
    batch 56, the neighbours' best was 12.4 USD s/token (tp 8, batch 64) and tp 4, pp 2 at
    batch 112 gave 9.1."""
    out, seen = [], set()
    top = 2.0 ** float(w.hi[2])
    for r in results:
        key = (r["plan"]["tp"], r["plan"]["pp"])
        if not r["feasible"] or key in seen:
            continue
        seen.add(key)
        th = np.asarray(r["theta"], dtype=float)

        def at(batch: float, th=th) -> dict[str, Any]:
            return exact_at(w, design, tech, np.concatenate([th[:2], [math.log2(batch)], th[3:]]))

        best = at(top)
        if not best["feasible"]:
            lo, hi, best = r["plan"]["batch"], top, r
            while hi - lo > max(1.0, lo * BATCH_RESOLUTION):
                mid = float(math.floor(0.5 * (lo + hi)))
                trial = at(mid)
                lo, hi, best = (mid, hi, trial) if trial["feasible"] else (lo, mid, best)
        if best is not r:
            out.append(best)
    return out


def _exact_numbers(w: Workload, design: ChipDesign, tech: Technology, th: jax.Array) -> dict:
    """The EXACT model's numbers at the whole plan ``th`` (arrays): objective (the workload's
    unit), memory headroom (bytes), chip power (W, :func:`chip_power_w`) and, for serving,
    TPOT and TTFT (s)."""
    sizes = jnp.asarray(w.sizes)
    if w.kind == "train":
        system = design_system(design, tech, w.like)
        plan, _ = relaxed_plan(th, jnp.asarray(PLAN_TAU), _structure(w.space), sizes)
        out = TrainCost(system, w.model, EXACT)(plan)
        numbers = {"objective": out.step_time_s}
    else:
        out, system = serve_out(w, design, tech, th, EXACT)
        numbers = {
            "objective": serve_objective(w, out, design, tech, EXACT),
            "tpot_s": out.tpot_s,
            "ttft_s": out.ttft_s,
        }
    power = chip_power_w(w, out, system, design, tech)
    return {**numbers, "headroom_bytes": out.headroom_bytes, "power_w": power}


#: One compiled :func:`_exact_numbers` per workload (keyed by identity; the workload is kept),
#: the :data:`EXACT_PROGRAMS_KEPT` most recently made.
_EXACT_PROGRAMS: dict[int, tuple[Workload, Any]] = {}
EXACT_PROGRAMS_KEPT = 32


def _exact_program(w: Workload):
    """The jitted :func:`_exact_numbers` of ``w``: compiled once per workload (and design
    ``counting``; 1-3 s), then ~1-2 ms a plan where the eager model took 0.1-0.35 s (measured:
    the verification of a train optimum ran ~100 plans in 25 s eagerly, 3 s so)."""
    if id(w) not in _EXACT_PROGRAMS:
        while len(_EXACT_PROGRAMS) >= EXACT_PROGRAMS_KEPT:
            del _EXACT_PROGRAMS[next(iter(_EXACT_PROGRAMS))]  # the oldest
        _EXACT_PROGRAMS[id(w)] = (w, eqx.filter_jit(lambda d, t, th: _exact_numbers(w, d, t, th)))
    return _EXACT_PROGRAMS[id(w)][1]


def exact_at(w: Workload, design: ChipDesign, tech: Technology, th: np.ndarray) -> dict[str, Any]:
    """The whole plan ``th`` evaluated with the EXACT model: objective, feasibility, plan (its
    degrees, and ``th`` itself), chip power (W, :func:`chip_power_w`)."""
    dtype = jnp.result_type(float)
    # every leaf a (non-weak) array of one dtype, so the program is traced once
    design = jax.tree.map(lambda v: jnp.asarray(v, dtype), design)
    th = np.asarray(th, dtype=float)
    n = {k: float(v) for k, v in _exact_program(w)(design, tech, jnp.asarray(th, dtype)).items()}
    ok = n["headroom_bytes"] >= 0
    if w.kind == "train":
        names = ("tp", "pp", "cp", "micro_batch")
        deg = {k: float(np.round(2.0 ** th[i])) for i, k in enumerate(names)}
        cols = {**{k: np.asarray([v]) for k, v in deg.items()}, "virtual_stages": np.asarray([1.0]),
                "chips": np.asarray([w.sizes[2]]), "ep": np.asarray([1.0]),
                "sequence_parallel": np.asarray([1.0 if deg["tp"] > 1 else 0.0])}  # fmt: skip
        ok = ok and bool(valid(cols, w.model, w.space)[0])
    else:
        deg = {k: float(np.round(2.0 ** th[i])) for i, k in enumerate(("tp", "pp", "batch"))}
        ok = ok and w.sizes[0] % (deg["tp"] * deg["pp"]) == 0
        ok = ok and n["tpot_s"] <= w.sizes[2] and n["ttft_s"] <= w.sizes[1]
    return {
        "objective": n["objective"],
        "feasible": bool(ok),
        "plan": deg,
        "power_w": n["power_w"],
        "theta": [float(v) for v in th],
    }


__all__ = [
    "PLAN_TAU",
    "WORKLOADS",
    "Workload",
    "builtin_workload",
    "chip_power_w",
    "exact_at",
    "exact_objective",
    "largest_batches",
    "plan_neighbours",
    "relaxed_objective",
    "relaxed_value",
    "rounded_plan",
    "serve_objective",
    "serve_out",
    "serve_structure",
    "serve_template",
]
