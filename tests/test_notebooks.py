"""The notebooks in notebooks/ run top to bottom (each ends by asserting its claims).

Executed with nbclient on the ``python3`` kernel of this environment, offline and headless
(matplotlib's inline backend, which renders with Agg).
Compiled XLA programs are cached between runs under pytest's cache directory.  To refresh the
outputs stored in the notebooks: ``python tests/test_notebooks.py``.
"""

import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
# Per cell.  Notebook 04's co-design cell takes about 115 s alone on a 2-core machine but passed
# 300 s in CI (2 cores, beside the other pytest worker, empty compilation cache): the limit is a
# hang guard, not a performance budget (benchmarks/headline.py measures speed).
TIMEOUT_S = 900


def execute(path: Path, cache_dir: Path | None = None) -> tuple[Any, float]:
    """Run a notebook in its own folder; return it (with outputs) and the wall time."""
    book = nbformat.read(path, as_version=4)
    env = {"JAX_PLATFORMS": "cpu"}
    if cache_dir is not None:
        env["JAX_COMPILATION_CACHE_DIR"] = str(Path(cache_dir).resolve())
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        client = nbclient.NotebookClient(
            book,
            timeout=TIMEOUT_S,
            kernel_name="python3",
            resources={"metadata": {"path": str(path.parent)}},
        )
        t0 = time.perf_counter()
        client.execute()
        return book, time.perf_counter() - t0
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_there_are_four_notebooks():
    assert [p.name[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04"]


@pytest.mark.slow  # 15-46 s each on 2 cores: run by `python -m pytest -m slow` (.ci/run does)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_and_its_claims_hold(path, request):
    store = getattr(request.config, "cache", None)  # absent under -p no:cacheprovider
    cache = store.mkdir("jax-compilation-cache") if store is not None else None
    book, wall = execute(path, cache)
    last = book.cells[-1]
    assert last.cell_type == "code" and "assert" in last.source
    text = "".join(o.get("text", "") for o in last.outputs if o.get("output_type") == "stream")
    assert "all claims hold" in text
    for cell in book.cells:
        for out in cell.get("outputs", []):
            assert out.get("output_type") != "error", out
    print(f"{path.name}: {wall:.1f} s")


if __name__ == "__main__":  # refresh the stored outputs
    for p in NOTEBOOKS if len(sys.argv) < 2 else [Path(a) for a in sys.argv[1:]]:
        nb, seconds = execute(p)
        nbformat.write(nb, p)
        print(f"{p.name}: {seconds:.1f} s")
