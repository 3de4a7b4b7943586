"""Jitter and failures at scale: curves for the closing note of issue 16.

Run: python benchmarks/jitter_goodput.py   (writes benchmarks/results/jitter-goodput.txt)

Job: Llama 3 405B, 8192-token sequences, 2048 sequences (16M tokens) per step, tp 8, pp 18,
full recomputation, data parallelism grown with the chip count (exact model, float32, CPU).

(a) step time of two systems: "peak" = dgx-h100 (400 Gb/s NIC per GPU) with an illustrative
    20 us collective jitter (the shipped systems count none: no measured value was found) and
    "predictable" = the same chips with half the scale-out bandwidth and no jitter;
    plus the jitter sigma at which the two break even.
(b) goodput fraction and Young's checkpoint interval of dgx-h100 against the chip count.
(c) Llama 3 (arXiv:2407.21783 §3.3.4): ">90% effective training time" on 16,384 H100
    (tp 8, pp 16, dp 128 as in the paper's Table 4); what the model predicts.
"""

from pathlib import Path

import equinox as eqx
import jax.numpy as jnp

from diffcost._inputs.hardware import System
from diffcost._inputs.loader import load_model, load_system
from diffcost._train.cost import TrainCost
from diffcost._train.plan import train_plan

OUT = Path(__file__).resolve().parent / "results" / "jitter-goodput.txt"
MODEL = load_model("llama-3-405b")
TP, PP, GLOBAL_BATCH, SEQ = 8, 18, 2048, 8192
DPS = (8, 16, 32, 64, 128, 256)
#: Illustrative per-collective jitter of the "peak" system, s (StragglAR, arXiv:2505.23523, and
#: Hoefler et al. SC'10 give tens of microseconds as the order of magnitude; not a measurement).
SIGMA_S = 20e-6


def with_sigma(system: System, sigma_s: float) -> System:
    """``system`` with a collective jitter of ``sigma_s`` seconds."""
    return eqx.tree_at(lambda s: s.reliability.collective_jitter_s, system, jnp.asarray(sigma_s))


def predictable(system: System) -> System:
    """Half the scale-out bandwidth, no jitter."""
    return eqx.tree_at(
        lambda s: (s.scale_out_bandwidth_bytes_per_s, s.reliability.collective_jitter_s),
        system,
        (system.scale_out_bandwidth_bytes_per_s / 2.0, jnp.asarray(0.0)),
    )


def predict(system: System, tp: int, pp: int, dp: int):
    plan = train_plan(tp=tp, pp=pp, dp=dp, global_batch=GLOBAL_BATCH, seq_len=SEQ, recompute="full")
    return TrainCost(system, MODEL)(plan)


def crossover_lines() -> list[str]:
    lines = [
        "(a) step time vs chips: peak (dgx-h100, 50 GB/s/GPU scale-out, jitter 20 us) vs",
        "    predictable (same, 25 GB/s/GPU scale-out, jitter 0); break-even sigma = jitter at",
        "    which peak becomes as slow as predictable",
        f"{'chips':>7} {'peak s':>9} {'of which jitter':>16} {'predictable s':>14} "
        f"{'break-even sigma':>17}",
    ]
    for dp in DPS:
        chips = TP * PP * dp
        system = with_sigma(load_system("dgx-h100", chips=chips), SIGMA_S)
        peak, calm = predict(system, TP, PP, dp), predict(predictable(system), TP, PP, dp)
        sigma = float(system.reliability.collective_jitter_s)
        per_sigma = float(peak.jitter_time_s) / sigma
        no_jitter = float(peak.step_time_s - peak.jitter_time_s)
        even = (float(calm.step_time_s) - no_jitter) / per_sigma
        lines.append(
            f"{chips:>7} {float(peak.step_time_s):>9.3f}"
            f" {float(peak.jitter_time_s) * 1e3:>13.2f} ms"
            f" {float(calm.step_time_s):>14.3f} {even * 1e3:>14.2f} ms"
        )
    lines += [
        "    At a fixed global batch the tensor-parallel all-reduces per step fall as 1/dp",
        "    (micro-batches = 2048/dp), and each waits for only tp = 8 ranks; the one step-wide",
        "    wait for all chips grows like sqrt(2 ln N) but is a single sigma-sized term.  So",
        "    with 20 us jitter the peak-bandwidth system stays faster at every size here, and",
        "    the jitter at which predictability wins rises with scale (no crossover).",
    ]
    return lines


def goodput_lines() -> list[str]:
    lines = [
        "",
        "(b) dgx-h100 goodput vs chips (Llama 3 failure rate 1.97e-5 /GPU-h, 0.122 GB/s/GPU",
        "    checkpoint bandwidth, 11 min restart)",
        f"{'chips':>7} {'MTBI h':>8} {'ckpt s':>8} {'Young interval s':>17} {'goodput':>8}",
    ]
    for dp in DPS:
        chips = TP * PP * dp
        system = load_system("dgx-h100", chips=chips)
        out = predict(system, TP, PP, dp)
        mtbi_h = 1.0 / (chips * float(system.reliability.failures_per_chip_s)) / 3600.0
        lines.append(
            f"{chips:>7} {mtbi_h:>8.2f} {float(out.checkpoint_time_s):>8.2f}"
            f" {float(out.checkpoint_interval_s):>17.1f} {float(out.goodput_fraction):>8.1%}"
        )
    return lines


def llama3_lines() -> list[str]:
    system = load_system("dgx-h100", chips=16384)
    out = predict(system, 8, 16, 128)
    return [
        "",
        "(c) Llama 3 405B on 16,384 H100 (tp 8, pp 16, dp 128): paper reports >90% effective",
        f"    training time; model predicts goodput {float(out.goodput_fraction):.1%} "
        f"(checkpoint {float(out.checkpoint_time_s):.2f} s every "
        f"{float(out.checkpoint_interval_s):.0f} s, job MTBI "
        f"{1.0 / (16384 * float(system.reliability.failures_per_chip_s)) / 3600.0:.2f} h), "
        f"jitter {float(out.jitter_time_s) * 1e3:.1f} ms of a {float(out.step_time_s):.2f} s step",
    ]


def main() -> None:
    text = "\n".join([*crossover_lines(), *goodput_lines(), *llama3_lines()]) + "\n"
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
