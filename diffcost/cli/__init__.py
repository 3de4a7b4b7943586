"""The ``diffcost`` command line: ``diffcost train``, ``diffcost specs``, ...

Each command lives in a ``_*_cmd`` module that adds it to :data:`app` when imported.  ``main``
imports only the module of the command it was asked for (issue 38: importing every command
imported pandas, the sensitivity analysis and co-design, ~0.8 s of a warm ``diffcost train`` on
2 cores); ``--help``, ``--version``, an unknown name and ``from diffcost.cli import app`` import
them all, in the order ``--help`` lists them.
"""

import importlib
import os
import sys
from pathlib import Path
from typing import Any

#: The module that defines each top-level command, in the order ``--help`` lists them.
COMMANDS: dict[str, str] = {
    "codesign": "_codesign_cmd",
    "plan": "_plan_cmd",
    "sensitivity": "_sensitivity_cmd",
    "serve": "_serve_cmd",
    "specs": "_specs_cmd",
    "sweep": "_sweep_cmd",
    "sweep-merge": "_sweep_merge_cmd",
    "train": "_train_cmd",
    "ui": "_ui_cmd",
    "validate": "_validate_cmd",
    "calibrate": "_validate_cmd",
}


def _import_commands(names: list[str] | None = None) -> Any:
    """Import the modules of ``names`` (all commands when None) and return the application."""
    modules = dict.fromkeys(COMMANDS.values() if names is None else map(COMMANDS.get, names))
    for module in modules:
        importlib.import_module(f"{__name__}.{module}")
    from ._app import app

    return app


def __getattr__(name: str) -> Any:
    if name == "app":  # the whole application: every command registered
        return _import_commands()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Console-script entry point.  Compiled XLA programs are cached on disk between runs
    (``DIFFCOST_CACHE_DIR``, default ``~/.cache/diffcost/jax``; set it empty to disable)."""
    import jax

    from .._core import exported

    cache = os.environ.get("DIFFCOST_CACHE_DIR", str(Path.home() / ".cache" / "diffcost" / "jax"))
    if cache:
        jax.config.update("jax_compilation_cache_dir", cache)
        # every program, the small ones too: building specs and plans runs ~40 small eager
        # operations, each compiled once per process otherwise (warm `diffcost train`
        # 4.5 -> 4.0 s measured on 2 cores)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    exported.enable(cache or None)  # traced programs kept beside the compiled ones
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    app = _import_commands([command] if command in COMMANDS else None)
    app()
