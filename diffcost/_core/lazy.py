"""Lazy re-exports (PEP 562) for ``diffcost/__init__.py`` and ``diffcost/testing.py``.

A re-exporting module lists each name twice: in its ``if typing.TYPE_CHECKING:`` block, as the
real import (for type checkers), and in ``__all__`` (a literal: pyright reads it for
re-exports).  The block is the one place that says where a name comes from: at run time it is
not executed (``import diffcost`` would import JAX, Equinox, Optax and pandas: ~2 s); instead the
first use of a name reads the block from the module's source (:mod:`ast`, once per module, after
``import diffcost`` has returned), imports that name's module and keeps the value in the
module's namespace, so later lookups do not come here.

``from .x import a``, ``from .x import a as b`` and ``from . import submodule`` resolve as the
import statement would: the attribute of the module, else its submodule.
"""

import importlib
from collections.abc import Callable
from typing import Any

#: name -> (module, attribute), the module as written (``._train.cost``), relative to the package
Where = dict[str, tuple[str, str]]


def type_checking_imports(source: str, filename: str = "<source>") -> Where:
    """The names bound by the ``from ... import ...`` statements of the top-level
    ``if TYPE_CHECKING:`` / ``if typing.TYPE_CHECKING:`` blocks of ``source``."""
    import ast  # only on the first lazy lookup: ``import diffcost`` stays as fast

    where: Where = {}
    for node in ast.parse(source, filename=filename).body:
        if not (isinstance(node, ast.If) and _is_type_checking(node.test)):
            continue
        for statement in node.body:
            if not isinstance(statement, ast.ImportFrom):
                raise TypeError(f"{filename}:{statement.lineno}: only `from ... import` here")
            module = "." * statement.level + (statement.module or "")
            for alias in statement.names:
                where[alias.asname or alias.name] = (module, alias.name)
    return where


def _is_type_checking(test: object) -> bool:
    import ast

    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def lazy_exports(
    namespace: dict[str, Any],
) -> tuple[Callable[[str], Any], Callable[[], list[str]], Callable[[], Where]]:
    """``__getattr__``, ``__dir__`` and ``where`` (name -> (module, attribute)) for the module
    whose globals are ``namespace``; call as
    ``__getattr__, __dir__, _where = lazy_exports(globals())``."""
    package, name, file = namespace["__package__"], namespace["__name__"], namespace["__file__"]
    found: list[Where] = []

    def where() -> Where:
        if not found:
            with open(file, encoding="utf-8") as f:
                found.append(type_checking_imports(f.read(), file))
        return found[0]

    def __getattr__(attribute: str) -> Any:
        entry = where().get(attribute)
        if entry is None:
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}")
        module, real = entry
        parent = importlib.import_module(module, package)
        try:
            value = getattr(parent, real)
        except AttributeError:  # ``from . import submodule``, not yet imported
            value = importlib.import_module(f"{parent.__name__}.{real}")
        namespace[attribute] = value  # later lookups find it without calling __getattr__
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(namespace.get("__all__", ())))

    return __getattr__, __dir__, where
