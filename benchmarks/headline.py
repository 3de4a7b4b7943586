"""Headline performance numbers in one machine-readable JSON, so that regressions are visible.

Run: python benchmarks/headline.py [--out benchmarks/headline.json] [--quick] [--programs]
(``--programs``: only the program sizes and their trace and compile times, printed)

Measured (seconds unless named otherwise; the device is recorded):
- ``import_s``: ``python -c "import diffcost"``, best of 3.
- ``programs``: jaxpr equations of the reference programs (exact and relaxed values, relaxed
  gradients; training and serving) with their budgets, trace and compile times.
- ``cold_*_s`` / ``warm_*_s``: ``diffcost train``, ``serve``, ``plan train --chips 64`` and
  ``sensitivity train`` as subprocesses, first with an empty compilation cache (a fresh
  machine), then with the cache they wrote (``DIFFCOST_CACHE_DIR``).
- ``single_plan_us``: one jitted training prediction of the step time, dispatch and the copy
  to the host included (``float(...)``), after warm-up; ``single_plan_all_outputs_us`` the same
  for every output (the whole breakdown pytree copied back); ``predictor_packed_us`` every
  output through :class:`diffcost.Predictor` (a packed plan in, a packed vector out), and
  ``predictor_plan_to_dict_us`` from a plan object to a dict of outputs.
- ``train_vmap_plans_per_s`` / ``serve_vmap_plans_per_s``: exact plans per second under one
  ``vmap`` (the step time / TPOT only; XLA drops unread outputs).
- ``exhaustive``: the on-device enumeration (:func:`diffcost._search.core.scan_space`) per
  scenario: space size, valid and feasible plans, compile and warm wall time, plans/s of the
  whole space end to end, and the same for the host enumeration it replaced.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import equinox as eqx
import jax
import numpy as np
from _timing import time_calls, time_vmapped  # benchmarks/ is sys.path[0] when run as a script
from bench_serve import random_plans as serve_plans
from bench_train import random_plans as train_plans

import diffcost as dc
from diffcost._analysis.program_size import BUDGETS, TARGETS, count_equations, reference_programs
from diffcost._search.core import _result, enumerate_all, scan_space, space_size
from diffcost._search.train import TrainProblem, TrainSearchSpace

SCENARIOS = [
    # name, model, system, chips, space
    ("gpt3-175b-1024xa100", "gpt3-175b", "dgx-a100", 1024, dict(global_batch=1536, seq_len=2048)),
    (
        "gpt3-175b-16384xh100-fp8-cp",
        "gpt3-175b",
        "dgx-h100",
        16384,
        dict(global_batch=4096, seq_len=4096, max_cp=8, precision=("bf16", "fp8")),
    ),
    (
        "llama-3-70b-chips-1..1024xh100",
        "llama-3-70b",
        "dgx-h100",
        1024,
        dict(
            global_batch=1024,
            seq_len=8192,
            max_cp=8,
            max_micro_batch=64,
            chips=tuple(2**k for k in range(11)),
            precision=("bf16", "fp8"),
        ),
    ),
]


def _best_of(
    cmd: list[str], repeats: int, env: dict[str, str] | None = None, cwd: str | None = None
) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=False, capture_output=True, env=env, cwd=cwd)
        best = min(best, time.perf_counter() - t0)
    return best


#: The command lines timed cold (empty cache) and warm (issue 38's list; codesign takes minutes
#: cold and is left to its own benchmark).
CLI_COMMANDS = [
    ("train", ["train"]),
    ("serve", ["serve"]),
    ("serve_qps", ["serve", "--qps", "0.5"]),
    ("plan_train", ["plan", "train", "--chips", "64"]),
    (
        "plan_train_gpt3",
        ["plan", "train", "--model", "gpt3-175b", "--system", "dgx-a100"] + ["--chips", "1024"],
    ),
    ("plan_serve", ["plan", "serve"]),
    (  # issue 43: aggregated against disaggregated pools, both formats, 8 chips
        "plan_serve_qps",
        ["plan", "serve", "--qps", "10", "--ttft-p99-ms", "2000", "--tpot-p99-ms", "200"],
    ),
    ("sensitivity_train", ["sensitivity", "train"]),
]


def cli_times(root: str | None = None) -> dict[str, float]:
    """Import time and cold/warm CLI wall times (subprocesses); ``root``: run ``python -m
    diffcost`` from that source tree instead of the installed command (a before/after)."""
    env0 = dict(os.environ)
    if root is None:
        exe = [str(Path(sys.executable).with_name("diffcost"))]
    else:
        exe = [sys.executable, "-m", "diffcost"]
        env0["PYTHONPATH"] = root
    imp = [sys.executable, "-c", "import diffcost"]
    out = {"import_s": _best_of(imp, 3, env0, cwd=root)}
    for name, args in CLI_COMMANDS:
        with tempfile.TemporaryDirectory() as cache:
            env = env0 | {"DIFFCOST_CACHE_DIR": cache}
            out[f"cold_{name}_s"] = _best_of([*exe, *args], 1, env, cwd=root)
            out[f"warm_{name}_s"] = _best_of([*exe, *args], 2, env, cwd=root)
        print(json.dumps({k: round(v, 2) for k, v in out.items() if name in k}), flush=True)
    return out


def programs() -> dict[str, dict]:
    """Per reference program (:mod:`diffcost._analysis.program_size`): jaxpr equations, its
    budget and issue 38's target, trace time (``make_jaxpr``) and compile time (``jit(...)
    .lower(...).compile()`` at XLA's default optimisation, no persistent cache)."""
    jax.config.update("jax_enable_compilation_cache", False)
    out = {}
    for name, (fn, args) in reference_programs().items():
        t0 = time.perf_counter()
        closed = jax.make_jaxpr(fn)(*args)
        trace_s = time.perf_counter() - t0
        lowered = jax.jit(fn).lower(*args)
        t0 = time.perf_counter()
        lowered.compile()
        out[name] = {
            "equations": count_equations(closed),
            "budget": BUDGETS.get(name),
            "target": TARGETS.get(name),
            "trace_s": trace_s,
            "compile_s": time.perf_counter() - t0,
        }
        print(json.dumps({name: out[name]}), flush=True)
    return out


def model_rates(plans: int) -> dict[str, float]:
    """Single-plan latency (host copy included) and vmapped plans/s of both cost models."""
    system, model = dc.load_system("dgx-h100", chips=1024), dc.load_model("llama-3-70b")
    cost = dc.TrainCost(system, model)
    plan = dc.train_plan(tp=8, pp=4, dp=32, global_batch=1024)
    step = eqx.filter_jit(lambda c, p: c(p).step_time_s)
    whole = eqx.filter_jit(lambda c, p: c(p))
    out = {}
    for key, fn, copy in [
        ("single_plan_us", step, float),
        ("single_plan_all_outputs_us", whole, jax.device_get),
    ]:
        copy(fn(cost, plan))
        t0, calls = time.perf_counter(), 500
        for _ in range(calls):
            copy(fn(cost, plan))
        out[key] = (time.perf_counter() - t0) / calls * 1e6
    fast = dc.Predictor(cost, plan)
    x = fast.pack(plan)
    for key, call, arg in [
        ("predictor_packed_us", fast.packed, x),
        ("predictor_plan_to_dict_us", fast, plan),
    ]:
        call(arg)
        t0, calls = time.perf_counter(), 2000
        for _ in range(calls):
            call(arg)
        out[key] = (time.perf_counter() - t0) / calls * 1e6
    chunk = min(plans, 250_000)
    chunks = [train_plans(chunk, seed=i) for i in range(max(1, plans // chunk))]
    _, best = time_vmapped(cost, chunks, lambda c, q: c(q).step_time_s, 2)
    out["train_vmap_plans_per_s"] = chunk * len(chunks) / best
    serve = dc.ServeCost(dc.load_system("dgx-h100", chips=64), model)
    chunks = [serve_plans(chunk, seed=i) for i in range(max(1, plans // chunk))]
    _, best = time_vmapped(serve, chunks, lambda c, q: c(q).tpot_s, 2)
    out["serve_vmap_plans_per_s"] = chunk * len(chunks) / best
    _, per = time_calls(eqx.filter_jit(lambda c, p: c(p).tpot_s), (serve, dc.serve_plan()), 500)
    out["serve_single_plan_us_no_copy"] = per * 1e6
    return out


def exhaustive(host: bool) -> list[dict]:
    """The on-device enumeration per scenario (and the host one it replaced, where asked)."""
    rows = []
    for name, model, system, chips, options in SCENARIOS:
        space = TrainSearchSpace(**({"chips": (chips,)} | options))
        problem = TrainProblem(dc.load_system(system, chips=chips), dc.load_model(model), space)
        size = space_size(problem)
        t0 = time.perf_counter()
        first = scan_space(problem, "device")
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        result = scan_space(problem, "device")
        warm = time.perf_counter() - t0
        assert first is not None and result is not None
        row = {
            "scenario": name,
            "space": size,
            "valid": result.evaluated,
            "feasible": result.feasible_count,
            "best_objective_s": result.best_objective,
            "best_plan": result.rows()[0] if result.best is not None else None,
            "device_first_call_s": cold,
            "device_warm_s": warm,
            "device_plans_per_s": size / warm,
        }
        if host and size <= 2_000_000:
            _result(problem, enumerate_all(problem), "host")  # compile
            t0 = time.perf_counter()
            ref = _result(problem, enumerate_all(problem), "host")
            row["host_warm_s"] = time.perf_counter() - t0
            row["host_plans_per_s"] = size / row["host_warm_s"]
            row["same_answer"] = ref.rows()[:1] == result.rows()[:1]
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "best_plan"}), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default=str(Path(__file__).with_name("headline.json")))
    parser.add_argument("--quick", action="store_true", help="skip the CLI subprocess timings")
    parser.add_argument("--plans", type=int, default=500_000)
    parser.add_argument("--programs", action="store_true", help="only the program sizes")
    parser.add_argument("--cli", action="store_true", help="only the command-line timings")
    parser.add_argument("--root", help="with --cli: time `python -m diffcost` of this tree")
    args = parser.parse_args()
    if args.programs:
        programs()
        return
    if args.cli:
        cli_times(args.root)
        return
    report: dict = {
        "device": str(jax.devices()[0]),
        "cpu_count": os.cpu_count(),
        "jax": jax.__version__,
        "date": time.strftime("%Y-%m-%d"),
    }
    report["programs"] = programs()
    report["exhaustive"] = exhaustive(host=True)
    report |= model_rates(args.plans)
    if not args.quick:
        report |= cli_times()
    Path(args.out).write_text(json.dumps(report, indent=1, default=float) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "exhaustive"}, indent=1))
    rates = [r["device_plans_per_s"] for r in report["exhaustive"]]
    print(f"exhaustive on device: {np.min(rates):,.0f} to {np.max(rates):,.0f} plans/s")


if __name__ == "__main__":
    main()
