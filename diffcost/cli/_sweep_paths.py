"""Where ``diffcost sweep`` writes each sweep's table and plots, with several files and shards.

Rules (also in ``diffcost sweep --help``):

* a ``--csv`` / ``--parquet`` / ``--plots`` flag overrides the sweep file's ``[output]`` path;
  ``{name}`` in a path is the sweep's name and ``{shard}`` the shard, ``I-of-N``;
* the sweep file's ``[output]`` paths are written only when asked (``--write``; ``write`` of
  :func:`output_paths`): a built-in sweep file names ``sweep-results/...``, which would otherwise
  land in whatever folder the command runs from;
* several sweep files: a flag path without ``{name}`` is a folder, each sweep writing
  ``<name>.csv`` / ``<name>.parquet`` / plots in ``<name>/`` inside it; a flag path ending in
  ``.csv`` or ``.parquet`` without ``{name}`` is ambiguous (an error); two sweeps that would
  write one path (the same name, or files naming one output) are an error;
* ``--shard``: a table path from the sweep file gets ``.shard-I-of-N`` before its suffix (the
  file cannot know the shard); a flag path is used as given (``{shard}`` formatted); plots need
  every point: ``--plots`` is refused (draw them with ``diffcost sweep-merge --plots``) and the
  file's plots are skipped.
"""

from pathlib import Path

from .._analysis.sweep import SweepFile
from .._core.errors import Problem, SpecError

_SUFFIX = {"csv": ".csv", "parquet": ".parquet"}


def _formatted(path: Path, name: str, shard: tuple[int, int] | None) -> Path:
    """``path`` with ``{name}`` and ``{shard}`` replaced."""
    text = str(path).replace("{name}", name)
    return Path(text.replace("{shard}", f"{shard[0]}-of-{shard[1]}" if shard else "all"))


def _one(
    key: str,
    flag: Path | None,
    spec: SweepFile,
    several: bool,
    shard: tuple[int, int] | None,
    write: bool = True,
) -> tuple[Path | None, Problem | None]:
    """The path of output ``key`` of one sweep (the file's only when ``write``), or the problem
    that stops it."""
    name = spec.sweep.name
    if flag is None:
        path = getattr(spec, key)
        if path is None or not write or (shard and key == "plots"):
            return None, None
        path = _formatted(path, name, shard)
        if shard:
            path = path.with_name(f"{path.stem}.shard-{shard[0]}-of-{shard[1]}{path.suffix}")
        return path, None
    if shard and key == "plots":
        reason = "plots need every point: draw them with diffcost sweep-merge --plots"
        return None, Problem("<flags>", key, reason)
    if several and "{name}" not in str(flag):
        if flag.suffix.lower() in _SUFFIX.values():
            reason = (
                f"{flag} names one file but several sweep files were given: give a folder "
                "(one <name>.csv each) or a path with {name}"
            )
            return None, Problem("<flags>", key, reason)
        flag = flag / (name if key == "plots" else name + _SUFFIX[key])
    return _formatted(flag, name, shard), None


def output_paths(
    specs: list[SweepFile],
    flags: dict[str, Path | None],
    shard: tuple[int, int] | None,
    write: bool = True,
) -> list[dict[str, Path | None]]:
    """Per sweep file, the path of each output (``csv``, ``parquet``, ``plots``; ``None``: not
    written) by the rules of the module docstring (``write``: the files' ``[output]`` paths
    too); every problem at once."""
    several = len(specs) > 1
    out: list[dict[str, Path | None]] = []
    problems: dict[tuple[str, str], Problem] = {}
    owner: dict[Path, str] = {}
    for spec in specs:
        paths: dict[str, Path | None] = {}
        for key, flag in flags.items():
            path, problem = _one(key, flag, spec, several, shard, write)
            if problem is not None:
                problems[(problem.key, problem.reason)] = problem
            paths[key] = path
            if path is not None and path in owner:
                reason = f"sweeps {owner[path]!r} and {spec.sweep.name!r} would both write {path}"
                problems[(key, reason)] = Problem("<flags>", key, reason)
            elif path is not None:
                owner[path] = spec.sweep.name
        out.append(paths)
    if problems:
        raise SpecError(list(problems.values()))
    return out


def unwritten(spec: SweepFile, flags: dict[str, Path | None]) -> dict[str, Path]:
    """The outputs a sweep file's ``[output]`` table names that no flag overrides: what
    ``--write`` would write (relative paths from the current folder)."""
    named = {key: getattr(spec, key) for key in flags if flags[key] is None}
    return {key: path for key, path in named.items() if path is not None}
