"""The built-in catalogue's range of every chip, system and model number.

When a prediction overflows (a NaN or infinite output), the inputs that lie far outside what any
built-in chip or model has are the ones to name: :func:`outside_catalogue`.
"""

import functools
from collections.abc import Iterator

import jax
import numpy as np

from .hardware import System
from .loader import builtin_names, load_model, load_system
from .model import Model

#: How far outside the built-in range (a factor either way) a number must lie to be named.
OUTSIDE_FACTOR = 10.0


def named_numbers(tree: object, prefix: str) -> Iterator[tuple[str, float]]:
    """``(name, value)`` of every numeric leaf, element-wise for vector leaves
    (``system.chip.peak_flop_per_s[3]``)."""
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        arr = np.asarray(leaf)
        if not np.issubdtype(arr.dtype, np.number):
            continue
        name = prefix + jax.tree_util.keystr(path)
        if arr.ndim == 0:
            yield name, float(arr)
        else:
            for i, v in enumerate(arr.ravel()):
                yield f"{name}[{i}]", float(v)


@functools.cache
def catalogue_ranges() -> dict[str, tuple[float, float]]:
    """Smallest and largest positive value of each number over the built-in chips (each in its
    default system) and models."""
    values: dict[str, list[float]] = {}
    trees = [("system", load_system(chip=name)) for name in builtin_names("chip")]
    trees += [("model", load_model(name)) for name in builtin_names("model")]
    for prefix, tree in trees:
        for name, v in named_numbers(tree, prefix):
            if v > 0 and np.isfinite(v):
                values.setdefault(name, []).append(v)
    return {k: (min(v), max(v)) for k, v in values.items()}


def outside_catalogue(system: System, model: Model) -> list[str]:
    """The numbers of ``system`` and ``model`` more than :data:`OUTSIDE_FACTOR` outside the
    built-in range, each as ``name = value (built-in: low to high)``."""
    ranges = catalogue_ranges()
    out = []
    for prefix, tree in (("system", system), ("model", model)):
        for name, v in named_numbers(tree, prefix):
            if name not in ranges or v <= 0:
                continue
            low, high = ranges[name]
            if v > high * OUTSIDE_FACTOR or v < low / OUTSIDE_FACTOR:
                out.append(f"{name} = {v:.3g} (built-in: {low:.3g} to {high:.3g})")
    return out


__all__ = ["OUTSIDE_FACTOR", "catalogue_ranges", "named_numbers", "outside_catalogue"]
