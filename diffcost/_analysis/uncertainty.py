"""How sure a prediction is: a posterior of the calibrated constants, intervals through the model.

**Posterior of the constants** (Laplace approximation, MacKay 1992, "A practical Bayesian
framework for backpropagation networks", Neural Computation 4(3); Bishop, *Pattern Recognition
and Machine Learning*, sec. 4.4). The calibration loss :func:`diffcost._analysis.calibrate.loss`
is read as a negative log posterior at temperature ``s2``: ``-log p(u | data) = loss(u) / s2``
with ``s2 = sum_i w_i r_i^2 / sum_i w_i`` the weighted mean square of the fit's in-sample log
errors ``r_i = log(predicted_i / measured_i)`` (for a Gaussian likelihood of variance ``s2 /
w_i`` the quadratic part of the loss is exactly that). Around the fitted optimum ``u*`` (global
and per-family unconstrained parameters, ``n + 3 n`` for ``n`` constants) the posterior is
Gaussian with covariance ``Sigma_u = s2 H^-1``, ``H = jax.hessian(loss)(u*)`` (the chosen
training plans held fixed), except for the priors of kernel-fitted constants
(:func:`diffcost._analysis.calibrate.kernel_prior`): those are measurements on other data (the
per-kernel timings), so their curvature enters at their own width, untempered (:func:`laplace`).
Eigenvalues of ``H`` below the prior's smallest curvature (a
direction the data leave flat or, away from convergence, slightly concave) are raised to it. The
covariance of a family's log constants follows from ``log v = log lo + (log hi - log lo)
sigmoid(u_g + u_f)``: ``Sigma_f = J_f Sigma_u J_f^T`` with ``J_f = diag((log hi - log lo) s (1 -
s)) [I, I_f]``.

**Model discrepancy** (Kennedy & O'Hagan 2001, "Bayesian calibration of computer models",
JRSS B 63(3)): what the constants cannot explain.  Its variance per regime (metric kind x chip
family) is the mean square of the leave-one-source-out log errors of that regime (each point
predicted by the fit that never saw its source), bias included.  A regime with fewer than
:data:`MIN_POINTS` held-out points takes at least its kind's pooled value.  A regime with none
in a family measured on other metrics takes that family's value pooled over all its held-out
points, and at least its kind's pooled value: the prediction extrapolates across metrics
within the family, with the family's constants, so the family's own evidence of how well its
constants transfer is the relevant error (NeMo's FP8 Hopper training, 2026-11: 4/18 covered by
the pooled training value alone), but once that family's serving is fitted well (2026-11-29,
TensorRT-LLM's Mixtral points modelled) its value alone is near 0 and a training prediction
extrapolated from serving evidence cannot be surer than the training error pooled over the
other families (the NeMo fold: 4/18 covered with the family value alone, 15/18 with both).
A regime of a family never measured takes the worst regime's value: a prediction with no
measurement behind it gets the widest interval the data justify, not a narrow one.

A parallel-layout axis: within one chip the discrepancy also depends on the plan.  Training
plans that shard ZeRO-3 over a group spanning more than one scale-up domain (node) form the
regime ``zero3_multinode`` (:data:`LAYOUT_REGIMES`): the published runs there (Narayanan et al.
SC'21 Table 2, ``specs/measurements/megatron-sc21-zero3.toml``) carry a named unmodelled effect
and are predicted 1.5-4x too fast.  Points with a named unmodelled effect weigh 0 in every fold
of the fit (:func:`diffcost._analysis.calibrate.fold_weights`), so their residuals are held out
for every fold; they are counted in their layout regime only (not in their chip family's, nor in
the pooled or default values of the families), and the regime's variance is their mean square
log error, bias included (the model's error there is a bias, not noise; a symmetric log
interval is the honest summary a delta method can give).  A layout regime with no held-out point
takes the default (worst family) value.  A plan's weight in the regime,
:func:`zero3_multinode_weight`, is ``zero[3] * (1 - is_one(domains))`` (exact at integer plans,
smooth in the relaxed plan), and its discrepancy variance is
``(1 - w) d^2_family + w d^2_layout``.

An engine axis: serving points whose engine's runtime carries a named unmodelled effect
(DeepSpeed-Inference 2022 and HF Accelerate, ``specs/measurements/bloom-inference.toml``:
predicted 5-47% fast) are counted in the regime of that engine (``engine <name>``, per serving
kind) and not in their chip family's, as the layout regime's points are: the runtime's error is
not the family's.  A serving prediction made for such an engine (``serve --engine``) takes the
engine regime's variance; every other engine, the family's.  When the engine's only source is
held out, its regime has no point and the fold takes the default (worst family) value.

**Intervals** (delta method in log space): for an output ``y`` the Jacobian
``g = d log y / d log v`` with respect to the calibrated constants of the chip (one
``jax.jacfwd`` over log scale factors, one jit per entry point) gives
``var log y = g Sigma_f g^T + d^2``;
``p50 = y`` (the median of a log-normal), ``p10/p90 = y exp(-/+ z sigma)``, ``z`` the standard
normal 0.9 quantile (1.2816).

The posterior is stored next to its calibration as ``<name>.posterior.json`` (with its
provenance) and recomputed from the fit by ``python -m diffcost._analysis.uncertainty --write``.
"""

import datetime as _dt
import functools
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._inputs.loader import load_model
from .._inputs.posterior import (
    LAYOUT_REGIMES,
    MIN_POINTS,
    MOE_REGIME,
    REGIME_FAMILIES,
    Posterior,
    basis_of,
    clear_cache,
    engine_regime,
    load_posterior,
    posterior_path,
    regime_family,
)
from .._terms.risk import Z80, scaled_efficiency
from .._train.regimes import zero3_multinode_weight
from . import calibrate as C
from .calibrate_kernels import kernel_constants
from .validate import Prepared, prepare

#: The metric kinds of the measurements (:data:`diffcost._inputs.measurements.METRICS`).
KINDS = ("train_throughput", "serve_throughput", "ttft", "token_latency")
#: Prefix of the regime of any other point with a named unmodelled effect (by its source): its
#: error is that effect's, not its chip family's; no prediction is mapped to it.
UNMODELLED_REGIME = "unmodelled "


# --- Laplace approximation ---------------------------------------------------------------------
def _flat(theta: dict[str, jax.Array]) -> jax.Array:
    return jnp.concatenate([theta["global"], theta["family"].reshape(-1)])


def _unflat(x: jax.Array) -> dict[str, jax.Array]:
    n = len(C.PARAMS)
    return {"global": x[:n], "family": x[n:].reshape(len(C.FAMILIES), n)}


@eqx.filter_jit
def _laplace_parts(x, data: C.FitData, chosen, weights):
    """Hessian of the loss, of the prior penalty alone, of the kernel priors' part of it, the
    log-error Jacobian and residuals."""
    f = lambda y: C.loss(_unflat(y), data, chosen, weights)  # noqa: E731
    h = jax.hessian(f)(x)
    h_prior = jax.hessian(lambda y: C.prior_penalty(_unflat(y), data.kernel))(x)
    kernel = data.kernel
    h_kernel = (
        jnp.zeros_like(h)
        if kernel is None
        else jax.hessian(lambda y: C.kernel_prior_penalty(_unflat(y), kernel))(x)
    )
    pred = lambda y: C.log_predictions(_unflat(y), data, chosen)  # noqa: E731
    r = pred(x) - data.log_measured
    return h, h_prior, h_kernel, r, jax.jacfwd(pred)(x)


def laplace(theta, data: C.FitData, chosen, weights) -> tuple[np.ndarray, float, np.ndarray]:
    """Covariance of the unconstrained parameters at a fit's optimum, ``s2 H^-1`` (module
    docstring), the temperature ``s2`` and the Jacobian of every point's log prediction
    ``(points, 28)``.

    A kernel-fitted constant's prior (:data:`~diffcost._analysis.calibrate.KERNEL_PRIOR_WIDTH`)
    is a measurement of its own, on other data: its curvature enters at its own width, not at
    the end-to-end temperature (``s2 / KERNEL_PRIOR_WEIGHT`` of it in ``H``).  Tempered like
    the rest, a 5% prior would read as +-0.4% (``0.05 sqrt(s2)``) and the family's GEMM
    constants as exact."""
    x = _flat(theta)
    h, h_prior, h_kernel, r, jac = (
        np.asarray(a, dtype=float) for a in _laplace_parts(x, data, jnp.asarray(chosen), weights)
    )
    w = np.asarray(weights, dtype=float)
    s2 = float(np.sum(w * r**2) / np.sum(w))
    relax = h_kernel * (s2 / C.KERNEL_PRIOR_WEIGHT - 1.0)
    h, h_prior = h + relax, h_prior + relax
    floor = float(np.min(np.linalg.eigvalsh(0.5 * (h_prior + h_prior.T))))
    lam, vec = np.linalg.eigh(0.5 * (h + h.T))
    lam = np.maximum(lam, max(floor, _prior_floor(), 1e-12))
    return s2 * (vec / lam) @ vec.T, s2, jac


@functools.cache
def _prior_floor() -> float:
    """Least curvature of the prior penalty at the priors' centre (:func:`C.initial_theta`), the
    floor of every direction's curvature in :func:`laplace`: no direction of the posterior is
    wider than the prior's widest.  At a fold's optimum the prior's own curvature can be
    negative (its bounded transform saturates) and the loss's too where the optimiser stopped
    on a ridge (the NeMo-less and NIM-less folds of 2026-11-29: one negative eigenvalue,
    variances up to 4e9 in the transformed coordinates and intervals 1e7 wide); the prior's
    curvature at its centre is positive (0.0015 for the 2026-11 priors)."""
    x0 = _flat(C.initial_theta())
    h = jax.hessian(lambda y: C.prior_penalty(_unflat(y), None))(x0)
    return float(np.min(np.linalg.eigvalsh(np.asarray(h, dtype=float))))


def log_constant_cov(theta, cov_u: np.ndarray) -> dict[str, np.ndarray]:
    """Covariance of the log constants, globally and per family (``J Sigma_u J^T``)."""
    n = len(C.PARAMS)
    span = C._HI - C._LO
    g = np.asarray(theta["global"], dtype=float)
    out = {}
    for i, name in enumerate(("global", *C.FAMILY_NAMES)):
        u = g if name == "global" else g + np.asarray(theta["family"][i - 1], dtype=float)
        s = 1.0 / (1.0 + np.exp(-u))
        jac = np.zeros((n, cov_u.shape[0]))
        jac[:, :n] = np.diag(span * s * (1 - s))
        if name != "global":
            jac[:, n * i : n * (i + 1)] = np.diag(span * s * (1 - s))
        out[name] = jac @ cov_u @ jac.T
    # a chip with its own prior (not fitted): the global constants' prior widths
    out["prior"] = np.diag(C._WIDTH**2)
    return out


# --- model discrepancy -------------------------------------------------------------------------


def point_regimes(prep: Prepared, chosen: Any) -> list[str | None]:
    """The regime of every point outside its chip family's (None: none): the layout regime of a
    training plan (``chosen``: one row per point, a fit's fold 0, with each point's system),
    the engine regime of a serving point with a named unmodelled effect (module docstring), or
    for any other point with a named unmodelled effect, its source's own regime."""
    out = _point_layouts(prep, chosen)
    for i, m in enumerate(prep.points):
        engine = m.plan.get("engine")
        if float(load_model(m.model).experts) > 0:
            out[i] = MOE_REGIME
        elif m.kind == "serve" and m.unmodelled is not None and isinstance(engine, str):
            out[i] = engine_regime(engine)
        elif m.unmodelled is not None and out[i] is None:
            out[i] = UNMODELLED_REGIME + m.source  # its own effect: no plan predicate maps here
    return out


def _point_layouts(prep: Prepared, chosen: Any) -> list[str | None]:
    out: list[str | None] = [None] * len(prep.points)
    if prep.train is None:
        return out
    rows = np.asarray(chosen)[: prep.n_train]
    systems, _, plans = jax.tree_util.tree_map(lambda x: x[rows], prep.train[:3])
    w = np.asarray(jax.vmap(zero3_multinode_weight)(plans, systems))
    for i, wi in enumerate(w):
        out[i] = "zero3_multinode" if wi > 0.5 else None
    return out


def discrepancy(
    rows: list[dict[str, Any]],
    chips: list[str],
    param_var: np.ndarray,
    exclude: str | None = None,
    regimes: Sequence[str | None] | None = None,
) -> tuple[dict[str, dict[str, float]], float, dict[str, dict[str, int]]]:
    """Discrepancy variance of log outputs per kind and regime family from held-out rows
    (``loso_rows`` of a fit, ``chips`` their chips), leaving out the rows of source
    ``exclude``: the mean square log error less the mean variance the constants' posterior
    already gives those rows (``param_var``, :func:`loso_param_variance`), at least 0.
    Rows with a regime of their own (``regimes``, :func:`point_regimes`: a layout or an
    engine) count in that regime only, stored under their kind (module docstring); a layout
    regime is always stored (the default without points), an engine regime where it has one.
    Returns the variances, the default (worst family regime) and the counts."""
    where_of: Sequence[str | None] = regimes or [None] * len(rows)
    res: dict[tuple[str, str], list[tuple[float, float]]] = {}
    own: dict[tuple[str, str], list[tuple[float, float]]] = {
        ("train_throughput", name): [] for name in LAYOUT_REGIMES
    }
    for row, chip, pv, where in zip(rows, chips, param_var, where_of, strict=True):
        if row["source"] == exclude:
            continue
        r = math.log(row["predicted"] / row["measured"])
        key = (row["metric"], where) if where is not None else (row["metric"], regime_family(chip))
        (own if where is not None else res).setdefault(key, []).append((r, float(pv)))
    out, default, counts = _family_discrepancy(res)
    for (kind, name), v in own.items():
        counts[kind][name] = len(v)
        var = _excess(v) if v else default
        out[kind][name] = var if len(v) >= MIN_POINTS else max(var, default)
    return out, default, counts


def _excess(v: list[tuple[float, float]]) -> float:
    """Mean square log error less the mean parameter variance of those rows, at least 0."""
    return max(float(np.mean([r * r - pv for r, pv in v])), 0.0)


def _family_discrepancy(
    res: dict[tuple[str, str], list[tuple[float, float]]],
) -> tuple[dict[str, dict[str, float]], float, dict[str, dict[str, int]]]:
    """Per kind and chip family (:func:`discrepancy`), with the pooled fallbacks."""
    excess = _excess
    pooled = {
        k: excess([x for (kk, _), v in res.items() if kk == k for x in v])
        for k in KINDS
        if any(kk == k for kk, _ in res)
    }
    full = [excess(v) for v in res.values() if len(v) >= MIN_POINTS]
    default = max(full or list(pooled.values()) or [1.0])
    family = {  # a family's own transfer error, over all its metrics (module docstring)
        fam: excess([x for (_, f), v in res.items() if f == fam for x in v])
        for fam in {f for _, f in res}
    }
    out: dict[str, dict[str, float]] = {}
    counts: dict[str, dict[str, int]] = {}
    for k in KINDS:
        out[k], counts[k] = {}, {}
        for fam in REGIME_FAMILIES:
            v = res.get((k, fam), [])
            counts[k][fam] = len(v)
            if len(v) >= MIN_POINTS:
                out[k][fam] = excess(v)
            elif v:
                out[k][fam] = max(excess(v), pooled[k])
            elif fam in family:
                out[k][fam] = max(family[fam], pooled.get(k, 0.0))
            else:
                out[k][fam] = default
    return out, default, counts


def fold_laplace(fit: C.Fit, prep: Prepared) -> list[tuple[np.ndarray, float, np.ndarray]]:
    """:func:`laplace` of every fold of a fit (fold 0: all sources; fold k: k-th held out)."""
    data = C.fit_data(prep, fit.kernel)
    _, weights = C.fold_weights(
        [m.source for m in prep.points], [m.unmodelled for m in prep.points]
    )
    out = []
    for k in range(len(fit.folds)):
        theta = jax.tree_util.tree_map(lambda x, k=k: x[k], fit.thetas)
        w = jnp.asarray(weights[k], dtype=data.log_measured.dtype)
        out.append(laplace(theta, data, fit.chosen[k], w))
    return out


def loso_param_variance(fit: C.Fit, prep: Prepared, folds: list) -> np.ndarray:
    """Per point, the variance of its held-out log prediction (``loso_rows``) under the
    posterior of the fold that predicted it, ``J_i Sigma_u J_i^T``."""
    fold_of = {s: i for i, s in enumerate(fit.folds)}
    out = np.zeros(len(prep.points))
    for i, m in enumerate(prep.points):
        cov_u, _, jac = folds[fold_of.get(m.source, 0)]
        out[i] = jac[i] @ cov_u @ jac[i]
    return out


def posterior(fit: C.Fit, prep: Prepared, fold: int = 0, folds: list | None = None) -> Posterior:
    """The posterior of fold ``fold`` of a fit: Laplace covariance at its optimum, discrepancy
    from the leave-one-source-out rows of every source but the fold's own (fold 0: all);
    ``folds``: :func:`fold_laplace` of the fit when already computed."""
    folds = fold_laplace(fit, prep) if folds is None else folds
    cov_u, s2, _ = folds[fold]
    theta = jax.tree_util.tree_map(lambda x: x[fold], fit.thetas)
    exclude = fit.folds[fold] if fold > 0 else None
    pv = loso_param_variance(fit, prep, folds)
    regimes = point_regimes(prep, fit.chosen[0])
    if not fit.loso_rows:  # a fit without leave-one-source-out: no held-out data, widest values
        pv, regimes = pv[:0], []
    chips = prep.chips if fit.loso_rows else []
    disc, default, counts = discrepancy(fit.loso_rows, chips, pv, exclude, regimes)
    return Posterior(log_constant_cov(theta, cov_u), disc, default, counts, s2)


# --- honest coverage ---------------------------------------------------------------------------
def loso_coverage(fit: C.Fit, prep: Prepared) -> list[dict[str, Any]]:
    """Per held-out source: the share of its points inside the nominal 80% interval computed
    from the posterior and discrepancy of the fold that never saw the source, the median
    half-width ``exp(Z80 sigma) - 1`` and the median absolute error of those points."""
    folds = fold_laplace(fit, prep)
    pv = loso_param_variance(fit, prep, folds)
    regimes = point_regimes(prep, fit.chosen[0])
    out = []
    for k, src in enumerate(fit.folds):
        if k == 0:
            continue
        disc, default, _ = discrepancy(fit.loso_rows, prep.chips, pv, src, regimes)
        inside, width, error, kinds = [], [], [], set()
        for i, (m, row) in enumerate(zip(prep.points, fit.loso_rows, strict=True)):
            if m.source != src:
                continue
            fam = regimes[i] or regime_family(prep.chips[i])
            sigma = math.sqrt(pv[i] + disc[m.metric].get(fam, default))
            inside.append(abs(math.log(row["predicted"] / row["measured"])) <= Z80 * sigma)
            width.append(math.exp(Z80 * sigma) - 1.0)
            error.append(abs(row["error"]))
            kinds.add(m.kind)
        out.append(
            {
                "source": str(src),
                "kind": "/".join(sorted(kinds)),
                "n": len(inside),
                "coverage_80": float(np.mean(inside)),
                "median_half_width": float(np.median(width)),
                "median_abs_error": float(np.median(error)),
            }
        )
    return out


def pooled_coverage(per_source: list[dict[str, Any]], kind: str) -> float:
    """Share of the held-out points of ``kind`` ("train"/"serve") inside their 80% interval."""
    rows = [r for r in per_source if r["kind"] == kind]
    n = sum(r["n"] for r in rows)
    return sum(r["coverage_80"] * r["n"] for r in rows) / n if n else float("nan")


# --- storage -----------------------------------------------------------------------------------


def posterior_json(post: Posterior, fit: C.Fit, prep: Prepared, command: str) -> dict[str, Any]:
    """The stored form of a posterior, with its provenance."""
    date = _dt.date.today().isoformat()
    source = (
        f"Computed {date} with `{command}` (diffcost/_analysis/uncertainty.py) from the fit of "
        f"`diffcost calibrate` on {len(prep.points)} points ({', '.join(fit.folds[1:])} held "
        "out in turn): log_covariance = Laplace approximation at the fitted optimum "
        f"(s2 = {post.s2:.4g}, the weighted mean square in-sample log error; MacKay 1992), "
        "mapped to log constants per family; discrepancy_log_variance = mean square of the "
        "leave-one-source-out log errors per metric kind and chip family (Kennedy & O'Hagan "
        f"2001); regimes with < {MIN_POINTS} points take at least their kind's pooled value, "
        "regimes with none the worst regime's value (default_log_variance); "
        "train_throughput.zero3_multinode: the parallel-layout regime of ZeRO-3 sharded "
        "across nodes (its points, with a named unmodelled effect and never fitted, count "
        "there only); '<serving kind>.engine <name>': the regime of a serving engine whose "
        "points carry a named unmodelled effect of its runtime (they count there only); "
        "'mixture of experts': the points of MoE models (they count there only)."
    )
    sig = lambda m: [[float(f"{x:.6g}") for x in row] for row in m]  # noqa: E731
    return {
        "schema_version": 1,
        "kind": "calibration-posterior",
        "constants": list(C.NAMES),
        "log_covariance": {k: sig(v) for k, v in post.log_cov.items()},
        "discrepancy_log_variance": post.discrepancy,
        "default_log_variance": post.default,
        "held_out_points": post.counts,
        "s2": post.s2,
        "source": source,
    }


def write_posterior(fit: C.Fit, prep: Prepared, path: str | Path, command: str) -> Path:
    """Compute fold 0's posterior of a fit and write it as JSON at ``path``."""
    target = Path(path)
    d = posterior_json(posterior(fit, prep), fit, prep, command)
    # one line per key (and per basis of the covariance): readable diffs after a refit
    lines = [
        f"  {json.dumps(k)}: "
        + (
            "{\n"
            + ",\n".join(f"    {json.dumps(b)}: {json.dumps(m)}" for b, m in v.items())
            + "\n  }"
            if k == "log_covariance"
            else json.dumps(v)
        )
        for k, v in d.items()
    ]
    target.write_text("{\n" + ",\n".join(lines) + "\n}\n")
    clear_cache()
    return target


# --- intervals through the model ---------------------------------------------------------------
#: The outputs given an interval, with the metric kind of their discrepancy (train, serve).
#: Cost is the chips' price times the time (``_train/cost.py``, ``_serve/cost.py``): its
#: interval is the time's; activity energy (idle power times the time plus work) gets its own
#: through the model, in the throughput regime; the request latency is TTFT plus the output
#: tokens' TPOT, dominated by the TPOT at the usual output lengths, so it takes the
#: token-latency regime.
TRAIN_OUTPUTS = (
    ("step_time_s", "train_throughput"),
    ("tokens_per_s", "train_throughput"),
    ("mfu", "train_throughput"),
    ("energy_j", "train_throughput"),
    ("cost_usd", "train_throughput"),
)
SERVE_OUTPUTS = (
    ("ttft_s", "ttft"),
    ("tpot_s", "token_latency"),
    ("output_tokens_per_s", "serve_throughput"),
    ("output_tokens_per_s_per_chip", "serve_throughput"),
    ("request_latency_s", "token_latency"),
    ("energy_per_token_j", "serve_throughput"),
    ("cost_per_million_tokens_usd", "serve_throughput"),
)
#: What pins each calibrated constant: the measurement to make next when its share of an
#: interval is the largest (:func:`knowledge`).  Each is the quantity the constant is defined
#: by in :class:`diffcost._inputs.hardware.Efficiency`.
MEASURE_NEXT = {
    "matmul_peak_fraction": "time a large GEMM (8192^3) in the plan's precision on this chip: "
    "achieved / datasheet FLOP/s",
    "matmul_half_dim": "time GEMMs of shrinking inner size (64 to 4096) on this chip: the size "
    "at half the large-GEMM efficiency",
    "memory_bandwidth_fraction": "a large device-to-device copy on this chip: achieved / "
    "datasheet HBM bandwidth",
    "link_bandwidth_fraction": "nccl-tests all_reduce_perf bus bandwidth at the plan's group "
    "sizes: achieved / link bandwidth",
    "kernel_launch_s": "the time per kernel of a chain of tiny kernels (a batch-1 decode step "
    "without CUDA graphs)",
    "overlap_contention": "the step time with and without communication overlap (the "
    "slowdown of compute while collectives run)",
    "kv_reread_fraction": "the decode step time against context length at a fixed batch (the "
    "KV-cache bytes read per step)",
    "graph_kernel_fraction": "a batch-1 decode step with and without CUDA graphs (the launch "
    "time a graph leaves)",
}


def _linearise(cost: Any, plan: Any, names: tuple[str, ...]) -> tuple[Any, jax.Array, jax.Array]:
    """``cost(plan)``, its outputs ``names`` and ``d log output / d log constant``
    ``(len(names), n)`` by forward mode from one trace of the model (one JVP per constant,
    batched by ``jax.jacfwd``; the breakdown is its primal, computed once).  The constants are
    scaled by ``exp(0) = 1`` exactly, so the breakdown is the plain prediction's."""

    def f(d):
        out = scaled_efficiency(cost, d)(plan)
        y = jnp.stack([getattr(out, n) for n in names])
        return jnp.log(y), (y, out)

    zero = jnp.zeros(len(C.NAMES), dtype=cost.system.efficiency.matmul_peak_fraction.dtype)
    jac, (value, out) = jax.jacfwd(f, has_aux=True)(zero)
    return out, value, jac


@eqx.filter_jit
def log_jacobian(cost: Any, plan: Any, names: tuple[str, ...]) -> tuple[jax.Array, jax.Array]:
    """Outputs ``names`` of ``cost(plan)`` and ``d log output / d log constant``
    ``(len(names), n)`` (:func:`_linearise`)."""
    _, value, jac = _linearise(cost, plan, names)
    return value, jac


@eqx.filter_jit
def predict_linearised(cost: Any, plan: Any, kind: str) -> tuple[Any, tuple[jax.Array, jax.Array]]:
    """The whole breakdown of a ``kind`` ("train"/"serve") prediction and the linearisation of
    its interval (the outputs of :data:`TRAIN_OUTPUTS`/:data:`SERVE_OUTPUTS` and their log
    Jacobian) from one trace of the model: a command that prints both compiles one program."""
    names = tuple(n for n, _ in (TRAIN_OUTPUTS if kind == "train" else SERVE_OUTPUTS))
    out, value, jac = _linearise(cost, plan, names)
    return out, (value, jac)


def intervals(
    cost: Any,
    plan: Any,
    chip: str,
    calibration: str | Path,
    kind: str,
    engine: str | None = None,
    linearised: tuple[jax.Array, jax.Array] | None = None,
) -> dict[str, Any] | None:
    """p10/p90 of the headline outputs of a ``kind`` ("train"/"serve") prediction on ``chip``
    (module docstring), served by ``engine`` (a profile name; its regime where it has one):
    ``{"<output>_p10": ..., "<output>_p90": ..., "interval": {...}}``; None when the
    calibration has no stored posterior.  An output of 0 (no price) or inf (an infeasible
    plan) keeps p10 = p90 = itself and has no entry under ``interval.outputs``.
    ``linearised`` is :func:`predict_linearised`'s second output where the caller has it (the
    model is then not traced again)."""
    post = load_posterior(calibration)
    if post is None:
        return None
    outputs = TRAIN_OUTPUTS if kind == "train" else SERVE_OUTPUTS
    if linearised is None:
        linearised = log_jacobian(cost, plan, tuple(n for n, _ in outputs))
    value, jac = (np.asarray(a, dtype=float) for a in linearised)
    basis, fam = basis_of(chip, calibration), regime_family(chip)
    cov = post.cov_for(basis)
    w = float(zero3_multinode_weight(plan, cost.system)) if kind == "train" else 0.0
    if w > 0.5:
        fam = f"{fam} {LAYOUT_REGIMES[0]}"
    if any(post.engine_variance(m, engine) is not None for _, m in outputs):
        fam = f"{fam} {engine_regime(str(engine))}"
    moe = float(cost.model.experts) > 0
    if moe:
        fam = f"{fam} {MOE_REGIME}"
    out: dict[str, Any] = {}
    sigma = {}
    for (name, metric), y, g in zip(outputs, value, jac, strict=True):
        ok = y > 0.0 and math.isfinite(y) and bool(np.all(np.isfinite(g)))
        if ok:
            disc = (
                post.moe_variance(metric) if moe else _discrepancy_of(post, metric, chip, engine, w)
            )
            sigma[name] = _output_sigma(g, cov, disc)
        s = sigma[name]["log_sigma"] if ok else 0.0
        out[f"{name}_p10"] = float(y * math.exp(-Z80 * s))
        out[f"{name}_p90"] = float(y * math.exp(Z80 * s))
    out["interval"] = {"nominal": 0.8, "constants": basis, "regime": fam, "outputs": sigma}
    out["interval"]["note"] = (
        f"p10-p90 by the delta method through the {basis} posterior of the calibration "
        f"constants plus the {fam} model discrepancy (leave-one-source-out)"
    )
    if sigma:
        first, shares = next(iter(sigma.items()))
        top, share = next(iter(shares["log_variance_shares"].items()))
        out["interval"]["note"] += f"; largest share of the {first} variance: {top} ({share:.0%})"
    return out


def _discrepancy_of(post: Posterior, metric: str, chip: str, engine: str | None, w: float) -> float:
    """The discrepancy variance of one output (module docstring): the engine's regime where it
    has one, else the chip family's; for training, blended with the layout regime by the
    plan's weight ``w`` in it."""
    disc = post.variance(metric, regime_family(chip))
    if (own := post.engine_variance(metric, engine)) is not None:
        disc = own
    if metric == "train_throughput":
        disc = (1.0 - w) * disc + w * post.layout_variance(LAYOUT_REGIMES[0])
    return disc


def _output_sigma(g: np.ndarray, cov: np.ndarray, disc: float) -> dict[str, Any]:
    """Log sigma of one output and where its variance comes from (:func:`variance_shares`)."""
    param = float(g @ cov @ g)
    return {
        "log_sigma": math.sqrt(param + disc),
        "constants_var": param,
        "discrepancy_var": disc,
        "log_variance_shares": variance_shares(g, cov, disc),
    }


def knowledge(iv: dict[str, Any]) -> dict[str, Any]:
    """Which uncertainty each output's interval comes from (an :func:`intervals` object):
    per output its half-width ``exp(Z80 sigma) - 1``, the model discrepancy's share of the log
    variance and the calibrated constant with the largest share; and the constants ranked by
    their largest share over the outputs, each with the measurement that pins it
    (:data:`MEASURE_NEXT`): the measurement a user should make next is the first one.  A
    discrepancy share near 1 says no constant's measurement would narrow the interval: the
    model's error in this regime is what limits it."""
    rows, best = {}, {}
    for name, s in iv["interval"]["outputs"].items():
        shares = s["log_variance_shares"]
        constants = {k: v for k, v in shares.items() if k in MEASURE_NEXT}
        top = max(constants, key=lambda k: constants[k])
        rows[name] = {
            "half_width": math.exp(Z80 * s["log_sigma"]) - 1.0,
            "discrepancy_share": shares["model discrepancy"],
            "top_constant": top,
            "top_share": constants[top],
        }
        for k, v in constants.items():
            best[k] = max(best.get(k, -math.inf), v)
    ranked = [
        {"constant": k, "largest_share": v, "measure": MEASURE_NEXT[k]}
        for k, v in sorted(best.items(), key=lambda kv: -kv[1])
    ]
    return {"outputs": rows, "ranked_constants": ranked}


def variance_shares(g: np.ndarray, cov: np.ndarray, disc: float) -> dict[str, float]:
    """Which uncertainty a log output's variance comes from, largest first: constant ``k``'s
    covariance-weighted share ``g_k (Sigma g)_k / var`` (the shares of the constants sum to
    their variance ``g Sigma g``; a correlated constant's share may be negative) and the
    model discrepancy's ``d^2 / var``.  The constant with the largest share is the one whose
    measurement would narrow the interval most."""
    total = float(g @ cov @ g) + disc
    if total <= 0.0:  # an output no constant moves and no discrepancy widens: exact
        return {**{n: 0.0 for n in C.NAMES}, "model discrepancy": 0.0}
    shares = {n: float(v) / total for n, v in zip(C.NAMES, g * (cov @ g), strict=True)}
    shares["model discrepancy"] = disc / total
    return dict(sorted(shares.items(), key=lambda kv: -kv[1]))


def main(argv: list[str] | None = None) -> None:
    """``python -m diffcost._analysis.uncertainty [--write PATH] [--calibration NAME]``: fit
    as ``diffcost calibrate`` does, print the posterior and the leave-one-source-out coverage,
    and write the posterior at PATH (default: beside the calibration)."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m diffcost._analysis.uncertainty")
    ap.add_argument("--calibration", default="default")
    ap.add_argument("--write", nargs="?", const="", default=None, metavar="PATH")
    args = ap.parse_args(argv)
    prep = prepare(calibration=args.calibration)
    fit = C.calibrate(prep, kernel=kernel_constants(args.calibration))
    for row in loso_coverage(fit, prep):
        print(json.dumps(row))
    if args.write is not None:
        path = args.write or posterior_path(args.calibration)
        command = "python -m diffcost._analysis.uncertainty --write"
        print(f"wrote {write_posterior(fit, prep, path, command)}")


if __name__ == "__main__":
    main()


# --- risk of a plan, for a search --------------------------------------------------------------
