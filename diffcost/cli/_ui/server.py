"""The web explorer's server: the page (three static files shipped in the package) and a JSON API
over :mod:`.answers` and :mod:`.jobs`, on Python's own ``http.server`` (no dependency, no asset
fetched from the internet; see the README for why no dashboard framework).

API (every body is JSON):

- ``GET /api/meta``: built-in models, systems, chips, the plan controls and the default jobs;
- ``POST /api/train``, ``/api/serve``: a tab's answer; ``/api/compare``, ``/api/why``;
- ``POST /api/upload``: ``{"filename", "text"}`` of a Hugging Face ``config.json``, checked by
  the model loader and kept for this server's life; returns the model reference to send;
- ``POST /api/search/train|serve|codesign``: start a plan search or a chip design;
  ``GET /api/search/<id>``: its state;
  ``POST /api/search/<id>/cancel``.

Bad input answers 400 with ``{"error", "message", "problems"}``: ``message`` is the command
line's text for the same problems.  The cost model's programs are compiled before the server
listens (:func:`.answers.warm`); requests that evaluate the model are served one at a time.
"""

import hashlib
import json
import re
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from pathlib import Path
from typing import Any

from ..._core.errors import Problem, SpecError
from ..._inputs.loader import load_model, load_spec
from . import answers
from .jobs import SearchJobs

#: Files of the page, served from the package (``diffcost/cli/_ui/static``).
STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/app.css": ("app.css", "text/css; charset=utf-8"),
}
#: Largest request body accepted (a config.json is a few kB; a page request well under this).
MAX_BODY_BYTES = 2_000_000


def static_text(name: str) -> bytes:
    """A file of the page, from the installed package."""
    return (resources.files("diffcost.cli._ui") / "static" / name).read_bytes()


class Explorer:
    """The server's state: the search jobs, the uploaded configs and the model lock."""

    def __init__(self) -> None:
        self.jobs = SearchJobs()
        self.uploads = Path(tempfile.mkdtemp(prefix="diffcost-ui-"))
        self.model_lock = threading.Lock()
        self.meta = answers.meta()

    def upload(self, body: dict[str, Any]) -> dict[str, Any]:
        """Keep an uploaded ``config.json`` and read it as a model (the loader's checks, every
        problem at once, naming the file by its uploaded name).

        Raises:
            SpecError: not a config this model reads.
        """
        name, text = body.get("filename") or "config.json", body.get("text")
        if not isinstance(text, str) or not text.strip():
            raise SpecError([Problem(str(name), "", "the uploaded file is empty")])
        # the folder names the model (its name is the folder's): the upload's name and a digest
        stem = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(str(name)).stem)[:40].strip("-.") or "config"
        folder = self.uploads / f"{stem}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"
        folder.mkdir(exist_ok=True)
        path = folder / "config.json"
        path.write_text(text, encoding="utf-8")
        try:
            with self.model_lock:
                load_model(str(path))
                info = load_spec("model", str(path)).info
        except SpecError as err:
            raise SpecError(
                [
                    Problem(str(name) if p.file == str(path) else p.file, p.key, p.reason)
                    for p in err.problems
                ]
            ) from None
        return {"model": str(path), "display_name": f"{info.display_name} (uploaded {name})"}

    def route(self, method: str, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Answer one API request: ``(HTTP status, JSON object)``."""
        evaluate: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "/api/train": answers.train,
            "/api/serve": answers.serve,
            "/api/compare": answers.compare,
            "/api/why": answers.why,
            "/api/pareto": answers.pareto,
        }
        if method == "GET" and path == "/api/meta":
            return 200, self.meta
        if method == "POST" and path in evaluate:
            with self.model_lock:
                start = time.perf_counter()
                obj = evaluate[path](body)
            return 200, {**obj, "server_s": time.perf_counter() - start}
        if method == "POST" and path == "/api/upload":
            return 200, self.upload(body)
        parts = path.strip("/").split("/")
        if method == "POST" and parts[:2] == ["api", "search"] and len(parts) == 3:
            if parts[2] in ("train", "serve", "codesign"):
                return 200, self.jobs.start(parts[2], body).status()
        if parts[:2] == ["api", "search"] and len(parts) >= 3:
            job = (
                self.jobs.cancel(parts[2])
                if method == "POST" and parts[3:] == ["cancel"]
                else self.jobs.get(parts[2])
            )
            if job is not None:
                return 200, job.status()
        return 404, {"error": "not found", "message": f"no such request: {method} {path}"}


def _handler(explorer: Explorer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "diffcost-ui"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass  # quiet: the terminal shows the address, not every request

        def _send(self, status: int, payload: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            self.wfile.write(payload)

        def _json(self, status: int, obj: dict[str, Any]) -> None:
            text = json.dumps(obj, allow_nan=False, default=str)
            self._send(status, text.encode(), "application/json")

        def _api(self, method: str) -> None:
            body: dict[str, Any] = {}
            if method == "POST":
                size = int(self.headers.get("Content-Length") or 0)
                if size > MAX_BODY_BYTES:
                    reason = f"the request is {size:,} bytes; at most {MAX_BODY_BYTES:,}"
                    self._json(413, {"error": "too large", "message": reason, "problems": []})
                    return
                try:
                    body = json.loads(self.rfile.read(size) or b"{}")
                except json.JSONDecodeError as err:
                    self._json(400, {"error": "bad json", "message": str(err), "problems": []})
                    return
                if not isinstance(body, dict):
                    msg = "the request must be a JSON object"
                    self._json(400, {"error": "bad json", "message": msg, "problems": []})
                    return
            try:
                status, obj = explorer.route(method, self.path.split("?")[0], body)
            except SpecError as err:
                problems = [vars(p) for p in err.problems]
                obj = {"error": "invalid input", "message": str(err), "problems": problems}
                status = int(HTTPStatus.BAD_REQUEST)
            except Exception as err:  # a bug: the page shows it, the server goes on
                obj = {
                    "error": "internal error",
                    "message": f"{type(err).__name__}: {err}",
                    "problems": [],
                    "traceback": traceback.format_exc()[-3000:],
                }
                status = int(HTTPStatus.INTERNAL_SERVER_ERROR)
            self._json(status, obj)

        def do_GET(self) -> None:  # noqa: N802
            path = self.path.split("?")[0]
            if path == "/favicon.ico":  # none: say so without an error in the console
                self._send(204, b"", "image/x-icon")
            elif path in STATIC:
                name, kind = STATIC[path]
                self._send(200, static_text(name), kind)
            else:
                self._api("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._api("POST")

    return Handler


class ExplorerServer(ThreadingHTTPServer):
    """The HTTP server with its :class:`Explorer` (the state its handlers share)."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], explorer: Explorer) -> None:
        super().__init__(address, _handler(explorer))
        self.explorer = explorer


def make_server(host: str = "127.0.0.1", port: int = 8765, warm: bool = True) -> ExplorerServer:
    """The explorer's HTTP server, its programs compiled (``warm``), not yet serving
    (``serve_forever``); port 0 picks a free one (``server.server_address``)."""
    explorer = Explorer()
    if warm:
        answers.warm(explorer.meta)
    return ExplorerServer((host, port), explorer)
