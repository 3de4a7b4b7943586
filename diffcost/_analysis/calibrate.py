"""Fit the efficiency constants to the published measurements by gradient descent.

What is fitted: six of the :class:`diffcost.Efficiency` fields — large-GEMM fraction of peak,
GEMM half-efficiency dimension, memory-bandwidth fraction, link-bandwidth fraction, kernel
launch time, overlap contention — as global values plus one offset per chip family (Ampere,
Hopper, Ada), the same for every point of the family and never per point.  The memory
constants (runtime reserve, fragmentation) only decide what fits and are not fitted.

Parametrisation: each constant lives in log space between physical bounds,
``log v = log lo + (log hi - log lo) * sigmoid(u_global + u_family)``, so every value stays
in its bounds and the fractions are fitted in log space.

Loss: a Huber loss of the log error ``log(predicted / measured)`` (quadratic below
``HUBER_DELTA``), a source of ``n`` fitted points weighing ``sqrt(n)``; points whose software
stack has a named effect the cost model lacks (``unmodelled`` in their measurement file) are
predicted and reported but weigh 0.  Plus Gaussian priors in log space: the global constants
around public microbenchmark values (``Param.prior``), each family around the global values,
so that a constant the remaining data do not inform stays physical instead of absorbing
another effect, and a family with no data keeps the global values.  Gradients come from the
exact cost models (:func:`diffcost._validate.train_rows` and ``serve_rows``) through
``jax.grad``; the optimizer is ``optax.adam``.

Unreported plan fields of training points are chosen by the validation rule (the fastest
exact plan that fits, :mod:`diffcost._validate`) for the current constants, so the fit
alternates: choose plans, take ``steps`` gradient steps with those plans fixed, choose again
(``rounds`` times); the final predictions choose plans once more with the final constants.

Honest generalisation: leave-one-source-out (LOSO).  Fold 0 fits every source; fold ``k``
fits every source but the ``k``-th and predicts the held-out one.  All folds are fitted at
once (``vmap`` over folds; one compilation).
"""

import datetime as _dt
import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, cast

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._core.errors import Problem, SpecError
from .._inputs.calibration import FAMILIES, FAMILY_NAMES, NAMES, PARAMS, Param, family_of
from .._inputs.hardware import Efficiency
from .._inputs.loader import clear_cache, efficiency_for, is_builtin, load_spec, specs_dir
from .validate import (
    Prepared,
    choose,
    serve_rows,
    summarise,
    train_rows,
    with_efficiency,
)

HUBER_DELTA = 0.2
#: Weight of the priors: global constants against the microbenchmark priors, family values
#: against the global ones, each ``0.5 * sum(((log v - log ref) / width)^2)``.
PRIOR_WEIGHT = 0.02
FAMILY_WEIGHT = 0.02
_LO = np.log([p.lo for p in PARAMS])
_HI = np.log([p.hi for p in PARAMS])
_LOG_PRIOR = np.log([p.prior for p in PARAMS])
_WIDTH = np.asarray([p.prior_log_width for p in PARAMS])
_FAMILY_WIDTH = np.asarray(
    [p.prior_log_width if p.family_log_width is None else p.family_log_width for p in PARAMS]
)


# --- parametrisation ---------------------------------------------------------------------------
def to_u(values: np.ndarray) -> np.ndarray:
    """Constants (SI) -> unconstrained parameters."""
    x = (np.log(np.asarray(values, dtype=float)) - _LO) / (_HI - _LO)
    x = np.clip(x, 1e-4, 1 - 1e-4)
    return np.log(x / (1 - x))


def from_u(u: jax.Array) -> jax.Array:
    """Unconstrained parameters (..., 6) -> constants (SI), inside their bounds."""
    return jnp.exp(_LO + (_HI - _LO) * jax.nn.sigmoid(u))


def initial_theta(calibration: str | None = None) -> dict[str, jax.Array]:
    """Start of the fit: the priors (or a calibration file's global constants), no family
    offsets."""
    if calibration is None:
        values = np.asarray([p.prior for p in PARAMS])
    else:
        eff = efficiency_for("__global__", calibration)
        values = np.asarray([float(getattr(eff, n)) for n in NAMES])
    return {"global": jnp.asarray(to_u(values)), "family": jnp.zeros((len(FAMILIES), len(PARAMS)))}


def constants(theta: dict[str, jax.Array]) -> dict[str, dict[str, float]]:
    """Fitted constants in SI: ``{"global": {...}, "<family>": {...}}``."""
    out = {"global": dict(zip(NAMES, map(float, from_u(theta["global"])), strict=True))}
    for i, fam in enumerate(FAMILY_NAMES):
        vals = from_u(theta["global"] + theta["family"][i])
        out[fam] = dict(zip(NAMES, map(float, vals), strict=True))
    return out


class KernelPrior(NamedTuple):
    """Constants fitted on per-kernel timings (:mod:`diffcost._analysis.calibrate_kernels`), by
    end-to-end family row (:data:`FAMILY_NAMES` then "none"): the fitted ones (:data:`PARAMS`)
    enter the fit as tight priors (``mask``, ``log_value``), the others (``extra``: field ->
    value per row, NaN where the family has none) replace the calibration's value."""

    mask: jax.Array  # (families, params) 1 where a kernel constant is the family's prior
    log_value: jax.Array  # (families, params)
    extra: dict[str, jax.Array]  # field -> (families + 1,)


#: Weight and log-space width of a kernel-fitted constant's prior in the end-to-end fit: a 10%
#: move costs as much as a 10%-off point, so the end-to-end data barely moves what the kernel
#: timings fixed.
KERNEL_PRIOR_WEIGHT = 1.0
KERNEL_PRIOR_WIDTH = 0.05


def kernel_prior(constants: dict[str, dict[str, float]] | None) -> KernelPrior | None:
    """:class:`KernelPrior` of kernel-fitted constants ``{family: {field: value}}`` (the
    families of :data:`FAMILIES` only: the others have no end-to-end row)."""
    if not constants:
        return None
    mask = np.zeros((len(FAMILIES), len(PARAMS)))
    value = np.ones((len(FAMILIES), len(PARAMS)))
    extra: dict[str, np.ndarray] = {}
    for f, fam in enumerate(FAMILY_NAMES):
        for name, v in constants.get(fam, {}).items():
            if name in NAMES:
                mask[f, NAMES.index(name)] = 1.0
                value[f, NAMES.index(name)] = v
            else:
                extra.setdefault(name, np.full(len(FAMILIES) + 1, np.nan))[f] = v
    return KernelPrior(
        jnp.asarray(mask),
        jnp.asarray(np.log(value)),
        {k: jnp.asarray(v) for k, v in extra.items()},
    )


def efficiency_rows(
    theta: dict[str, jax.Array],
    family: jax.Array,
    base: Efficiency,
    kernel: KernelPrior | None = None,
) -> Efficiency:
    """Per-row efficiency: the row's family offsets on the global values (none: global), and
    the family's kernel-fitted constants outside :data:`PARAMS` (``kernel.extra``)."""
    offsets = jnp.concatenate([theta["family"], jnp.zeros((1, len(PARAMS)))])
    vals = from_u(theta["global"][None, :] + offsets[family])
    dtype = base.matmul_peak_fraction.dtype
    eff = eqx.tree_at(
        lambda e: tuple(getattr(e, n) for n in NAMES),
        base,
        tuple(vals[:, k].astype(dtype) for k in range(len(NAMES))),
    )
    if kernel is None or not kernel.extra:
        return eff
    names = tuple(kernel.extra)
    rows = tuple(
        jnp.where(
            jnp.isnan(kernel.extra[n][family]), getattr(eff, n), kernel.extra[n][family]
        ).astype(dtype)
        for n in names
    )
    return eqx.tree_at(lambda e: tuple(getattr(e, n) for n in names), eff, rows)


# --- data --------------------------------------------------------------------------------------
class FitData(NamedTuple):
    """Everything the jitted fit needs, as arrays (absent kinds are None)."""

    train: tuple | None  # (systems, models, plans) of every training candidate row
    serve: tuple | None  # (systems, models, plans) of every serving point
    train_family: jax.Array  # per training candidate row
    serve_family: jax.Array  # per serving point
    serve_metric: jax.Array  # 0 throughput, 1 TTFT, 2 per-token latency
    serve_output_len: jax.Array
    log_measured: jax.Array  # per point (training points first)
    kernel: KernelPrior | None = None  # constants fitted on per-kernel timings, by family


def fit_data(prep: Prepared, kernel: dict[str, dict[str, float]] | None = None) -> FitData:
    fam = np.asarray([family_of(c) for c in prep.chips])
    n_train = prep.n_train
    row_point = prep.train.row_point if prep.train is not None else np.zeros(0, dtype=int)
    serve = prep.points[n_train:]
    code = {"serve_throughput": 0, "ttft": 1, "token_latency": 2}
    return FitData(
        train=tuple(prep.train[:3]) if prep.train is not None else None,
        serve=tuple(prep.serve) if prep.serve is not None else None,
        train_family=jnp.asarray(fam[:n_train][row_point] if n_train else np.zeros(0, int)),
        serve_family=jnp.asarray(fam[n_train:]),
        serve_metric=jnp.asarray([code[m.metric] for m in serve], dtype=int),
        serve_output_len=jnp.asarray([float(m.plan["output_len"]) for m in serve]),
        log_measured=jnp.asarray(np.log([m.measured for m in prep.points])),
        kernel=kernel_prior(kernel),
    )


def fold_weights(
    sources: Sequence[str], unmodelled: Sequence[str | None]
) -> tuple[list[str], np.ndarray]:
    """Fold names (``"all"`` then each source held out) and point weights ``(folds, points)``,
    from each point's source and its known unmodelled effect (None when there is none).

    A source of ``n`` fitted points weighs ``sqrt(n)`` in total (between one vote per source
    and one per point), shared by its points without a known unmodelled effect (those weigh
    0); the held-out source weighs 0.  A source with no fitted point gets no fold
    of its own: the fit on all sources never saw it.
    """
    src = np.asarray(list(sources))
    fitted = np.asarray([u is None for u in unmodelled])
    sources = sorted({s for s, f in zip(src, fitted, strict=True) if f})
    base = np.asarray(
        [
            1.0 / np.sqrt(np.sum((src == s) & fitted)) if f else 0.0
            for s, f in zip(src, fitted, strict=True)
        ]
    )
    base = base / np.sum(base) * len(sources)
    weights = [base]
    for s in sources:
        weights.append(np.where(src == s, 0.0, base))
    return ["all", *sources], np.stack(weights)


# --- model evaluations -------------------------------------------------------------------------
def log_predictions(theta, data: FitData, chosen: jax.Array) -> jax.Array:
    """Log of every point's predicted metric, training rows ``chosen`` (one per point)."""
    parts = []
    if data.train is not None:
        systems, models, plans = jax.tree_util.tree_map(lambda x: x[chosen], data.train)
        eff = efficiency_rows(theta, data.train_family[chosen], systems.efficiency, data.kernel)
        out = train_rows(with_efficiency(systems, eff), models, plans)
        parts.append(jnp.log(out.tokens_per_s))
    if data.serve is not None:
        systems, models, plans = data.serve
        eff = efficiency_rows(theta, data.serve_family, systems.efficiency, data.kernel)
        out = serve_rows(with_efficiency(systems, eff), models, plans)
        metric = jnp.stack(
            [
                out.output_tokens_per_s_per_chip,
                out.ttft_s,
                out.request_latency_s / data.serve_output_len,
            ]
        )
        parts.append(jnp.log(jnp.take_along_axis(metric, data.serve_metric[None, :], 0)[0]))
    return jnp.concatenate(parts)


def loss(theta, data: FitData, chosen: jax.Array, weights: jax.Array) -> jax.Array:
    """Weighted Huber loss of the log errors plus the family prior (see module docstring)."""
    r = log_predictions(theta, data, chosen) - data.log_measured
    a = jnp.abs(r)
    huber = jnp.where(a < HUBER_DELTA, 0.5 * r**2, HUBER_DELTA * (a - 0.5 * HUBER_DELTA))
    return jnp.sum(weights * huber) + prior_penalty(theta, data.kernel)


def _log_family(theta) -> jax.Array:
    """Log of every family's constants, ``(families, constants)``."""
    return jnp.log(from_u(theta["global"][None, :] + theta["family"]))


def kernel_prior_penalty(theta, kernel: KernelPrior) -> jax.Array:
    """The kernel priors' part of :func:`prior_penalty`: each kernel-fitted family constant
    tightly around its value (:data:`KERNEL_PRIOR_WIDTH`, weight :data:`KERNEL_PRIOR_WEIGHT`)."""
    tight = ((_log_family(theta) - kernel.log_value) / KERNEL_PRIOR_WIDTH) ** 2
    return KERNEL_PRIOR_WEIGHT * (0.5 * jnp.sum(kernel.mask * tight))


def prior_penalty(theta, kernel: KernelPrior | None = None) -> jax.Array:
    """Gaussian priors in log space: global constants around the microbenchmark priors, family
    constants around the global ones, or, where the family has a kernel-fitted value
    (``kernel``), tightly around that value (:func:`kernel_prior_penalty`)."""
    log_g = jnp.log(from_u(theta["global"]))
    glob = 0.5 * jnp.sum(((log_g - _LOG_PRIOR) / _WIDTH) ** 2)
    around = ((_log_family(theta) - log_g[None, :]) / _FAMILY_WIDTH) ** 2
    if kernel is None:
        return PRIOR_WEIGHT * glob + FAMILY_WEIGHT * 0.5 * jnp.sum(around)
    fam = 0.5 * jnp.sum((1.0 - kernel.mask) * around)
    return PRIOR_WEIGHT * glob + FAMILY_WEIGHT * fam + kernel_prior_penalty(theta, kernel)


def _candidate_times(theta, data: FitData):
    assert data.train is not None  # only called with training points
    systems, models, plans = data.train
    eff = efficiency_rows(theta, data.train_family, systems.efficiency, data.kernel)
    out = train_rows(with_efficiency(systems, eff), models, plans)
    return out.step_time_s, out.headroom_bytes


@eqx.filter_jit
def _fit_folds(thetas, data, chosen, weights, steps: int, learning_rate: float):
    import optax  # imported here: 0.15 s that no prediction needs

    opt = optax.adam(learning_rate)

    def run(theta, ch, w):
        def body(carry, _):
            th, state = carry
            value, g = jax.value_and_grad(loss)(th, data, ch, w)
            g = jax.tree_util.tree_map(lambda x: jnp.where(jnp.isfinite(x), x, 0.0), g)
            updates, state = opt.update(g, state, th)
            return (optax.apply_updates(th, updates), state), value

        (th, _), history = jax.lax.scan(body, (theta, opt.init(theta)), None, length=steps)
        return th, history

    return jax.vmap(run)(thetas, chosen, weights)


@eqx.filter_jit
def _choose_times(thetas, data):
    return jax.vmap(lambda th: _candidate_times(th, data))(thetas)


def _choose_all(thetas, prep: Prepared, data: FitData) -> np.ndarray:
    """The rule's training rows for every fold's constants: ``(folds, n_train)``."""
    n_folds = thetas["global"].shape[0]
    if prep.train is None:
        return np.zeros((n_folds, 0), dtype=int)
    times, head = (np.asarray(x) for x in _choose_times(thetas, data))
    return np.stack(
        [choose(times[f], head[f], prep.train.row_point, prep.n_train)[0] for f in range(n_folds)]
    )


@eqx.filter_jit
def _predict_folds(thetas, data, chosen):
    return jax.vmap(lambda th, ch: log_predictions(th, data, ch))(thetas, chosen)


# --- the fit -----------------------------------------------------------------------------------
@dataclass
class Fit:
    """Result of :func:`calibrate`."""

    folds: list[str]
    thetas: dict[str, jax.Array]  # leading axis = folds
    chosen: np.ndarray
    losses: np.ndarray  # (folds, rounds * steps)
    loso_rows: list[dict[str, Any]]  # every point predicted by the fold that held its source out
    fit_rows: list[dict[str, Any]]  # every point predicted by the fit on all sources
    prior_rows: list[dict[str, Any]]  # every point predicted with the priors (before the fit)
    kernel: dict[str, dict[str, float]] | None = None  # kernel-fitted constants by family

    def constants(self, fold: int = 0) -> dict[str, dict[str, float]]:
        """Fitted constants (SI) of fold ``fold`` by "global" and family, with each family's
        kernel-fitted constants outside :data:`PARAMS`."""
        out = constants(jax.tree_util.tree_map(lambda x: x[fold], self.thetas))
        for fam, values in (self.kernel or {}).items():
            if fam in out:
                out[fam].update({k: v for k, v in values.items() if k not in NAMES})
        return out


def calibrate(
    prep: Prepared,
    *,
    steps: int = 150,
    rounds: int = 3,
    learning_rate: float = 0.05,
    loso: bool = True,
    kernel: dict[str, dict[str, float]] | None = None,
) -> Fit:
    """Fit fold 0 (all sources) and, with ``loso``, one fold per held-out source, every fold
    starting from the priors; ``kernel``: constants fitted on per-kernel timings by family
    (:func:`diffcost._analysis.calibrate_kernels.kernel_constants`), tight priors of the fit."""
    data = fit_data(prep, kernel)
    folds, weights = fold_weights(
        [m.source for m in prep.points], [m.unmodelled for m in prep.points]
    )
    if not loso:
        folds, weights = folds[:1], weights[:1]
    n_folds = len(folds)
    theta0 = initial_theta()
    thetas = jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (n_folds, *x.shape)), theta0)
    w = jnp.asarray(weights, dtype=data.log_measured.dtype)
    losses = []
    prior_rows: list[dict[str, Any]] = []
    for _ in range(rounds):
        chosen = _choose_all(thetas, prep, data)
        if not prior_rows:
            prior = np.asarray(_predict_folds(thetas, data, jnp.asarray(chosen)))
            prior_rows = _rows(prep, np.exp(prior[0]))
        fitted = _fit_folds(thetas, data, jnp.asarray(chosen), w, steps, learning_rate)
        thetas, hist = cast(tuple[dict[str, jax.Array], jax.Array], fitted)  # filter_jit: Any
        losses.append(np.asarray(hist))
    chosen = _choose_all(thetas, prep, data)
    preds = np.asarray(_predict_folds(thetas, data, jnp.asarray(chosen)))
    fit_rows = _rows(prep, np.exp(preds[0]))
    loso_rows = []
    if loso:
        fold_of = {s: i for i, s in enumerate(folds)}
        held = np.asarray(
            [np.exp(preds[fold_of.get(m.source, 0), i]) for i, m in enumerate(prep.points)]
        )
        loso_rows = _rows(prep, held)
    return Fit(
        folds,
        thetas,
        chosen,
        np.concatenate(losses, axis=1),
        loso_rows,
        fit_rows,
        prior_rows,
        kernel,
    )


def _rows(prep: Prepared, predicted: np.ndarray) -> list[dict[str, Any]]:
    return [
        {
            "id": m.id,
            "source": m.source,
            "metric": m.metric,
            "measured": m.measured,
            "predicted": float(p),
            "error": float(p) / m.measured - 1.0,
            "unmodelled": m.unmodelled,
        }
        for m, p in zip(prep.points, predicted, strict=True)
    ]


def report(fit: Fit) -> dict[str, Any]:
    """Summaries before the fit (the priors), after it (fit on all sources, in sample) and
    leave-one-source-out (each source predicted by a fit that never saw it)."""
    return {
        "priors": summarise(fit.prior_rows),
        "after_in_sample": summarise(fit.fit_rows),
        "leave_one_source_out": summarise(fit.loso_rows) if fit.loso_rows else {},
        "constants": fit.constants(0),
        "loso_constants": {f: fit.constants(i) for i, f in enumerate(fit.folds) if i > 0},
    }


# --- writing the calibration file ---------------------------------------------------------------
def _fmt(p: Param, value: float) -> str:
    v = value * p.toml_scale
    if p.name == "matmul_half_dim":
        return str(int(round(v)))
    return f"{float(f'{v:.4g}')}"


#: Keys of ``[efficiency]`` in the order the file lists them.
_ORDER = (
    "matmul_peak_fraction",
    "matmul_half_dim",
    "memory_bandwidth_fraction",
    "link_bandwidth_fraction",
    "kernel_launch_us",
    "memory_reserved_gb",
    "memory_fragmentation_fraction",
    "overlap_contention",
    "kv_reread_fraction",
    "graph_kernel_fraction",
)


def calibration_toml(
    fit: Fit,
    prep: Prepared,
    summary: dict[str, Any],
    command: str,
    calibration: str = "default",
    date: str | None = None,
    name: str = "default",
    kernel_note: str | None = None,
) -> str:
    """The calibration file with the fitted constants (fold 0) and the fit's provenance
    (``kernel_note``: the kernel fit's, :mod:`diffcost._analysis.calibrate_kernels`).

    ``calibration``: the file whose unfitted (memory) constants and per-chip priors
    (:func:`prior_overrides`) are kept; ``name``: the new file's name, which must be its file
    name without ``.toml``."""
    spec = load_spec("calibration", calibration)
    eff = spec.values["efficiency"]
    c = fit.constants(0)
    date = date or _dt.date.today().isoformat()
    fitted = {p.toml_key: _fmt(p, c["global"][p.name]) for p in PARAMS}
    fixed = {
        "memory_reserved_gb": f"{eff['memory_reserved_bytes'] / 1e9:g}",
        "memory_fragmentation_fraction": f"{eff['memory_fragmentation_fraction']:g}",
    }
    values = {**fitted, **fixed}
    lines = [
        "schema_version = 1",
        'kind = "calibration"',
        f'name = "{name}"',
        f'display_name = "Efficiency constants fitted to published measurements ({date})"',
        "",
        "# Fitted by `diffcost calibrate --write PATH` (diffcost/_analysis/calibrate.py): global",
        "# values plus one set per chip family (written as overrides for every chip of the",
        "# family).  memory_* are not fitted (they only decide what fits).",
        "",
        "[efficiency]",
        *[f"{k} = {values[k]}" for k in _ORDER],
        "",
    ]
    used = {prep.chips[i] for i in range(len(prep.points))}
    for fam, members in FAMILIES.items():
        if not used & set(members):
            continue
        extras = {k: v for k, v in c[fam].items() if k not in NAMES}
        for chip in members:
            lines.append(f"[overrides.{chip}]  # {fam}")
            lines += [f"{p.toml_key} = {_fmt(p, c[fam][p.name])}" for p in PARAMS]
            lines += [f"{k} = {_fmt_extra(k, v)}" for k, v in extras.items()]
            lines.append("")
    written = {chip for members in FAMILIES.values() if used & set(members) for chip in members}
    by_chip = kernel_by_chip(fit.kernel or {}, written)
    priors, prior_sources = prior_overrides(spec.values, spec.info.source, written, by_chip)
    provenance = _provenance(fit, prep, summary, command, date)
    if kernel_note:
        provenance += "\n" + kernel_note
    lines += [*priors, "[source]", 'efficiency = """', provenance, '"""', *prior_sources]
    return "\n".join(lines) + "\n"


def kernel_by_chip(
    kernel: dict[str, dict[str, float]], written: set[str]
) -> dict[str, dict[str, float]]:
    """Kernel-fitted constants of every member of a kernel family
    (:data:`~diffcost._analysis.calibrate_kernels.KERNEL_FAMILIES`) that the end-to-end fit did
    not write: they overlay the chip's prior override."""
    from .calibrate_kernels import KERNEL_FAMILIES

    return {
        chip: dict(values)
        for fam, values in kernel.items()
        for chip in KERNEL_FAMILIES.get(fam, ())
        if chip not in written
    }


def _fmt_extra(name: str, value: float) -> str:
    """A kernel-fitted constant outside :data:`PARAMS` as the calibration file writes it."""
    if name.startswith("attention_"):
        return str(int(round(value)))
    return f"{float(f'{value:.4g}')}"


#: Calibration keys (SI name -> file key and scale) of every constant a prior may set.
_TOML_KEYS = {
    **{p.name: (p.toml_key, p.toml_scale) for p in PARAMS},
    "narrow_matmul_fraction": ("narrow_matmul_fraction", 1.0),
    "attention_softmax_dim": ("attention_softmax_dim", 1.0),
    "attention_half_span": ("attention_half_span", 1.0),
    "attention_half_tiles": ("attention_half_tiles", 1.0),
    "memory_reserved_bytes": ("memory_reserved_gb", 1e-9),
    "memory_fragmentation_fraction": ("memory_fragmentation_fraction", 1.0),
}


#: Keys written as whole numbers.
_WHOLE_KEYS = (
    "matmul_half_dim",
    "attention_softmax_dim",
    "attention_half_span",
    "attention_half_tiles",
)


def prior_overrides(
    values: dict[str, Any],
    source: dict[str, str],
    fitted: set[str],
    kernel: dict[str, dict[str, float]] | None = None,
) -> tuple[list[str], list[str]]:
    """The per-chip priors of a calibration file, to carry into a refitted one: every
    ``[overrides.<chip>]`` with its own ``source.<chip>`` (a chip with no measurement, whose
    constants come from public microbenchmarks, not from the fit), except chips of a family
    the fit wrote (``fitted``), each overlaid with its kernel-fitted constants (``kernel``:
    chip -> field -> SI value, :func:`kernel_by_chip`).  Returns the override lines and the
    source lines."""
    lines: list[str] = []
    sources: list[str] = []
    kernel = kernel or {}
    overrides = values.get("overrides", {})
    for chip in sorted(c for c in overrides if c in source and c not in fitted):
        lines.append(f"[overrides.{chip}]  # prior (not fitted): see source.{chip}")
        merged = {**overrides[chip], **kernel.get(chip, {})}
        for name, value in merged.items():
            key, scale = _TOML_KEYS[name]
            v = value * scale
            lines.append(f"{key} = {round(v) if key in _WHOLE_KEYS else float(f'{v:.4g}')}")
        lines.append("")
        note = source[chip]
        if chip in kernel:
            fitted_names = ", ".join(sorted(kernel[chip]))
            note = (
                f"{fitted_names}: fitted on the per-kernel timings of specs/kernels "
                "(diffcost/_analysis/calibrate_kernels.py; see the efficiency source). "
                "Otherwise: " + note.split(" Otherwise: ", 1)[-1]
            )
        sources.append(f"{chip} = {json.dumps(note)}")
    return lines, sources


def _provenance(fit: Fit, prep: Prepared, summary: dict[str, Any], command: str, date: str) -> str:
    def line(name: str, s: dict[str, Any], group: str = "all") -> str:
        parts = [
            f"{k} {v[group]['median_abs_error']:.1%}/{v[group]['p90_abs_error']:.1%} "
            f"(n={v[group]['n']})"
            for k, v in s.items()
            if v.get(group)
        ]
        return f"{name}: " + "; ".join(parts) + "."

    sources = sorted({m.source for m in prep.points})
    unmodelled = sum(1 for m in prep.points if m.unmodelled)
    text = [
        f"Fitted {date} with `{command}` (diffcost/_analysis/calibrate.py): optax adam on the "
        "exact cost models' gradients; Huber loss of log(predicted/measured), a source of n "
        "fitted points weighing sqrt(n); constants bounded in log space; global values plus one "
        "set per chip "
        f"family ({', '.join(FAMILY_NAMES)}), written as overrides for every chip of the family; "
        f"Gaussian log-space priors (weight {PRIOR_WEIGHT}) around microbenchmark values: "
        + ", ".join(f"{p.name} {p.prior:g}" for p in PARAMS)
        + " (large cuBLAS GEMMs 75-87% of dense peak; babelstream 80-90% of HBM; nccl-tests "
        "busbw ~80% of line rate; a few us per kernel launch; NCCL on 15-30% of the SMs; "
        "a GQA K/V re-read between the L2 bound ~0.3 (gpu-benches gpu-l2-cache: A100 5.4 vs 1.73 "
        "TB/s, H200 9.8 vs 3.9 TB/s) and a full miss 1); family values around the global ones "
        f"(weight {FAMILY_WEIGHT}) with the prior's log width, except "
        + ", ".join(
            f"{p.name} (log width {p.family_log_width:g})"
            for p in PARAMS
            if p.family_log_width is not None
        )
        + " (families run different formats: FP8 on Hopper and Ada).",
        f"Data: {len(prep.points)} points of specs/measurements ({', '.join(sources)}); "
        f"{unmodelled} points with a named unmodelled effect are predicted but not fitted; "
        f"{len(prep.excluded)} excluded points are not predicted.",
        "Errors, median/p90 of |predicted/measured - 1| per metric (all points):",
        line("priors (before the fit)", summary["priors"]),
        line("after (in sample)", summary["after_in_sample"]),
    ]
    if summary.get("leave_one_source_out"):
        text.append(line("leave-one-source-out (held out)", summary["leave_one_source_out"]))
        text.append(
            line(
                "leave-one-source-out, points without unmodelled effects",
                summary["leave_one_source_out"],
                "modelled",
            )
        )
    text.append("Bounds: " + ", ".join(f"{p.name} [{p.lo:g}, {p.hi:g}]" for p in PARAMS) + ".")
    text.append(
        "Not fitted: memory_reserved_gb 1.0 (CUDA context and NCCL buffers) and "
        "memory_fragmentation_fraction 0.05 (caching-allocator fragmentation, PyTorch "
        "memory docs): they decide what fits, not how fast."
    )
    return "\n".join(text).replace('"""', "'''")


def write_calibration(text: str, path: str | Path) -> Path:
    """Write a calibration file at ``path`` once it loads cleanly; return the path.

    The built-in calibrations are read-only (they ship inside the package): a path inside the
    built-in specs is refused.  The file's ``name`` must equal its stem (see
    :func:`calibration_toml`); it is checked in a scratch folder before ``path`` is touched.
    """
    target = Path(path)
    if is_builtin(target):
        raise SpecError(
            [
                Problem(
                    str(target),
                    "",
                    f"is inside the built-in specs ({specs_dir()}), which are read-only: write "
                    "the calibration elsewhere and load it with --calibration PATH",
                )
            ]
        )
    with tempfile.TemporaryDirectory() as scratch:
        trial = Path(scratch) / (target.name if target.suffix else target.name + ".toml")
        trial.write_text(text)
        load_spec("calibration", trial)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    clear_cache()
    return target


__all__ = [
    "Fit",
    "calibrate",
    "calibration_toml",
    "constants",
    "efficiency_rows",
    "fit_data",
    "fold_weights",
    "initial_theta",
    "prior_overrides",
    "log_predictions",
    "loss",
    "report",
    "write_calibration",
]
