"""Errors a user sees: every problem of an input at once, each naming file, key and reason."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One problem with an input: where (file, key) and why."""

    file: str
    key: str
    reason: str

    def __str__(self) -> str:
        where = f"{self.file}: {self.key}" if self.key else self.file
        return f"{where}: {self.reason}"


class SpecError(ValueError):
    """A spec, scenario or plan is invalid.  ``problems`` lists all of them."""

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        lines = [str(p) for p in self.problems]
        head = f"{len(lines)} problem(s) in the input:" if len(lines) > 1 else "invalid input:"
        super().__init__("\n".join([head, *("  - " + line for line in lines)]))


class Infeasible(ValueError):
    """A request that cannot be satisfied (the model does not fit, degrees do not divide, ...)."""


def _gb(x: float) -> str:
    return f"{x / 1e9:.1f} GB"


def memory_problem(total_bytes: float, capacity_bytes: float, what: str = "per chip") -> str | None:
    """'needs X, has Y: over by Z (P%)' or None when it fits."""
    if total_bytes <= capacity_bytes:
        return None
    over = total_bytes - capacity_bytes
    return (
        f"does not fit in memory: needs {_gb(total_bytes)} {what}, capacity "
        f"{_gb(capacity_bytes)}: over by {_gb(over)} ({over / capacity_bytes:.0%})"
    )
