"""Search machinery shared by training and serving plans.

1. Relaxed optimisation: a plan is a vector ``theta`` of log2 degrees and categorical logits;
   ``optax.adam`` minimises ``log(objective) + penalties`` from many random starts at once
   (``vmap``), the softmax temperature annealed towards one-hot, all in one ``jit``
   (``lax.scan`` over steps).
2. Rounding: each relaxed optimum is rounded to its integer neighbourhood (the two nearest allowed
   values of every degree, the two heaviest choices of every category); the neighbourhood is
   evaluated with the *exact* model in one batched call and the best feasible plan is kept.
3. Refinement: exact local search from the best rounded plans (:mod:`diffcost._core.discrete`,
   which also holds the candidate table, :class:`Candidates`).
4. Enumeration: the whole discrete space, evaluated exactly in chunks; the oracle for tests, the
   ``--exhaustive`` option and the default for spaces of at most :func:`auto_limit`
   plans (there enumeration is faster than compiling the relaxed search, and exact).
"""

import abc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from .._core.dedupe import deduplicated
from .._core.discrete import (  # noqa: F401  (re-exported: the search's public vocabulary)
    Axis,
    Candidates,
    Choice,
    Evaluation,
    best_of,
    device_columns,
    layout,
    moves,
    refine,
    row_keys,
    scaled_moves,
    unique,
)
from .._core.errors import Problem, SpecError
from .._inputs.hardware import host_float

#: The plan type of a search: :class:`~diffcost.TrainPlan` or :class:`~diffcost.ServePlan`.
P = TypeVar("P")


@dataclass
class SearchResult(Generic[P]):
    """Best exact plan of a search, why it is best, and what came close.

    ``best`` and the plans of ``alternatives`` are exact plan objects (a
    :class:`~diffcost.TrainPlan` or :class:`~diffcost.ServePlan` with scalar leaves), ready for
    the cost model; :meth:`row` writes one as the plain values the search chose (the JSON row
    of ``diffcost plan``).  ``relaxed_objective`` is the best relaxed objective (``exp`` of the
    lowest relaxed loss, penalties included).  Per relaxed start (``None`` for an exhaustive
    search): ``relaxed_objectives`` holds the relaxed objective it reached and
    ``rounded_objectives`` the best exact feasible objective of its rounded neighbourhood
    before refinement (``inf`` when none is valid and feasible): what the gradient phase alone
    delivers.
    """

    best: P | None
    best_objective: float
    objective_name: str
    binding: str
    alternatives: list[tuple[P, float]]
    evaluated: int
    feasible_count: int
    method: str
    wall_s: float = 0.0
    relaxed_objective: float | None = None
    suggestions: list[str] = field(default_factory=list)
    relaxed_objectives: np.ndarray | None = None
    rounded_objectives: np.ndarray | None = None
    # The exact breakdown (a cost model's output, numpy leaves) of the best plan and of each
    # runner-up, in that order.
    breakdowns: list[Any] = field(default_factory=list)
    # The plain values of a plan of this search (its problem's :meth:`SearchProblem.row`).
    describe: Callable[[P], dict[str, Any]] | None = field(default=None, repr=False)

    def keep(self, runners_up: int) -> "SearchResult[P]":
        """Only the first ``runners_up`` alternatives (and their breakdowns)."""
        self.alternatives = self.alternatives[:runners_up]
        self.breakdowns = self.breakdowns[: runners_up + 1]
        return self

    def row(self, plan: P) -> dict[str, Any]:
        """The plain values of ``plan`` (the best or a runner-up): the searched fields and the
        ones they determine, ints for degrees and counts, choices by their plain value."""
        assert self.describe is not None, "a search result knows its problem's rows"
        return self.describe(plan)

    def rows(self) -> list[dict[str, Any]]:
        """:meth:`row` of the best plan and of each runner-up, in that order (none when no
        plan is feasible)."""
        plans = [] if self.best is None else [self.best, *(p for p, _ in self.alternatives)]
        return [self.row(p) for p in plans]


def settings(space: Any) -> dict[str, Any]:
    """Every setting of a search space, defaulted or given, as plain JSON values (what a
    result echoes so that no default changes an answer silently)."""
    import dataclasses
    import enum

    def plain(v: Any) -> Any:
        if isinstance(v, enum.Enum):
            return v.value
        if isinstance(v, (tuple, list)):
            return [plain(x) for x in v]
        return v if not isinstance(v, float) or math.isfinite(v) else None

    return {f.name: plain(getattr(space, f.name)) for f in dataclasses.fields(space)}


def rows_of(outputs: Any, index: Any) -> list[Any]:
    """Rows ``index`` of stacked breakdowns, each as its own breakdown with numpy leaves."""
    return [jax.tree_util.tree_map(lambda x, i=int(i): np.asarray(x)[i], outputs) for i in index]


def evaluate_in_buckets(fn: Callable[[Candidates], Any], c: Candidates, chunk: int = 16384) -> Any:
    """``fn`` (a jitted exact evaluation of stacked candidates) over all of ``c``.

    Rows go in fixed buckets (powers of two from 256 up to ``chunk``; the last padded by
    repeating a row) so the evaluation compiles for a few shapes only; the outputs, any pytree
    of arrays with a leading row axis, are trimmed and concatenated.
    """
    bucket = chunk if len(c) > chunk else max(256, 1 << (len(c) - 1).bit_length())
    parts = []
    for start in range(0, len(c), bucket):
        idx = np.arange(start, min(start + bucket, len(c)))
        pad = np.concatenate([idx, np.full(bucket - len(idx), idx[0])])
        k = len(idx)
        parts.append(jax.tree_util.tree_map(lambda x, k=k: np.asarray(x)[:k], fn(c.take(pad))))
    return jax.tree_util.tree_map(lambda *x: np.concatenate(x), *parts)


def anneal(step: jax.Array, steps: int, start: float = 1.0, end: float = 0.02) -> jax.Array:
    """Geometric temperature schedule from ``start`` to ``end`` over ``steps``."""
    frac = step / jnp.maximum(steps - 1, 1)
    return start * (end / start) ** frac


def optimise(
    loss: Callable[[jax.Array, jax.Array], jax.Array],
    theta0: jax.Array,
    steps: int,
    learning_rate: float,
) -> tuple[jax.Array, jax.Array]:
    """Minimise ``loss(theta, temperature)`` from every row of ``theta0`` (vmapped adam).

    Returns the final thetas and their losses at the final temperature.  Pure: jit the caller.
    """
    import optax  # imported here: 0.15 s that no prediction needs

    opt = optax.adam(learning_rate)
    # the gradient of the deduplicated loss: a smaller program to compile (:mod:`.._core.dedupe`)
    small = deduplicated(loss)

    def run(theta: jax.Array) -> tuple[jax.Array, jax.Array]:
        def body(carry, step):
            th, state = carry
            tau = anneal(step, steps)
            g = jax.grad(small)(th, tau)
            g = jnp.where(jnp.isfinite(g), g, 0.0)
            updates, state = opt.update(g, state, th)
            new = optax.apply_updates(th, updates)
            return (jnp.asarray(new), state), None

        (th, _), _ = jax.lax.scan(body, (theta, opt.init(theta)), jnp.arange(steps))
        return th, loss(th, anneal(jnp.asarray(steps - 1), steps))

    return jax.vmap(run)(theta0)


# --- the driver ----------------------------------------------------------------------------------
class SearchProblem(abc.ABC):
    """What a concrete search (training, serving) provides to :func:`search`.

    ``theta`` holds one relaxed log2 value per axis (``layout()["x"]``, in axis order) and one
    logit vector per choice (``layout()[choice.name]``).  Concrete problems are final.
    """

    objective: str
    axes: tuple[Axis, ...]
    choices: tuple[Choice, ...]

    def pools(self) -> dict[str, tuple[Any, ...]]:
        """Allowed values of every axis and choice."""
        return {a.name: a.values for a in self.axes} | {c.name: c.options for c in self.choices}

    @abc.abstractmethod
    def layout(self) -> dict[str, slice]:
        """Where each axis and choice lives in ``theta`` (see :func:`layout`)."""

    @abc.abstractmethod
    def valid(self, c: Candidates) -> np.ndarray:
        """Which rows satisfy the exact validity rules (divisibility, ...)."""

    @abc.abstractmethod
    def evaluate(self, c: Candidates) -> Evaluation:
        """The exact model on every row."""

    @abc.abstractmethod
    def solve(self, theta0: np.ndarray, steps: int, lr: float) -> tuple[np.ndarray, np.ndarray]:
        """Relaxed optima from every start, and their losses."""

    @abc.abstractmethod
    def plans(self, c: Candidates) -> list[Any]:
        """Every row as an exact plan object (scalar leaves), in row order."""

    @abc.abstractmethod
    def row(self, plan: Any) -> dict[str, Any]:
        """An exact plan of this problem as plain values (the JSON row of a result)."""

    @abc.abstractmethod
    def binding(self, outputs: Any, i: int) -> str:
        """Which constraint or cost term shapes row ``i``'s objective."""

    @abc.abstractmethod
    def suggest(self) -> list[str]:
        """What would make an infeasible request feasible."""

    def coupled(self) -> dict[str, tuple[str, ...]]:
        """Axes that scale with degrees in refinement moves (see :func:`scaled_moves`)."""
        return {}

    def repair(self, c: Candidates) -> Candidates:
        """The nearest valid plan of every row (identity: no repair rule)."""
        return c

    def scan(self, start: int, chunk: int, k: int) -> "Scan | None":
        """The exact model over flat plans ``start .. start + chunk`` of the whole space, decoded,
        checked for validity and evaluated inside one ``jit`` (:func:`scan_space`); None where
        the problem has no device enumeration (the host one is used)."""
        return None


@dataclass(frozen=True)
class Scan:
    """One chunk of an on-device enumeration: how many of its plans are valid and feasible, and
    its ``k`` best (chunk-local indices, objectives ``inf`` where none, and their breakdowns);
    device arrays until :func:`scan_space` fetches every chunk at once."""

    valid: Any
    feasible: Any
    top: Any
    objective: Any
    outputs: Any


def require_price(system: Any, objective: str) -> None:
    """A cost objective needs a price per chip-hour; say so instead of optimising zeros."""
    if objective == "cost" and system is not None and not float(system.price_usd_per_chip_hour) > 0:
        raise SpecError(
            [
                Problem(
                    "<arguments>",
                    "objective",
                    "cost needs a price per chip-hour, "
                    "and this system has none: add [price] usd_per_hour to its "
                    "system or chip spec, or use another objective",
                )
            ]
        )


def enumerate_all(problem: SearchProblem) -> Candidates:
    """Every valid discrete plan: the exhaustive oracle's input."""
    cand = Candidates.product(problem.axes, problem.choices)
    return cand.take(np.nonzero(problem.valid(cand))[0])


def neighbourhood(problem: SearchProblem, theta: np.ndarray) -> Candidates:
    """The integer neighbourhood of a relaxed point: two nearest values per axis, two heaviest
    options per choice."""
    lay = problem.layout()
    per: dict[str, list[Any]] = {}
    for i, axis in enumerate(problem.axes):
        per[axis.name] = axis.nearest_two(float(theta[lay["x"]][i]))
    for choice in problem.choices:
        top = np.argsort(-theta[lay[choice.name]])[:2]
        per[choice.name] = [choice.options[j] for j in top]
    return Candidates.product(problem.axes, problem.choices, per)


def _score(problem: SearchProblem, cand: Candidates) -> np.ndarray:
    ok = problem.valid(cand)
    out = np.full(len(cand), np.inf)
    if ok.any():
        idx = np.nonzero(ok)[0]
        ev = problem.evaluate(cand.take(idx))
        out[idx] = np.where(ev.feasible, ev.objective, np.inf)
    return out


def _seeds(obj: np.ndarray, groups: list[np.ndarray]) -> list[int]:
    """The best row of each relaxed start's own neighbourhood (starts with none are skipped)."""
    seeds = []
    for rows in groups:  # the rows one relaxed start proposed
        mine = rows[np.isfinite(obj[rows])]
        if len(mine):
            seeds.append(int(mine[np.argmin(obj[mine])]))
    return seeds


def _refine_best(
    problem: SearchProblem, cand: Candidates, obj: np.ndarray, top: int, groups: list[np.ndarray]
) -> tuple[Candidates, int]:
    """Refine one seed per relaxed start (the best of its own neighbourhood, so the seeds come
    from different basins; ``obj``: the exact objectives of ``cand``), the ``top`` best of
    those, by exact local search."""
    evaluated = 0

    def score(c: Candidates) -> np.ndarray:
        nonlocal evaluated
        evaluated += int(problem.valid(c).sum())  # invalid moves are never evaluated
        return _score(problem, c)

    seeds = sorted(set(_seeds(obj, groups)), key=lambda i: obj[i])[:top]
    flip = [c.name for c in problem.choices]
    found = [
        refine(
            cand.take([i]),
            problem.pools(),
            score,
            coupled=problem.coupled(),
            flip=flip,
            repair=problem.repair,
        )[0]
        for i in seeds
    ]
    if not found:
        return cand, evaluated
    return unique(Candidates.concat([cand, *found])), evaluated


def unstack(stacked: Any) -> list[Any]:
    """The rows of a stacked plan, each its own plan with scalar leaves (fetched once, each
    leaf placed on the device as :func:`~diffcost._inputs.hardware.host_float` does, as the
    plan constructors do: no program compiled per row)."""
    host = jax.device_get(stacked)
    n = len(jax.tree_util.tree_leaves(host)[0])
    return [jax.tree_util.tree_map(lambda x, i=i: host_float(x[i]), host) for i in range(n)]


def _empty(problem: SearchProblem, binding: str, evaluated: int, method: str) -> SearchResult:
    return SearchResult(
        None,
        math.inf,
        problem.objective,
        binding,
        [],
        evaluated,
        0,
        method,
        suggestions=problem.suggest(),
        describe=problem.row,
    )


def _result(problem: SearchProblem, cand: Candidates, method: str) -> SearchResult:
    if len(cand) == 0:
        binding = "divisibility: no valid degree combination in the space"
        return _empty(problem, binding, 0, method)
    ev = problem.evaluate(cand)
    order, values = best_of(ev.objective, ev.feasible, k=6)
    if len(order) == 0:
        return _empty(problem, "no valid plan is feasible", len(cand), method)
    plans = problem.plans(cand.take(order))
    return SearchResult(
        best=plans[0],
        best_objective=float(values[0]),
        objective_name=problem.objective,
        binding=problem.binding(ev.outputs, int(order[0])),
        alternatives=list(zip(plans[1:], map(float, values[1:]), strict=True)),
        evaluated=len(cand),
        feasible_count=int(np.sum(ev.feasible)),
        method=method,
        breakdowns=rows_of(ev.outputs, order),
        describe=problem.row,
    )


#: Plans per on-device enumeration call on a CPU (32x that on an accelerator): large enough
#: that dispatch is negligible, small enough that the traced model's intermediates stay well
#: inside memory.
SCAN_CHUNK = 32768


def scan_space(problem: SearchProblem, method: str, k: int = 6) -> SearchResult | None:
    """Exhaustive search on device: the whole space in chunks of flat indices, each decoded,
    checked and evaluated exactly in one ``jit`` that keeps only its ``k`` best; the best of
    all chunks' bests (ties to the lower flat index, as :func:`best_of`).  None where the
    problem has no device enumeration."""
    total = space_size(problem)
    if total >= 2**31:
        return None  # int32 flat indices (JAX's default)
    size = SCAN_CHUNK if jax.default_backend() == "cpu" else 32 * SCAN_CHUNK
    chunk = size if total > size else max(256, 1 << (total - 1).bit_length())
    scans = []
    for start in range(0, total, chunk):  # dispatched asynchronously, fetched once below
        part = problem.scan(start, chunk, k)
        if part is None:
            return None
        scans.append((start, part))
    scans = [(start, Scan(*jax.device_get(tuple(vars(p).values())))) for start, p in scans]
    valid = sum(int(p.valid) for _, p in scans)
    feasible = sum(int(p.feasible) for _, p in scans)
    if valid == 0:
        return _empty(problem, "divisibility: no valid degree combination in the space", 0, method)
    if feasible == 0:
        return _empty(problem, "no valid plan is feasible", valid, method)
    flat = np.concatenate([start + np.asarray(p.top) for start, p in scans])
    objective = np.concatenate([p.objective for _, p in scans])
    outputs = jax.tree_util.tree_map(lambda *x: np.concatenate(x), *[p.outputs for _, p in scans])
    order = np.lexsort((flat, objective))[:k]
    order = order[np.isfinite(objective[order])]
    cand = Candidates.at(problem.axes, problem.choices, flat[order])
    outputs = jax.tree_util.tree_map(lambda x: x[order], outputs)
    plans = problem.plans(cand)
    return SearchResult(
        best=plans[0],
        best_objective=float(objective[order[0]]),
        objective_name=problem.objective,
        binding=problem.binding(outputs, 0),
        alternatives=list(zip(plans[1:], map(float, objective[order[1:]]), strict=True)),
        evaluated=valid,
        feasible_count=feasible,
        method=method,
        breakdowns=rows_of(outputs, range(len(order))),
        describe=problem.row,
    )


def enumerate_exactly(problem: SearchProblem, method: str) -> SearchResult:
    """The exact optimum of the whole space: on device where the problem can, else on host."""
    found = scan_space(problem, method + ", on device")
    return found if found is not None else _result(problem, enumerate_all(problem), method)


def _relaxed_candidates(
    problem: SearchProblem, starts: int, steps: int, learning_rate: float, seed: int
) -> tuple[Candidates, list[np.ndarray], np.ndarray]:
    """Relaxed optima from ``starts`` random points, rounded: the distinct valid rows, the rows
    each start proposed (one index array per start), and the relaxed losses."""
    lo = np.asarray([math.log2(min(a.values)) for a in problem.axes])
    hi = np.asarray([math.log2(max(a.values)) for a in problem.axes])
    rng = np.random.default_rng(seed)
    theta0 = rng.normal(0.0, 0.3, (starts, problem.layout()["size"].start))
    theta0[:, problem.layout()["x"]] = rng.uniform(lo, hi, (starts, len(problem.axes)))
    thetas, losses = problem.solve(theta0, steps, learning_rate)
    parts = [neighbourhood(problem, th) for th in thetas]
    every = Candidates.concat(parts)
    owner = np.concatenate([np.full(len(p), i) for i, p in enumerate(parts)])
    keep = np.nonzero(problem.valid(every))[0]
    every, owner = every.take(keep), owner[keep]
    # distinct rows, each remembering which starts proposed it (each is evaluated once)
    index: dict[tuple, int] = {}
    row_of = np.asarray([index.setdefault(k, len(index)) for k in row_keys(every)], dtype=int)
    cand = every.take(np.asarray(sorted(set(np.unique(row_of, return_index=True)[1])), dtype=int))
    groups = [row_of[owner == s] for s in range(starts)]  # empty for a start with no valid row
    return cand, groups, losses


#: Spaces of at most this many discrete plans (valid or not) are searched by enumeration when
#: the caller leaves the method to the search (``exhaustive=None``): on a 2-core CPU the
#: vectorised exact model evaluates them in seconds with no compilation of the gradient
#: (``benchmarks/bench_search.py``), while compiling the relaxed search takes 20-60 s.
AUTO_EXHAUSTIVE_MAX = 2_000_000

#: The same limit for a problem that enumerates on device (:meth:`SearchProblem.scan`): about
#: 6M plans/s on a 2-core CPU after a 3-5 s compilation (``benchmarks/bench_search.py``), so a
#: space this large takes about 10 s, still less than compiling the relaxed search.
AUTO_SCAN_MAX = 50_000_000


def auto_limit(problem: SearchProblem) -> int:
    """The largest space the default search enumerates for this problem."""
    on_device = type(problem).scan is not SearchProblem.scan
    return AUTO_SCAN_MAX if on_device else AUTO_EXHAUSTIVE_MAX


def space_size(problem: SearchProblem) -> int:
    """Discrete plans in a problem's space (the product of its axes and choices)."""
    return Candidates.size_of(problem.axes, problem.choices)


def search(
    problem: SearchProblem,
    *,
    exhaustive: bool | None = None,
    starts: int = 32,
    steps: int = 150,
    learning_rate: float = 0.15,
    seed: int = 0,
    refine_top: int = 12,
) -> SearchResult:
    """Best exact plan: relaxed search, exact rounding and exact local refinement of the
    ``refine_top`` best rounded plans (0: rounding alone), or exhaustive enumeration.

    ``exhaustive=None`` (the default) enumerates a space of at most :func:`auto_limit` plans
    and searches a larger one; True or False forces either.
    An answer of "infeasible" is always confirmed by enumerating the whole space.
    """
    t0 = time.perf_counter()
    size = space_size(problem)
    auto = exhaustive is None
    if auto:
        exhaustive = size <= auto_limit(problem)
    if exhaustive:
        method = "exhaustive"
        if auto:
            method += f" (auto: {size:,} plans <= {auto_limit(problem):,})"
        result = enumerate_exactly(problem, method)
        result.wall_s = time.perf_counter() - t0
        return result
    cand, groups, losses = _relaxed_candidates(problem, starts, steps, learning_rate, seed)
    method = f"relaxed ({starts} starts x {steps} steps) + exact rounding"
    obj = _score(problem, cand) if len(cand) else np.zeros(0)
    rounded = np.asarray([np.min(obj[rows], initial=np.inf) for rows in groups])
    extra = 0
    if refine_top and len(cand):
        cand, extra = _refine_best(problem, cand, obj, refine_top, groups)
        extra += len(obj)  # the rounded rows, scored above
        method += f" + exact 2-move refinement from the best {refine_top} starts"
    result = _result(problem, cand, method)
    result.evaluated += extra
    if result.best is None:
        # Never call a request infeasible on the strength of a neighbourhood: confirm exactly.
        full = enumerate_exactly(problem, method)
        full.method = method + "; none feasible there, so the whole space was enumerated"
        full.evaluated += result.evaluated
        result = full
    best_loss = float(np.nanmin(losses))
    result.relaxed_objective = math.exp(best_loss) if best_loss < 700.0 else math.inf
    result.relaxed_objectives = np.exp(np.minimum(np.asarray(losses, dtype=float), 700.0))
    result.rounded_objectives = rounded
    result.wall_s = time.perf_counter() - t0
    return result
