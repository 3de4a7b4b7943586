"""Results that depend only on files (the built-in specs, the package's own source), kept on
disk between runs so that a second run skips recomputing them.

The cache lives in ``DIFFCOST_CACHE_DIR`` (the command line's compilation cache, default
``~/.cache/diffcost/jax``; set empty to disable), one JSON file per result, named by a SHA-256
of every input file's path and bytes: an edited spec or an upgraded package gives a new name.
"""

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def cache_root() -> Path | None:
    """Where cached results go (None when ``DIFFCOST_CACHE_DIR`` is set empty)."""
    root = os.environ.get("DIFFCOST_CACHE_DIR", str(Path.home() / ".cache" / "diffcost" / "jax"))
    return Path(root) if root else None


def digest(folders: Sequence[Path]) -> str:
    """SHA-256 of every file under ``folders`` (relative path and bytes, sorted)."""
    h = hashlib.sha256()
    for folder in folders:
        for path in sorted(
            p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts
        ):
            h.update(str(path.relative_to(folder)).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:24]


def cached_json(name: str, folders: Sequence[Path], compute: Callable[[], Any]) -> Any:
    """``compute()`` (JSON-serialisable), read from the cache when the files under ``folders``
    are unchanged since it was stored; stored best-effort (a read-only or full disk only costs
    the recomputation)."""
    root = cache_root()
    if root is None:
        return compute()
    path = root / f"{name}-{digest(folders)}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    value = compute()
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(value))
        tmp.replace(path)
    except OSError:
        pass
    return value
