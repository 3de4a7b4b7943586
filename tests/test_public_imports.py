"""Tests use the public API (``import diffcost as dc``) or the one documented testing module
(``diffcost.testing``), never a private module (issue 40): moving or renaming a private module then
changes ``diffcost/testing.py`` alone, not dozens of tests.  A private module is any ``diffcost``
module with a part that starts with one underscore (``diffcost._core.smooth``,
``diffcost.cli._options``).  Every import counts: at module level, inside a function, and in the
source of a script a test runs in a subprocess (a string constant that starts a line with
``from diffcost._...`` or ``import diffcost._...``).

Read from the source with :mod:`ast` (no test file is imported).  ``python
tests/test_public_imports.py`` prints every private import and the counts."""

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from test_layers import collect

import diffcost as dc
from diffcost import testing

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

#: The test files still allowed to import private modules, each with the reason.  An entry whose
#: file no longer imports one fails :func:`test_every_exception_is_still_needed`.
EXCEPTIONS: dict[str, str] = {
    "tests/test_layers.py": "the layer checker's own fixtures are sources that import private "
    "modules (strings, never run)",
    "tests/test_public_imports.py": "this checker's own fixtures (strings, never run)",
}

# a line of a string constant that imports a private module (the script of a subprocess)
_SCRIPT_IMPORT = re.compile(r"^\s*(?:from|import)\s+(diffcost(?:\.\w+)+)", re.MULTILINE)


class PrivateImport(NamedTuple):
    file: str  # relative to the repository root
    line: int
    module: str


def private(module: str) -> bool:
    """``diffcost._core.smooth``, ``diffcost.cli._options``: a diffcost module with a private part
    (one underscore; ``__main__`` is not private)."""
    parts = module.split(".")
    return parts[0] == "diffcost" and any(
        p.startswith("_") and not p.startswith("__") for p in parts[1:]
    )


def private_imports(text: str, file: str) -> Iterator[PrivateImport]:
    """Every private diffcost module that the source ``text`` imports, at any depth, including
    the lines of string constants that import one."""
    for node in ast.walk(ast.parse(text, filename=file)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            modules = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            # ``from diffcost._core import smooth`` names the package once
            modules = [next((m for m in modules if private(m)), node.module)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for match in _SCRIPT_IMPORT.finditer(node.value):
                if private(match.group(1)):
                    line = node.lineno + node.value.count("\n", 0, match.start())
                    yield PrivateImport(file, line, match.group(1))
            continue
        else:
            continue
        for module in modules:
            if private(module):
                yield PrivateImport(file, node.lineno, module)


def collect_tests(tests: Path = TESTS) -> list[PrivateImport]:
    """Every private import in the test files under ``tests``."""
    found = []
    for path in sorted(tests.rglob("*.py")):
        file = path.relative_to(tests.parent).as_posix()
        found.extend(private_imports(path.read_text(), file))
    return found


def _outside_exceptions(found: list[PrivateImport]) -> list[str]:
    return [f"{i.file}:{i.line}: imports {i.module}" for i in found if i.file not in EXCEPTIONS]


# -- the rules on the real tests ----------------------------------------------------------------


def test_no_test_imports_a_private_module():
    found = _outside_exceptions(collect_tests())
    assert not found, (
        f"{len(found)} private imports: use `import diffcost as dc` or `from diffcost.testing "
        "import ...` (add the name to diffcost/testing.py if it is missing):\n" + "\n".join(found)
    )


def test_every_exception_is_still_needed():
    files = {i.file for i in collect_tests()}
    stale = sorted(set(EXCEPTIONS) - files)
    assert not stale, f"no private import left, remove from EXCEPTIONS: {stale}"


def test_no_library_module_imports_the_testing_module():
    """``diffcost.testing`` sits above every layer: it imports from them, none imports it."""
    found = [f"{e.file}:{e.line}: {e.source}" for e in collect() if e.target == testing.__name__]
    assert not found, "\n".join(found)


def test_the_testing_module_names_resolve_and_are_not_public():
    """Every name of ``diffcost.testing`` is found where the module says (a private module that
    moved fails here, by name, not in the tests that use it); a public name is used as
    ``dc.X`` instead, so none is here."""
    assert testing.__all__ == sorted(testing.__all__, key=lambda name: (name.lower(), name))
    assert set(testing.__all__) == set(testing._where())
    assert not set(testing.__all__) & set(dc.__all__)
    missing = []
    for name in testing.__all__:
        try:
            getattr(testing, name)
        except (AttributeError, ImportError) as error:
            missing.append(f"{name}: {testing._where()[name]}: {error}")
    assert not missing, "\n".join(missing)


def test_the_lazy_names_are_the_type_checking_imports():
    """``diffcost`` and ``diffcost.testing`` name each export twice: its real import in the
    ``if typing.TYPE_CHECKING:`` block (which the run-time lookup reads) and ``__all__``."""
    assert set(dc.__all__) == set(dc._where())
    assert set(testing.__all__) == set(testing._where())


def test_the_lazy_lookup_reads_each_form_of_import():
    source = """
import typing
from typing import TYPE_CHECKING

if typing.TYPE_CHECKING:
    from ._train.cost import TrainCost
    from ._analysis import calibrate as calibration
    from . import testing
if TYPE_CHECKING:
    from .x import a as b
def f():
    if TYPE_CHECKING:
        from .y import c
"""
    assert testing.type_checking_imports(source) == {
        "TrainCost": ("._train.cost", "TrainCost"),
        "calibration": ("._analysis", "calibrate"),
        "testing": (".", "testing"),
        "b": (".x", "a"),
    }
    assert testing.calibration.__name__ == "diffcost._analysis.calibrate"  # a submodule
    assert testing.train_cmd.__name__ == "diffcost.cli._train_cmd"


# -- the checker itself (so it cannot pass for want of looking) -----------------------------------

_SYNTHETIC = '''
import diffcost as dc
import diffcost
import diffcost.__main__
from diffcost import TrainCost
from diffcost.testing import smooth, gemm_flop
from diffcost.cli import app
from . import helper
from diffcost._core.smooth import EXACT
import diffcost._core.quick_compile as qc
from diffcost._core import smooth
from diffcost.cli._options import field_option


def f():
    from diffcost._serve import load


SCRIPT = """
    import jax
    from diffcost._analysis.sweep import run_sweep
    from diffcost import Sweep
"""
'''


def test_the_checker_finds_each_form_of_private_import():
    found = [(i.line, i.module) for i in private_imports(_SYNTHETIC, "synthetic.py")]
    assert found == [
        (9, "diffcost._core.smooth"),
        (10, "diffcost._core.quick_compile"),
        (11, "diffcost._core"),
        (12, "diffcost.cli._options"),
        (16, "diffcost._serve"),
        (21, "diffcost._analysis.sweep"),
    ]


def test_the_checker_honours_the_exceptions():
    found = [
        PrivateImport("tests/test_layers.py", 1, "diffcost.cli._options"),
        PrivateImport("tests/test_new.py", 2, "diffcost._core.smooth"),
    ]
    assert _outside_exceptions(found) == ["tests/test_new.py:2: imports diffcost._core.smooth"]


def test_the_checker_reads_the_tests():
    """The checkers' own fixtures are found (so an empty answer is not for want of looking)."""
    assert {i.file for i in collect_tests()} == {
        "tests/test_layers.py",
        "tests/test_public_imports.py",
    }


if __name__ == "__main__":
    found = collect_tests()
    for item in found:
        note = EXCEPTIONS.get(item.file, "NOT ALLOWED")
        print(f"{item.file}:{item.line}: {item.module}  ({note})")
    outside = _outside_exceptions(found)
    print(
        f"{len(found)} private imports in {len({i.file for i in found})} test files; "
        f"{len(outside)} outside the {len(EXCEPTIONS)} exceptions"
    )
    sys.exit(1 if outside else 0)
