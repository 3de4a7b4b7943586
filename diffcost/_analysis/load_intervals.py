"""p10/p90 of the latencies under load: the calibration's posterior through the load model,
the serving discrepancy of each metric, and the queue's own discrepancy.

An output ``y`` of :func:`diffcost.under_load` (TTFT p50/p99/mean, TPOT mean and p99) gets a
log-normal band ``y exp(-/+ z80 sigma)`` with ``sigma^2 = g Sigma g + d_serve + d_queue``
(the intervals of :mod:`diffcost._analysis.uncertainty`):

* ``g Sigma g``: ``g = d log y / d log theta`` by forward mode through the load model's fixed
  point and its quantile bisection, ``Sigma`` the chip's posterior of the calibrated
  constants (the covariance the single-request intervals use);
* ``d_serve``: the leave-one-source-out discrepancy variance of the single-request metric the
  load output is made of (``ttft`` for TTFT, ``token_latency`` for TPOT) in the chip family's
  or the engine's regime;
* ``d_queue``: :data:`QUEUE_LOG_SD` squared, the analytic queue's error against the
  simulation of the same scheduler (module docstring of ``tests/test_serve_load.py``,
  ``benchmarks/load_vs_simulation.py``): of its 150 cells (six workloads, 0.3-0.9 of
  saturation; TTFT p50/p90/p99, TPOT mean/p99) the median |error| is 4% and 16 miss by more
  than 10%; a normal log error with median |e| = 0.674 sd gives sd 0.059, with
  P(|e| > 0.10) = 16/150 gives sd 0.062.

Effects the model does not have (a point's ``unmodelled`` note) are not in the band.
"""

import math
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._inputs.posterior import basis_of, load_posterior, regime_family
from .._serve.load import Workload, under_load
from .._serve.scheduling import IterationPolicy
from .._terms.risk import Z80, scaled_efficiency
from . import calibrate as C
from .uncertainty import _discrepancy_of

#: Log standard deviation of the analytic queue against the simulation (module docstring).
QUEUE_LOG_SD = 0.06

#: Load outputs given a band, with the serving metric whose discrepancy they carry.
LOAD_OUTPUTS = (
    ("ttft_mean_s", "ttft"),
    ("ttft_p50_s", "ttft"),
    ("ttft_p99_s", "ttft"),
    ("tpot_s", "token_latency"),
    ("tpot_p99_s", "token_latency"),
)


class _Held(eqx.Module):
    """The system in the place :func:`~diffcost._terms.risk.scaled_efficiency` scales."""

    system: Any


@eqx.filter_jit
def load_log_jacobian(system, model, plan, load: Workload, policy: IterationPolicy | None):
    """The :data:`LOAD_OUTPUTS` of :func:`~diffcost.under_load` and ``d log output / d log
    constant`` ``(outputs, constants)`` by forward mode."""

    def f(d):
        scaled = scaled_efficiency(_Held(system), d).system
        out = under_load(scaled, model, plan, load, policy=policy)
        y = jnp.stack([getattr(out, n) for n, _ in LOAD_OUTPUTS])
        return jnp.log(y), y

    zero = jnp.zeros(len(C.NAMES), dtype=system.efficiency.matmul_peak_fraction.dtype)
    jac, value = jax.jacfwd(f, has_aux=True)(zero)
    return value, jac


def load_intervals(
    system,
    model,
    plan,
    load: Workload,
    chip: str,
    calibration: str = "default",
    engine: str | None = None,
    policy: IterationPolicy | None = None,
) -> dict[str, Any] | None:
    """``{"<output>_p10": ..., "<output>_p90": ..., "interval": {...}}`` of the load outputs
    (module docstring); None without a stored posterior.  An output that is not finite and
    positive keeps p10 = p90 = itself."""
    post = load_posterior(calibration)
    if post is None:
        return None
    value, jac = (
        np.asarray(a, dtype=float) for a in load_log_jacobian(system, model, plan, load, policy)
    )
    cov = post.cov_for(basis_of(chip, calibration))
    out: dict[str, Any] = {}
    parts: dict[str, dict[str, float]] = {}
    for (name, metric), y, g in zip(LOAD_OUTPUTS, value, jac, strict=True):
        s = 0.0
        if y > 0.0 and math.isfinite(y) and bool(np.all(np.isfinite(g))):
            param = float(g @ cov @ g)
            serve = _discrepancy_of(post, metric, chip, engine, 0.0)
            s = math.sqrt(param + serve + QUEUE_LOG_SD**2)
            parts[name] = {"constants_var": param, "serve_var": serve, "queue_var": QUEUE_LOG_SD**2}
        out[f"{name}_p10"] = float(y * math.exp(-Z80 * s))
        out[f"{name}_p90"] = float(y * math.exp(Z80 * s))
    out["interval"] = {
        "nominal": 0.8,
        "regime": regime_family(chip),
        "outputs": parts,
        "note": "p10-p90: the calibration posterior through the load model, the serving "
        "discrepancy of the metric, and the queue's against its simulation "
        f"(log sd {QUEUE_LOG_SD})",
    }
    return out


def load_coverage(points: list | None = None, calibration: str = "default") -> dict[str, Any]:
    """Each measured value of the open-loop points at their published rate (not the goodput
    points, whose latencies are predicted at the model's own goodput) against its band, twice:
    the band of :func:`load_intervals` (``p10``, ``p90``, ``inside``), and that band widened
    by the server-mode discrepancy left over on the *other* sources' modelled points
    (``server_var``: their mean squared log error less their mean band variance, at least 0,
    leave-one-source-out, as the calibration's regime discrepancies are: ``p10_loso``,
    ``p90_loso``, ``inside_loso``).  Rows ``{"id", "source", "metric", "measured",
    "predicted", ...}``; the share inside per band, per metric and overall, over the points
    without a known unmodelled effect."""
    from .._inputs.load_measurements import LoadMeasurement
    from .coverage import job_chip
    from .plans import load_load_measurements
    from .validate_load import PREDICTOR, _inputs, policy_of

    chosen: list[LoadMeasurement] = load_load_measurements() if points is None else points
    rows = []
    for m in chosen:
        if m.excluded or "qps" not in m.load or m.limits is not None:
            continue
        system, model, plan, load = _inputs(m, calibration)
        assert load is not None
        chip = job_chip({"system": m.system} if m.system else {"chip": m.chip})
        engine = m.plan.get("engine")
        iv = load_intervals(system, model, plan, load, chip, calibration, engine, policy_of(m))
        if iv is None:
            continue
        for key, value in m.measured.items():
            name = PREDICTOR[key]
            lo, hi = iv[f"{name}_p10"], iv[f"{name}_p90"]
            y = math.sqrt(lo * hi)
            rows.append(
                {
                    "id": m.id,
                    "source": m.source,
                    "metric": key,
                    "measured": value,
                    "predicted": y,
                    "log_sigma": math.log(hi / y) / Z80,
                    "p10": lo,
                    "p90": hi,
                    "inside": lo <= value <= hi,
                    "unmodelled": m.unmodelled,
                }
            )
    modelled = [r for r in rows if not r["unmodelled"]]
    for r in rows:
        others = [o for o in modelled if o["source"] != r["source"]]
        err2 = [math.log(o["predicted"] / o["measured"]) ** 2 for o in others]
        band2 = [o["log_sigma"] ** 2 for o in others]
        extra = max(0.0, float(np.mean(err2)) - float(np.mean(band2))) if others else 0.0
        s = math.sqrt(r["log_sigma"] ** 2 + extra)
        r["server_var"] = extra
        r["p10_loso"] = r["predicted"] * math.exp(-Z80 * s)
        r["p90_loso"] = r["predicted"] * math.exp(Z80 * s)
        r["inside_loso"] = r["p10_loso"] <= r["measured"] <= r["p90_loso"]

    def share(sel: list[dict[str, Any]], key: str) -> float | None:
        return sum(r[key] for r in sel) / len(sel) if sel else None

    out: dict[str, Any] = {"rows": rows, "n": len(modelled)}
    for key in ("inside", "inside_loso"):
        by = {k: share([r for r in modelled if r["metric"] == k], key) for k in PREDICTOR}
        out[key] = {
            "coverage": share(modelled, key),
            "by_metric": {k: v for k, v in by.items() if v is not None},
        }
    return out


def main() -> None:
    """Print :func:`load_coverage` (``python -m diffcost._analysis.load_intervals``)."""
    result = load_coverage()
    for r in result["rows"]:
        mark = " (unmodelled)" if r["unmodelled"] else ""
        print(
            f"{r['id'][:46]:46s} {r['metric']:12s} {1e3 * r['measured']:9.1f} ms "
            f"[{1e3 * r['p10']:8.1f}, {1e3 * r['p90']:8.1f}] "
            f"LOSO [{1e3 * r['p10_loso']:8.1f}, {1e3 * r['p90_loso']:8.1f}] "
            f"{'in' if r['inside'] else 'out'}/{'in' if r['inside_loso'] else 'out'}{mark}"
        )
    for key, label in (("inside", "posterior+serve+queue"), ("inside_loso", "+ server LOSO")):
        c = result[key]
        print(f"nominal 80% band ({label}), modelled points: {c['coverage']:.0%} of {result['n']}")
        for metric, value in c["by_metric"].items():
            print(f"  {metric}: {value:.0%}")


if __name__ == "__main__":
    main()


__all__ = [
    "LOAD_OUTPUTS",
    "QUEUE_LOG_SD",
    "load_coverage",
    "load_intervals",
    "load_log_jacobian",
]
