"""Each shared quantity once per evaluation: a memo scoped to one call of a cost model.

A cost model is a composition of small named terms (the stage's layer count, the parameters a
chip holds, a layer's forward time, ...), and several terms need the same quantity: the
training step asks for the first stage's parameters in the memory, the data-parallel
reduction, the ZeRO-3 gathers, the optimizer stream, the checkpoint and the energy.  Written as
plain function calls, every request re-traces the whole sub-computation into the program (a
Llama-2-70B step was 8,170 jaxpr equations, of which 2,290 distinct).  Passing each quantity
down by hand would tie every term's signature to every caller's.

:func:`evaluation` opens a memo for one evaluation (``TrainCost.__call__``,
``ServeCost.__call__``); a function decorated with :func:`once` returns, within it, the value
it already computed for the same arguments instead of tracing it again.  Arguments are the
same when they are the same objects (the plan, the model, a tracer: identity, as a trace
passes the same objects down) or equal plain values (ints, floats, strings, a
:class:`~diffcost._core.smooth.Smoothing`); the memo holds the arguments so that no identity
is reused while it lives.  It is used only in the trace that opened it: inside a nested trace
(a ``fori_loop`` body, a ``vmap`` or ``grad`` inside the evaluation) the function is evaluated
afresh, so no value of one trace leaks into another.  Outside an evaluation, or for functions
called directly, nothing changes: the same values, computed as before.

The memoised functions must be pure functions of their arguments (every cost term is).
"""

import contextlib
import functools
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from jax.extend.core import get_opaque_trace_state

from .smooth import Smoothing

_P = ParamSpec("_P")
_R = TypeVar("_R")

#: The convention name JAX asks of callers of ``get_opaque_trace_state``.
_CONVENTION = "diffcost"

#: Argument types compared by value rather than identity.
_VALUE_TYPES = (bool, int, float, str, type(None), Smoothing)


@dataclass
class _Scope:
    """One evaluation's memo and the trace it belongs to."""

    trace: Any
    memo: dict[tuple, tuple] = field(default_factory=dict)


_SCOPE: ContextVar[_Scope | None] = ContextVar("diffcost_shared_scope", default=None)


@contextlib.contextmanager
def evaluation() -> Iterator[None]:
    """A fresh memo for the functions decorated with :func:`once`, for one evaluation in the
    current trace; the previous one (if any) is restored on exit."""
    token = _SCOPE.set(_Scope(get_opaque_trace_state(convention=_CONVENTION)))
    try:
        yield
    finally:
        _SCOPE.reset(token)


@contextlib.contextmanager
def in_evaluation() -> Iterator[None]:
    """The open :func:`evaluation` where it belongs to the current trace, else a fresh one for
    the duration of the block: a term whose parts share a quantity (two laws of
    :func:`diffcost._terms.execution.matmul_efficiency` padding the same weight) computes it
    once even when called inside a nested trace (a ``vmap`` in the evaluation) or alone."""
    scope = _SCOPE.get()
    if scope is not None and get_opaque_trace_state(convention=_CONVENTION) == scope.trace:
        yield
        return
    with evaluation():
        yield


def _key(value: Any) -> tuple:
    """An argument's memo key: its value for plain immutable values, else its identity."""
    if type(value) in _VALUE_TYPES:
        return (type(value), value)
    return ("id", id(value))


def once(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """``fn`` computed once per set of arguments within an :func:`evaluation` (see the module
    docstring); a plain call outside one."""

    @functools.wraps(fn)
    def wrapped(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        scope = _SCOPE.get()
        if scope is None or get_opaque_trace_state(convention=_CONVENTION) != scope.trace:
            return fn(*args, **kwargs)
        key = (fn, tuple(map(_key, args)), tuple((k, _key(v)) for k, v in sorted(kwargs.items())))
        hit = scope.memo.get(key)
        if hit is None:
            hit = (args, kwargs, fn(*args, **kwargs))  # the arguments keep their ids unique
            scope.memo[key] = hit
        return hit[2]

    return wrapped


__all__ = ["evaluation", "in_evaluation", "once"]
