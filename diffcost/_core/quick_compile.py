"""Quick CPU compilation for programs compiled once and run for milliseconds (optimiser steps).

XLA's CPU back end spends much of a large scalar program's compile time in LLVM's optimisation
of the generated code.  A co-design step runs in well under a millisecond, 200-300 times: the
compile dominates, so LLVM at ``-O0`` without its expensive passes is the better trade (XLA
``DebugOptions``: ``xla_backend_optimization_level``, ``xla_llvm_disable_expensive_passes``,
openxla/xla ``xla/xla.proto``).  Measured on 2 cores (jax 0.10.2; one workload's gradient of the
mix co-design, :mod:`diffcost._codesign.parts`): edge 25.1 -> 17.5 s compile (a run 0.36 ->
0.70 ms), train 25.8 -> 21.9 s (0.72 -> 0.50 ms); the values equal to float32 rounding.
A JAX that does not know an option (XLA renames them) compiles with its defaults.

CPU only: on an H200 (jax 0.11.2) the same options made a 200-deep chain's gradient compile in
over 170 s against 62 s with the defaults (a 20-deep one: 1.19 against 1.02 s, the same
values), so on any other back end the defaults are used.
"""

from collections.abc import Callable
from typing import Any

import jax
from jax.core import Tracer

#: XLA compile options of :func:`compile_quickly` and :func:`quick_jit`.
QUICK_COMPILE: dict[str, Any] = {
    "xla_backend_optimization_level": 0,
    "xla_llvm_disable_expensive_passes": True,
}


def _options() -> dict[str, Any] | None:
    """:data:`QUICK_COMPILE` on the CPU back end, else None (module docstring)."""
    return QUICK_COMPILE if jax.default_backend() == "cpu" else None


def _unknown_option(error: Exception) -> bool:
    return "No such compile option" in str(error)  # XLA's INVALID_ARGUMENT message


def compile_quickly(lowered: Any) -> Any:
    """``lowered.compile()`` (a ``jax.stages.Lowered``) with :data:`QUICK_COMPILE` on the CPU;
    with the defaults elsewhere and where this XLA does not know an option."""
    try:
        return lowered.compile(compiler_options=_options())
    except jax.errors.JaxRuntimeError as error:
        if not _unknown_option(error):
            raise
        return lowered.compile()


def quick_jit(fn: Callable) -> Callable:
    """``jax.jit(fn)`` compiled with :data:`QUICK_COMPILE` on the CPU (the defaults elsewhere
    and where this XLA does not know an option).  Called inside another trace (``jax.vmap``,
    an outer ``jax.jit``) it is plain ``jax.jit(fn)``: JAX takes compile options on the
    outermost program only."""
    quick, plain = jax.jit(fn, compiler_options=_options()), jax.jit(fn)
    chosen = [quick]

    def call(*args: Any) -> Any:
        if any(isinstance(leaf, Tracer) for leaf in jax.tree.leaves(args)):
            return plain(*args)  # inside another trace: compiler options are top-level only
        try:
            return chosen[0](*args)
        except jax.errors.JaxRuntimeError as error:
            if chosen[0] is plain or not _unknown_option(error):
                raise
            chosen[0] = plain
            return plain(*args)

    return call


__all__ = ["QUICK_COMPILE", "compile_quickly", "quick_jit"]
