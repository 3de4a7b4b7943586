"""Shared fixtures.  Tests run in float64 so finite differences are meaningful."""

import gc

import jax
import pytest

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")

import diffcost as dc  # noqa: E402
from diffcost.testing import QUICK_COMPILE, add_flags, backends_started  # noqa: E402


def _slow_pass(config: pytest.Config) -> bool:
    """Whether this run selects the slow tests (``pytest -m slow``)."""
    expr = str(config.getoption("markexpr") or "")
    return "slow" in expr and "not slow" not in expr


#: The default run's XLA programs are compiled with LLVM at -O0 and without its expensive
#: passes (the options of ``diffcost._core.quick_compile``, as flags): its time is mostly
#: compilation (each cost model, gradient and vmap compiled once per shape and static
#: configuration) and its programs run for milliseconds.  Measured on 2 cores, the default run
#: took 7 min 15 s with XLA's defaults and 5 min 55 s with these (the same tests pass).  The
#: slow pass keeps XLA's defaults, the code generation the command line and the library use, so
#: both are tested: an adam trajectory follows float rounding, and one slow test's statistic over
#: random starts (tests/test_search.py, the relaxed objectives' median) moved past its bound
#: under -O0 (14.8 against 10.2; 1 passed with the defaults).
TEST_XLA_FLAGS = tuple(f"--{k}={str(v).lower()}" for k, v in QUICK_COMPILE.items())


#: Whether :data:`TEST_XLA_FLAGS` were added before JAX's backends started (tests/test_xla.py).
TEST_FLAGS_IN_TIME: bool | None = None


def pytest_configure(config: pytest.Config) -> None:
    """Add :data:`TEST_XLA_FLAGS` to ``XLA_FLAGS`` outside the slow pass, before the first
    computation (importing diffcost runs none: tests/test_xla.py); an option already in
    ``XLA_FLAGS`` is left as given.  Both runs are spread over 2 processes (pytest-xdist, ``-n 2``
    in the pytest options of pyproject.toml): each worker runs this hook with the run's options
    before its own first computation, and inherits the flags the main process added."""
    global TEST_FLAGS_IN_TIME
    if not _slow_pass(config):
        TEST_FLAGS_IN_TIME = not backends_started()
        add_flags(TEST_XLA_FLAGS)


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
