"""Run one fuzz case as a user would (the ``diffcost`` command, in process) and judge it.

Every case ends in exactly one outcome:

- ``answer``: exit 0 with a finite, physically possible prediction;
- ``infeasible``: exit 1 with the reasons;
- ``clear``: exit 2, a plain-text ``error:`` message on stderr that names the input
  (the mutated file, or the flag);
- ``traceback``: an exception escaped, or an exit status other than 0, 1, 2;
- ``unclear``: an error whose message does not name the input, or a refusal without reasons;
- ``nan_answer``: exit 0 with a NaN, infinite or negative time, rate, size or count;
- ``false_feasible``: exit 0 and ``feasible`` while an independent check of the printed numbers
  says otherwise (memory over capacity, degrees that do not multiply to the chips, MFU above 1,
  a latency above the limit asked for);
- ``hang``: no answer within :data:`CASE_TIMEOUT_S`;
- ``accepted_invalid``: the oracle says the input is invalid (:attr:`Case.valid` False) and it
  was answered, exit 0 or 1 (an invalid input must be refused: exit 2 naming the flag or the
  file and key); this outcome takes precedence over what the answer's numbers show;
- ``refused_valid``: the oracle says the input is valid (:attr:`Case.valid` True) and it was
  refused with exit 2.

The first three are the good outcomes.  The independent checks read only the printed JSON, not
the model's own feasibility code, and they read every nested object: a NaN, an infinity or a
negative amount anywhere (``best_breakdown``, ``alternatives[i].breakdown``, ``load``) is a
``nan_answer``; an MFU above 1 in any breakdown, the ``best_breakdown`` of a feasible plan over
its memory or the limits asked for, and a feasible answer whose ``load`` block is saturated
(utilisation >= 1 or ``stable`` false) are ``false_feasible``.

The oracle (:mod:`fuzz.oracle`, whose docstring lists every rule) is independent of the
loader's code: it reads the documented key reference (``specs/SCHEMA.md``) and unit table and
fixed rules per flag.  ``Case.valid`` None means the generator cannot tell; such cases are
judged without the two oracle outcomes and counted apart (``valid?`` column).  A refusal is
``clear`` only when stderr names the input: the file (``names``) and, where a case gives
``keys`` (a unit-suffix typo: the key as typed or as meant), the key too; a flag case's
``names`` are the flags as typed (``--tp``) and any path given (the message names the file),
never another value given nor the bare word (``tp``), which many messages contain by accident.
"""

import json
import math
import os
import re
import signal
import tempfile
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

GOOD = ("answer", "infeasible", "clear")
BAD = (
    "traceback",
    "unclear",
    "nan_answer",
    "false_feasible",
    "hang",
    "accepted_invalid",
    "refused_valid",
)
#: Columns of the oracle's verdicts: the case's input is valid, invalid, or the generator
#: cannot tell.
VALIDITY = {True: "valid", False: "invalid", None: "valid?"}
#: A case that runs longer than this is a defect (``hang``): no input should make a single
#: prediction, validation or sweep of a built-in size take minutes.
CASE_TIMEOUT_S = 120


class _Hang(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _Hang(f"no answer after {CASE_TIMEOUT_S} s")


#: Output keys that may be negative (a margin, a signed error, an elasticity, a variance share:
#: a correlated constant's covariance-weighted share of a log variance can be below 0,
#: ``diffcost._analysis.uncertainty.variance_shares``).
_SIGNED = re.compile(r"headroom|error|elastic|gradient|sensitiv|bias|log|delta|margin|slope|share")
_NAN_TEXT = re.compile(r"(?<![\w.])-?(nan|inf)(?![\w])", re.IGNORECASE)


@dataclass(frozen=True)
class Case:
    """One input a user could give: files to write and the command line that reads them.

    ``argv`` may contain ``{dir}``, the folder the files are written to.  ``names``: the
    strings of which an error message must contain at least one (the file or the flag);
    ``keys``: if given, the message must also contain one of these (the mutated key).
    ``valid``: the oracle's verdict on the input (None: cannot tell).
    """

    group: str
    label: str
    argv: tuple[str, ...]
    files: tuple[tuple[str, bytes], ...] = ()
    names: tuple[str, ...] = ()
    limits: tuple[tuple[str, float], ...] = ()
    valid: bool | None = None
    keys: tuple[str, ...] = ()


@dataclass
class Tally:
    """Outcome counts per group, and the first few examples of each bad outcome."""

    counts: dict[str, Counter] = field(default_factory=dict)
    examples: list[tuple[str, Case, str]] = field(default_factory=list)
    #: Outcome counts per oracle verdict (valid / invalid / valid?).
    by_validity: dict[str, Counter] = field(default_factory=dict)

    def add(self, case: Case, outcome: str, detail: str) -> None:
        counts = self.counts.setdefault(case.group, Counter())
        counts[outcome] += 1
        counts[VALIDITY[case.valid]] += 1
        self.by_validity.setdefault(VALIDITY[case.valid], Counter())[outcome] += 1
        if outcome in BAD and len(self.examples) < 400:
            self.examples.append((outcome, case, detail))

    def total(self) -> Counter:
        out: Counter = Counter()
        for c in self.counts.values():
            out.update(c)
        return out

    def table(self) -> str:
        """Counts per group: tried, the oracle's valid / invalid / cannot tell, then each
        outcome (good, then bad)."""
        cols = ("tried", *VALIDITY.values(), *GOOD, *BAD)
        short = {"accepted_invalid": "acc_invalid", "refused_valid": "ref_valid"}
        width = 12
        rows = [
            f"{'group':<20}" + "".join(f"{short.get(c, c)[: width - 1]:>{width}}" for c in cols)
        ]
        for group, c in [*sorted(self.counts.items()), ("TOTAL", self.total())]:
            tried = sum(c[k] for k in (*GOOD, *BAD))
            rows.append(
                f"{group[:19]:<20}{tried:>{width}}" + "".join(f"{c[k]:>{width}}" for k in cols[1:])
            )
        rows += [
            "",
            f"{'oracle':<20}"
            + "".join(f"{short.get(c, c)[: width - 1]:>{width}}" for c in ("tried", *GOOD, *BAD)),
        ]
        for verdict in VALIDITY.values():
            c = self.by_validity.get(verdict, Counter())
            rows.append(
                f"{verdict:<20}{sum(c.values()):>{width}}"
                + "".join(f"{c[k]:>{width}}" for k in (*GOOD, *BAD))
            )
        return "\n".join(rows)


def _numbers(obj: Any, key: str = "") -> list[tuple[str, float]]:
    if isinstance(obj, dict):
        return [kv for k, v in obj.items() for kv in _numbers(v, f"{key}.{k}" if key else k)]
    if isinstance(obj, list):
        return [kv for i, v in enumerate(obj) for kv in _numbers(v, f"{key}[{i}]")]
    if isinstance(obj, (int, float)) and not isinstance(obj, bool):
        return [(key, float(obj))]
    return []


def _plan_chips(plan: dict[str, Any], keys: tuple[str, ...]) -> float:
    return math.prod(float(plan.get(k, 1)) for k in keys)


def _objects(obj: Any, key: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every JSON object of an output with its path (the output itself first)."""
    if isinstance(obj, dict):
        out = [(key, obj)]
        for k, v in obj.items():
            out += _objects(v, f"{key}.{k}" if key else k)
        return out
    if isinstance(obj, list):
        return [kv for i, v in enumerate(obj) for kv in _objects(v, f"{key}[{i}]")]
    return []


def _false_feasible(out: dict[str, Any], case: Case) -> str | None:
    """An independent reading of a feasible answer's own numbers, nested ones included."""
    for where, obj in _objects(out):
        mfu = obj.get("mfu")
        if isinstance(mfu, (int, float)) and not isinstance(mfu, bool) and mfu > 1.0:
            return f"{where or 'output'}: MFU {mfu:.3g} > 1"
    if not out.get("feasible"):
        return None
    load = out.get("load")
    if isinstance(load, dict):
        util = load.get("utilisation")
        if load.get("stable") is False or (isinstance(util, (int, float)) and util >= 1.0):
            return f"feasible but load.utilisation = {util} (saturated queue)"
    best = out.get("best_breakdown")
    if isinstance(best, dict):
        nested = {**best, "feasible": True, "plan": out.get("best_plan", {})}
        nested.setdefault("system_chips", out.get("chips"))
        problem = _false_feasible_one(nested, case)
        if problem:
            return f"best_breakdown: {problem}"
    return _false_feasible_one(out, case)


def _false_feasible_one(out: dict[str, Any], case: Case) -> str | None:
    """The checks of one feasible answer (a prediction, or a plan's best breakdown)."""
    capacity = out.get("capacity_bytes")
    mem = out.get("memory_bytes") or out.get("memory") or {}
    total = mem.get("total_bytes") if isinstance(mem, dict) else None
    if isinstance(total, (int, float)) and isinstance(capacity, (int, float)):
        if total > capacity * (1 + 1e-6):
            return f"feasible but memory {total:.4g} B > capacity"
    plan = out.get("plan", {})
    if "mfu" in out:
        chips = out.get("chips")
        if isinstance(chips, (int, float)) and _plan_chips(plan, ("tp", "pp", "dp", "cp")) != chips:
            return "feasible but tp*pp*dp*cp != chips"
    elif isinstance(out.get("system_chips"), (int, float)) and not plan.get("disaggregated"):
        if _plan_chips(plan, ("tp", "pp", "replicas")) > out["system_chips"]:
            return "feasible but tp*pp*replicas > chips"
    for key, limit in case.limits:
        value = out.get(key)
        if isinstance(value, (int, float)) and value > limit * (1 + 1e-6):
            return f"feasible but {key} = {out[key]:.4g} > limit {limit:.4g}"
    return None


def judge_answer(stdout: str, case: Case) -> tuple[str, str]:
    """Outcome of an exit-0 run from what it printed."""
    text = stdout.strip()
    if not text.startswith("{"):
        bad = _NAN_TEXT.search(text)
        return ("nan_answer", bad.group(0)) if bad else ("answer", "")
    try:
        out = json.loads(text)
    except json.JSONDecodeError as err:
        return "unclear", f"--json output is not one JSON object: {err}"
    for key, value in _numbers(out):
        if not math.isfinite(value):
            return "nan_answer", f"{key} = {value}"
        tail = key.rsplit(".", 1)[-1]
        if value < 0 and not _SIGNED.search(tail) and not _SIGNED.search(key):
            return "nan_answer", f"{key} = {value} < 0"
    problem = _false_feasible(out, case)
    return ("false_feasible", problem) if problem else ("answer", "")


def _judge_refusal(stdout: str, stderr: str) -> tuple[str, str]:
    """Exit 1 (infeasible) must say why: the ``problems`` of the JSON object, or the
    ``infeasible:`` list of the text output."""
    text = stdout.strip()
    if text.startswith("{"):
        try:
            out = json.loads(text)
        except json.JSONDecodeError as err:
            return "unclear", f"--json output is not one JSON object: {err}"
        reasons = out.get("problems") or out.get("binding") or out.get("reason")
        if reasons and not out.get("feasible", False):
            return "infeasible", ""
    elif "infeasible" in stdout + stderr or "no feasible" in stdout + stderr:
        return "infeasible", ""
    return "unclear", f"exit 1 without reasons: {(stdout + stderr)[-300:]!r}"


def judge(exit_code: int, exception: BaseException | None, stdout: str, stderr: str, case: Case):
    """``(outcome, detail)`` of one finished run, with the oracle's verdict applied."""
    outcome, detail = _judge_run(exit_code, exception, stdout, stderr, case)
    if outcome in ("traceback", "hang"):
        return outcome, detail
    if case.valid is False and exit_code in (0, 1):
        return "accepted_invalid", f"exit {exit_code} ({outcome}{': ' + detail if detail else ''})"
    if case.valid is True and exit_code == 2:
        first = (stderr.strip().splitlines() or [""])[0]
        return "refused_valid", f"exit 2: {first[:300]}"
    return outcome, detail


def _named(stderr: str, case: Case) -> bool:
    """The message names the input: one of ``names`` and, if given, one of ``keys``."""
    if case.names and not any(n in stderr for n in case.names):
        return False
    return not case.keys or any(k in stderr for k in case.keys)


def _judge_run(
    exit_code: int, exception: BaseException | None, stdout: str, stderr: str, case: Case
):
    """``(outcome, detail)`` of one finished run, before the oracle."""
    if isinstance(exception, _Hang):
        return "hang", str(exception)
    if exception is not None and not isinstance(exception, SystemExit):
        return "traceback", f"{type(exception).__name__}: {exception}"[:300]
    if exit_code == 0:
        return judge_answer(stdout, case)
    if exit_code == 1:
        return _judge_refusal(stdout, stderr)
    if exit_code == 2:
        first = stderr.lstrip().splitlines()[:1]
        plain = bool(first) and (first[0].startswith("error:") or first[0].startswith("Usage:"))
        if plain and _named(stderr, case) and "╭" not in stderr:
            return "clear", ""
        return "unclear", f"exit 2: {stderr[-300:]!r}"
    return "traceback", f"exit {exit_code}: {(stdout + stderr)[-300:]!r}"


class Runner:
    """Runs cases in one process (compiled programs are reused across cases)."""

    def __init__(self) -> None:
        from diffcost.cli import app

        self.app = app
        self.cli = CliRunner()
        self.tally = Tally()

    def run(self, case: Case) -> tuple[str, str]:
        with tempfile.TemporaryDirectory(prefix="diffcost-fuzz-") as tmp:
            for rel, content in case.files:
                path = Path(tmp) / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(content)
            argv = [a.replace("{dir}", tmp) for a in case.argv]
            names = tuple(n.replace("{dir}", tmp) for n in case.names)
            case_here = replace(case, argv=tuple(argv), files=(), names=names)
            previous = signal.signal(signal.SIGALRM, _alarm)
            signal.alarm(CASE_TIMEOUT_S)
            here = os.getcwd()
            os.chdir(tmp)  # relative output paths of a mutated file land in the case's folder
            try:
                result = self.cli.invoke(self.app, argv, catch_exceptions=True)
            finally:
                os.chdir(here)
                signal.alarm(0)
                signal.signal(signal.SIGALRM, previous)
            outcome = judge(
                result.exit_code, result.exception, result.stdout, result.stderr, case_here
            )
        self.tally.add(case, *outcome)
        return outcome
