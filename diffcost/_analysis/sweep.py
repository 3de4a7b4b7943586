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

import contextlib
import functools
import math
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import pandas as pd
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .._inputs.hardware import FORMATS
from .._serve.cost import ServeCost
from .._serve.plan import MODES, ServePlan, default_compute_format, encode_serve
from .._train.cost import TrainCost
from .._train.plan import TRAIN_FIELDS, TrainPlan, encode_train
from .sweep_spec import (  # noqa: F401  (re-exported)
    JOBS,
    OUTPUTS,
    PLAN_FIELDS,
    SERVE_OUTPUTS,
    TRAIN_OUTPUTS,
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


def _serve_plan(r) -> ServePlan:
    """The exact serving plan of decoded point ``r`` (derived fields NaN or -1 when not given:
    compute format from the weight format, pools of one instance, replicas filling the chips)."""
    tp, pp = r["tp"], r["pp"]
    inst = tp * pp
    wf = r["weight_format"].astype(jnp.int32)
    cf = jnp.where(
        r["compute_format"] < 0,
        jnp.asarray(_COMPUTE_DEFAULT)[wf],
        r["compute_format"].astype(jnp.int32),
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


def evaluate_point(structure: _Structure, tables, consts, index) -> dict[str, jax.Array]:
    """Inputs of point ``index`` decoded from its digits, then the exact cost model."""
    r = dict(consts)
    for size, stride, names in structure.axes:
        digit = (index // stride) % size
        for name in names:
            r[name] = _pick(tables["columns"][name], digit)
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
        plan = _train_plan(r)
        out = TrainCost(system, model)(plan)
        flat = _flatten(out)
        flat["tokens_per_s_per_chip"] = out.tokens_per_s / out.chips
        flat["dp"], flat["global_batch"] = plan.dp, plan.global_batch
        layout = (jnp.abs(out.chips - r["chips"]) < 0.5) & (plan.dp >= 1.0) & _is_int(plan.dp)
        layout &= (plan.virtual_stages == 1.0) | (plan.pp > 1.0)
    else:
        plan = _serve_plan(r)
        out = ServeCost(system, model)(plan)
        flat = _flatten(out)
        flat["replicas"] = plan.replicas
        layout = out.chips <= r["chips"] + 0.5
        layout &= plan.input_len + plan.output_len <= model.max_seq_len
    fits = out.headroom_bytes >= 0.0
    flat["fits"] = fits
    flat["feasible"] = fits & layout & (out.divisibility_violation <= 1e-9)
    return {k: flat[k] for k in structure.outputs}


@functools.partial(jax.jit, static_argnums=0)
def _evaluate_chunk(structure: _Structure, tables, consts, indices):
    return jax.vmap(lambda i: evaluate_point(structure, tables, consts, i))(indices)


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
    """

    table: pd.DataFrame
    devices: int
    chunk: int
    chunks: int
    compile_s: float
    run_s: float
    memory_bytes: int
    output_devices: tuple[int, ...] = ()

    @property
    def points_per_s(self) -> float:
        """Evaluations per second after compilation."""
        return len(self.table) / max(self.run_s, 1e-12)

    def to_csv(self, path: str | Path) -> None:
        self.table.to_csv(path, index=False)

    def to_parquet(self, path: str | Path) -> None:
        self.table.to_parquet(path, index=False)


def _host_table(prep: _Prepared, outputs: dict[str, np.ndarray]) -> pd.DataFrame:
    n = prep.n
    idx = np.arange(n)
    data: dict[str, Any] = {}

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
    data.update({k: outputs[k] for k in prep.structure.outputs})
    return pd.DataFrame(data)


def _compile(prep: _Prepared, tables, consts, indices, nd: int, per_device: int, budget, fixed):
    """Compile the chunk evaluation, halving the points per device until the compiled memory
    fits ``budget`` per device (or ``fixed``: the caller chose the chunk).  Returns the compiled
    function, the chunk size and its memory in bytes."""
    while True:
        size = per_device * nd
        compiled = _evaluate_chunk.lower(prep.structure, tables, consts, indices(0, size)).compile()
        mem = compiled.memory_analysis()
        used = (
            mem.argument_size_in_bytes + mem.output_size_in_bytes + mem.temp_size_in_bytes
            if mem is not None
            else 0
        )
        if fixed or used / nd <= budget or per_device <= 256:
            return compiled, size, used
        per_device //= 2


def _run_chunks(compiled, tables, consts, indices, n: int, size: int, advance):
    """Evaluate every chunk (each dispatched while the previous one is copied to the host).
    Returns the host outputs and the ids of the devices that held the first chunk."""
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
        out = compiled(tables, consts, indices(start, size))  # dispatched asynchronously
        if pending is not None:  # copy the previous chunk while this one runs
            collect(*pending)
        pending = (out, start)
    assert pending is not None
    collect(*pending)
    return host, tuple(placed)


def run_sweep(
    sweep: Sweep,
    *,
    progress: bool = True,
    chunk: int | None = None,
    devices: Sequence[jax.Device] | None = None,  # pyright: ignore[reportInvalidTypeForm]
    memory_fraction: float = 0.25,
    max_chunk_per_device: int = 1 << 18,
) -> SweepResult:
    """Evaluate every point of ``sweep`` with the exact model; see the module docstring.

    ``chunk`` (points per chunk, a multiple of the device count) defaults to the largest power
    of two per device, up to ``max_chunk_per_device``, whose compiled memory fits in
    ``memory_fraction`` of the free memory of a device.
    """
    prep = prepare(sweep)
    devices = list(devices or jax.devices())
    nd = len(devices)
    mesh = Mesh(np.asarray(devices), ("points",))
    sharded = NamedSharding(mesh, PartitionSpec("points"))
    replicated = NamedSharding(mesh, PartitionSpec())
    tables = jax.device_put(prep.tables, replicated)
    consts = jax.device_put(prep.consts, replicated)
    index_dtype = np.int64 if jax.config.read("jax_enable_x64") else np.int32
    n = prep.n
    budget = memory_fraction * min(free_memory_bytes(d) for d in devices)

    def indices(start: int, size: int) -> jax.Array:
        host = np.minimum(np.arange(start, start + size), n - 1).astype(index_dtype)
        return jax.make_array_from_callback((size,), sharded, lambda s: host[s])

    per_device = 1 << max(0, math.ceil(math.log2(max(1, -(-n // nd)))))
    per_device = min(per_device, max_chunk_per_device)
    if chunk is not None:
        per_device = max(1, -(-chunk // nd))
    t0 = time.perf_counter()
    compiled, size, used = _compile(
        prep, tables, consts, indices, nd, per_device, budget, chunk is not None
    )
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    with _progress(progress, n, sweep.name, nd) as advance:
        host, placed = _run_chunks(compiled, tables, consts, indices, n, size, advance)
    run_s = time.perf_counter() - t0
    chunks = len(range(0, n, size))
    return SweepResult(
        _host_table(prep, host), nd, size, chunks, compile_s, run_s, int(used), placed
    )


def _progress(enabled: bool, total: int, name: str, devices: int):
    """A context giving ``advance(points)``: a rich progress bar on stderr, or nothing."""
    if not enabled:
        return contextlib.nullcontext(lambda k: None)
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    class Rate(ProgressColumn):
        def render(self, task):
            return Text(f"{task.speed or 0:,.0f} points/s", style="cyan")

    progress = Progress(
        # the description holds the sweep's name (user text): never parsed as markup
        TextColumn("{task.description}", style="bold", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        Rate(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
    )
    task = progress.add_task(f"{name} ({devices} device{'s' * (devices > 1)})", total=total)

    @contextlib.contextmanager
    def bar():
        with progress:
            yield lambda k: progress.advance(task, k)

    return bar()


# --- sweep files ----------------------------------------------------------------------------------


__all__ = [
    "OUTPUTS",
    "PLAN_FIELDS",
    "SERVE_OUTPUTS",
    "TRAIN_OUTPUTS",
    "Sweep",
    "SweepFile",
    "SweepResult",
    "evaluate_point",
    "free_memory_bytes",
    "load_sweep",
    "prepare",
    "run_sweep",
]
