"""Programs traced once per structure and kept on disk: a command-line call that has run before
reads its program instead of tracing the cost model again.

JAX's persistent compilation cache (``DIFFCOST_CACHE_DIR``) skips XLA's compilation of a program
it has seen, but every process still traces the Python cost model (1-2 s for a training step with
its interval) to find out which program it is.  An :class:`ExportedProgram` keys a function's
program by everything that decides it without running it:

- the entry point's name, the bytes of the package's source (:func:`package_digest`), the JAX and
  jaxlib versions, the backend and whether 64-bit floats are on;
- the arguments' structure with their static values (``jax.tree.structure`` of the non-array part
  prints the static fields of every Equinox module) and every array leaf's shape and dtype.

The first call with a key traces the function, exports it (``jax.export``: StableHLO, the array
leaves as its flat inputs) and writes it with the output's structure under
``DIFFCOST_CACHE_DIR/programs``; later processes deserialize it (milliseconds) and call it, and
the compilation cache supplies its executable.  Anything that goes wrong reading or writing the
file falls back to tracing: the cache costs a recomputation, never an answer.

It is on only where :func:`enable` was called (the command line's ``main``); elsewhere an
:class:`ExportedProgram` is ``eqx.filter_jit`` of its function, so library users and tests that
patch a function see their change.  Reference: JAX documentation, "Exporting and serializing
staged-out computations" (``jax.export``).
"""

import copyreg
import dataclasses
import hashlib
import os
import pickle
from collections.abc import Callable
from enum import Enum
from functools import cache, partial
from importlib import metadata
from pathlib import Path
from typing import Any

import equinox as eqx
import jax

from .disk_cache import digest
from .quick_compile import quick_jit

_DIR: Path | None = None


def enable(cache_dir: str | Path | None) -> None:
    """Keep exported programs under ``cache_dir/programs`` (None: off)."""
    global _DIR
    _DIR = None if cache_dir is None else Path(cache_dir) / "programs"


@cache
def package_digest() -> str:
    """SHA-256 of the package's source files: an edited or upgraded diffcost is a new key."""
    return digest([Path(__file__).resolve().parents[1]])


def _pickle_equinox_sentinel() -> None:
    """Equinox marks a module without static fields by a sentinel in its tree definition; a
    pickled tree definition must unpickle it as that same object (an identity test)."""
    from equinox._module import _flatten

    missing = _flatten.MISSING
    copyreg.pickle(type(missing), lambda _: (_sentinel, ()))


def _sentinel() -> Any:
    from equinox._module import _flatten

    return _flatten.MISSING


def stable_name(x: Any) -> str | None:
    """A static value as text that names it in every process: numbers, strings, enumerations
    and tuples of them by their ``repr``; dataclasses by their class and fields' names;
    module-level functions (and ``functools.partial`` of
    them with stable arguments) by module and qualified name; None for anything else (a
    lambda or a local function, an object whose ``repr`` may hide its state or show an
    address)."""
    if x is None or isinstance(x, bool | int | float | str | Enum):
        return repr(x)
    if isinstance(x, tuple):
        inner = [stable_name(y) for y in x]
        return None if None in inner else f"({', '.join(map(str, inner))})"
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        inner = [stable_name(getattr(x, f.name)) for f in dataclasses.fields(x)]
        cls = type(x)
        return None if None in inner else f"{cls.__module__}.{cls.__qualname__}{tuple(inner)}"
    if isinstance(x, partial):
        inner = [stable_name(y) for y in (x.func, x.args, tuple(sorted(x.keywords.items())))]
        return None if None in inner else f"partial{tuple(inner)}"
    qualname = getattr(x, "__qualname__", "")
    if callable(x) and qualname and "<" not in qualname and hasattr(x, "__module__"):
        return f"{x.__module__}.{qualname}"
    return None


def exported_program(name: str) -> Callable[[Callable[..., Any]], "ExportedProgram"]:
    """Decorator: ``fn`` as the :class:`ExportedProgram` ``name`` (in place of
    ``eqx.filter_jit``)."""
    return lambda fn: ExportedProgram(fn, name)


def call(fn: Any, *args: Any) -> Any:
    """``fn(*args)``: with :data:`EXACT`, any cost model on its plan."""
    return fn(*args)


class ExportedProgram:
    """``fn`` compiled once per argument structure; with :func:`enable` kept on disk between
    processes (module docstring).  ``fn``'s non-array arguments are static, as under
    ``eqx.filter_jit``.  ``quick``: a program run once per call for milliseconds, whose
    compile dominates, is compiled (on disk) with LLVM's quick options
    (:mod:`~diffcost._core.quick_compile`)."""

    def __init__(self, fn: Callable[..., Any], name: str, quick: bool = False):
        self.fn, self.name, self.quick = fn, name, quick
        self.__doc__, self.__wrapped__ = fn.__doc__, fn
        self._jit = eqx.filter_jit(fn)
        self._loaded: dict[str, tuple[Callable[..., Any], Any]] = {}

    def __call__(self, *args: Any) -> Any:
        if _DIR is None:
            return self._jit(*args)
        dyn, static = eqx.partition(args, eqx.is_array)
        leaves, dyn_tree = jax.tree.flatten(dyn)
        key = self.key(static, dyn_tree, leaves)
        if key is None:  # a static value without a stable name (a lambda, an object)
            return self._jit(*args)
        if key not in self._loaded:
            self._loaded[key] = self._read(key) or self._export(key, static, dyn_tree, leaves)
        call, out_tree = self._loaded[key]
        return jax.tree.unflatten(out_tree, call(*leaves))

    def key(self, static: Any, dyn_tree: Any, leaves: list[Any]) -> str | None:
        """The program's name: everything that decides it (module docstring); None when a
        static value has no name that is the same in every process (:func:`stable_name`)."""
        names = [stable_name(x) for x in jax.tree.leaves(static)]
        if None in names:
            return None
        parts = [
            self.name,
            package_digest(),
            jax.__version__,
            metadata.version("jaxlib"),
            jax.default_backend(),
            str(jax.config.read("jax_enable_x64")),
            str(jax.tree.structure(static)),
            *map(str, names),
            str(dyn_tree),
            *(f"{x.dtype}{x.shape}{getattr(x, 'weak_type', False)}" for x in leaves),
        ]
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]

    def _path(self, key: str) -> Path:
        """The file of a program, in the folder of this version of the package."""
        assert _DIR is not None
        return _DIR / package_digest() / f"{self.name}-{key}.bin"

    def _read(self, key: str) -> tuple[Callable[..., Any], Any] | None:
        try:
            blob = self._path(key).read_bytes()
            _pickle_equinox_sentinel()
            serialized, out_tree = pickle.loads(blob)
            exported = jax.export.deserialize(serialized)
        except Exception:  # a missing, partial or foreign file: trace instead
            return None
        return self._compiled(exported), out_tree

    def _export(
        self, key: str, static: Any, dyn_tree: Any, leaves: list[Any]
    ) -> tuple[Callable[..., Any], Any]:
        trees: list[Any] = []

        def flat(*xs: Any) -> list[Any]:
            out = self.fn(*eqx.combine(jax.tree.unflatten(dyn_tree, xs), static))
            out_leaves, out_tree = jax.tree.flatten(out)
            trees.append(out_tree)
            return out_leaves

        shapes = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in leaves]
        exported = jax.export.export(jax.jit(flat))(*shapes)
        try:
            _pickle_equinox_sentinel()
            blob = pickle.dumps((exported.serialize(), trees[0]))
            path = self._path(key)
            if not path.parent.exists():  # a new version of the package: drop the old ones'
                for old in path.parent.parent.glob("*/*.bin"):
                    old.unlink(missing_ok=True)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(blob)
            tmp.replace(path)
        except Exception:  # an unpicklable structure or a read-only disk: this process only
            pass
        return self._compiled(exported), trees[0]

    def _compiled(self, exported: Any) -> Callable[..., Any]:
        """The exported program's call, compiled with LLVM's quick options where ``quick``
        (:func:`~diffcost._core.quick_compile.quick_jit`)."""
        return quick_jit(exported.call) if self.quick else jax.jit(exported.call)


#: ``cost(plan)`` of any cost model, compiled once per structure.
EXACT = ExportedProgram(call, "exact")
