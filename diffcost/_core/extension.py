"""Extension points: abstract Equinox modules whose implementations are final classes.

As Diffrax's ``AbstractSolver`` and ``AbstractTerm``: an extension point (a collective
algorithm, :mod:`diffcost._terms.collectives`) is an abstract :class:`equinox.Module` whose
interface is its abstract methods (``abc.abstractmethod``) and, where needed, abstract fields
(``eqx.AbstractVar``); an implementation is one concrete class, never subclassed.  Its
implementations are listed once, explicitly, in the point's registry (:func:`registry`: a
name -> class mapping, not filled by import-time side effects), which the generic tests
(``tests/test_extension_points.py``) iterate: a new implementation is one class plus one
registry entry, and it is tested by the existing tests.

Equinox 0.13 no longer enforces "concrete classes are final" (its ``strict=True`` class
argument is accepted and ignored), so :class:`AbstractExtension` does, with Equinox's former
naming rule: a class named ``Abstract*`` is an interface and may be subclassed; any other
subclass is final, and subclassing it raises ``TypeError`` when the class is defined
(``typing.final`` on each implementation says the same to pyright).
"""

from collections.abc import Mapping
from types import MappingProxyType
from typing import ClassVar, TypeVar

import equinox as eqx


def is_abstract(cls: type) -> bool:
    """True for an interface: a class named ``Abstract*``."""
    return cls.__name__.startswith("Abstract")


class AbstractExtension(eqx.Module):
    """Root of every extension point (see the module docstring).

    Attributes:
        name: the implementation's key in its registry and its spelling for users (a class
            attribute of each concrete class).
    """

    name: ClassVar[str]

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        final = [b.__name__ for b in cls.__mro__[1:] if _is_extension(b) and not is_abstract(b)]
        if final:
            raise TypeError(
                f"{cls.__name__} subclasses {final[0]}, a final implementation of an extension "
                "point: subclass its Abstract* interface instead"
            )


def _is_extension(cls: type) -> bool:
    return isinstance(cls, type) and issubclass(cls, AbstractExtension)


_E = TypeVar("_E", bound=type[AbstractExtension])


def registry(*classes: _E) -> Mapping[str, _E]:
    """The read-only ``name -> class`` mapping of an extension point's implementations, in the
    order given.

    Raises:
        TypeError: a class is an interface, has abstract methods or fields left, or has no
            ``name``; or two share a name.
    """
    out: dict[str, _E] = {}
    for cls in classes:
        left = sorted(
            {*cls.__abstractmethods__, *getattr(cls, "__abstractvars__", ())}  # pyright: ignore[reportAttributeAccessIssue]
        )
        if is_abstract(cls) or left:
            raise TypeError(f"{cls.__name__} is abstract ({', '.join(left) or 'its name'})")
        name = cls.__dict__.get("name")
        if not isinstance(name, str) or not name:
            raise TypeError(f"{cls.__name__} has no name (a ClassVar[str])")
        if name in out:
            raise TypeError(f"{cls.__name__} and {out[name].__name__} are both named {name!r}")
        out[name] = cls
    return MappingProxyType(out)


__all__ = ["AbstractExtension", "is_abstract", "registry"]
