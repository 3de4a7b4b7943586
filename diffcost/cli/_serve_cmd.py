"""``diffcost serve``: predict serving latency, throughput, memory and cost."""

from pathlib import Path
from typing import Annotated

import equinox as eqx
import typer

from .._core.errors import Problem, SpecError
from .._inputs.loader import load_model, load_system
from .._serve.cost import ServeCost, serve_problems
from .._serve.plan import serve_plan
from . import app
from ._common import (
    EXIT_INFEASIBLE,
    CalibrationOpt,
    JsonFlag,
    Opt,
    console,
    fmt_bytes,
    fmt_time,
    friendly_errors,
    kv_table,
    merge_inputs,
    prediction_json,
    print_json,
    spec_infos,
)

DEFAULT_SCENARIO = "default-serve"
_predict = eqx.filter_jit(lambda cost, plan: cost(plan))
_at_slo = eqx.filter_jit(lambda cost, plan, ttft, tpot: cost.at_slo(plan, ttft, tpot))


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


@app.command()
@friendly_errors
def serve(
    scenario: Annotated[
        str | None,
        Opt(
            f"Scenario file or built-in name (default: {DEFAULT_SCENARIO} when no model is given)."
        ),
    ] = None,
    model: Annotated[str | None, Opt("Built-in model name, model TOML or HF config.json.")] = None,
    system: Annotated[str | None, Opt("Built-in system name or system TOML.")] = None,
    chip: Annotated[str | None, Opt("Built-in chip name or chip TOML.")] = None,
    chips: Annotated[int | None, Opt("Number of chips in the system.")] = None,
    tp: Annotated[int | None, Opt("Tensor-parallel degree of one instance.")] = None,
    pp: Annotated[int | None, Opt("Pipeline-parallel degree of one instance.")] = None,
    replicas: Annotated[int | None, Opt("Replicas (default: chips / chips per replica).")] = None,
    batch: Annotated[int | None, Opt("Concurrent sequences per instance.")] = None,
    input_len: Annotated[int | None, Opt("Prompt tokens per request.")] = None,
    output_len: Annotated[int | None, Opt("Generated tokens per request.")] = None,
    weight_format: Annotated[str | None, Opt("Weights: bf16|fp16|fp8|int8|int4|fp4|...")] = None,
    compute_format: Annotated[
        str | None,
        Opt("GEMM/activation format (default: the weight format; bf16 for int8/int4 weight-only)."),
    ] = None,
    kv_format: Annotated[str | None, Opt("KV-cache format (default bf16).")] = None,
    mode: Annotated[str | None, Opt("static | continuous.")] = None,
    prefill_chunk: Annotated[int | None, Opt("Prompt tokens per iteration (continuous).")] = None,
    draft_len: Annotated[int | None, Opt("Speculative decoding: drafted tokens per step.")] = None,
    acceptance: Annotated[float | None, Opt("Speculative decoding: acceptance rate.")] = None,
    draft_fraction: Annotated[float | None, Opt("Draft model size / target size.")] = None,
    disaggregated: Annotated[
        bool | None,
        typer.Option(
            "--disaggregated/--colocated",
            help="Separate prefill and decode pools.",
            show_default=False,
        ),
    ] = None,
    prefill_chips: Annotated[int | None, Opt("Prefill pool chips per replica.")] = None,
    decode_chips: Annotated[int | None, Opt("Decode pool chips per replica.")] = None,
    kv_block: Annotated[int | None, Opt("Tokens per paged-KV block (1: contiguous).")] = None,
    gqa_decode_kernel: Annotated[
        bool | None,
        typer.Option(
            "--gqa-decode-kernel/--per-query-head-decode",
            help="Decode attention reads each KV head once per group (default), or once per "
            "query head (TensorRT-LLM <= 0.9 masked MHA).",
            show_default=False,
        ),
    ] = None,
    fused_dequant: Annotated[
        bool | None,
        typer.Option(
            "--fused-dequant/--separate-dequant",
            help="Weight-only formats dequantized inside the GEMM (default), or by a separate "
            "kernel writing a 16-bit copy (DeepSpeed-Inference 2022 int8).",
            show_default=False,
        ),
    ] = None,
    accuracy_cost: Annotated[
        list[str] | None, Opt("Accuracy cost of a format, FORMAT=NUMBER (repeatable).")
    ] = None,
    ttft_slo_ms: Annotated[float | None, Opt("TTFT limit, ms: also find the best batch.")] = None,
    tpot_slo_ms: Annotated[float | None, Opt("TPOT limit, ms: also find the best batch.")] = None,
    calibration: CalibrationOpt = "default",
    json_out: JsonFlag = False,
) -> None:
    """Predict serving: TTFT, TPOT, throughput per chip, memory per chip, energy and cost."""
    flags = dict(
        tp=tp,
        pp=pp,
        replicas=replicas,
        batch=batch,
        input_len=input_len,
        output_len=output_len,
        weight_format=weight_format,
        compute_format=compute_format,
        kv_format=kv_format,
        mode=mode,
        prefill_chunk=prefill_chunk,
        draft_len=draft_len,
        acceptance=acceptance,
        draft_params_fraction=draft_fraction,
        disaggregated=disaggregated,
        prefill_chips=prefill_chips,
        decode_chips=decode_chips,
        kv_block=kv_block,
        accuracy_cost=_accuracy_costs(accuracy_cost),
        gqa_decode_kernel=gqa_decode_kernel,
        fused_dequant=fused_dequant,
    )
    refs_flags = {"model": model, "system": system, "chip": chip, "chips": chips}
    refs, values, scenario = merge_inputs("serve", scenario, DEFAULT_SCENARIO, refs_flags, flags)

    sys_ = load_system(
        refs["system"], chip=refs["chip"], chips=refs["chips"], calibration=calibration
    )
    n_chips = int(sys_.num_chips)
    if "replicas" not in values:
        inst = values.get("tp", 1) * values.get("pp", 1)
        per_replica = inst
        if values.get("disaggregated"):
            per_replica = values.get("prefill_chips", inst) + values.get("decode_chips", inst)
        ok = isinstance(per_replica, int) and per_replica > 0
        values["replicas"] = max(1, n_chips // per_replica) if ok else 1
    plan = serve_plan(**values, source=Path(scenario).name if scenario else "<flags>")
    model_ = load_model(refs["model"])
    cost = ServeCost(sys_, model_)
    out = _predict(cost, plan)
    problems = serve_problems(model_, plan, out, float(sys_.num_chips))
    slo = None
    if ttft_slo_ms is not None or tpot_slo_ms is not None:
        inf = float("inf")
        ttft = inf if ttft_slo_ms is None else ttft_slo_ms * 1e-3
        tpot = inf if tpot_slo_ms is None else tpot_slo_ms * 1e-3
        res = _at_slo(cost, plan, ttft, tpot)
        b = res.breakdown
        slo = {
            "ttft_slo_s": ttft if ttft_slo_ms is not None else None,
            "tpot_slo_s": tpot if tpot_slo_ms is not None else None,
            "feasible": bool(res.feasible),
            "batch": int(res.batch),
            "output_tokens_per_s_per_chip": float(b.output_tokens_per_s_per_chip)
            if res.feasible
            else 0.0,
            "output_tokens_per_s": float(b.output_tokens_per_s) if res.feasible else 0.0,
            "ttft_s": float(b.ttft_s),
            "tpot_s": float(b.tpot_s),
        }

    if json_out:
        extra = {"slo": slo} if slo is not None else {}
        chips = {"system_chips": n_chips}
        print_json(prediction_json(out, refs, chips, values, problems, **extra))
    else:
        model_info, hw_info = spec_infos(refs)
        _print_table(
            out, model_info.display_name, hw_info.display_name, n_chips, values, problems, slo
        )
    if problems:
        raise typer.Exit(EXIT_INFEASIBLE)


def _print_table(out, model_name, hw_name, n_chips, values, problems, slo) -> None:
    g = float
    plan_str = ", ".join(f"{k}={v}" for k, v in values.items())
    price = g(out.cost_per_million_tokens_usd)
    rows = [
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
        ("memory / chip: weights", fmt_bytes(g(out.memory.weights_bytes))),
        (
            "  KV cache (block waste)",
            f"{fmt_bytes(g(out.memory.kv_cache_bytes))} "
            f"({fmt_bytes(g(out.memory.kv_block_waste_bytes))})",
        ),
        ("  activations", fmt_bytes(g(out.memory.activations_bytes))),
        ("  runtime reserve", fmt_bytes(g(out.memory.reserved_bytes))),
        (
            "  total / capacity",
            f"{fmt_bytes(g(out.memory.total_bytes))} / {fmt_bytes(g(out.capacity_bytes))}",
        ),
        ("largest batch that fits", f"{max(g(out.max_batch), 0.0):,.0f}"),
        ("chips for the weights alone", f"{g(out.min_chips_for_weights):.2f}"),
        ("energy / output token", f"{g(out.energy_per_token_j):.3f} J (at TDP)"),
        ("cost / 1M output tokens", f"${price:.3f}" if price > 0 else "n/a (no price)"),
        ("accuracy cost (user-set)", f"{g(out.accuracy_cost):g}"),
    ]
    console.print(f"[bold]{model_name}[/] on [bold]{g(out.chips):.0f}[/] of {n_chips}x {hw_name}")
    console.print(f"plan: {plan_str}", highlight=False)
    console.print(kv_table("serving", rows))
    if slo is not None:
        if slo["feasible"]:
            console.print(
                f"at the SLO: batch {slo['batch']}, "
                f"{slo['output_tokens_per_s_per_chip']:,.1f} output tokens/s/chip "
                f"(TTFT {fmt_time(slo['ttft_s'])}, TPOT {fmt_time(slo['tpot_s'])})",
                highlight=False,
            )
        else:
            console.print("[bold red]no batch meets the SLO[/] (and fits in memory)")
    if problems:
        console.print("[bold red]infeasible:[/]")
        for p in problems:
            console.print(f"  - {p}", highlight=False)
    else:
        console.print("[green]feasible[/]: fits in memory, degrees divide.")
