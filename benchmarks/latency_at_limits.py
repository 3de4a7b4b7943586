"""Latencies of MLPerf-style goodput points: at the published rate against at the model's own
goodput at the same p99 limits.

Run: python benchmarks/latency_at_limits.py

An MLPerf Inference Server (or Interactive) result is the largest ``target_qps`` whose p99 TTFT
and p99 TPOT meet the benchmark's limits (mlcommons/inference loadgen; a run outside them is
invalid), so its latencies are those of a server at its own limits.  ``diffcost validate --load``
predicts them at the model's goodput at those limits
(:func:`diffcost._analysis.validate_load.validate_load`); this script prints, for every load
point with limits (``specs/measurements/load``), the measured mean TTFT and TPOT, the model's at
the published rate and at its goodput, and the median |error| of each way.
"""

import jax.numpy as jnp
import numpy as np

from diffcost._analysis.plans import load_load_measurements
from diffcost._analysis.validate_load import _inputs, _predict, closed
from diffcost._serve.load import goodput_qps_jit, workload

KEYS = (("ttft_mean_s", "ttft_mean_s"), ("tpot_mean_s", "tpot_s"), ("tpot_p99_s", "tpot_p99_s"))


def main() -> None:
    errors: dict[str, list[float]] = {}
    print("point | qps published / model goodput | measured, at published rate, at goodput (ms)")
    for m in load_load_measurements():
        if closed(m) or m.limits is None:
            continue
        system, model, plan, load = _inputs(m, "default")
        limits = tuple(jnp.asarray(x) for x in m.limits)
        good = float(goodput_qps_jit(system, model, plan, load.arrival_cv, load.input_cv, *limits))
        at_rate = _predict(system, model, plan, load)
        at_good = _predict(
            system, model, plan, workload(good, m.load["arrival_cv"], m.load["input_cv"])
        )
        parts = []
        for key, field in KEYS:
            if key not in m.measured:
                continue
            meas = m.measured[key]
            a, g = float(getattr(at_rate, field)), float(getattr(at_good, field))
            errors.setdefault(f"{key} at published rate", []).append(a / meas - 1.0)
            errors.setdefault(f"{key} at model goodput", []).append(g / meas - 1.0)
            parts.append(f"{key} {1e3 * meas:6.0f} {1e3 * a:6.0f} {1e3 * g:6.0f}")
        print(f"{m.id[:44]:44s} {m.load['qps']:6.1f} / {good:6.1f} | " + " | ".join(parts))
    for label, errs in errors.items():
        e = np.asarray(errs)
        print(
            f"{label:32s} n={len(e)} median |err| {100 * np.median(np.abs(e)):4.0f}% "
            f"(median {100 * np.median(e):+4.0f}%)"
        )


if __name__ == "__main__":
    main()
