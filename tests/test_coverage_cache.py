"""The coverage index is the same bits whether a process computes it or reads it from the disk
cache, whichever process filled the cache (issue 40: ``checks.mfu.best_published_mfu`` of
``diffcost plan train --json`` was 0.5626812663 or 0.5626812914 depending on whether the test
suite, which runs in float64, or a float32 command had filled ``DIFFCOST_CACHE_DIR``)."""

import json
import os
import subprocess
import sys

from diffcost.testing import builtin_index

# a float32 process (the command line's float type): computes the index with an empty cache,
# reads it back from that cache, then reads the cache a float64 process filled
_SCRIPT = """
import json, os, sys
from diffcost.testing import builtin_index

def mfus(cache):
    os.environ["DIFFCOST_CACHE_DIR"] = cache
    builtin_index.cache_clear()
    return [p.mfu for p in builtin_index()]

fresh, _, other = sys.argv[1:]
print(json.dumps([mfus(fresh), mfus(fresh), mfus(other)]))
"""


def _mfus(monkeypatch, cache) -> list[float | None]:
    monkeypatch.setenv("DIFFCOST_CACHE_DIR", str(cache))
    builtin_index.cache_clear()
    try:
        return [p.mfu for p in builtin_index()]
    finally:
        builtin_index.cache_clear()


def test_the_cached_index_is_what_the_process_computes(tmp_path, monkeypatch):
    # this process runs in float64 (tests/conftest.py): computed, then read back
    computed = _mfus(monkeypatch, tmp_path / "x64")
    assert any(computed) and list(tmp_path.joinpath("x64").iterdir())
    assert _mfus(monkeypatch, tmp_path / "x64") == computed
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_ENABLE_X64"] = "0"
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(tmp_path / "x32"), "", str(tmp_path / "x64")],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    fresh, read, filled_by_float64 = json.loads(out.stdout.splitlines()[-1])
    assert read == fresh  # bit for bit (JSON keeps a float's shortest exact repr)
    assert filled_by_float64 == fresh  # the float64 process's file is not read
    assert fresh != computed  # the two float types do differ (so the test can fail)
