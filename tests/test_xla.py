"""XLA's CPU flags: added to XLA_FLAGS once, never over the user's own setting."""

import os

from diffcost.testing import CPU_FLAGS, configure_xla, flags_supported, xla


def test_the_flags_are_set_in_this_process_before_jax_started():
    # conftest imports diffcost before any computation, so the flag reached XLA
    assert all(f in os.environ.get("XLA_FLAGS", "") for f in CPU_FLAGS)


def test_the_tests_compile_as_users_do():
    """No test run adds the quick-compile options (LLVM -O0, no expensive passes): under them
    the serving sweep's intervals differed from the default compile's (tests/conftest.py)."""
    from diffcost.testing import QUICK_COMPILE

    flags = os.environ.get("XLA_FLAGS", "").split()
    assert not any(f.startswith(f"--{k}=") for k in QUICK_COMPILE for f in flags)


def test_a_backend_already_started_leaves_the_environment_alone():
    import jax.numpy as jnp

    float(jnp.ones(()))  # the backend is running now
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    assert configure_xla(env) is False
    assert env == {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}


def test_backends_started_asks_jax_and_changes_nothing():
    import jax
    import jax.numpy as jnp

    float(jnp.ones(()))
    before = getattr(jax.config, xla._PROBE_OPTION)
    assert xla.backends_started() is True
    assert getattr(jax.config, xla._PROBE_OPTION) == before


def test_the_users_own_value_wins(monkeypatch):
    monkeypatch.setattr(xla, "backends_started", lambda: False)
    env = {"XLA_FLAGS": "--xla_cpu_use_fusion_emitters=true"}
    assert configure_xla(env) is True
    assert env["XLA_FLAGS"] == "--xla_cpu_use_fusion_emitters=true"
    other = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    configure_xla(other)
    assert other["XLA_FLAGS"].split() == ["--xla_force_host_platform_device_count=2", *CPU_FLAGS]
    empty: dict[str, str] = {}
    configure_xla(empty)
    assert empty["XLA_FLAGS"] == " ".join(CPU_FLAGS)


def test_a_jaxlib_without_the_classic_emitters_gets_no_flag(monkeypatch):
    # jaxlib 0.11.2 aborts the whole process on the unknown flag (seen on an H100 machine)
    assert flags_supported("0.10.2") and flags_supported("0.4.30")
    assert not flags_supported("0.11.2") and not flags_supported("1.0.0")
    assert not flags_supported("not-a-version")
    monkeypatch.setattr(xla, "backends_started", lambda: False)
    monkeypatch.setattr(xla.metadata, "version", lambda _: "0.11.2")
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    assert configure_xla(env) is False
    assert env == {"XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
