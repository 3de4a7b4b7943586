"""Shared CLI plumbing: error handling, JSON output, number formatting."""

import contextlib
import json
import math
import sys
import threading
import time
from collections.abc import Callable, Iterator
from functools import wraps
from pathlib import Path
from typing import Annotated, Any

import equinox as eqx
import jax
import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from .._analysis.plans import load_scenario
from .._core.errors import Problem, SpecError
from .._inputs.catalogue import OUTSIDE_FACTOR, outside_catalogue
from .._inputs.checker import MAX_SI_VALUE
from .._inputs.loader import load_spec
from .._inputs.scenario import Scenario
from .._serve.plan import plan_kwargs

#: Plain output: ``markup=False``, so no text a user wrote (a name with ``[/x]``, a path)
#: is ever read as rich markup; emphasis is a ``style=`` on a whole line.
console = Console(width=None if sys.stdout.isatty() else 140, markup=False)

#: A flag without a shown default (``None``: not given, so a scenario's value stands).
Opt = lambda help_: typer.Option(help=help_, show_default=False)  # noqa: E731
#: ``--json``: one JSON object on stdout.
JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
#: ``--calibration``: the efficiency constants to use.
CalibrationOpt = Annotated[str, typer.Option(help="Calibration file or name.")]

EXIT_INFEASIBLE = 1
EXIT_BAD_INPUT = 2

#: Progress goes to stderr, so ``--json`` and piped stdout stay clean.
err_console = Console(stderr=True)


#: A stage that takes longer than this says so on stderr when stderr is not a terminal (a script,
#: ``--json`` piped to a file, CI logs): one line when it has run this long, one when it ends.
QUIET_STAGE_S = 1.0


def _os_stream(stream: Any) -> bool:
    """Whether ``stream`` is an operating-system file (a pipe, a file, a terminal) rather than an
    in-memory buffer (click's test runner, a caller's ``StringIO``): progress lines go only where
    a person or a log reads them, never into a buffer a caller parses."""
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    return True


@contextlib.contextmanager
def stage(text: str, enabled: bool = True) -> Iterator[None]:
    """Name the stage of long work (compiling, searching, fitting) on stderr while it runs.

    On a terminal: a spinner (rich's ``status``, transient: it leaves no line behind).
    Otherwise (issue 44: long runs visible when scripted, ``--json`` included): nothing for a
    stage shorter than :data:`QUIET_STAGE_S`; a longer one prints ``diffcost: <stage> ...``
    once it has run that long and ``diffcost: <stage>: done in N s`` when it ends (only where
    stderr is an operating-system stream: :func:`_os_stream`).  stdout is never written.
    ``enabled`` false: nothing at all."""
    if not enabled:
        yield
        return
    if err_console.is_terminal:
        with err_console.status(text, spinner="dots"):
            yield
        return
    if not _os_stream(sys.stderr):  # an in-memory stderr (a caller capturing the output)
        yield
        return
    start = time.monotonic()
    said = threading.Event()

    def announce() -> None:
        said.set()
        sys.stderr.write(f"diffcost: {text} ...\n")
        sys.stderr.flush()

    timer = threading.Timer(QUIET_STAGE_S, announce)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        if said.is_set():
            sys.stderr.write(f"diffcost: {text}: done in {time.monotonic() - start:.1f} s\n")
            sys.stderr.flush()


def friendly_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn input errors into a clear message and exit status 2 (no traceback)."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SpecError as err:
            problems = [_as_flag(p) for p in err.problems]
            # plain text: no markup engine may eat bracketed names ([/x]) and no console may
            # wrap a line inside a key name
            sys.stderr.write(f"error: {SpecError(problems)}\n")
            if kwargs.get("json_out"):
                # --json: a script reads one JSON object on stdout, also for a refusal
                print_json({"error": "invalid input", "problems": [vars(p) for p in problems]})
            raise typer.Exit(EXIT_BAD_INPUT) from None

    return wrapper


def _as_flag(problem: Problem) -> Problem:
    """A problem with a function argument (``<arguments>: ttft_slo_ms``) as the command line
    says it (``command line: --ttft-slo-ms``)."""
    if problem.file not in ("<arguments>", "<flags>"):
        return problem
    flags = [k if k.startswith("-") else "--" + k.replace("_", "-") for k in problem.key.split("/")]
    return Problem("command line", "/".join(flags), problem.reason)


def to_python(tree: Any) -> Any:
    """A module or pytree of scalar arrays -> nested dict of floats (for JSON)."""
    if isinstance(tree, eqx.Module):
        return {k: to_python(getattr(tree, k)) for k in tree.__dataclass_fields__}
    if isinstance(tree, dict):
        return {k: to_python(v) for k, v in tree.items()}
    if isinstance(tree, (jax.Array, np.ndarray, np.generic)):
        arr = np.asarray(tree)
        return float(arr) if arr.ndim == 0 else arr.tolist()
    return tree


def merge_inputs(
    kind: str,
    scenario: str | None,
    default_scenario: str,
    refs_flags: dict[str, Any],
    flags: dict[str, Any],
    command: str | None = None,
) -> tuple[dict[str, Any], dict[str, Any], str | None, Scenario | None]:
    """Scenario file (or the default when no model is given) overridden by command-line flags.

    Returns the references (model, system or chip, chips), the plan values, the scenario used
    and its contents (read once: the caller needs its other keys, e.g. ``collective``).
    ``refs_flags`` holds the ``model``, ``system``, ``chip`` and ``chips`` flags; ``flags`` the
    plan flags (``None``: not given).
    """
    base: dict[str, Any] = {}
    refs: dict[str, Any] = {"model": None, "system": None, "chip": None, "chips": None}
    sc = None
    if scenario is None and refs_flags["model"] is None:
        scenario = default_scenario
    if scenario is not None:
        sc = load_scenario(scenario)
        if sc.kind != kind:
            reason = f"is {sc.kind!r}; diffcost {command or kind} needs {kind!r}"
            raise SpecError([Problem(sc.path, "kind", reason)])
        base = dict(sc.plan) if kind == "train" else plan_kwargs(sc.plan)
        refs = {"model": sc.model, "system": sc.system, "chip": sc.chip, "chips": sc.chips}
    if refs_flags["system"] is not None or refs_flags["chip"] is not None:
        refs["system"], refs["chip"] = refs_flags["system"], refs_flags["chip"]
    for key in ("model", "chips"):
        if refs_flags[key] is not None:
            refs[key] = refs_flags[key]
    if refs["system"] is None and refs["chip"] is None:
        refs["system"] = "dgx-h100"
    return refs, {**base, **{k: v for k, v in flags.items() if v is not None}}, scenario, sc


def spec_infos(refs: dict[str, Any]) -> tuple[Any, Any]:
    """Identity of the model and of the system (or chip) a command ran on."""
    model_info = load_spec("model", refs["model"]).info
    kind = "system" if refs["system"] else "chip"
    return model_info, load_spec(kind, refs["system"] or refs["chip"]).info


def prediction_json(
    out: Any,
    refs: dict[str, Any],
    chips: dict[str, int],
    values: dict[str, Any],
    problems: list[str],
    **extra: Any,
) -> dict[str, Any]:
    """The ``--json`` object of a prediction: identities, plan, every output in SI units,
    the memory breakdown in bytes, feasibility and its reasons."""
    model_info, hw_info = spec_infos(refs)
    result = to_python(out)
    memory = result.pop("memory")
    return {
        "model": model_info.name,
        "system": hw_info.name,
        **chips,
        "plan": values,
        **result,
        "memory_bytes": memory,
        "fits": bool(out.fits()),
        "feasible": not problems,
        "problems": problems,
        **extra,
    }


class NonFiniteOutput(RuntimeError):
    """A NaN or an infinity reached the JSON output: a bug (issue 39).  Every value without a
    bound is written as ``null`` with its reason before printing; standard JSON has no NaN or
    Infinity, and a script reading ``NaN`` as a number reads a wrong answer."""


def non_finite_paths(obj: Any, path: str = "") -> list[str]:
    """Where ``obj`` (nested dicts and lists) holds a NaN or an infinite float:
    ``load.ttft_p99_s = nan``."""
    if isinstance(obj, float):
        return [] if math.isfinite(obj) else [f"{path or '<top>'} = {obj}"]
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in non_finite_paths(v, f"{path}.{k}".strip("."))]
    if isinstance(obj, (list, tuple)):
        return [p for i, v in enumerate(obj) for p in non_finite_paths(v, f"{path}[{i}]")]
    return []


def print_json(obj: dict[str, Any]) -> None:
    """One JSON object on stdout, standard JSON only (``allow_nan=False``).

    Raises:
        NonFiniteOutput: a NaN or infinite value, named by its path (a bug: a value without a
            bound must be ``null`` with its reason by then).
    """
    try:
        text = json.dumps(obj, indent=2, sort_keys=False, allow_nan=False)
    except ValueError as err:
        bad = ", ".join(non_finite_paths(obj)) or str(err)
        raise NonFiniteOutput(
            f"not printed: the JSON output holds non-finite numbers ({bad}); this is a bug in "
            "diffcost, not in the input"
        ) from None
    sys.stdout.write(text + "\n")


def fmt_time(seconds: float) -> str:
    if seconds >= 1.0:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.1f} us"


def fmt_bytes(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


def plan_line(values: dict[str, Any]) -> str:
    """``tp=8, pp=1, ...``: the plan as given."""
    return ", ".join(f"{k}={v}" for k, v in values.items())


def print_problems(problems: list[str]) -> None:
    """Why a plan is infeasible, or that it is feasible."""
    if problems:
        console.print("infeasible:", style="bold red")
        for p in problems:
            console.print(f"  - {p}", highlight=False)
    else:
        console.print("feasible: fits in memory, degrees divide.", style="green")


def kv_table(
    title: str, rows: list[tuple[str, str]], intervals: dict[str, str] | None = None
) -> Table:
    """A two-column table of quantities; with ``intervals`` (quantity -> text) a third column
    holds the 80% interval of the quantities that have one."""
    table = Table(title=title, show_header=intervals is not None, title_justify="left")
    table.add_column("quantity", style="bold")
    table.add_column("value", justify="right")
    if intervals is not None:
        table.add_column("p10 - p90", justify="right")
    for key, value in rows:
        table.add_row(key, value, *([intervals.get(key, "")] if intervals is not None else []))
    return table


def interval_text(iv: dict[str, Any] | None, name: str, fmt: Callable[[float], str]) -> str:
    """``"p10 - p90"`` of output ``name`` of an interval object, formatted by ``fmt`` (empty
    where it has none, or none wider than the value: no price, an infeasible plan)."""
    if iv is None or f"{name}_p10" not in iv or iv[f"{name}_p10"] == iv[f"{name}_p90"]:
        return ""
    return f"{fmt(iv[f'{name}_p10'])} - {fmt(iv[f'{name}_p90'])}"


#: Longest file or folder name most file systems accept (ext4, XFS, APFS, NTFS: 255).
NAME_MAX_BYTES = 255

#: File types a plot may be written as (matplotlib's Agg, SVG and PDF backends).
PLOT_SUFFIXES = (".png", ".svg", ".pdf")


def output_problems(
    paths: dict[str, Path | str | None], folders: tuple[str, ...] = (), plots: tuple[str, ...] = ()
) -> list[Problem]:
    """What stops each output path from being written, before any work is done.

    ``paths``: option name -> path (``None``: not asked for); a name in ``folders`` is a folder
    to create, any other a file to write (an existing file is overwritten); a name in
    ``plots`` is an image whose suffix must be one of :data:`PLOT_SUFFIXES`.  Every existing
    ancestor of a path must be a folder.
    """
    problems = []
    for key, raw in paths.items():
        if raw is None:
            continue
        path = Path(raw)
        long = [part for part in path.parts if len(part.encode()) > NAME_MAX_BYTES]
        if long:
            reason = f"a name in {str(path)[:60]}... is longer than {NAME_MAX_BYTES} bytes"
            problems.append(Problem("<arguments>", key, reason))
            continue
        ancestor = next((a for a in path.parents if a.exists()), None)
        if ancestor is not None and not ancestor.is_dir():
            problems.append(Problem("<arguments>", key, f"{ancestor} is a file, not a folder"))
        elif key in folders and path.exists() and not path.is_dir():
            problems.append(Problem("<arguments>", key, f"{path} is a file, not a folder"))
        elif key not in folders and path.is_dir():
            problems.append(Problem("<arguments>", key, f"{path} is a folder; give a file name"))
        elif key in plots and path.suffix.lower() not in PLOT_SUFFIXES:
            reason = f"{path} must end in one of {', '.join(PLOT_SUFFIXES)}"
            problems.append(Problem("<arguments>", key, reason))
    return problems


def check_outputs(
    paths: dict[str, Path | str | None], folders: tuple[str, ...] = (), plots: tuple[str, ...] = ()
) -> None:
    """Raise every :func:`output_problems` at once (exit 2 through :func:`friendly_errors`)."""
    problems = output_problems(paths, folders, plots)
    if problems:
        raise SpecError(problems)


def positive_problems(
    values: dict[str, float | None], unit: str, why: str, to_si: float = 1.0
) -> list[Problem]:
    """Each given number (``None``: not given) must be positive, finite and, in SI units
    (``value * to_si``), at most the spec loader's
    :data:`~diffcost._inputs.checker.MAX_SI_VALUE`; ``unit`` names its unit in the message
    and ``why`` says what 0 or less would mean.  Every problem at once."""
    problems = []
    for key, value in values.items():
        if value is None:
            continue
        if not math.isfinite(value):
            reason = f"must be a positive number of {unit}, got {value!r}: not a finite number"
        elif value <= 0:
            reason = f"must be a positive number of {unit}, got {value!r}: {why}"
        elif value * to_si > MAX_SI_VALUE:
            reason = (
                f"{value:g} {unit} is beyond any physical input (at most {MAX_SI_VALUE:.0e} in "
                "SI units; larger values overflow float32, in which the model computes)"
            )
        else:
            continue
        problems.append(Problem("<arguments>", key, reason))
    return problems


def cv_problems(values: dict[str, float]) -> list[Problem]:
    """Each coefficient of variation (of arrival gaps, of prompt lengths) must be a finite
    number >= 0 (a standard deviation over a mean: 0 is a constant, a negative one has no
    meaning).  Every problem at once."""
    return [
        Problem("<arguments>", key, f"must be a non-negative number, got {value!r}")
        for key, value in values.items()
        if not (math.isfinite(value) and value >= 0)
    ]


#: What a latency limit of 0 or less would mean (:func:`positive_problems`).
NO_LIMIT = "no latency can meet a limit of 0 or less; leave the flag out for no limit"


def check_finite(out: Any, job: str, system: Any, model: Any, inputs: str = "") -> None:
    """Refuse to print a prediction with a NaN or infinite value as an answer.

    The loader keeps every input finite and within [1e-15, 1e21] in SI units, so a non-finite
    output means the inputs combine beyond what the float32 model represents (an extreme model
    shape against an extreme chip): raised as an input error naming every such output and the
    inputs that lie far outside the built-in catalogue
    (:func:`diffcost._inputs.catalogue.outside_catalogue`); ``inputs`` names the files read.
    """
    flat = to_python(out)
    bad = {
        f"{prefix}{key}": value
        for prefix, table in (("", flat), ("memory.", flat.get("memory", {})))
        for key, value in table.items()
        if isinstance(value, float) and not np.isfinite(value)
    }
    if bad:
        names = ", ".join(f"{k} = {v}" for k, v in bad.items())
        extreme = outside_catalogue(system, model)
        cause = (
            f"inputs more than {OUTSIDE_FACTOR:.0f}x outside the built-in range: "
            + "; ".join(extreme)
            if extreme
            else "no chip or model number is far outside the built-in range: check the plan "
            "(sequence length, batch)"
        )
        reason = (
            f"the {job} prediction is not finite ({names}): the model, chip and plan combine "
            f"beyond what the model represents in float32; {cause}"
            + (f" (inputs: {inputs})" if inputs else "")
        )
        raise SpecError([Problem("<prediction>", "prediction", reason)])


def naming_flag(flag: str, err: SpecError, given: list[str]) -> SpecError:
    """``err`` with each problem about a value given to ``flag`` itself (a file not found, an
    unknown built-in name: its ``file`` is one of the ``given`` values or it quotes one) named
    as that flag, so the message says which option was wrong; problems inside a file that
    was found keep naming that file."""

    def about_flag(p: Problem) -> bool:
        return p.file in given or any(f"'{g}'" in p.reason for g in given)

    return SpecError(
        [
            Problem(
                "command line",
                flag,
                p.reason if p.file.startswith("<") else f"{p.file}: {p.reason}",
            )
            if about_flag(p)
            else p
            for p in err.problems
        ]
    )
