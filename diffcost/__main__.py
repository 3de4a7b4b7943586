"""``python -m diffcost``: the command line (:func:`diffcost.cli.main`)."""

from .cli import main

if __name__ == "__main__":
    main()
