"""Where the equations of the reference programs come from: jaxpr equations per source line.

    python benchmarks/program_breakdown.py [--program NAME] [--top 40]
        [--by line|function|file|term] [--depth 2]

Walks the traced jaxpr of each reference program (``diffcost._analysis.program_size``), nested
bodies included, and attributes every equation to the innermost frame of the diffcost package
in its traceback (``eqn.source_info``).  The top lines are where a shared quantity is recomputed
or a Python loop is unrolled.  ``--by term`` attributes it instead to the chain of ``--depth``
calls below the cost model's ``_evaluate`` (``stage_times > layer_forward``): which term of
the breakdown a group of equations belongs to (a memoised quantity counts where it is first
computed).  Equations without a diffcost frame (the bodies JAX traces for ``jnp.polyval``'s
scans) are ``<outside diffcost>``.
"""

import argparse
import collections
import os
from typing import Any

import jax

from diffcost._analysis.program_size import _sub_jaxprs, reference_programs

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _term(frames: list[Any], depth: int) -> str:
    """The ``depth`` diffcost calls below the cost model's ``_evaluate`` in ``frames``
    (innermost first), outermost first, joined by ``>``."""
    names = [f.function_name for f in reversed(frames) if "/diffcost/" in f.file_name]
    top = next((i for i, n in enumerate(names) if n.endswith("_evaluate")), None)
    if top is None:
        return "<outside diffcost>"
    return " > ".join(names[top + 1 : top + 1 + depth]) or "<the entry point itself>"


def _frame(eqn: Any, by: str, depth: int = 2) -> str:
    """The innermost diffcost frame that recorded ``eqn``, as a line, function or file (or
    its term: :func:`_term`)."""
    tb = eqn.source_info.traceback
    frames = tb.frames if tb is not None else []
    if by == "term":
        inner = [f for f in frames if "/_core/" not in f.file_name]
        return _term(inner, depth)
    for f in frames:  # innermost first
        name = f.file_name
        if "/diffcost/" in name and "/_core/smooth.py" not in name:
            rel = os.path.relpath(name, _ROOT)
            if by == "file":
                return rel
            if by == "function":
                return f"{rel}:{f.function_name}"
            return f"{rel}:{f.line_num} ({f.function_name})"
    return "<outside diffcost>"


def breakdown(
    jaxpr: Any, by: str, counts: collections.Counter | None = None, depth: int = 2
) -> collections.Counter:
    """Equations of ``jaxpr`` (nested bodies included) counted per source frame."""
    counts = collections.Counter() if counts is None else counts
    for eqn in getattr(jaxpr, "jaxpr", jaxpr).eqns:
        counts[_frame(eqn, by, depth)] += 1
        for value in eqn.params.values():
            for sub in _sub_jaxprs(value):
                breakdown(sub, by, counts, depth)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--program", action="append", help="a reference program (default: all)")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--by", choices=("line", "function", "file", "term"), default="line")
    parser.add_argument("--depth", type=int, default=2, help="calls per term (--by term)")
    args = parser.parse_args()
    programs = reference_programs()
    for name in args.program or list(programs):
        fn, example = programs[name]
        counts = breakdown(jax.make_jaxpr(fn)(*example), args.by, depth=args.depth)
        print(f"== {name}: {sum(counts.values())} equations")
        for where, n in counts.most_common(args.top):
            print(f"{n:6d}  {where}")


if __name__ == "__main__":
    main()
