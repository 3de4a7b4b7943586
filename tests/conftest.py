"""Shared fixtures.  Tests run in float64 so finite differences are meaningful."""

import jax
import pytest

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")

import diffcost as dc  # noqa: E402


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
