"""Sweeps: one cost model evaluated over grids and lists of plans, hardware and models, at scale.

A :class:`Sweep` is a base scenario (model, system or chip, chip count, plan fields, overrides of
any hardware or model number) and axes: every ``grid`` entry is an axis of its own (Cartesian
product); all ``zip`` entries share one axis (lists of equal length, varied together); the two
are crossed.  Point ``i`` is decoded *on the device* from its index as mixed-radix digits (the
last axis varies fastest), so no per-point pytree is ever built on the host: the distinct
systems and models are stacked once, each point gathers its own, builds its exact plan and runs
the exact cost model under ``vmap``.

Chunks of points are sharded over every JAX device along the leading axis
(``NamedSharding(Mesh(devices, ("points",)), P("points"))``), so the same sweep runs on one CPU,
several devices or a GPU; indices are made with ``jax.make_array_from_callback`` and results
gathered with ``process_allgather`` so that processes joined by ``jax.distributed`` each feed
their own devices.  The chunk size is sized to memory: the compiled chunk's
``memory_analysis()`` must fit a fraction of the free device (or host) memory.

Field grammar (keys of ``base``, ``grid`` and ``zip``):

* ``model``; ``system`` or ``chip`` (built-in names or paths); ``chips`` (chip count; default the
  system's);
* any plan field of :func:`diffcost.train_plan` or :func:`diffcost.serve_plan` (for serving the
  accuracy cost of a format is ``accuracy_cost_<format>``).  Training ``dp`` defaults to
  ``chips / (tp * pp * cp)`` and serving ``replicas`` to ``floor(chips / replica_chips)``;
* ``system.<path>`` / ``model.<field>``: set any number of the hardware or model, in SI units
  (``system.chip.memory_bandwidth_bytes_per_s``, ``system.chip.peak_flop_per_s.bf16``,
  ``system.scale_out_latency_s``, ``system.efficiency.matmul_peak_fraction``, ``model.layers``);
  ``scale.system.<path>`` / ``scale.model.<field>`` multiply it instead.
"""

import functools
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import pandas as pd
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .._core.errors import Problem, SpecError
from .._inputs.hardware import FORMATS
from .._serve.cost import ServeCost
from .._serve.load import Workload, under_load
from .._serve.plan import MODES, ServePlan, default_compute_format, encode_serve
from .._train.cost import TrainCost
from .._train.plan import TRAIN_FIELDS, TrainPlan, encode_train
from . import uncertainty as U
from .coverage import job_chip
from .distributed import agree_min
from .sweep_progress import sweep_progress
from .sweep_spec import (  # noqa: F401  (re-exported)
    JOBS,
    LOAD_OUTPUTS,
    NAN_WHEN_UNSET,
    OUTPUTS,
    PLAN_FIELDS,
    SERVE_OUTPUTS,
    TRAIN_OUTPUTS,
    UNSET,
    Sweep,
    SweepFile,
    _Override,
    _Prepared,
    _Structure,
    load_sweep,
    prepare,
)


def _apply(tree, o: _Override, value):
    get = lambda t: functools.reduce(getattr, o.path, t)
    leaf = get(tree)
    value = value.astype(leaf.dtype)
    if o.index >= 0:
        new = leaf.at[o.index].multiply(value) if o.multiply else leaf.at[o.index].set(value)
    else:
        new = leaf * value if o.multiply else value
    return eqx.tree_at(get, tree, new)


def _one_hot(code, k):
    return jax.nn.one_hot(code.astype(jnp.int32), k, dtype=code.dtype)


_COMPUTE_DEFAULT = np.asarray([FORMATS.index(default_compute_format(f)) for f in FORMATS], np.int32)
_TRAIN_CHOICES = {f.name: len(f.options()) for f in TRAIN_FIELDS if f.kind == "categorical"}


def _train_plan(r) -> TrainPlan:
    """The exact training plan of decoded point ``r`` (derived fields are NaN when not given:
    ``dp = chips / (tp pp cp)``, ``global_batch = dp * micro_batch``, SP on when ``tp > 1``)."""
    tp, pp, cp, mb = r["tp"], r["pp"], r["cp"], r["micro_batch"]
    dp = jnp.where(jnp.isnan(r["dp"]), r["chips"] / (tp * pp * cp), r["dp"])
    gb = jnp.where(jnp.isnan(r["global_batch"]), dp * mb, r["global_batch"])
    sp = jnp.where(
        jnp.isnan(r["sequence_parallel"]), (tp > 1).astype(tp.dtype), r["sequence_parallel"]
    )
    fields = {f.name: r[f.name] for f in TRAIN_FIELDS}
    fields |= {k: _one_hot(r[k], size) for k, size in _TRAIN_CHOICES.items()}
    return encode_train(fields | {"dp": dp, "global_batch": gb, "sequence_parallel": sp})


def _serve_plan(r, formats) -> ServePlan:
    """The exact serving plan of decoded point ``r`` (derived fields NaN or -1 when not given:
    the compute format the chip runs the weight format's GEMMs in, pools of one instance,
    replicas filling the chips).  ``formats``: the point's chip's row of
    :func:`~diffcost._analysis.sweep_spec.hardware_formats`; ``r["_formats_ok"]`` is set to
    whether the chip runs the plan's GEMM format (a point that it does not is infeasible, as
    ``diffcost serve`` refuses it: never priced at another format's rate)."""
    tp, pp = r["tp"], r["pp"]
    inst = tp * pp
    wf = r["weight_format"].astype(jnp.int32)
    n = len(FORMATS)
    on_chip = formats[:n][wf]  # -1: no format of the chip runs these weights
    cf_given = r["compute_format"].astype(jnp.int32)
    unset = r["compute_format"] < 0
    r["_formats_ok"] = jnp.where(unset, on_chip >= 0, formats[n:][jnp.maximum(cf_given, 0)] > 0)
    cf = jnp.where(
        unset,
        jnp.where(on_chip >= 0, on_chip, jnp.asarray(_COMPUTE_DEFAULT)[wf]),
        cf_given,
    ).astype(tp.dtype)
    pre = jnp.where(jnp.isnan(r["prefill_chips"]), inst, r["prefill_chips"])
    dec = jnp.where(jnp.isnan(r["decode_chips"]), inst, r["decode_chips"])
    d = r["disaggregated"]
    per_replica = (1.0 - d) * inst + d * (pre + dec)
    replicas = jnp.where(
        jnp.isnan(r["replicas"]),
        jnp.maximum(1.0, jnp.floor(r["chips"] / per_replica)),
        r["replicas"],
    )
    fields = {k: r[k] for k in ServePlan.__dataclass_fields__ if k in r}
    return encode_serve(
        fields
        | {
            "replicas": replicas,
            "weight_format": _one_hot(r["weight_format"], len(FORMATS)),
            "compute_format": _one_hot(cf, len(FORMATS)),
            "kv_format": _one_hot(r["kv_format"], len(FORMATS)),
            "mode": _one_hot(r["mode"], len(MODES)),
            "prefill_chips": pre,
            "decode_chips": dec,
            "accuracy_cost": jnp.stack([r[f"accuracy_cost_{f}"] for f in FORMATS]),
        }
    )


def _flatten(out) -> dict[str, jax.Array]:
    flat = {}
    for k in out.__dataclass_fields__:
        v = getattr(out, k)
        if isinstance(v, eqx.Module):
            flat.update({f"{k}_{k2}": getattr(v, k2) for k2 in v.__dataclass_fields__})
        else:
            flat["chips_used" if k == "chips" else k] = v
    return flat


def _is_int(x, tol=1e-6):
    return jnp.abs(x - jnp.round(x)) <= tol * jnp.maximum(1.0, jnp.abs(x))


def _pick(table, code):
    """Entry ``code`` of a stacked table (leading axis); a table of one entry needs no gather."""
    if jtu.tree_leaves(table)[0].shape[0] == 1:
        return jtu.tree_map(lambda x: x[0], table)
    return jtu.tree_map(lambda x: x[code.astype(jnp.int32)], table)


def _point(structure: _Structure, tables, consts, index):
    """Point ``index`` decoded from its digits: its inputs ``r``, cost model and exact plan."""
    r = dict(consts)
    for size, stride, names in structure.axes:
        digit = (index // stride) % size
        for name in names:
            r[name] = _pick(tables["columns"][name], digit)
    for name in NAN_WHEN_UNSET & r.keys():  # sent as UNSET (see sweep_spec.UNSET), NaN here
        r[name] = jnp.where(r[name] == UNSET, jnp.nan, r[name])
    system = _pick(tables["systems"], r["_hw"])
    model = _pick(tables["models"], r["_model"])
    r["chips"] = jnp.where(jnp.isnan(r["chips"]), system.num_chips, r["chips"])
    system = eqx.tree_at(lambda s: s.num_chips, system, r["chips"])
    for o in structure.overrides:
        if o.target == "system":
            system = _apply(system, o, r[o.column])
        else:
            model = _apply(model, o, r[o.column])
    if structure.job == "train":
        return r, TrainCost(system, model), _train_plan(r)
    return r, ServeCost(system, model), _serve_plan(r, _pick(tables["formats"], r["_hw"]))


def _outputs(job: str, cost, plan, r) -> dict[str, jax.Array]:
    """Every output column of one point: the breakdown, flattened, and the feasibility flags."""
    out = cost(plan)
    flat = _flatten(out)
    if job == "train":
        flat["tokens_per_s_per_chip"] = out.tokens_per_s / out.chips
        flat["dp"], flat["global_batch"] = plan.dp, plan.global_batch
        layout = (jnp.abs(out.chips - r["chips"]) < 0.5) & (plan.dp >= 1.0) & _is_int(plan.dp)
        layout &= (plan.virtual_stages == 1.0) | (plan.pp > 1.0)
    else:
        flat["replicas"] = plan.replicas
        layout = out.chips <= r["chips"] + 0.5
        layout &= plan.input_len + plan.output_len <= cost.model.max_seq_len
        layout &= r["_formats_ok"]
    if "qps" in r:  # a serving sweep with an offered load (static: the key is in the spec)
        load = Workload(r["qps"], r["arrival_cv"], r["input_cv"])
        under = under_load(cost.system, cost.model, plan, load)
        flat |= {f"load_{k}": v for k, v in under._asdict().items() if f"load_{k}" in LOAD_OUTPUTS}
    fits = out.headroom_bytes >= 0.0
    # a point with a NaN or infinite output (an override that makes a rate zero) is no answer
    finite = jnp.all(jnp.stack([jnp.isfinite(v) for v in flat.values()]))
    flat["fits"] = fits
    flat["feasible"] = fits & layout & (out.divisibility_violation <= 1e-9) & finite
    return flat


def _with_intervals(structure: _Structure, tables, cost, plan, r) -> dict[str, jax.Array]:
    """:func:`_outputs` plus ``<name>_p10`` / ``<name>_p90`` for every name of
    ``structure.intervals``: the delta method of :mod:`diffcost._analysis.uncertainty` in log
    space, ``sigma^2 = g Sigma g^T + d^2`` with ``g = d log y / d log constants`` (by autodiff
    over the log scale factors of ``uncertainty.scaled_efficiency``), ``Sigma`` and ``d^2`` those
    of the point's chip (``tables["interval"]``, :func:`with_intervals`);
    ``p10/p90 = y exp(-/+ Z80 sigma)``.

    ``g`` is computed once per distinct :data:`INTERVAL_OUTPUTS` ``jacobian_of`` output, by
    reverse mode (one pass per output) when there are at most a quarter as many of them as
    constants, else by forward mode (one tangent per constant).  Training has two (step time,
    whose factors the constants do not change, and activity energy) for 8 constants: reverse
    mode ran its sweep at 588,000 evaluations/s against forward mode's 385,000 (16,384-point
    chunks, the same process, shared cores); serving's five ran at 71,000/s forward and
    58,000/s reverse.  The two agree to 3e-7 relative (float32)."""
    names = structure.intervals
    share = dict((n, j) for n, _, j in INTERVAL_OUTPUTS[structure.job])
    primary = tuple(dict.fromkeys(share[n] for n in names))

    def f(d):
        flat = _outputs(structure.job, U.scaled_efficiency(cost, d), plan, r)
        return jnp.log(jnp.stack([flat[n] for n in primary])), flat

    zero = jnp.zeros(len(U.C.NAMES), dtype=cost.system.efficiency.matmul_peak_fraction.dtype)
    jac = jax.jacrev if 4 * len(primary) <= len(zero) else jax.jacfwd
    g, flat = jac(f, has_aux=True)(zero)
    cov = _pick(tables["interval"]["cov"], r["_hw"]).astype(g.dtype)
    disc = _pick(tables["interval"]["disc"], r["_hw"]).astype(g.dtype)
    param = jnp.einsum("on,nm,om->o", g, cov, g)
    for k, name in enumerate(names):
        sigma = jnp.sqrt(param[primary.index(share[name])] + disc[k])
        flat[f"{name}_p10"] = flat[name] * jnp.exp(-U.Z80 * sigma)
        flat[f"{name}_p90"] = flat[name] * jnp.exp(U.Z80 * sigma)
    return flat


def interval_columns(structure: _Structure) -> tuple[str, ...]:
    """The ``_p10`` / ``_p90`` columns of a prepared sweep, in table order."""
    return tuple(f"{n}_{q}" for n in structure.intervals for q in ("p10", "p90"))


def evaluate_point(structure: _Structure, tables, consts, index) -> dict[str, jax.Array]:
    """Inputs of point ``index`` decoded from its digits, then the exact cost model (and the
    interval columns when ``structure.intervals`` names any)."""
    r, cost, plan = _point(structure, tables, consts, index)
    if structure.intervals:
        flat = _with_intervals(structure, tables, cost, plan, r)
    else:
        flat = _outputs(structure.job, cost, plan, r)
    return {k: flat[k] for k in (*structure.outputs, *interval_columns(structure))}


#: Points per block of a chunk on a CPU (:func:`_evaluate_chunk`): a block's intermediate arrays
#: (a few hundred of ``block`` float32 each) stay in the caches.  Measured on the 1,000,000-point
#: training sweep with intervals (262,144-point chunks, the same process, shared cores): the
#: whole chunk at once 235,000 evaluations/s and 524 MB of temporaries; blocks of 2,048 272,000/s
#: (4 MB), 8,192 289,000/s (19 MB), 32,768 275,000/s (74 MB).
CPU_BLOCK = 8192


@functools.partial(jax.jit, static_argnums=(0, 4, 5))
def _evaluate_chunk(structure: _Structure, tables, consts, indices, block=None, mesh=None):
    """Every point of ``indices`` under one ``vmap``, or, with ``block``, each device's points
    in blocks of ``block`` (``lax.map``: one ``vmap``ed block after another, so a block's
    intermediates stay in cache; ``shard_map`` over ``mesh`` gives each device its own)."""
    if block is None:
        return jax.vmap(lambda i: evaluate_point(structure, tables, consts, i))(indices)

    def local(tables, consts, ix):
        point = lambda i: evaluate_point(structure, tables, consts, i)
        return jax.lax.map(point, ix, batch_size=min(block, ix.shape[0]))

    if mesh is None or mesh.size == 1:
        return local(tables, consts, indices)
    # check_vma off: with it, the interval's reverse pass (inside a point) would sum the
    # cotangent of its device-invariant zero over the devices (the transpose of ``pvary``)
    specs = (PartitionSpec(), PartitionSpec(), PartitionSpec("points"))
    shard = jax.shard_map(
        local, mesh=mesh, in_specs=specs, out_specs=PartitionSpec("points"), check_vma=False
    )
    return shard(tables, consts, indices)


# --- running --------------------------------------------------------------------------------------
# jax exports ``Device`` as a variable (an alias of the runtime device class), which pyright
# rejects in annotations: the two ``jax.Device`` annotations below carry a targeted ignore.
def free_memory_bytes(device: jax.Device) -> float:  # pyright: ignore[reportInvalidTypeForm]
    """Free memory of a device (accelerator statistics; the host's available RAM for a CPU)."""
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if stats and "bytes_limit" in stats:
        return float(stats["bytes_limit"] - stats.get("bytes_in_use", 0))
    try:
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError):
        return 4e9


@dataclass
class SweepResult:
    """A finished sweep.

    Attributes:
        table: tidy table, one row per point: the inputs that vary, the base values, and the
            outputs (SI units; ``fits`` and ``feasible`` booleans).
        devices: devices the chunks were sharded over; chunk: points per chunk; chunks: count.
        compile_s: compilation time; run_s: evaluation time of all chunks (after compilation).
        memory_bytes: the compiled chunk's memory (arguments + outputs + temporaries).
        output_devices: ids of the devices that held the outputs of the first chunk.
        interval_note: how the ``<output>_p10`` / ``<output>_p90`` columns were computed, or
            why there are none.
    """

    table: pd.DataFrame
    devices: int
    chunk: int
    chunks: int
    compile_s: float
    run_s: float
    memory_bytes: int
    output_devices: tuple[int, ...] = ()
    interval_note: str = ""

    @property
    def points_per_s(self) -> float:
        """Points this run evaluated (the table's rows: one shard's when ``points`` was given;
        all processes' devices together) per second of evaluation, compilation excluded."""
        return len(self.table) / max(self.run_s, 1e-12)

    def to_csv(self, path: str | Path) -> None:
        self.table.to_csv(path, index=False)

    def to_parquet(self, path: str | Path) -> None:
        self.table.to_parquet(path, index=False)


#: Outputs given an interval per job: ``(name, metric kind of its model discrepancy,
#: jacobian_of)``, the outputs of :mod:`diffcost._analysis.uncertainty` plus training tokens/s
#: per chip.  ``jacobian_of`` names the output whose ``|d log y / d log constants|`` is the
#: same: training tokens/s ``= B S / t_step``, MFU ``= F / (t_step N peak)`` and tokens/s per
#: chip ``= B S / (t_step N)`` (``diffcost/_train/cost.py``, ``TrainCost.__call__``) differ from
#: the step time ``t_step`` by factors no calibrated constant changes (batch, sequence, model
#: FLOP, chips, datasheet peak), so their log Jacobian is minus its; serving output tokens/s
#: per chip is output tokens/s over the chip count.  Cost is price times the step time
#: (training) or over the output tokens/s (serving, ``_serve/cost.py``); activity energy is
#: not a multiple of the time (``_terms/energy.py``: idle power times the time plus work), so
#: it takes its own Jacobian.
INTERVAL_OUTPUTS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "train": (
        ("step_time_s", "train_throughput", "step_time_s"),
        ("tokens_per_s", "train_throughput", "step_time_s"),
        ("mfu", "train_throughput", "step_time_s"),
        ("tokens_per_s_per_chip", "train_throughput", "step_time_s"),
        ("energy_j", "train_throughput", "energy_j"),
        ("cost_usd", "train_throughput", "step_time_s"),
    ),
    "serve": (
        ("ttft_s", "ttft", "ttft_s"),
        ("tpot_s", "token_latency", "tpot_s"),
        ("output_tokens_per_s", "serve_throughput", "output_tokens_per_s"),
        ("output_tokens_per_s_per_chip", "serve_throughput", "output_tokens_per_s"),
        ("request_latency_s", "token_latency", "request_latency_s"),
        ("energy_per_token_j", "serve_throughput", "energy_per_token_j"),
        ("cost_per_million_tokens_usd", "serve_throughput", "output_tokens_per_s"),
    ),
}


def with_intervals(prep: _Prepared) -> tuple[_Prepared, str]:
    """``prep`` with interval columns for the headline outputs it keeps (:data:`INTERVAL_OUTPUTS`)
    and, per hardware entry, the log covariance of the constants of its chip's basis and the
    discrepancy variance of each output in its chip's regime
    (:func:`diffcost._analysis.uncertainty.basis_of`, ``regime_family``); unchanged, and a note
    saying so, when the calibration has no posterior.  Returns the prepared sweep and the note."""
    calibration = prep.sweep.calibration
    post = U.load_posterior(calibration)
    if post is None:
        return prep, (
            f"no interval columns: calibration {calibration!r} has no posterior "
            f"({U.posterior_path(calibration).name}; write one with "
            "`python -m diffcost._analysis.uncertainty --write`)"
        )
    outputs = [
        (n, m) for n, m, _ in INTERVAL_OUTPUTS[prep.sweep.job] if n in prep.structure.outputs
    ]
    covs, discs, bases = [], [], []
    for kind, name in prep.hardware:
        chip = job_chip({kind: name})
        basis, family = U.basis_of(chip, calibration), U.regime_family(chip)
        covs.append(post.cov_for(basis))
        discs.append([post.variance(metric, family) for _, metric in outputs])
        bases.append(f"{chip}: {basis} constants, {family} discrepancy")
    dtype = jnp.result_type(float)
    tables = {
        **prep.tables,
        "interval": {
            "cov": jnp.asarray(np.stack(covs), dtype),
            "disc": jnp.asarray(np.asarray(discs).reshape(len(covs), len(outputs)), dtype),
        },
    }
    structure = replace(prep.structure, intervals=tuple(n for n, _ in outputs))
    note = (
        "p10-p90 (nominal 80%) by the delta method through the posterior of calibration "
        f"{calibration!r} plus the model discrepancy of each chip's regime ({'; '.join(bases)})"
    )
    return replace(prep, structure=structure, tables=tables), note


def _host_table(prep: _Prepared, outputs: dict[str, np.ndarray], points: range) -> pd.DataFrame:
    """The tidy table of the evaluated ``points``: the flat point index (column ``point``), the
    base values, the axis values decoded from the index, then the outputs."""
    idx = np.arange(points.start, points.stop)
    n = len(idx)
    data: dict[str, Any] = {"point": idx.astype(np.int64)}

    def column(values: list, codes: np.ndarray):
        if all(isinstance(v, str) for v in values):
            cats = list(dict.fromkeys(values))
            return pd.Categorical.from_codes(
                np.asarray([cats.index(v) for v in values])[codes], categories=cats
            )
        return np.asarray(values)[codes]

    zero = np.zeros(n, dtype=np.int64)
    for key, value in prep.sweep.base.items():
        data[key] = column([value], zero)
    for (size, stride, _), axis in zip(prep.structure.axes, prep.host_axes, strict=True):
        digit = (idx // stride) % size
        for key, values in axis.items():
            data[key] = column(values, digit)
    data.update(
        {k: outputs[k] for k in (*prep.structure.outputs, *interval_columns(prep.structure))}
    )
    return pd.DataFrame(data)


def _compile(
    prep: _Prepared, tables, consts, indices, nd: int, per_device: int, budget, fixed, block, mesh
):
    """Compile the chunk evaluation, halving the points per device until the compiled memory
    fits ``budget`` per device (or ``fixed``: the caller chose the chunk).  Processes joined by
    ``jax.distributed`` then agree on the smallest chunk any of them chose (every process must
    run the same program), recompiling where theirs was larger.  Returns the compiled function,
    the chunk size and its memory in bytes."""

    def build(per_device: int):
        args = (prep.structure, tables, consts, indices(0, per_device * nd), block, mesh)
        compiled = _evaluate_chunk.lower(*args).compile()
        mem = compiled.memory_analysis()
        used = (
            mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes
            if mem is not None
            else 0
        )
        return compiled, per_device * nd, used

    compiled, size, used = build(per_device)
    while not fixed and used / nd > budget and per_device > 256:
        per_device //= 2
        compiled, size, used = build(per_device)
    agreed = int(agree_min(per_device))  # once in every process, whatever its loop did
    return build(agreed) if agreed != per_device else (compiled, size, used)


def _run_chunks(compiled, tables, consts, indices, points: range, size: int, advance):
    """Evaluate every chunk of ``points`` (each dispatched while the previous one is copied to
    the host; with several processes every one gathers every chunk).  Returns the host outputs
    (one entry per point of ``points``) and the ids of the devices that held the first chunk."""
    n = len(points)
    host: dict[str, np.ndarray] = {}
    placed: list[int] = []

    def collect(out, start):
        if not placed:
            placed.extend(sorted(d.id for d in next(iter(out.values())).sharding.device_set))
        if jax.process_count() > 1:
            from jax.experimental import multihost_utils

            out = multihost_utils.process_allgather(out, tiled=True)
        k = min(size, n - start)
        for name, arr in out.items():
            a = np.asarray(arr)
            if name not in host:
                host[name] = np.empty(n, dtype=a.dtype)
            host[name][start : start + k] = a[:k]
        advance(k)

    pending = None
    for start in range(0, n, size):
        out = compiled(tables, consts, indices(points.start + start, size))  # asynchronous
        if pending is not None:  # copy the previous chunk while this one runs
            collect(*pending)
        pending = (out, start)
    assert pending is not None
    collect(*pending)
    return host, tuple(placed)


def _points_of(points: range | None, n: int, source: str) -> range:
    """The evaluated index range: every point by default, else a non-empty step-1 range
    within ``0..n``."""
    if points is None:
        return range(n)
    if points.step != 1 or not 0 <= points.start < points.stop <= n:
        reason = f"must be a non-empty range of step 1 within 0..{n}, got {points}"
        raise SpecError([Problem(source, "points", reason)])
    return points


def _local_budget(devices, memory_fraction: float) -> float:
    """``memory_fraction`` of the least free memory of this process's devices among
    ``devices`` (another process's device cannot be asked), agreed on by every process."""
    mine = [d for d in devices if d.process_index == jax.process_index()] or jax.local_devices()
    return agree_min(memory_fraction * min(free_memory_bytes(d) for d in mine))


def _first_chunk(n: int, nd: int, chunk: int | None, max_per_device: int) -> int:
    """Points per device of the first chunk tried: ``chunk`` split over the ``nd`` devices when
    given, else the power of two covering ``n`` points, at most ``max_per_device``."""
    if chunk is not None:
        return max(1, -(-chunk // nd))
    return min(1 << max(0, math.ceil(math.log2(max(1, -(-n // nd))))), max_per_device)


def run_sweep(
    sweep: Sweep,
    *,
    progress: bool = True,
    chunk: int | None = None,
    devices: Sequence[jax.Device] | None = None,  # pyright: ignore[reportInvalidTypeForm]
    memory_fraction: float = 0.25,
    max_chunk_per_device: int = 1 << 18,
    intervals: bool = True,
    points: range | None = None,
    block: int | None = None,
) -> SweepResult:
    """Evaluate every point of ``sweep`` (or the flat indices ``points``, a contiguous range:
    one shard, :func:`diffcost._analysis.sweep_shard.shard_range`) with the exact model; see
    the module docstring.

    ``chunk`` (points per chunk, a multiple of the device count) defaults to the largest power
    of two per device, up to ``max_chunk_per_device``, whose compiled memory fits in
    ``memory_fraction`` of the free memory of a device.  With ``intervals`` the headline outputs
    get ``_p10`` / ``_p90`` columns (:func:`with_intervals`; none when the sweep's calibration has
    no posterior, said in ``interval_note``).  ``devices`` defaults to ``jax.devices()``: every
    device of every process joined by ``jax.distributed`` (each process must call this with
    the same arguments; each gets the whole table).  ``block`` (points) evaluates each device's
    part of a chunk in blocks of that many points; it defaults to :data:`CPU_BLOCK` when every
    device is a CPU and to the whole chunk otherwise (an accelerator wants wide batches).
    """
    prep = prepare(sweep)
    note = "no interval columns: not asked for"
    if intervals:
        prep, note = with_intervals(prep)
    points = _points_of(points, prep.n, sweep.source)
    devices = list(devices or jax.devices())
    nd = len(devices)
    with sweep_progress(progress, sweep.name, nd) as show:
        show.stage("compiling")
        mesh = Mesh(np.asarray(devices), ("points",))
        sharded = NamedSharding(mesh, PartitionSpec("points"))
        replicated = NamedSharding(mesh, PartitionSpec())
        tables = jax.device_put(prep.tables, replicated)
        consts = jax.device_put(prep.consts, replicated)
        index_dtype = np.int64 if jax.config.read("jax_enable_x64") else np.int32
        n = len(points)
        budget = _local_budget(devices, memory_fraction)

        def indices(start: int, size: int) -> jax.Array:
            host = np.minimum(np.arange(start, start + size), points.stop - 1).astype(index_dtype)
            return jax.make_array_from_callback((size,), sharded, lambda s: host[s])

        per_device = _first_chunk(n, nd, chunk, max_chunk_per_device)
        if block is None and all(d.platform == "cpu" for d in devices):
            block = CPU_BLOCK
        if block is not None and block >= per_device:
            block = None  # one block: a plain vmap
        t0 = time.perf_counter()
        compiled, size, used = _compile(
            prep, tables, consts, indices, nd, per_device, budget, chunk is not None, block, mesh
        )
        compile_s = time.perf_counter() - t0
        show.evaluating(n)
        t0 = time.perf_counter()
        host, placed = _run_chunks(compiled, tables, consts, indices, points, size, show.advance)
        run_s = time.perf_counter() - t0
        show.stage("building the table")
        table = _host_table(prep, host, points)
    chunks = len(range(0, n, size))
    return SweepResult(table, nd, size, chunks, compile_s, run_s, int(used), placed, note)


# --- sweep files ----------------------------------------------------------------------------------


__all__ = [
    "INTERVAL_OUTPUTS",
    "OUTPUTS",
    "PLAN_FIELDS",
    "SERVE_OUTPUTS",
    "TRAIN_OUTPUTS",
    "Sweep",
    "SweepFile",
    "SweepResult",
    "evaluate_point",
    "free_memory_bytes",
    "interval_columns",
    "with_intervals",
    "load_sweep",
    "prepare",
    "run_sweep",
]
