"""The ``diffcost`` Typer application, which every ``_*_cmd`` module adds its commands to."""

import typer

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
