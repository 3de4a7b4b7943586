"""Plots of predictions, sweeps and sensitivities (matplotlib, no global state).

Every function returns a :class:`matplotlib.figure.Figure` built without ``pyplot`` (so it works
headless, under the Agg canvas, and in notebooks), or draws on a given ``ax``.

* :func:`roofline`: arithmetic intensity vs achieved FLOP/s of every matrix operation of one
  prediction (:func:`roofline_ops`), under the datasheet and achievable roofs (Williams,
  Waterman, Patterson, "Roofline", CACM 2009);
* :func:`pareto`: latency-throughput trade-off of a serving sweep and its Pareto front;
* :func:`memory_bars`: stacked memory per chip of a few plans against capacity;
* :func:`mfu_heatmap`: best MFU over tensor x pipeline parallel degrees of a training sweep;
* :func:`interval_band`: one output of a sweep along one input, with its p10-p90 band;
* :func:`tornado`: exact metric change when each parameter alone is halved or doubled.
"""

from collections.abc import Sequence
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pandas as pd
from jaxtyping import ArrayLike
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .._core.smooth import EXACT
from .._inputs.hardware import System, format_index
from .._inputs.model import Model
from .._serve.passes import consts
from .._serve.plan import ServePlan
from .._terms.attention import causal_skip
from .._terms.layer import LAYER_GEMMS, GemmOp, layer_gemms, logits_gemm
from .._train.cost import (
    attention_core_s,
    attention_ops,
    flash_attention_bytes,
    gemm_format,
    tokens_per_chip,
)
from .._train.plan import TrainPlan

#: Axis labels (with units) of the common sweep columns; others read as their words.
LABELS = {
    "tp": "tensor parallel degree (TP)",
    "pp": "pipeline parallel degree (PP)",
    "dp": "data parallel degree (DP)",
    "cp": "context parallel degree (CP)",
    "batch": "batch (requests)",
    "micro_batch": "micro-batch (sequences)",
    "global_batch": "global batch (sequences)",
    "seq_len": "sequence length (tokens)",
    "chips": "chips",
    "qps": "arrival rate (requests/s)",
    "step_time_s": "step time (s)",
    "mfu": "MFU (model FLOP utilisation)",
    "tokens_per_s": "tokens/s",
    "tokens_per_s_per_chip": "tokens/s per chip",
    "ttft_s": "time to first token (s)",
    "tpot_s": "time per output token (s)",
    "request_latency_s": "request latency (s)",
    "output_tokens_per_s": "output tokens/s",
    "output_tokens_per_s_per_chip": "output tokens/s per chip",
    "output_tokens_per_s_per_user": "output tokens/s per user",
    "energy_j": "energy per step (J)",
    "cost_usd": "cost per step (USD)",
    "memory_total_bytes": "memory per chip (bytes)",
}


def label(column: str) -> str:
    """A readable axis label with the unit: :data:`LABELS`, else the column's words with a
    ``_s`` / ``_bytes`` / ``_j`` / ``_usd`` suffix read as its unit."""
    if column in LABELS:
        return LABELS[column]
    for suffix, unit in (("_s", "s"), ("_bytes", "bytes"), ("_j", "J"), ("_usd", "USD")):
        if column.endswith(suffix):
            return f"{column.removesuffix(suffix).replace('_', ' ')} ({unit})"
    return column.replace("_", " ")


def _one(df: pd.DataFrame, column: str, plural: str) -> str | None:
    """The single value of ``column`` in ``df``, ``"<k> <plural>"`` when it varies, ``None``
    when absent."""
    if column not in df:
        return None
    values = list(dict.fromkeys(df[column].tolist()))
    return str(values[0]) if len(values) == 1 else f"{len(values)} {plural}"


def sweep_title(df: pd.DataFrame, job: str) -> str:
    """What a sweep's plots show, read from its table: model, system (or chip) and chip count,
    and the workload, e.g. ``"llama-3-70b on dgx-h100 x64, train seq 4096"``."""
    model = _one(df, "model", "models") or "model"
    hardware = _one(df, "system", "systems") or _one(df, "chip", "chips") or "system"
    chips = _one(df, "chips", "chip counts")
    where = f"{model} on {hardware}" + (f" x{chips}" if chips and " " not in chips else "")
    if job == "train":
        seq = _one(df, "seq_len", "lengths")
        work = "train" + (f" seq {seq}" if seq else "")
    else:
        lens = [_one(df, c, "lengths") for c in ("input_len", "output_len")]
        work = "serve" + (f" {lens[0]} in / {lens[1]} out tokens" if all(lens) else "")
    return f"{where}, {work}"


def _axes(ax: Axes | None, size=(6.4, 4.4)) -> tuple[Figure, Axes]:
    if ax is not None:
        fig = ax.get_figure(root=True)  # the Figure, also for an axis inside a SubFigure
        assert isinstance(fig, Figure)
        return fig, ax
    fig = Figure(figsize=size, layout="constrained")
    return fig, fig.add_subplot()


def save(fig: Figure, path: str | Path, dpi: int = 120) -> Path:
    """Write ``fig`` (PNG, SVG or PDF by suffix) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    return path


# --- roofline -------------------------------------------------------------------------------------
def roofline_ops(system: System, model: Model, plan: TrainPlan | ServePlan) -> pd.DataFrame:
    """The matrix operations of one layer (and the logits) on one chip, as the cost model charges
    them: ``op``, ``flop``, ``bytes``, ``time_s`` (the model's roofline time),
    ``intensity`` (FLOP/byte) and ``achieved_flop_per_s``.

    Training: forward GEMMs of one micro-batch (QKV, attention output, MLP in/out, logits) and
    the attention core (``attention``: one fused kernel over the kept scores, or the unfused
    ``QK^T`` and ``AV`` GEMMs, :func:`~diffcost._train.cost.attention_core_s`).  Serving: the
    decode step's GEMMs for the plan's batch and the prefill GEMMs of one prompt, with the weight
    bytes the pass charges (a separately dequantized weight included).
    Every row comes from the shapes of :mod:`diffcost._terms.layer` and
    :mod:`diffcost._terms.attention` that the cost models sum, so the plot cannot drift from them.
    """
    ops: list[tuple[str, GemmOp, ArrayLike]] = []  # (name, op, scale)
    extra: list[tuple[str, float, float, float]] = []  # (name, flop, bytes, seconds)
    if isinstance(plan, TrainPlan):
        tokens, fmt = tokens_per_chip(plan), gemm_format(system, plan)
        ops += [
            (n, op, 1.0)
            for n, op in zip(LAYER_GEMMS, layer_gemms(tokens, model, plan.tp, fmt), strict=True)
        ]
        # the attention core as the step charges it: a fused kernel over the kept scores, or
        # the unfused QK^T and AV GEMMs over the whole matrix
        qk, av = attention_ops(system, model, plan)
        flash = plan.flash_attention
        skip = causal_skip(model, flash, plan.seq_len, EXACT)
        flop = skip * (qk.flop() + av.flop())
        moved = flash * flash_attention_bytes(model, plan) + (1.0 - flash) * (
            qk.bytes() + av.bytes()
        )
        seconds = attention_core_s(system, model, plan, EXACT)
        extra.append(("attention", float(flop), float(moved), float(seconds)))
        ops.append(("logits", logits_gemm(tokens, model, plan.tp, fmt), 1.0))
    else:
        fmt = consts(system, model, plan, EXACT).gemm_format()
        micro = jnp.minimum(plan.pp, plan.batch)
        for phase, m in (("decode", plan.batch / micro), ("prefill", plan.input_len)):
            gemms = zip(LAYER_GEMMS, layer_gemms(m, model, plan.tp, fmt), strict=True)
            ops += [(f"{phase} {n}", op, 1.0) for n, op in gemms]
            ops.append((f"{phase} logits", logits_gemm(m, model, plan.tp, fmt), 1.0))
    rows = [
        (name, *(float(scale * x) for x in (op.flop(), op.bytes(), op.time_s(system, EXACT))))
        for name, op, scale in ops
    ] + extra
    df = pd.DataFrame(rows, columns=["op", "flop", "bytes", "time_s"])
    df["intensity"] = df.flop / df.bytes
    df["achieved_flop_per_s"] = df.flop / df.time_s
    return df


def roofline(
    ops: pd.DataFrame,
    system: System,
    peak_flop_per_s: float | None = None,
    title: str = "roofline",
    ax: Axes | None = None,
) -> Figure:
    """Achieved FLOP/s against arithmetic intensity for every op of ``ops``
    (:func:`roofline_ops`), under the datasheet roof ``min(peak, I * bandwidth)`` and the
    achievable one (the calibration's fractions of both)."""
    fig, ax = _axes(ax)
    chip, eff = system.chip, system.efficiency
    peak = float(
        chip.peak_flop_per_s[format_index("bf16")] if peak_flop_per_s is None else peak_flop_per_s
    )
    bw = float(chip.memory_bandwidth_bytes_per_s)
    lo, hi = max(ops.intensity.min() / 4, 0.1), ops.intensity.max() * 4
    x = np.geomspace(lo, hi, 200)
    ax.loglog(x, np.minimum(peak, x * bw), "k-", lw=1.5, label="datasheet roof")
    ach = np.minimum(
        peak * float(eff.matmul_peak_fraction), x * bw * float(eff.memory_bandwidth_fraction)
    )
    ax.loglog(x, ach, "k--", lw=1, label="achievable roof")
    for _, row in ops.iterrows():
        ax.loglog(row.intensity, row.achieved_flop_per_s, "o", ms=7, label=row.op)
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved FLOP/s")
    ax.set_title(title)
    ax.legend(fontsize=7, ncols=2)
    ax.grid(True, which="both", alpha=0.3)
    return fig


# --- sweeps ---------------------------------------------------------------------------------------
def pareto_front(
    df: pd.DataFrame, x: str, y: str, maximize: tuple[bool, bool] = (True, True)
) -> pd.DataFrame:
    """Rows of ``df`` not dominated in ``(x, y)`` (both maximised by default), sorted by ``x``."""
    sx = df[x].to_numpy() * (1 if maximize[0] else -1)
    sy = df[y].to_numpy() * (1 if maximize[1] else -1)
    order = np.lexsort((-sy, -sx))  # best x first, ties: best y first
    best_y, keep = -np.inf, []
    for i in order:
        if sy[i] > best_y:
            keep.append(i)
            best_y = sy[i]
    return df.iloc[keep].sort_values(x)


def pareto(
    df: pd.DataFrame,
    x: str = "output_tokens_per_s_per_user",
    y: str = "output_tokens_per_s_per_chip",
    hue: str | None = None,
    maximize: tuple[bool, bool] = (True, True),
    title: str = "latency-throughput trade-off",
    ax: Axes | None = None,
) -> Figure:
    """Scatter of ``(x, y)`` for the feasible rows (one colour per ``hue`` value) and the Pareto
    front of each group (by default both maximised: faster per user, more per chip; for a
    latency on ``x`` pass ``maximize=(False, True)``)."""
    fig, ax = _axes(ax)
    rows = df[df.feasible] if "feasible" in df else df
    groups = [(None, rows)] if hue is None else list(rows.groupby(hue, observed=True))
    for name, g in groups:
        if g.empty:
            continue
        pts = ax.scatter(g[x], g[y], s=6, alpha=0.25)
        front = pareto_front(pd.DataFrame(g), x, y, maximize)
        ax.plot(
            front[x],
            front[y],
            "-o",
            ms=3,
            color=np.asarray(pts.get_facecolor())[0][:3],
            label=str(name) if name is not None else "Pareto front",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(label(x))
    ax.set_ylabel(label(y))
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    return fig


_MEMORY_PARTS = {
    "train": [
        "memory_weights_bytes",
        "memory_gradients_bytes",
        "memory_optimizer_bytes",
        "memory_activations_bytes",
        "memory_reserved_bytes",
    ],
    "serve": [
        "memory_weights_bytes",
        "memory_kv_cache_bytes",
        "memory_activations_bytes",
        "memory_reserved_bytes",
    ],
}


def memory_bars(
    df: pd.DataFrame,
    labels: Sequence[str] | None = None,
    title: str = "memory per chip",
    ax: Axes | None = None,
) -> Figure:
    """Stacked memory per chip (GB) of each row of ``df`` with its capacity marked."""
    job = "train" if "memory_gradients_bytes" in df else "serve"
    parts = [p for p in _MEMORY_PARTS[job] if p in df]
    fig, ax = _axes(ax, (max(4.0, 0.9 * len(df) + 2), 4.4))
    x = np.arange(len(df))
    bottom = np.zeros(len(df))
    for p in parts:
        vals = df[p].to_numpy(dtype=float) / 1e9
        ax.bar(x, vals, bottom=bottom, label=p.removeprefix("memory_").removesuffix("_bytes"))
        bottom += vals
    if "capacity_bytes" in df:
        cap = df["capacity_bytes"].to_numpy(dtype=float) / 1e9
        ax.scatter(x, cap, marker="_", s=900, color="k", label="capacity", zorder=3)
    ax.set_xticks(
        x,
        labels if labels is not None else [str(i) for i in df.index],
        rotation=30,
        ha="right",
        fontsize=8,
    )
    ax.set_ylabel("GB per chip")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def mfu_heatmap(
    df: pd.DataFrame,
    x: str = "tp",
    y: str = "pp",
    value: str = "mfu",
    title: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Best ``value`` over the other swept inputs for each ``(x, y)`` cell, feasible rows only
    (blank cells: nothing feasible)."""
    fig, ax = _axes(ax, (5.6, 4.6))
    rows = df[df.feasible] if "feasible" in df else df
    grid = rows.pivot_table(index=y, columns=x, values=value, aggfunc="max")
    xs = sorted(df[x].unique())
    ys = sorted(df[y].unique())
    grid = grid.reindex(index=ys, columns=xs)
    im = ax.imshow(grid.to_numpy(dtype=float), origin="lower", cmap="viridis", aspect="auto")
    ax.set_xticks(range(len(xs)), [f"{v:g}" for v in xs])
    ax.set_yticks(range(len(ys)), [f"{v:g}" for v in ys])
    lo, hi = np.nanmin(grid.to_numpy(dtype=float)), np.nanmax(grid.to_numpy(dtype=float))
    for i in range(len(ys)):
        for j in range(len(xs)):
            v = grid.iat[i, j]
            if np.isfinite(v):
                bright = (v - lo) > 0.6 * (hi - lo)  # viridis is light at the top
                ax.text(
                    j,
                    i,
                    f"{v:.0%}" if value in ("mfu", "hfu") else f"{v:.3g}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="k" if bright else "w",
                )
    ax.set_xlabel(label(x))
    ax.set_ylabel(label(y))
    ax.set_title(title or f"best {value} over {x} x {y} (feasible plans)")
    fig.colorbar(im, ax=ax, label=value)
    return fig


def latency_vs_load(
    df: pd.DataFrame, x: str = "qps", hue: str | None = None, title: str | None = None
) -> Figure:
    """TTFT percentiles (p50 / p90 / p99) and TPOT (mean / p90 / p99), the ``load_*`` columns
    of a serving sweep with ``qps``, against the arrival rate: the knee where queueing takes
    over.  Points past saturation (``load_stable`` false) are left out; a dotted line marks the
    first of them."""
    fig = Figure(figsize=(10.5, 4.2), layout="constrained")
    panes = fig.subplots(1, 2)
    groups = [(None, df)] if hue is None else list(df.groupby(hue, observed=True))
    for pane, metric in zip(panes, ("ttft", "tpot"), strict=True):
        for name, g in groups:
            g = pd.DataFrame(g).sort_values(x)
            ok = pd.DataFrame(g[g["load_stable"] > 0])
            for q, style in (("p50", "-o"), ("p90", "--"), ("p99", ":")):
                col = "load_tpot_s" if (metric, q) == ("tpot", "p50") else f"load_{metric}_{q}_s"
                q = "mean" if col == "load_tpot_s" else q
                legend = q if name is None else f"{name} {q}"
                pane.plot(ok[x], 1e3 * ok[col], style, ms=3, label=legend)
            past = g[x].to_numpy(dtype=float)[g["load_stable"].to_numpy() <= 0]
            if past.size:
                pane.axvline(float(past.min()), color="grey", ls=":", lw=1)
        pane.set_xlabel(label(x))
        pane.set_ylabel(f"{metric.upper()} (ms)")
        pane.set_yscale("log")
        pane.legend(fontsize=7)
    head = "latency percentiles under load (dotted: saturation)"
    fig.suptitle(f"{title}: {head}" if title else head)
    return fig


def interval_band(
    df: pd.DataFrame,
    x: str,
    y: str,
    hue: str | None = None,
    maximize: bool | None = None,
    title: str | None = None,
    ax: Axes | None = None,
) -> Figure:
    """``y`` against ``x`` for the feasible rows of a sweep, one line per ``hue`` value, with
    the p10-p90 interval (the ``<y>_p10`` / ``<y>_p90`` columns of
    :func:`diffcost._analysis.sweep.run_sweep`) as a shaded band labelled "80% interval".

    Where several rows share an ``x`` (other inputs swept too) the line follows the best of
    them (largest ``y``, or smallest for a time: ``maximize`` defaults to ``y`` not ending in
    ``_s``) and the band is that row's interval."""
    lo, hi = f"{y}_p10", f"{y}_p90"
    if lo not in df or hi not in df:
        raise ValueError(f"no interval columns {lo} / {hi}: run the sweep with intervals")
    best = (not y.endswith("_s")) if maximize is None else maximize
    fig, ax = _axes(ax)
    rows = pd.DataFrame(df[df.feasible] if "feasible" in df else df)
    groups = [(None, rows)] if hue is None else list(rows.groupby(hue, observed=True))
    labelled = False
    for name, group in groups:
        g = pd.DataFrame(group)
        g = pd.DataFrame(g[np.isfinite(g[y].to_numpy(dtype=float))])
        if g.empty:
            continue
        by_x = g.groupby(x, observed=True)[y]
        line = pd.DataFrame(g.loc[(by_x.idxmax() if best else by_x.idxmin()).to_numpy()])
        line = line.sort_values(x)
        (drawn,) = ax.plot(line[x], line[y], "-o", ms=3, label=y if name is None else str(name))
        ax.fill_between(
            line[x].to_numpy(dtype=float),
            line[lo].to_numpy(dtype=float),
            line[hi].to_numpy(dtype=float),
            color=drawn.get_color(),
            alpha=0.2,
            lw=0,
            label=None if labelled else "80% interval",  # one legend entry for every band
        )
        labelled = True
    xs = rows[x].to_numpy(dtype=float)
    if len(xs) and bool((xs > 0).all()) and xs.max() >= 8 * xs.min():
        ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(label(x))
    ax.set_ylabel(label(y))
    ax.set_title(title or f"best feasible {y} per {x}")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    return fig


# --- sensitivity ----------------------------------------------------------------------------------
def tornado(
    swings: pd.DataFrame, metric: str, title: str | None = None, ax: Axes | None = None
) -> Figure:
    """Tornado chart of :meth:`diffcost._sensitivity.Sensitivity.swings`: the exact relative
    change of ``metric`` when each parameter alone is multiplied by each factor."""
    cols = [c for c in swings.columns if c.startswith("x")]
    fig, ax = _axes(ax, (7.5, 0.45 * len(swings) + 1.6))
    y = np.arange(len(swings))[::-1]
    for col, color in zip(cols, ("tab:blue", "tab:orange", "tab:green"), strict=False):
        ax.barh(
            y,
            100 * swings[col].to_numpy(),
            color=color,
            alpha=0.8,
            label=f"parameter {col.replace('x', 'x ')}",
        )
    pairs = zip(swings.parameter, swings.elasticity, strict=True)
    labels = [f"{p}  (e={e:+.2f})" for p, e in pairs]
    ax.set_yticks(y, labels, fontsize=8)
    ax.axvline(0, color="k", lw=0.8)
    ax.set_xlabel(f"change of {metric} (%)")
    ax.set_title(title or f"sensitivity of {metric}")
    ax.legend(fontsize=8)
    return fig


__all__ = [
    "interval_band",
    "memory_bars",
    "mfu_heatmap",
    "pareto",
    "pareto_front",
    "roofline",
    "roofline_ops",
    "save",
    "tornado",
]
