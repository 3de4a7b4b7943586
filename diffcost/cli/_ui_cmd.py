"""``diffcost ui``: the web explorer on this machine (:mod:`diffcost.cli._ui`)."""

import sys
from typing import Annotated

import typer

from ._app import app
from ._common import console, err_console, stage


@app.command()
def ui(
    host: Annotated[
        str, typer.Option(help="Address to listen on (this machine only by default).")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(help="Port to listen on (0: any free one).", min=0, max=65535)
    ] = 8765,
    warm: Annotated[
        bool, typer.Option(help="Compile every program before listening (first start: ~1-2 min).")
    ] = True,
) -> None:
    """Start the web explorer: training, serving, search and compare tabs; every number moves
    with the controls.  Prints its address; Ctrl-C stops it."""
    from ._ui.server import make_server  # imported here: only `diffcost ui` needs the server

    try:
        with stage("compiling the cost model's programs (cached for the next start)"):
            server = make_server(host, port, warm=warm)
    except OSError as err:
        err_console.print(f"error: cannot listen on {host}:{port}: {err.strerror or err}")
        raise typer.Exit(2) from None
    address = f"http://{server.server_address[0]}:{server.server_address[1]}/"
    console.print(f"diffcost ui: {address}", highlight=False)
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.explorer.jobs.close()
        server.server_close()
