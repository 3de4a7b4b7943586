"""Timing helpers shared by the benchmarks: compile once, then time the compiled calls."""

import time
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax


def time_calls(fn: Callable[..., Any], args: tuple[Any, ...], calls: int) -> tuple[float, float]:
    """``(compile_s, seconds per call)`` of one jitted call, dispatch included."""
    t0 = time.perf_counter()
    jax.block_until_ready(fn(*args))
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(calls):
        out = fn(*args)
    jax.block_until_ready(out)  # pyright: ignore[reportPossiblyUnbound]  (calls >= 1)
    return compile_s, (time.perf_counter() - t0) / calls


def time_vmapped(
    cost: Any, chunks: list[Any], fn: Callable[[Any, Any], Any], repeats: int
) -> tuple[float, float]:
    """``(compile_s, best seconds)`` for ``vmap(fn(cost, .))`` over every chunk of stacked plans,
    best of ``repeats``.  XLA drops outputs nobody reads, so ``fn`` picks what is computed."""
    batched = eqx.filter_jit(lambda c, p: jax.vmap(lambda q: fn(c, q))(p))
    t0 = time.perf_counter()
    jax.block_until_ready(batched(cost, chunks[0]))
    compile_s = time.perf_counter() - t0
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready([batched(cost, c) for c in chunks])
        best = min(best, time.perf_counter() - t0)
    return compile_s, best
