"""Long work of the web explorer (plan searches and chip co-design): run as ``diffcost plan
train|serve --json`` or ``diffcost codesign --json`` in a child process, so that the page shows
its progress, the server keeps answering control changes meanwhile, and a cancel ends it at once
(the process is killed: nothing is left half done in the server).  The result is the command
line's own ``--json`` object."""

import json
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..._core.errors import Problem, SpecError

#: What a search request may set, per job: the ``diffcost plan`` option and the value's type.
#: (Lists are comma-separated on the command line.)
SEARCH_OPTIONS: dict[str, dict[str, type]] = {
    "train": {
        "model": str,
        "system": str,
        "chip": str,
        "chips": int,
        "global_batch": int,
        "seq_len": int,
        "objective": str,
        "recompute": str,
        "zero": str,
        "precision": str,
        "max_cp": int,
        "top": int,
    },
    "serve": {
        "model": str,
        "system": str,
        "chip": str,
        "chips": int,
        "input_len": int,
        "output_len": int,
        "objective": str,
        "ttft_slo_ms": float,
        "tpot_slo_ms": float,
        "weight_formats": str,
        "kv_formats": str,
        "max_batch": int,
        "top": int,
    },
    "codesign": {
        "workload": str,
        "area_mm2": float,
        "power_w": float,
        "cost_usd": float,
        "node": str,
        "steps": int,
        "starts": int,
        "seed": int,
    },
}


def search_argv(kind: str, request: dict[str, Any]) -> list[str]:
    """The command line of a page's long request: ``plan train|serve`` or ``codesign``.

    Raises:
        SpecError: an unknown job or option, or a value of the wrong type (every problem).
    """
    if kind not in SEARCH_OPTIONS:
        reason = f"must be one of {', '.join(SEARCH_OPTIONS)}, got {kind!r}"
        raise SpecError([Problem("page", "kind", reason)])
    allowed = SEARCH_OPTIONS[kind]
    argv: list[str] = ["codesign"] if kind == "codesign" else ["plan", kind]
    problems: list[Problem] = []
    for key, value in request.items():
        if value is None or value == "":
            continue
        cast = allowed.get(key)
        if cast is None:
            problems.append(Problem("page", key, f"not an option of {' '.join(argv)}"))
            continue
        ok = isinstance(value, cast) and not isinstance(value, bool)
        if cast is float:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok:
            problems.append(Problem("page", key, f"must be a {cast.__name__}, got {value!r}"))
            continue
        argv += [f"--{key.replace('_', '-')}", str(value)]
    if problems:
        raise SpecError(problems)
    return [*argv, "--json"]


@dataclass
class SearchJob:
    """One search in a child process: its state (``running``, ``done``, ``failed``,
    ``cancelled``), the ``--json`` result or the error text, and when it started."""

    id: str
    kind: str
    argv: list[str]
    started_s: float = field(default_factory=time.monotonic)
    state: str = "running"
    result: dict[str, Any] | None = None
    error: str = ""
    ended_s: float | None = None
    _proc: subprocess.Popen[str] | None = field(default=None, repr=False)

    def status(self) -> dict[str, Any]:
        """What the page polls: state, elapsed seconds, the command and the result."""
        end = self.ended_s if self.ended_s is not None else time.monotonic()
        return {
            "id": self.id,
            "kind": self.kind,
            "state": self.state,
            "elapsed_s": round(end - self.started_s, 2),
            "command": "diffcost " + " ".join(self.argv),
            "result": self.result,
            "error": self.error,
        }


class SearchJobs:
    """The searches of one server (any number at once; each its own process)."""

    def __init__(self) -> None:
        self._jobs: dict[str, SearchJob] = {}
        self._lock = threading.Lock()

    def start(self, kind: str, request: dict[str, Any]) -> SearchJob:
        """Start ``diffcost plan <kind>`` (or ``codesign``) for ``request`` (:func:`search_argv`).

        Raises:
            SpecError: a bad request (before any process starts).
        """
        argv = search_argv(kind, request)
        job = SearchJob(uuid.uuid4().hex[:12], kind, argv)
        job._proc = subprocess.Popen(  # noqa: S603 (our own interpreter and module)
            [sys.executable, "-m", "diffcost", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        with self._lock:
            self._jobs[job.id] = job
        threading.Thread(target=self._wait, args=(job,), daemon=True).start()
        return job

    def _wait(self, job: SearchJob) -> None:
        assert job._proc is not None
        out, err = job._proc.communicate()
        job.ended_s = time.monotonic()
        if job.state == "cancelled":
            return
        try:
            obj = json.loads(out) if out.strip() else None
        except json.JSONDecodeError:
            obj = None
        # exit 1: no feasible plan, still a result (the JSON says why)
        if obj is not None and job._proc.returncode in (0, 1):
            job.result, job.state = obj, "done"
        else:
            job.error = (err or out).strip()[-4000:] or f"exit status {job._proc.returncode}"
            job.state = "failed"

    def get(self, job_id: str) -> SearchJob | None:
        with self._lock:
            return self._jobs.get(job_id)

    def cancel(self, job_id: str) -> SearchJob | None:
        """Kill a running search (its state becomes ``cancelled``); a finished one stays."""
        job = self.get(job_id)
        if job is not None and job.state == "running" and job._proc is not None:
            job.state = "cancelled"
            job._proc.kill()
        return job

    def close(self) -> None:
        """Kill every running search (the server is stopping)."""
        with self._lock:
            jobs = list(self._jobs.values())
        for job in jobs:
            self.cancel(job.id)
