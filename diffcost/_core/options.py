"""Typed options and plan field tables.

Options that used to travel as free strings (objective, recomputation policy, ZeRO stage,
number format, serving mode, optimizer) are enumerations here.  A library entry point accepts
the member or its plain value and converts it once, at the boundary, with :func:`coerce`; a bad
value raises the same :class:`~diffcost._core.errors.SpecError` the CLI shows (file or
``<arguments>``, key, reason with the valid choices).  ``StrEnum`` members are ``str``
instances, so a coerced option compares, hashes and serialises (JSON) as its value.

:class:`PlanField` describes one field of a plan (name, kind, default, doc); each job keeps one
table of them (:data:`diffcost._train.plan.TRAIN_FIELDS`, :data:`diffcost._serve.plan.SERVE_FIELDS`)
from which the constructor's checks, the scenario schema, the sweep encoding and the search's
JSON rows are derived.
"""

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import jax
import numpy as np
from jax import dtypes
from jaxtyping import Array, Float

from .errors import Problem, SpecError


class Format(enum.StrEnum):
    """Number formats, in the order of every per-format vector (``diffcost.FORMATS``)."""

    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    INT8 = "int8"
    FP4 = "fp4"
    INT4 = "int4"


class TrainPrecision(enum.StrEnum):
    """GEMM formats training supports: fp32/tf32 (Ampere+ tensor cores), bf16/fp16 mixed
    precision (Micikevicius et al. 2018), fp8 (Transformer Engine, Micikevicius et al. 2022).
    Integer and 4-bit formats are inference formats; no framework the model is calibrated
    against trains in them.  Positions equal those of :class:`Format`."""

    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"


class Recompute(enum.StrEnum):
    """Activation recomputation (Korthikanti et al. 2022): none, selective, full."""

    NONE = "none"
    SELECTIVE = "selective"
    FULL = "full"


class ZeroStage(enum.IntEnum):
    """ZeRO stage (Rajbhandari et al. 2020): 0 none, 1 optimizer, 2 +gradients, 3 +weights."""

    NONE = 0
    OPTIMIZER = 1
    GRADIENTS = 2
    WEIGHTS = 3


class Optimizer(enum.StrEnum):
    """Optimizer and whether it keeps fp32 master weights (sets its state bytes per param)."""

    ADAM = "adam"
    ADAM_NO_MASTER = "adam_no_master"
    SGD = "sgd"
    SGD_NO_MASTER = "sgd_no_master"
    #: Adam with fp32 moments that keeps only the 16-bit remainders of the fp32 master weights
    #: beside the bf16 weights (Apex DistributedFusedAdam ``store_param_remainders``, which NeMo
    #: selects for bf16 O2 training: megatron_base_model.py ``setup_optimization``).
    ADAM_PARAM_REMAINDERS = "adam_param_remainders"
    #: Adam with bf16 moments updating the bf16 weights in place, no master copy (Apex
    #: DistributedFusedAdam ``dtype=bf16, store_params=False``: NeMo optim.dtype = bf16).
    ADAM_BF16 = "adam_bf16"


class ServeMode(enum.StrEnum):
    """Batching of a serving instance: static batches or continuous (in-flight) batching."""

    STATIC = "static"
    CONTINUOUS = "continuous"


class TrainObjective(enum.StrEnum):
    """What a training search minimises: seconds per step, USD per token, joules per token, or
    the upper (p90) quantile of seconds per step (risk-aware: the calibrated constants'
    posterior and the model discrepancy of the plan's regime, :mod:`diffcost._analysis.
    uncertainty`)."""

    TIME = "time"
    COST = "cost"
    ENERGY = "energy"
    P90 = "p90"


class ServeObjective(enum.StrEnum):
    """What a serving search minimises: chip-seconds per output token (throughput), request
    latency, USD per million tokens, the time per output token (TPOT, its median prediction)
    or its upper (p90) quantile (risk-aware, :mod:`diffcost._analysis.uncertainty`), or chips
    per request/s of goodput (the largest arrival rate meeting p99 TTFT and TPOT limits under
    load, :func:`diffcost._serve.load.goodput_qps`)."""

    THROUGHPUT = "throughput"
    LATENCY = "latency"
    COST = "cost"
    TPOT = "tpot"
    P90 = "p90"
    GOODPUT = "goodput"


E = TypeVar("E", bound=enum.Enum)


def values(kind: type[enum.Enum]) -> tuple[Any, ...]:
    """The plain values of an option kind, in declaration order."""
    return tuple(member.value for member in kind)


def _lookup(kind: type[E], value: object) -> E | None:
    if isinstance(value, bool):  # True == 1 would otherwise pass as ZeRO stage 1
        return None
    try:
        return kind(value)
    except (ValueError, TypeError):
        return None


def coerce(kind: type[E], value: object, key: str, source: str = "<arguments>") -> E:
    """``value`` (a member or its plain value) as a member of ``kind``.

    Raises:
        SpecError: ``source: key: must be one of a, b, c; got 'x'``.
    """
    member = _lookup(kind, value)
    if member is None:
        raise SpecError([choice_problem(kind, value, key, source)])
    return member


def coerce_all(kind: type[E], items: Any, key: str, source: str = "<arguments>") -> tuple[E, ...]:
    """A non-empty sequence of options, each coerced (the error lists every bad entry)."""
    seq = (items,) if isinstance(items, (str, int)) else tuple(items)
    bad = [v for v in seq if _lookup(kind, v) is None]
    if bad or not seq:
        choices = ", ".join(map(str, values(kind)))
        got = ", ".join(map(repr, bad)) if bad else "nothing"
        raise SpecError([Problem(source, key, f"each must be one of {choices}; got {got}")])
    return tuple(kind(v) for v in seq)


def choice_problem(kind: type[enum.Enum], value: object, key: str, source: str) -> Problem:
    """The problem of a value that is not one of ``kind``'s choices."""
    return Problem(
        source, key, f"must be one of {', '.join(map(str, values(kind)))}; got {value!r}"
    )


# --- plan field tables ---------------------------------------------------------------------------
Kind = Literal["degree", "count", "bool", "categorical", "number"]


#: Largest degree or count of a plan: 2**31 - 1.  No plan field counts more than a billion
#: (chips in a cluster ~1e5-1e6, a context ~1e7 tokens, a global batch ~1e5 sequences); a
#: larger one is a typo or a fuzzed value, and past 2**53 it is not even a float exactly.
MAX_COUNT = 2**31 - 1
MAX_COUNT_WHY = "no cluster, batch or context counts more"


@dataclass(frozen=True)
class Choices:
    """The search axis of a categorical or bool plan field: a search tries each of its values
    and relaxes it as a softmax blend of one-hot weights over the choices (a bool field: the
    blend of 0 and 1), exact at one-hot weights.

    Attributes:
        values: the values a search tries when its space does not list them (default: every
            choice of a categorical field; ``False, True`` for a bool field).  A search space
            with an attribute of the field's name (``TrainSearchSpace.recompute``) lists them.
        listed_as: the name of that attribute where it is not the field's
            (``ServeSearchSpace.weight_formats``).
    """

    values: tuple[Any, ...] = ()
    listed_as: str = ""

    def of(self, field: "PlanField", space: object) -> tuple[Any, ...]:
        """The values ``space`` lets the search try for ``field``."""
        given = getattr(space, self.listed_as or field.name, None)
        if given is not None:
            return tuple(given)
        if self.values:
            return self.values
        return field.options() if field.kind == "categorical" else (False, True)


def searched_choices(fields: "tuple[PlanField, ...]") -> "tuple[PlanField, ...]":
    """The fields a search varies as choices (declared ``axis=Choices()``), in the order of the
    search's columns and relaxed weights: categorical fields, then bool fields, each in
    declaration order."""
    chosen = [f for f in fields if isinstance(f.axis, Choices)]
    return tuple(sorted(chosen, key=lambda f: f.kind == "bool"))


@dataclass(frozen=True)
class Degrees:
    """The search axis of a parallel degree or count: a search tries the integers ``1 .. top``
    (``top``: the smallest of the sizes named in ``upto``), or the powers of two up to it, that
    divide the size named ``divides`` and pass ``keep``; relaxed as a log2 variable, exact at
    the integers the exact evaluation rounds to.

    Attributes:
        upto: names of the sizes bounding the value: ``chips`` (the largest chip count of the
            space), an attribute of the search space (``max_cp``) or of the model (``layers``).
        divides: the name of a size the value must divide (``""``: none).
        powers_of_two: only powers of two (1 always).
        keep: a further test ``keep(model, space, value)`` (a framework rule on the model).
        grid: the values tried up to ``top`` (``grid(top)``), instead of every integer or power
            of two (a serving batch: every batch to 256, then ~6% steps).
    """

    upto: tuple[str, ...] = ("chips",)
    divides: str = ""
    powers_of_two: bool = False
    keep: Callable[[Any, Any, int], bool] | None = None
    grid: Callable[[int], Iterable[float]] | None = None

    def of(self, model: object, space: object, size: Callable[[str], int]) -> tuple[float, ...]:
        """The values a search tries (``size(name)``: the size a name in ``upto`` or
        ``divides`` stands for)."""
        top = min(size(name) for name in self.upto)
        if self.grid is not None:
            tried = list(self.grid(top))
        elif self.powers_of_two:
            tried = [1] + [2**k for k in range(1, top.bit_length() + 1) if 2**k <= top]
        else:
            tried = list(range(1, top + 1))
        if self.divides:
            tried = [d for d in tried if size(self.divides) % d == 0]
        if self.keep is not None:
            tried = [d for d in tried if self.keep(model, space, d)]
        return tuple(float(d) for d in tried)


def searched_degrees(fields: "tuple[PlanField, ...]") -> "tuple[PlanField, ...]":
    """The fields a search varies as degrees (declared ``axis=Degrees()``), in declaration
    order: the order of the search's columns and relaxed log2 variables."""
    return tuple(f for f in fields if isinstance(f.axis, Degrees))


@dataclass(frozen=True)
class PlanField:
    """One field of a plan.

    Attributes:
        name: keyword of the plan constructor (and key of scenario, sweep and JSON rows).
        kind: ``degree`` (parallel degree, positive integer), ``count`` (integer >= ``minimum``),
            ``bool``, ``categorical`` (one of ``choices``, an enumeration) or ``number``.
        default: the constructor's default (``None``: derived from other fields).
        doc: meaning and unit.
        choices: the option kind of a categorical field.
        minimum: smallest allowed count.
        check: a number field's range test; reason: its message (``{value!r}`` is filled in).
        derived: the sweep derives this field per point when it is not given.
        unit: the unit of a number or count (``sequences``, ``tokens``, ``bytes``; empty for a
            degree, a flag or a choice).
        help: the ``--help`` text (default: derived, :meth:`cli_help`).
        flag: the command-line spelling (default ``""``: derived, :meth:`cli_flag`; ``None``:
            no command-line option).
        launch: ``(framework, flag)`` pairs: the field's flag in a launcher's command line
            (Megatron-LM ``--tensor-model-parallel-size``, vLLM ``--tensor-parallel-size``).
        short: the column heading of the field in ``diffcost plan``'s table (default: the name).
        axis: how a search varies the field: :class:`Choices` (tried over its values, relaxed
            as a one-hot blend; :func:`searched_choices`), :class:`Degrees` (integers tried
            over their allowed values, relaxed in log2; :func:`searched_degrees`), or ``None``
            (not searched: fixed by the search space or derived).

    The command-line options of ``diffcost train`` and ``diffcost serve`` are derived from
    these declarations (:func:`diffcost.cli._options.option_group`).
    """

    name: str
    kind: Kind
    default: Any
    doc: str
    choices: type[enum.Enum] | None = None
    minimum: int = 1
    check: Callable[[float], bool] | None = None
    reason: str = ""
    derived: bool = False
    unit: str = ""
    help: str = ""
    flag: str | None = ""
    launch: tuple[tuple[str, str], ...] = ()
    short: str = ""
    axis: Choices | Degrees | None = None

    def cli_help(self) -> str:
        """The ``--help`` text of the field's option: ``help``, else a categorical field's
        choices (``a | b | c.``), else ``doc`` as a sentence."""
        if self.help:
            return self.help
        if self.kind == "categorical":
            return " | ".join(map(str, self.options())) + "."
        return self.doc[:1].upper() + self.doc[1:] + "."

    def cli_flag(self) -> str | None:
        """The option's spelling: ``flag``, else ``--`` and the name with ``-`` (a bool field
        ``--name/--no-name``); ``None`` when the field is no command-line option."""
        if self.flag is None or self.flag:
            return self.flag
        name = "--" + self.name.replace("_", "-")
        return f"{name}/--no-{name[2:]}" if self.kind == "bool" else name

    def cli_type(self) -> type:
        """The Python type of the option's value: ``int`` for degrees and counts, ``bool``,
        ``float`` for numbers, a categorical field's plain value type (``str``; ``int`` for
        the ZeRO stage)."""
        if self.kind == "categorical":
            return type(self.options()[0])
        return {"degree": int, "count": int, "bool": bool, "number": float}[self.kind]

    def launch_flag(self, framework: str) -> str | None:
        """The framework's own flag for this field (``launch``), or ``None``."""
        return dict(self.launch).get(framework)

    def plain(self, value: object) -> Any:
        """A categorical field's value (a member or its plain value) as the plain value."""
        assert self.choices is not None, f"{self.name} is not categorical"
        return self.choices(value).value

    def options(self) -> tuple[Any, ...]:
        """Plain values of a categorical field (empty otherwise)."""
        return values(self.choices) if self.choices is not None else ()

    def read(self, leaf: Any) -> Any:
        """This field's plain value in an exact plan, from its leaf (a number or choice weights):
        the heaviest choice of a categorical field (weights may run past its choices, as the
        training precision's over every format, with zero weight there), a bool field as a
        bool, a whole number as an int."""
        x = np.asarray(leaf, dtype=float)
        if self.kind == "categorical":
            return self.options()[int(np.argmax(x))]
        if self.kind == "bool":
            return bool(x)
        number = float(x)
        return int(number) if number.is_integer() else number

    def problem(self, value: object, source: str, listing: str = "words") -> Problem | None:
        """What is wrong with ``value`` for this field, or ``None``.

        ``listing`` chooses how choices are written: ``words`` (``a, b; got 'x'``) or
        ``tuple`` (``('a', 'b'), got 'x'``, the training plan's historical message).
        """
        reason = self._reason(value, listing)
        return None if reason is None else Problem(source, self.name, reason)

    def _reason(self, value: object, listing: str) -> str | None:
        if self.kind in ("degree", "count"):
            if not isinstance(value, bool) and isinstance(value, int) and value >= self.minimum:
                if value <= MAX_COUNT:
                    return None
                return f"must be at most {MAX_COUNT:,} ({MAX_COUNT_WHY}), got {value!r}"
            what = "positive" if self.minimum >= 1 else "non-negative"
            return f"must be a {what} integer, got {value!r}"
        if self.kind == "bool":
            return None if isinstance(value, bool) else f"must be true or false, got {value!r}"
        if self.kind == "categorical":
            assert self.choices is not None
            if _lookup(self.choices, value) is not None:
                return None
            if listing == "tuple":
                return f"must be one of {self.options()}, got {value!r}"
            return choice_problem(self.choices, value, self.name, "").reason
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return self.reason.format(value=value)
        if self.check is None or self.check(float(value)):
            return None
        return self.reason.format(value=value)


def plain_value(fields: Mapping[str, PlanField], name: str, value: Any) -> Any:
    """A plan value as JSON (search results, plan rows): a bool field as a bool, a categorical
    one as its choice's plain value, any other number as an int where it is integral."""
    f = fields.get(name)
    if f is not None and f.kind == "bool":
        return bool(value)
    if f is not None and f.kind == "categorical":
        return f.plain(value)
    return int(value) if isinstance(value, float) and value.is_integer() else value


def check_fields(
    fields: tuple[PlanField, ...],
    given: dict[str, object],
    source: str,
    listing: str = "words",
) -> list[Problem]:
    """Problems of every given value (``None`` for a field whose default is ``None`` means
    "derive it" and is not checked)."""
    table = {f.name: f for f in fields}
    found = [
        table[k].problem(v, source, listing)
        for k, v in given.items()
        if v is not None or table[k].default is not None
    ]
    return [p for p in found if p is not None]


def one_hot(index: int, size: int) -> Float[Array, " k"]:
    """One-hot weight vector of a categorical plan field's option (built on the host: one
    transfer, not a zeros and a scatter on the device)."""
    return jax.device_put(np.eye(size, dtype=dtypes.canonicalize_dtype(np.float64))[index])


__all__ = [
    "Choices",
    "Degrees",
    "Format",
    "Optimizer",
    "PlanField",
    "Recompute",
    "ServeMode",
    "ServeObjective",
    "TrainObjective",
    "TrainPrecision",
    "ZeroStage",
    "check_fields",
    "coerce",
    "coerce_all",
    "one_hot",
    "searched_choices",
    "searched_degrees",
    "values",
]
