"""Shared fixtures.  Tests run in float64 so finite differences are meaningful."""

import gc

import jax
import pytest

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")

import diffcost as dc  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_code():
    """Drop every compiled executable after each test module.  The jit caches otherwise keep
    every module's executables alive for the whole session, and the slow pass (searches,
    calibrations, notebooks) grew past the 24 GiB of a CI machine until XLA's compiler crashed
    (a segfault in backend_compile_and_load, test_uncertainty, in the slow pass of stop 25)."""
    yield
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
