"""Sensitivity of a prediction to every hardware and model number, as ranked elasticities.

The elasticity of a metric ``m`` with respect to a parameter ``x`` is

    e = d log|m| / d log x = (dm/dx) * x / m,

the percent change of ``m`` per percent change of ``x`` (dimensionless, so a bandwidth and a
latency rank on one scale; a metric that grows as ``x^a`` has ``e = a``).  All of them come from
one ``eqx.filter_grad`` of the log-metrics with respect to the whole ``(System, Model)`` pytree,
mapped over the metrics, on the *exact* cost model: the gradient of the piecewise-smooth exact
model is the one-sided slope of the active branch, which is what a small hardware change does.

Headline metrics (:data:`TRAIN_METRICS`, :data:`SERVE_METRICS`):

* training: step time, MFU, tokens/s per chip, memory headroom, cost and energy per token;
* serving: TTFT, TPOT, output tokens/s per chip, memory headroom, cost and energy per output
  token, the largest batch that fits, and two capacity metrics:

  - ``chips_needed``: chips whose memory just holds one instance (weights, KV cache and
    activations of the plan's batch): ``instance_chips * (used - reserved) / (capacity -
    reserved)`` per chip;
  - ``min_deployment_tokens_per_s_per_chip``: output tokens/s per chip of that smallest
    instance, i.e. the plan with its tensor-parallel degree rescaled (continuously, one replica)
    so that the instance has exactly ``chips_needed`` chips.  For a batch-1 decode
    ``chips * TPOT ~ W / BW + chips * t_overhead`` (weights ``W`` streamed once per token over
    the aggregate bandwidth, plus the per-chip latency of launches and collectives), and
    ``chips ~ W / capacity``.  On HBM chips ``W / BW`` dominates and bandwidth is the most
    elastic hardware number; on SRAM-only chips (Groq, Cerebras) ``W / BW`` is microseconds,
    the overheads of hundreds of chips dominate, and capacity (which sets how many chips) is.

Metrics that are zero or undefined for a scenario (cost without a price) are left out.
Flags (``on_chip_sram``, ``causal``, ``bias``, ...) are not parameters: they have no
meaningful logarithm.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import pandas as pd
from jax.flatten_util import ravel_pytree
from jaxtyping import Array

from .._core.dedupe import deduplicated
from .._core.exported import exported_program
from .._inputs.hardware import ARCHITECTURES, FORMATS, System
from .._inputs.model import Model
from .._serve.cost import ServeCost
from .._serve.plan import ServePlan
from .._train.cost import TrainCost
from .._train.plan import TrainPlan

#: Parameter groups that are properties of the hardware (ranked for the seed thesis).
HARDWARE_GROUPS: tuple[str, ...] = (
    "compute",
    "memory",
    "interconnect",
    "power",
    "price",
    "reliability",
)

#: Headline training metrics, in display order.
TRAIN_METRICS: tuple[str, ...] = (
    "step_time_s",
    "mfu",
    "tokens_per_s_per_chip",
    "memory_headroom_bytes",
    "cost_per_token_usd",
    "energy_per_token_j",
)

#: Headline serving metrics, in display order.
SERVE_METRICS: tuple[str, ...] = (
    "ttft_s",
    "tpot_s",
    "output_tokens_per_s_per_chip",
    "memory_headroom_bytes",
    "cost_per_token_usd",
    "energy_per_token_j",
    "max_batch",
    "chips_needed",
    "min_deployment_tokens_per_s_per_chip",
)

#: The metric a ranking or tornado chart shows by default.
PRIMARY = {"train": "step_time_s", "serve": "tpot_s"}

_FLAGS = {
    "on_chip_sram",
    "in_network_reduction",
    "array_dim",
    "learned_positions",
    "tied_embeddings",
    "bias",
    "dropout",
    "causal",
}
_GROUP_OF = {
    "peak_flop_per_s": "compute",
    "memory_capacity_bytes": "memory",
    "memory_bandwidth_bytes_per_s": "memory",
    "tdp_w": "power",
    "node_overhead_w": "power",
    "price_usd_per_chip_hour": "price",
    "num_chips": "system",
}


# --- metrics ------------------------------------------------------------------------------------
def train_metrics(params: tuple[System, Model], plan: TrainPlan) -> dict[str, Array]:
    """Headline training metrics of ``plan`` (SI units; see :data:`TRAIN_METRICS`)."""
    system, model = params
    out = TrainCost(system, model)(plan)
    tokens = plan.global_batch * plan.seq_len
    return {
        "step_time_s": out.step_time_s,
        "mfu": out.mfu,
        "tokens_per_s_per_chip": out.tokens_per_s / out.chips,
        "memory_headroom_bytes": out.headroom_bytes,
        "cost_per_token_usd": out.cost_usd / tokens,
        "energy_per_token_j": out.energy_j / tokens,
    }


def chips_needed(out, plan: ServePlan) -> Array:
    """Chips whose memory just holds one instance of ``plan`` (continuous count).

    ``(W + instance_chips * kv) / (capacity - reserved - activations)``: the instance's weights
    ``W`` (``min_chips_for_weights * (capacity - reserved)``) and KV cache over what one chip can
    give them once its runtime reserve and activation workspace are set aside.
    """
    mem = out.memory
    usable = out.capacity_bytes - mem.reserved_bytes
    weights = out.min_chips_for_weights * usable
    kv = plan.instance_chips() * mem.kv_cache_bytes
    return (weights + kv) / (usable - mem.activations_bytes)


def smallest_instance(plan: ServePlan, chips: Array) -> ServePlan:
    """``plan`` resized to one replica of ``chips`` chips (a continuous count): its outer
    parallel degree absorbs the change, the pipeline degree when ``pp > 1`` (pipelined layouts,
    as on SRAM chips), else the tensor-parallel degree."""
    piped = plan.pp > 1.0
    tp = jnp.where(piped, plan.tp, chips / plan.pp)
    pp = jnp.where(piped, chips / plan.tp, plan.pp)
    one = jnp.ones_like(plan.replicas)
    return eqx.tree_at(
        lambda p: (p.tp, p.pp, p.replicas, p.prefill_chips, p.decode_chips),
        plan,
        (tp, pp, one, chips, chips),
    )


def serve_metrics(params: tuple[System, Model], plan: ServePlan) -> dict[str, Array]:
    """Headline serving metrics of ``plan`` (SI units; see :data:`SERVE_METRICS`)."""
    system, model = params
    cost = ServeCost(system, model)
    out = cost(plan)
    needed = chips_needed(out, plan)
    small = cost(smallest_instance(plan, needed))
    return {
        "ttft_s": out.ttft_s,
        "tpot_s": out.tpot_s,
        "output_tokens_per_s_per_chip": out.output_tokens_per_s_per_chip,
        "memory_headroom_bytes": out.headroom_bytes,
        "cost_per_token_usd": out.cost_per_million_tokens_usd / 1e6,
        "energy_per_token_j": out.energy_per_token_j,
        "max_batch": out.max_batch,
        "chips_needed": needed,
        "min_deployment_tokens_per_s_per_chip": small.output_tokens_per_s_per_chip,
    }


# --- parameters ---------------------------------------------------------------------------------
def _key_name(k) -> str:
    return str(getattr(k, "name", getattr(k, "key", getattr(k, "idx", k))))


def parameter_names(params: tuple[System, Model]) -> list[tuple[str, str]]:
    """``(name, group)`` of every scalar in ``params``, in ``ravel_pytree`` order.

    Names: ``chip.peak_flop_per_s[bf16]``, ``chip.memory_bandwidth_bytes_per_s``,
    ``system.scale_up_latency_s``, ``efficiency.kernel_launch_s``, ``model.hidden``.
    """
    out = []
    for path, leaf in jtu.tree_flatten_with_path(params)[0]:
        keys = [_key_name(k) for k in path]
        top, rest = keys[0], keys[1:]
        field_name = rest[-1]
        if top == "1":
            prefix, group = "model", "model"
        elif rest[0] == "chip" and "energy" in rest:  # per-operation energies: power
            prefix, group = "chip.energy", "power"
        elif rest[0] == "chip" and "near_memory" in rest:  # the SRAM level beside HBM
            prefix, group = "chip.near_memory", "memory"
        elif rest[0] == "chip":
            prefix, group = "chip", _GROUP_OF.get(field_name, "memory")
        elif rest[0] == "efficiency":
            prefix, group = "efficiency", "efficiency"
        elif rest[0] == "reliability":  # jitter, failures, checkpoint, restart
            prefix, group = "system.reliability", "reliability"
        else:
            prefix, group = "system", _GROUP_OF.get(field_name, "interconnect")
        size = int(np.size(leaf))
        if size == len(FORMATS) and field_name in ("peak_flop_per_s", "flop_j"):
            out += [(f"{prefix}.{field_name}[{fmt}]", group) for fmt in FORMATS]
        elif field_name == "architecture":  # one-hot execution class: flags
            out += [(f"{prefix}.{field_name}[{a}]", "flag") for a in ARCHITECTURES]
        else:
            out.append((f"{prefix}.{field_name}", "flag" if field_name in _FLAGS else group))
    return out


# --- elasticities -------------------------------------------------------------------------------
def _safe_log_abs(x: Array) -> Array:
    return jnp.log(jnp.abs(jnp.where(x == 0.0, 1.0, x)))


@exported_program("elasticities")
def _elasticities(metric_fn: Callable, names: tuple[str, ...], params, plan):
    """Metric values and the elasticity matrix ``[metric, parameter]`` (ravel order)."""

    def log_metrics(p):
        values = metric_fn(p, plan)
        return jnp.stack([_safe_log_abs(values[n]) for n in names])

    dynamic, static = eqx.partition(params, eqx.is_inexact_array)

    def weighted(dyn, selector):
        return jnp.sum(selector * log_metrics(eqx.combine(dyn, static)))

    # the gradient of the deduplicated model: a smaller program to compile (:mod:`.._core.dedupe`)
    small = deduplicated(weighted)

    def one(selector):
        grads = jax.grad(small)(dynamic, selector)
        elastic = jtu.tree_map(lambda g, x: g * x, grads, dynamic)
        return ravel_pytree(elastic)[0]

    values = metric_fn(params, plan)
    # lax.map, not vmap: one backward pass compiled once and run per metric (a batched
    # backward pass compiles about twice as slowly, and the run time is microseconds either way)
    matrix = jax.lax.map(one, jnp.eye(len(names)))
    return jnp.stack([values[n] for n in names]), matrix


@eqx.filter_jit
def _swings(metric_fn: Callable, name: str, params, plan, index, factors):
    """Exact metric with parameter ``index[i]`` (ravel order) multiplied by ``factors[j]``."""
    flat, unravel = ravel_pytree(params)

    def at(i_f):
        i, f = i_f
        return metric_fn(unravel(flat.at[i].multiply(f)), plan)[name]

    ii, ff = jnp.meshgrid(index, factors, indexing="ij")
    # lax.map: a handful of exact evaluations, compiled once unbatched (cheaper than vmap)
    return jax.lax.map(at, (ii.ravel(), ff.ravel())).reshape(ii.shape)


@dataclass
class Sensitivity:
    """Elasticities of the headline metrics of one prediction.

    Attributes:
        job: ``"train"`` or ``"serve"``.
        metrics: value of each reported metric (SI units).
        table: tidy table, one row per (metric, parameter): ``metric``, ``parameter``, ``group``
            (compute, memory, interconnect, power, price, reliability, efficiency, system,
            model),
            ``value`` (parameter, SI), ``elasticity``.
    """

    job: str
    metrics: dict[str, float]
    table: pd.DataFrame
    _metric_fn: Callable = field(repr=False)
    _params: tuple = field(repr=False)
    _plan: object = field(repr=False)

    def ranked(
        self, metric: str | None = None, groups: Sequence[str] | None = None
    ) -> pd.DataFrame:
        """Parameters ranked by ``|elasticity|`` on ``metric`` (default: :data:`PRIMARY`),
        optionally only those in ``groups`` (e.g. :data:`HARDWARE_GROUPS`)."""
        metric = metric or PRIMARY[self.job]
        if metric not in self.metrics:
            raise KeyError(f"metric {metric!r} not available; have {sorted(self.metrics)}")
        rows = self.table.loc[self.table["metric"] == metric]
        if groups is not None:
            rows = rows.loc[rows["group"].isin(tuple(groups))]
        order = rows["elasticity"].abs().sort_values(ascending=False, kind="stable").index
        return rows.loc[order].reset_index(drop=True)

    def most_elastic(
        self, metric: str | None = None, groups: Sequence[str] | None = HARDWARE_GROUPS
    ) -> str:
        """Name of the parameter (by default: hardware) with the largest ``|elasticity|``."""
        return str(self.ranked(metric, groups).parameter.iloc[0])

    def elasticity(self, metric: str, parameter: str) -> float:
        """One elasticity, ``d log metric / d log parameter``."""
        row = self.table[(self.table.metric == metric) & (self.table.parameter == parameter)]
        return float(row.elasticity.iloc[0])

    def wide(self, groups: Sequence[str] | None = None) -> pd.DataFrame:
        """Parameters as rows, metrics as columns (elasticities), ranked on the primary metric."""
        t = self.table
        if groups is not None:
            t = t.loc[t["group"].isin(tuple(groups))]
        wide = t.pivot(index=["parameter", "group"], columns="metric", values="elasticity")
        wide = wide.loc[:, list(self.metrics)]
        primary = PRIMARY[self.job] if PRIMARY[self.job] in wide else wide.columns[0]
        return wide.reindex(wide[primary].abs().sort_values(ascending=False).index)

    def swings(
        self,
        metric: str | None = None,
        parameters: Sequence[str] | None = None,
        factors: tuple[float, float] = (0.5, 2.0),
        top: int = 10,
        groups: Sequence[str] | None = None,
    ) -> pd.DataFrame:
        """Exact relative change of ``metric`` when each parameter alone is multiplied by each
        factor (the bars of a tornado chart).  Default: the ``top`` most elastic parameters
        (of ``groups``, e.g. :data:`HARDWARE_GROUPS`)."""
        metric = metric or PRIMARY[self.job]
        ranked = self.ranked(metric, groups)
        if parameters is None:
            parameters = list(ranked[ranked.elasticity != 0].parameter[:top])
        names = [n for n, _ in parameter_names(self._params)]
        index = jnp.asarray([names.index(p) for p in parameters], dtype=jnp.int32)
        values = np.asarray(
            _swings(self._metric_fn, metric, self._params, self._plan, index, jnp.asarray(factors))
        )
        base = self.metrics[metric]
        out = pd.DataFrame({"parameter": list(parameters)})
        for j, f in enumerate(factors):
            out[f"x{f:g}"] = values[:, j] / base - 1.0
        out["elasticity"] = [self.elasticity(metric, p) for p in parameters]
        return out


def sensitivity(job: str, system: System, model: Model, plan: TrainPlan | ServePlan) -> Sensitivity:
    """Elasticities of every headline metric of ``job`` ("train" or "serve") with respect to
    every number of ``system`` and ``model``, on the exact model (one jitted call)."""
    if job not in PRIMARY:
        raise ValueError(f"job must be 'train' or 'serve', got {job!r}")
    fn, names = (train_metrics, TRAIN_METRICS) if job == "train" else (serve_metrics, SERVE_METRICS)
    params = (system, model)
    values, matrix = _elasticities(fn, names, params, plan)
    values, matrix = np.asarray(values), np.asarray(matrix)
    flat = np.asarray(ravel_pytree(params)[0])
    pnames = parameter_names(params)
    keep_p = [i for i, (_, g) in enumerate(pnames) if g != "flag"]
    keep_m = [j for j, v in enumerate(values) if np.isfinite(v) and v != 0.0]
    rows = {"metric": [], "parameter": [], "group": [], "value": [], "elasticity": []}
    for j in keep_m:
        for i in keep_p:
            rows["metric"].append(names[j])
            rows["parameter"].append(pnames[i][0])
            rows["group"].append(pnames[i][1])
            rows["value"].append(float(flat[i]))
            rows["elasticity"].append(float(matrix[j, i]))
    table = pd.DataFrame(rows)
    metrics = {names[j]: float(values[j]) for j in keep_m}
    return Sensitivity(job, metrics, table, fn, params, plan)


def train_sensitivity(system: System, model: Model, plan: TrainPlan) -> Sensitivity:
    """:func:`sensitivity` of a training step."""
    return sensitivity("train", system, model, plan)


def serve_sensitivity(system: System, model: Model, plan: ServePlan) -> Sensitivity:
    """:func:`sensitivity` of a serving plan."""
    return sensitivity("serve", system, model, plan)


__all__ = [
    "HARDWARE_GROUPS",
    "PRIMARY",
    "SERVE_METRICS",
    "TRAIN_METRICS",
    "Sensitivity",
    "chips_needed",
    "parameter_names",
    "sensitivity",
    "serve_metrics",
    "serve_sensitivity",
    "train_metrics",
    "train_sensitivity",
]
