"""The GEMM constants of a chip family, fitted on published per-kernel timings first.

Issue 41's order: kernel constants from kernel data, then only what remains end to end.  Two
:class:`~diffcost.Efficiency` fields describe one GEMM kernel and nothing else:
``matmul_peak_fraction`` (the share of the datasheet peak a large GEMM reaches at the top clock)
and ``matmul_half_dim`` (tile and wave quantization, :func:`~diffcost._terms.execution.
gpu_matmul_efficiency`).  For each chip family with GEMM points in ``specs/kernels``
(:data:`KERNEL_FAMILIES`), a grid search picks the pair that minimises the Huber loss of
``log(predicted / measured)`` over the family's GEMM points that take at least
:data:`SHAPE_DOMINATED` times the fixed cost the model charges a kernel (the floor is the
calibration's launch constants, not fitted here: the sources' floors differ by library, 3 us
for DeepGEMM's kernels on H800 and 8-10 us for XLA's smallest dots on B200), a source of ``n``
points weighing ``sqrt(n)`` in total (as the end-to-end fit, :mod:`diffcost._analysis.
calibrate`).  A third constant, ``narrow_matmul_fraction``, scales the 8-bit peaks.  A point
with an ``unmodelled`` effect (a quantization kernel inside the timed call, a locked clock)
weighs nothing.  The prediction is the GEMM term at the top clock
(:func:`~diffcost._terms.power.burst`: the kernels are timed alone in short loops), or at the
clock a lowered board power limit sustains for a point timed under one (``power_limit_w``,
:func:`~diffcost._analysis.kernel_points.gemm_conditions`), plus the fixed cost a cost model
charges per kernel as the source timed it (:func:`fixed_s`), with every other constant the
calibration's.  A point under a lowered power limit is predicted but weighs nothing: its time
is the power law's (:mod:`diffcost._terms.power`, whose constants come from the power check),
not the shape constants', so it checks that law out of sample.

Leave-one-source-out: for a family with several sources, each source is predicted by the fit on
the others; a family with one source has no held-out error (its fit is in sample only).
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._core.smooth import EXACT
from .._inputs.hardware import System, format_index
from .._inputs.kernel_measurements import KernelMeasurement
from .._inputs.loader import load_system
from .._terms.gemm import GemmFormat, gemm_time_s
from .._terms.kernels import KERNELS_PER_LAYER_FORWARD, launch_s
from .._terms.power import burst
from .kernel_points import DTYPE_BYTES, gemm_conditions, gemm_format, gemm_source, prefill_args

#: Chip families whose GEMM constants the kernel timings fix (every member shares them).  The
#: Hopper family is the end-to-end fit's (:data:`~diffcost._inputs.calibration.FAMILIES`), with
#: the H800 SXM (the same GH100 die and HBM3).
KERNEL_FAMILIES: dict[str, tuple[str, ...]] = {
    "hopper": ("h100-sxm", "h100-pcie", "h200", "h800-sxm"),
    "blackwell": ("b200", "b300"),
}
#: The constants fitted here, in :class:`~diffcost.Efficiency` field names.
KERNEL_CONSTANTS = ("matmul_peak_fraction", "matmul_half_dim", "narrow_matmul_fraction")
#: Grid of ``matmul_peak_fraction`` (a burst can approach the peak: the H100 SXM's 989 TFLOP/s
#: are rated at 1830 MHz, its top clock is 1980 MHz) and of ``matmul_half_dim`` (elements;
#: the bounds of :data:`~diffcost._inputs.calibration.PARAMS`).
FRACTION_GRID = np.round(np.arange(0.40, 1.0001, 0.005), 3)
HALF_DIM_GRID = np.arange(16.0, 128.1, 4.0)
#: A point weighs in the fit only if its measured time is at least this many times the fixed
#: cost per kernel the model charges it: then a floor off by half moves it by at most 12%, and
#: the shape constants, not the floor, decide it.
SHAPE_DOMINATED = 4.0
#: Grid of ``narrow_matmul_fraction`` (an 8-bit GEMM's share of the 16-bit fraction).
NARROW_GRID = np.round(np.arange(0.60, 1.0001, 0.02), 3)
_ONE = len(NARROW_GRID) - 1
HUBER_DELTA = 0.2


def family_of_chip(chip: str) -> str | None:
    """The kernel family of a chip name, or None."""
    for fam, members in KERNEL_FAMILIES.items():
        if chip in members:
            return fam
    return None


def launch_parts_s(system: System) -> tuple[float, float]:
    """``(gpu, host)`` seconds of the fixed cost a cost model charges one kernel.

    The whole is ``kernel_launch_s`` (:func:`~diffcost._terms.kernels.launch_s` per kernel);
    its GPU-side part (grid launch, first loads, epilogue, tail) is the share
    ``graph_kernel_fraction`` a CUDA graph keeps, the rest is the host launch a graph removes
    (:class:`~diffcost.Efficiency`).
    """
    one = float(launch_s(0.0, system) / KERNELS_PER_LAYER_FORWARD)
    gpu = one * float(system.efficiency.graph_kernel_fraction)
    return gpu, one - gpu


def fixed_s(system: System, timing: str) -> float:
    """Fixed seconds a cost model charges one kernel, as the source timed it: ``kernel`` (a
    profiler's GPU time of the kernel alone) its GPU-side part, ``call`` (host-side timing) the
    whole (:func:`launch_parts_s`)."""
    gpu, host = launch_parts_s(system)
    return gpu if timing == "kernel" else gpu + host


@eqx.filter_jit
def _grid_seconds(system: System, m, n, k, peak, nbytes, flop_j, fractions, half_dims, tile):
    """GEMM seconds for every (fraction, half_dim) and point: (F, D, P), on ``system`` (the
    top clock, or a lowered power limit with the points' J/FLOP ``flop_j``; None: no limit),
    of data-parallel kernels of output tile ``tile`` (None: balanced ones)."""

    def one(f, d, mi, ni, ki, pi, bi, ji):
        eff = eqx.tree_at(
            lambda e: (e.matmul_peak_fraction, e.matmul_half_dim),
            system.efficiency,
            (f.astype(system.efficiency.matmul_peak_fraction.dtype), d.astype(f.dtype)),
        )
        s = eqx.tree_at(lambda x: x.efficiency, system, eff)
        return gemm_time_s(mi, ni, ki, GemmFormat(pi, bi, flop_j=ji, tile=tile), s, EXACT)

    points = 0 if flop_j is not None else None
    over_points = jax.vmap(one, in_axes=(None, None, 0, 0, 0, 0, 0, points))
    over_d = jax.vmap(over_points, in_axes=(None, 0, None, None, None, None, None, None))
    over_f = jax.vmap(over_d, in_axes=(0, None, None, None, None, None, None, None))
    return over_f(fractions, half_dims, m, n, k, peak, nbytes, flop_j)


def grid_terms(
    points: Sequence[KernelMeasurement], calibration: str
) -> tuple[np.ndarray, np.ndarray]:
    """GEMM terms of ``points`` (at the top clock, or at the clock a lowered power limit
    sustains: :func:`~diffcost._analysis.kernel_points.gemm_conditions`) for every (narrow
    fraction, fraction, half_dim) triple, ``(len(NARROW_GRID), len(FRACTION_GRID),
    len(HALF_DIM_GRID), len(points))`` seconds, and each point's fixed seconds per kernel as
    its source timed it (:func:`fixed_s`, the calibration's launch constants); a point of a
    ``data_parallel`` file with its last partial wave
    (:func:`~diffcost._analysis.kernel_points.gemm_format`), one of ``reused`` operands within
    the chip's L2 read from it (:func:`~diffcost._analysis.kernel_points.gemm_source`)."""
    shape = (len(NARROW_GRID), len(FRACTION_GRID), len(HALF_DIM_GRID), len(points))
    out = np.zeros(shape)
    host = np.zeros(len(points))
    loaded = {c: load_system(chip=c, calibration=calibration) for c in {p.chip for p in points}}
    by_chip: dict[tuple[str, str, float | None, str, float], list[int]] = {}
    for i, p in enumerate(points):
        system, _ = gemm_conditions(p, loaded[p.chip])
        fmt = gemm_format(p, system, family_of_chip(p.chip))
        bandwidth = float(gemm_source(p, system, fmt).chip.memory_bandwidth_bytes_per_s)
        key = (p.chip, p.timing, p.shape.get("power_limit_w"), p.tiling, bandwidth)
        by_chip.setdefault(key, []).append(i)
    for (chip, timing, _, _, _), idx in by_chip.items():
        pts = [points[i] for i in idx]
        system, flop_j = gemm_conditions(pts[0], loaded[chip])
        fmt = gemm_format(pts[0], system, family_of_chip(chip))
        tile = fmt.tile
        system = gemm_source(pts[0], system, fmt)
        if flop_j is not None:
            flop_j = jnp.stack([gemm_conditions(p, loaded[chip])[1] for p in pts])
        m, n, k = (jnp.asarray([float(p.shape[key]) for p in pts]) for key in ("m", "n", "k"))
        peak = jnp.stack([system.chip.peak_flop_per_s[format_index(p.dtype)] for p in pts])
        narrow = jnp.asarray([DTYPE_BYTES[p.dtype] <= 1.0 for p in pts])
        nbytes = jnp.asarray([DTYPE_BYTES[p.dtype] for p in pts])
        for r, ratio in enumerate(NARROW_GRID):
            secs = _grid_seconds(
                system,
                m,
                n,
                k,
                jnp.where(narrow, peak * ratio, peak),
                nbytes,
                flop_j,
                jnp.asarray(FRACTION_GRID),
                jnp.asarray(HALF_DIM_GRID),
                tile,
            )
            out[r][:, :, idx] = np.asarray(secs)
        host[idx] = fixed_s(system, timing)
    return out, host


def _loss(pred: np.ndarray, measured: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted Huber loss of the log errors over the last axis."""
    r = np.abs(np.log(pred / measured))
    huber = np.where(r < HUBER_DELTA, 0.5 * r**2, HUBER_DELTA * (r - 0.5 * HUBER_DELTA))
    return np.sum(huber * weights, axis=-1)


def source_weights(sources: Sequence[str]) -> np.ndarray:
    """Each source of ``n`` points weighs ``sqrt(n)`` in total, shared by its points."""
    src = np.asarray(list(sources))
    return np.asarray([1.0 / np.sqrt(np.sum(src == s)) for s in src])


@dataclass(frozen=True)
class FamilyFit:
    """The kernel fit of one family: its constants (:data:`KERNEL_CONSTANTS`), the points it
    used, per-point predictions (the model's, no source overhead added) by the fit on every
    source and by the fit without the point's own source (None for a family with one
    source)."""

    family: str
    constants: dict[str, float]
    ids: tuple[str, ...]
    sources: tuple[str, ...]
    fitted_s: tuple[float, ...]
    held_out_s: tuple[float, ...] | None


def _best(
    terms: np.ndarray, fixed: np.ndarray, measured: np.ndarray, weights: np.ndarray
) -> tuple[int, int, int]:
    """Grid indices (narrow fraction, fraction, half_dim) of the least loss; a narrow fraction
    no point depends on (no 8-bit point) stays at 1."""
    best = (np.inf, 0, 0, 0)
    used = [r for r in range(len(NARROW_GRID)) if r == _ONE or np.any(terms[r] != terms[_ONE])]
    for r in used:
        loss = _loss(terms[r] + fixed, measured, weights)
        i, j = np.unravel_index(int(np.argmin(loss)), loss.shape)
        if loss[i, j] < best[0] - 1e-12:
            best = (float(loss[i, j]), r, int(i), int(j))
    return best[1], best[2], best[3]


def held_out_s(
    sources: Sequence[str], fit_without: Callable[[np.ndarray], np.ndarray]
) -> tuple[float, ...] | None:
    """Each point predicted by the fit without its own source: ``fit_without(keep)`` fits on
    the points where ``keep`` is true and predicts every point; None for a single source."""
    if len(set(sources)) < 2:
        return None
    out = np.zeros(len(sources))
    for name in sorted(set(sources)):
        mask = np.asarray([x == name for x in sources])
        out[mask] = fit_without(~mask)[mask]
    return tuple(map(float, out))


def fit_family(
    family: str, points: Sequence[KernelMeasurement], calibration: str = "default"
) -> FamilyFit:
    """Fit :data:`KERNEL_CONSTANTS` of ``family`` on its GEMM ``points`` (module docstring)."""
    pts = [p for p in points if p.op == "gemm" and family_of_chip(p.chip) == family]
    if not pts:
        raise ValueError(f"no GEMM kernel points for family {family!r}")
    terms, host = grid_terms(pts, calibration)
    measured = np.asarray([p.time_s for p in pts])
    sources = [p.source for p in pts]
    # only points whose time the shape constants decide weigh in the fit (module docstring):
    # not a floor-dominated one, nor one whose clock a lowered power limit sets
    shaped = measured >= SHAPE_DOMINATED * host
    modelled = np.asarray([p.unmodelled is None and "power_limit_w" not in p.shape for p in pts])
    w = np.where(shaped & modelled, source_weights(sources), 0.0)
    best = _best(terms, host, measured, w)

    def predict(r: int, i: int, j: int) -> np.ndarray:
        return terms[r, i, j] + host

    held = held_out_s(
        sources,
        lambda keep: predict(*_best(terms[..., keep], host[keep], measured[keep], w[keep])),
    )
    r, i, j = best
    constants = {
        "matmul_peak_fraction": float(FRACTION_GRID[i]),
        "matmul_half_dim": float(HALF_DIM_GRID[j]),
        "narrow_matmul_fraction": float(NARROW_GRID[r]),
    }
    return FamilyFit(
        family,
        constants,
        tuple(p.id for p in pts),
        tuple(sources),
        tuple(map(float, predict(*best))),
        held,
    )


#: The fused attention constants, fitted per chip family on its prefill points (the softmax's
#: share differs by architecture: the special-function units' rate against the tensor cores').
ATTENTION_CONSTANTS = ("attention_softmax_dim", "attention_half_span", "attention_half_tiles")
SOFTMAX_DIM_GRID = np.concatenate([[1.0, 2.0], np.arange(4.0, 96.1, 4.0)])
HALF_SPAN_GRID = np.concatenate([[1.0, 16.0], np.arange(32.0, 1536.1, 32.0)])
HALF_TILES_GRID = np.asarray([1.0, 4.0, 8.0, 16.0, 24.0, 32.0, 48.0, 64.0, 96.0, 128.0])


def with_constants(system: System, constants: dict[str, float]) -> System:
    """``system`` with some :class:`~diffcost.Efficiency` fields replaced (SI values)."""
    eff = system.efficiency
    names = tuple(constants)
    values = tuple(
        jnp.asarray(constants[n], getattr(eff, n).dtype).reshape(getattr(eff, n).shape)
        for n in names
    )
    eff = eqx.tree_at(lambda e: tuple(getattr(e, n) for n in names), eff, values)
    return eqx.tree_at(lambda x: x.efficiency, system, eff)


@eqx.filter_jit
def _attention_grid(system: System, args, softmax, span, tiles):
    """Prefill attention seconds at the top clock for every constant triple and point."""
    from .._terms.attention import prefill_attention

    tokens, piece, context, shape, peak = args

    def one(ds, dc, dt):
        s = with_traced(system, ds, dc, dt)
        return jax.vmap(
            lambda t, p, c, sh, pk: prefill_attention(t, p, c, sh, pk, s, EXACT).time_s
        )(tokens, piece, context, shape, peak)

    grid = jax.vmap(jax.vmap(jax.vmap(one, (None, None, 0)), (None, 0, None)), (0, None, None))
    return grid(softmax, span, tiles)


def with_traced(system: System, ds, dc, dt) -> System:
    """``system`` with the three fused attention constants replaced by (traced) values."""
    eff = eqx.tree_at(
        lambda e: (e.attention_softmax_dim, e.attention_half_span, e.attention_half_tiles),
        system.efficiency,
        (ds, dc, dt),
    )
    return eqx.tree_at(lambda x: x.efficiency, system, eff)


@dataclass(frozen=True)
class AttentionFit:
    """The fused attention constants of one family fitted on its prefill points, and per-point
    predictions by that fit and by the fit without the point's own source (None: one source)."""

    family: str
    constants: dict[str, float]
    ids: tuple[str, ...]
    sources: tuple[str, ...]
    fitted_s: tuple[float, ...]
    held_out_s: tuple[float, ...] | None


def fit_attention(
    family: str,
    points: Sequence[KernelMeasurement],
    calibration: str = "default",
    gemm: "FamilyFit | None" = None,
) -> AttentionFit | None:
    """Fit :data:`ATTENTION_CONSTANTS` of ``family`` on its ``attention_prefill`` points, with
    the family's GEMM constants from ``gemm`` (:func:`fit_family`) where given."""
    pts = [p for p in points if p.op == "attention_prefill" and family_of_chip(p.chip) == family]
    if not pts:
        return None
    grid = np.zeros((len(SOFTMAX_DIM_GRID), len(HALF_SPAN_GRID), len(HALF_TILES_GRID), len(pts)))
    fixed = np.zeros(len(pts))
    by_chip: dict[tuple[str, str], list[int]] = {}
    for i, p in enumerate(pts):
        by_chip.setdefault((p.chip, p.timing), []).append(i)
    for (chip, timing), idx in by_chip.items():
        system = load_system(chip=chip, calibration=calibration)
        if gemm is not None:
            system = with_constants(system, gemm.constants)
        args = [prefill_args(pts[i], system) for i in idx]
        stacked = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *args)
        got = _attention_grid(
            burst(system),
            stacked,
            jnp.asarray(SOFTMAX_DIM_GRID),
            jnp.asarray(HALF_SPAN_GRID),
            jnp.asarray(HALF_TILES_GRID),
        )
        grid[..., idx] = np.asarray(got)
        fixed[idx] = fixed_s(system, timing)
    measured = np.asarray([p.time_s for p in pts])
    sources = [p.source for p in pts]
    modelled = np.asarray([p.unmodelled is None for p in pts])
    w = np.where(modelled, source_weights(sources), 0.0)
    pred = grid + fixed

    def best(mask: np.ndarray) -> tuple[int, int, int]:
        loss = _loss(pred[..., mask], measured[mask], w[mask])
        a, b, c = np.unravel_index(int(np.argmin(loss)), loss.shape)
        return int(a), int(b), int(c)

    everything = np.ones(len(pts), dtype=bool)
    a, b, c = best(everything)
    held = held_out_s(sources, lambda keep: pred[best(keep)])
    constants = {
        "attention_softmax_dim": float(SOFTMAX_DIM_GRID[a]),
        "attention_half_span": float(HALF_SPAN_GRID[b]),
        "attention_half_tiles": float(HALF_TILES_GRID[c]),
    }
    return AttentionFit(
        family,
        constants,
        tuple(p.id for p in pts),
        tuple(sources),
        tuple(map(float, pred[a, b, c])),
        held,
    )


def fit_kernel_constants(
    points: Sequence[KernelMeasurement], calibration: str = "default"
) -> dict[str, FamilyFit]:
    """:func:`fit_family` for every family of :data:`KERNEL_FAMILIES` with GEMM points."""
    fams = {family_of_chip(p.chip) for p in points if p.op == "gemm"}
    return {f: fit_family(f, points, calibration) for f in KERNEL_FAMILIES if f in fams}


@dataclass(frozen=True)
class KernelFits:
    """Every kernel fit: GEMM constants by family, fused attention constants by family, and
    both merged (``constants``: family -> :class:`~diffcost.Efficiency` field -> SI value)."""

    gemm: dict[str, FamilyFit]
    attention: dict[str, AttentionFit]

    @property
    def constants(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for fam, fit in (*self.gemm.items(), *self.attention.items()):
            out.setdefault(fam, {}).update(fit.constants)
        return out

    def held_out_s(self) -> dict[str, float]:
        """Point id -> the prediction of its family's fit without its source (where there is
        one)."""
        out: dict[str, float] = {}
        for fit in (*self.gemm.values(), *self.attention.values()):
            if fit.held_out_s is not None:
                out.update(zip(fit.ids, fit.held_out_s, strict=True))
        return out


def fit_kernels(points: Sequence[KernelMeasurement], calibration: str = "default") -> KernelFits:
    """The GEMM fit of every family with GEMM points (:func:`fit_family`), then its fused
    attention fit with those GEMM constants (:func:`fit_attention`)."""
    gemm = fit_kernel_constants(points, calibration)
    attention = {}
    for fam in KERNEL_FAMILIES:
        got = fit_attention(fam, points, calibration, gemm.get(fam))
        if got is not None:
            attention[fam] = got
    return KernelFits(gemm, attention)


def kernel_constants(calibration: str = "default") -> dict[str, dict[str, float]]:
    """The kernel-fitted constants by family from every built-in kernel file, with the
    calibration's other constants (what ``diffcost calibrate`` fits first)."""
    from .._inputs.kernel_measurements import read_kernel_measurements

    return fit_kernels(read_kernel_measurements(), calibration).constants


def kernel_note(fits: KernelFits, points: Sequence[KernelMeasurement]) -> str:
    """The kernel fit's provenance for a calibration file: constants by family, points used and
    the leave-one-source-out median |error| where a family has several sources."""
    measured = {p.id: p.time_s for p in points}
    parts = []
    for fam, values in fits.constants.items():
        text = ", ".join(f"{k} {v:.4g}" for k, v in values.items())
        parts.append(f"{fam}: {text}")
    held = fits.held_out_s()
    errors = {
        kind: [
            abs(held[i] / measured[i] - 1.0) for f in fits_of.values() for i in f.ids if i in held
        ]
        for kind, fits_of in (("GEMM", fits.gemm), ("prefill attention", fits.attention))
    }
    loso = "; ".join(f"{kind} {np.median(e):.1%} (n={len(e)})" for kind, e in errors.items() if e)
    return (
        "Kernel constants (issue 41), fitted first on the per-kernel timings of specs/kernels by "
        "diffcost/_analysis/calibrate_kernels.py (grid search, Huber loss of log errors, each "
        "kernel at the top clock plus the fixed cost per kernel as its source timed it) and "
        "held as tight priors (log width 0.05) or fixed values by the end-to-end fit: "
        + "; ".join(parts)
        + ". Leave-one-source-out within a family, median |error|: "
        + (loso or "none (one source per family)")
        + "."
    )


__all__ = [
    "ATTENTION_CONSTANTS",
    "AttentionFit",
    "KERNEL_CONSTANTS",
    "KERNEL_FAMILIES",
    "FamilyFit",
    "KernelFits",
    "family_of_chip",
    "fit_attention",
    "fit_family",
    "fit_kernel_constants",
    "fit_kernels",
    "fixed_s",
    "grid_terms",
    "kernel_constants",
    "kernel_note",
    "launch_parts_s",
    "with_constants",
]
