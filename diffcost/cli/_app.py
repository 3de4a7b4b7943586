"""The ``diffcost`` Typer application, which every ``_*_cmd`` module adds its commands to."""

from typing import Annotated

import typer

from .._core.version import VERSION

app = typer.Typer(
    name="diffcost",
    help="Predict (and differentiate) what training and serving large models costs on real "
    "hardware.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # plain-text usage errors and help: no markup engine may eat bracketed text and no box
    # drawing in messages a script or a log reads
    rich_markup_mode=None,
)


def _print_version(value: bool) -> bool:
    if value:
        typer.echo(f"diffcost {VERSION}")
        raise typer.Exit()
    return value  # click passes the callback's result on as the option's value


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the installed version and exit.",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """Predict (and differentiate) what training and serving large models costs on real
    hardware."""
