"""What a running sweep shows on stderr: a spinner naming the stage (compiling, evaluating,
building the table) and, while evaluating, a bar of the points done and their rate."""

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass


@dataclass
class Stages:
    """Handle of a running display: ``stage(name)`` names what runs now (an indeterminate
    spinner), ``evaluating(total)`` starts the bar, ``advance(points)`` moves it."""

    stage: Callable[[str], None]
    evaluating: Callable[[int], None]
    advance: Callable[[int], None]


#: The handle of a sweep that shows nothing.
QUIET = Stages(lambda s: None, lambda n: None, lambda k: None)


@contextlib.contextmanager
def sweep_progress(enabled: bool, name: str, devices: int) -> Iterator[Stages]:
    """A rich spinner and progress bar on stderr labelled ``name (devices)``, or :data:`QUIET`.

    The rate column is the points evaluated by this run (this shard's points, all processes'
    devices together) per second of evaluation, as rich measures it over recent updates."""
    if not enabled:
        yield QUIET
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    class Rate(ProgressColumn):
        """Points per second (blank before the bar starts)."""

        def render(self, task):
            return Text(f"{task.speed or 0:,.0f} points/s" if task.total else "", style="cyan")

    progress = Progress(
        SpinnerColumn(),
        # the description holds the sweep's name (user text): never parsed as markup
        TextColumn("{task.description}", style="bold", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        Rate(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
    )
    label = f"{name} ({devices} device{'s' * (devices > 1)})"
    task = progress.add_task(f"{label}: starting", total=None)

    def evaluating(total: int) -> None:
        progress.reset(task, total=total, description=f"{label}: evaluating")

    with progress:
        yield Stages(
            lambda s: progress.update(task, description=f"{label}: {s}"),
            evaluating,
            lambda k: progress.advance(task, k),
        )
