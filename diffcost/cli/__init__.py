"""The ``diffcost`` command line: ``diffcost train``, ``diffcost specs``, ..."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="diffcost",
    help="Predict (and differentiate) what training and serving large models costs on real hardware.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

from . import _specs_cmd, _train_cmd  # noqa: E402,F401  (register subcommands)


def main() -> None:
    """Console-script entry point."""
    app()
