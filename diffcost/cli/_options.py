"""Command-line options declared once and shared between commands.

Typer reads a command's parameters from its signature, so a shared list of options is written
as an *option group*: a function whose signature is nothing but declarations (``Annotated``
aliases with their defaults).  :func:`with_options` splices the groups into a command's
signature where the command names them, and hands the command one ``dict`` per group (keys in
declaration order, ``None``: not given).
"""

import inspect
from collections.abc import Callable, Sequence
from functools import cache, wraps
from pathlib import Path
from typing import Annotated, Any

import typer

from .._core.options import PlanField
from .._serve.plan import SERVE_FIELDS
from .._train.plan import TRAIN_FIELDS
from ._common import Opt

#: The values of one option group, by parameter name (``None``: not given).
Flags = dict[str, Any]

# --- model and hardware references --------------------------------------------------------
Model = Annotated[str | None, Opt("Built-in model name, model TOML or HF config.json.")]
System = Annotated[str | None, Opt("Built-in system name or system TOML.")]
Chip = Annotated[str | None, Opt("Built-in chip name or chip TOML.")]
Chips = Annotated[int | None, Opt("Number of chips.")]
SystemChips = Annotated[int | None, Opt("Number of chips in the system.")]
Collective = Annotated[
    str | None,
    Opt(
        "Collective algorithm of every all-reduce and all-gather: fastest (the default: on a "
        "GPU the faster of NCCL's choice and the serving engines' one-shot/two-shot kernels, "
        "by message size), hierarchical, ring, tree, nvls (only on a system with in-network "
        "reduction), nccl, custom, one_shot or two_shot."
    ),
]


# --- training plan ------------------------------------------------------------------------
# Derived from the plan's field declarations (:data:`diffcost._train.plan.TRAIN_FIELDS`): each
# field's flag, type and help text are written once, there.
@cache
def field_option(field: PlanField) -> inspect.Parameter:
    """The command-line option of a plan field: keyword ``field.name``, type ``T | None``
    (``None``: not given, the scenario's or the plan's default applies), its declared flag
    spelling and help text (:meth:`~diffcost._core.options.PlanField.cli_flag`,
    :meth:`~diffcost._core.options.PlanField.cli_help`), no default shown."""
    flag = field.cli_flag()
    assert flag is not None, f"{field.name} has no command-line option"
    decls = [flag] if field.flag or field.kind == "bool" else []
    option = typer.Option(*decls, help=field.cli_help(), show_default=False)
    kind = field.cli_type()
    annotation = Annotated[kind | None, option]  # pyright: ignore[reportInvalidTypeForm]
    return inspect.Parameter(
        field.name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation
    )


def option_group(
    fields: Sequence[PlanField], names: Sequence[str] | None = None, doc: str = ""
) -> Callable[..., None]:
    """An option group (see :func:`with_options`) of plan fields: every field with a
    command-line option, in declaration order, or the fields ``names`` in that order."""
    table = {f.name: f for f in fields}
    chosen = [table[n] for n in names] if names is not None else list(fields)
    params = [field_option(f) for f in chosen if f.cli_flag() is not None]

    def group(**_: Any) -> None:
        pass

    group.__signature__ = inspect.Signature(params)  # pyright: ignore[reportFunctionMemberAccess]
    group.__doc__ = doc
    return group


#: Option group: every training plan field that has a command-line option (``diffcost train``).
train_plan_flags = option_group(TRAIN_FIELDS, doc="Option group: the training plan.")

#: Option group: the ``--optimizer`` option alone (``diffcost sensitivity train``).
train_optimizer_flag = option_group(
    TRAIN_FIELDS, names=("optimizer",), doc="Option group: the optimizer."
)

#: Option group: the training plan's degrees, batch and recomputation (``diffcost sensitivity``).
train_parallel_flags = option_group(
    TRAIN_FIELDS,
    names=(
        *("tp", "pp", "dp", "cp", "ep", "expert_tp", "micro_batch", "global_batch", "seq_len"),
        *("virtual_stages", "recompute"),
    ),
    doc="Option group: the training plan's degrees, batch and recomputation.",
)

# --- sensitivity report -------------------------------------------------------------------
Metric = Annotated[
    str | None, Opt("Metric to rank by (default: step_time_s for train, tpot_s for serve).")
]
Group = Annotated[str, typer.Option(help="Parameters shown: hardware | model | efficiency | all.")]
Top = Annotated[int, typer.Option(help="Rows to show.", min=1)]
Tornado = Annotated[
    Path | None,
    Opt("Write a tornado chart (exact change for x0.5 and x2 of each parameter) to this PNG."),
]


def spec_refs(
    model: Model = None, system: System = None, chip: Chip = None, collective: Collective = None
) -> None:
    """Option group: which model, which system or chip, and its collective algorithm
    (``--chips`` is declared apart: its help differs between jobs)."""


#: Option group: every serving plan field that has a command-line option (``diffcost serve``).
serve_plan_flags = option_group(SERVE_FIELDS, doc="Option group: the serving plan.")

#: Option group: the serving instance, its batch, the request and the weight format.
serve_shape_flags = option_group(
    SERVE_FIELDS,
    names=("tp", "pp", "replicas", "batch", "input_len", "output_len", "weight_format"),
    doc="Option group: the serving instance, its batch, the request and the weight format.",
)

#: Option group: the batching mode of a serving plan.
serve_mode_flags = option_group(
    SERVE_FIELDS,
    names=("mode", "prefill_chunk"),
    doc="Option group: the batching mode of a serving plan.",
)


def report_flags(
    metric: Metric = None, group: Group = "all", top: Top = 15, tornado: Tornado = None
) -> None:
    """Option group: what a sensitivity report shows."""


def with_options(
    **groups: Callable[..., None],
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Splice option groups into a command's signature.

    Each keyword names a (keyword-only, default-less) parameter of the decorated command; in the
    command-line signature that parameter is replaced by the group's parameters, and at call time
    the command receives them as one ``dict`` under that name.  The command keeps its own
    parameters, in order.  Every parameter becomes keyword-only (Typer passes them by name).
    """

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        own = inspect.signature(command)
        members = {name: inspect.signature(g).parameters for name, g in groups.items()}
        params: list[inspect.Parameter] = []
        for name, param in own.parameters.items():
            params.extend(members[name].values() if name in members else [param])
        params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params]

        @wraps(command)
        def wrapper(**kwargs: Any) -> Any:
            for name, group in members.items():
                kwargs[name] = {key: kwargs.pop(key) for key in group}
            return command(**kwargs)

        # Typer reads both: the parameters from the signature, their types from the annotations.
        # (``__signature__`` is a plain function attribute that ``inspect.signature`` honours.)
        wrapper.__signature__ = own.replace(parameters=params)  # pyright: ignore[reportAttributeAccessIssue]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return wrapper

    return decorate
