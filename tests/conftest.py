"""Shared fixtures.  Tests run in float64 so finite differences are meaningful."""

import gc

import jax
import pytest

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")

import diffcost as dc  # noqa: E402


def _slow_pass(config: pytest.Config) -> bool:
    """Whether this run selects the slow tests (``pytest -m slow``)."""
    expr = str(config.getoption("markexpr") or "")
    return "slow" in expr and "not slow" not in expr


#: Both runs compile with XLA's defaults, the code generation the command line and the library
#: use.  The default run used to add LLVM -O0 without its expensive passes (the options of
#: ``diffcost._core.quick_compile``) to save compile time (7 min 15 s -> 5 min 55 s then); under
#: those options the serving sweep's interval columns (one vmapped program) came out different
#: from the same intervals at the default compile and from the single-plan intervals: 19 of 64
#: rows of tests/test_sweep.py's serving sweep off by up to 13% at p90 (the point values equal),
#: while at the defaults every row agrees to 1e-15.  A test must see the numbers a user gets.
#: Issue 38 asks for the default run at XLA's defaults too.


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_code(request: pytest.FixtureRequest):
    """In the slow pass, drop every compiled executable after each test module.  The jit caches
    otherwise keep every module's executables alive for the whole session, and the slow pass
    (searches, calibrations, notebooks) grew until XLA's compiler crashed on a 23 GiB machine (a
    segfault in backend_compile_and_load, test_uncertainty, slow pass of stop 25).  The fast
    pass keeps its caches: its modules share compiled cost models (1-2 minutes of recompiling)
    and each of its 2 worker processes peaks near 3.3 GiB."""
    yield
    if _slow_pass(request.config):
        jax.clear_caches()
        gc.collect()


@pytest.fixture(scope="session")
def a100_1024():
    return dc.load_system("dgx-a100", chips=1024)


@pytest.fixture(scope="session")
def h100_64():
    return dc.load_system("dgx-h100", chips=64)


@pytest.fixture(scope="session")
def gpt3():
    return dc.load_model("gpt3-175b")


@pytest.fixture(scope="session")
def llama70():
    return dc.load_model("llama-2-70b")
