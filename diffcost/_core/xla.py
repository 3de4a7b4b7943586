"""XLA's CPU compiler settings diffcost runs under, applied once at import.

diffcost's cost models are large graphs of scalar (or batched-scalar) elementwise arithmetic.
XLA's newer CPU fusion emitters compile such graphs slowly and run them slowly: on a 2-core
CPU the gradient of the relaxed 1,024-chip training model (~21,000 operations) compiled in
106 s with them and 17.7 s with the classic emitters (``--xla_cpu_use_fusion_emitters=false``),
with the same gradient to float32 rounding, and the 1,000,000-point training sweep ran at
181,000 evaluations/s with them and 524,000/s without (``python benchmarks/bench_sweep.py``
with and without the flag in ``XLA_FLAGS``; same 556,689 feasible points).

The flag is added to ``XLA_FLAGS`` unless the user's ``XLA_FLAGS`` already sets it.  XLA reads
``XLA_FLAGS`` when its first backend starts, so the setting takes effect only if no JAX
computation ran before ``import diffcost``; otherwise it is left as it is (the models are the
same, only slower to compile).  It concerns the CPU backend only; GPU and TPU are unaffected.

XLA aborts the process (a fatal ``Unknown flag in XLA_FLAGS``, not an exception) on a flag it
does not know, and the classic CPU emitters and their flag were retired from XLA in 2026
(openxla/xla PR 48001, "Retire ParallelLoopEmitter and the legacy elemental route"): jaxlib
0.10.2 accepts the flag and jaxlib 0.11.2 aborts on it (seen on an H100 machine with jax 0.11.2,
2026-11-26).  So the flag is added only for a jaxlib older than :data:`LAST_JAXLIB`; a newer
jaxlib runs with its own emitters (slower to compile on a CPU, the same models).
"""

import os
import sys
from collections.abc import MutableMapping
from importlib import metadata

#: Flags added to ``XLA_FLAGS`` (each unless the user's value already names it).
CPU_FLAGS: tuple[str, ...] = ("--xla_cpu_use_fusion_emitters=false",)

#: The first jaxlib (major, minor) without the classic CPU emitters: the flags are not added.
LAST_JAXLIB: tuple[int, int] = (0, 11)


def flags_supported(jaxlib_version: str | None = None) -> bool:
    """Whether the installed jaxlib (or ``jaxlib_version``) still knows :data:`CPU_FLAGS`; an
    unknown or unreadable version counts as not knowing them (never risk XLA's abort)."""
    try:
        version = jaxlib_version or metadata.version("jaxlib")
        major, minor = (int(part) for part in version.split(".")[:2])
    except (metadata.PackageNotFoundError, ValueError):
        return False
    return (major, minor) < LAST_JAXLIB


def configure_xla(environ: dict[str, str] | None = None) -> bool:
    """Add :data:`CPU_FLAGS` to ``XLA_FLAGS`` in ``environ`` (default ``os.environ``) unless
    JAX's backends already started or the installed jaxlib no longer knows them; returns
    whether the flags are (now) in effect."""
    env = os.environ if environ is None else environ
    if not flags_supported():
        return False
    if "jax" not in sys.modules:  # no backend can have started, and importing JAX costs ~1 s
        add_flags(CPU_FLAGS, env)
        return True
    if backends_started():
        return all(f.split("=")[0] in env.get("XLA_FLAGS", "") for f in CPU_FLAGS)
    add_flags(CPU_FLAGS, env)
    return True


#: A JAX option whose validator refuses a change once a backend started (JAX's public
#: ``jax.config.update`` raises ``RuntimeError``); changing it is harmless otherwise (a timeout).
_PROBE_OPTION = "jax_cpu_get_local_topology_timeout_minutes"


def backends_started() -> bool:
    """Whether JAX's backends (XLA clients) have started in this process, so that XLA has read
    ``XLA_FLAGS`` and ``jax.distributed.initialize`` can no longer run.

    JAX has no public query for it (only a function of its private ``xla_bridge`` module), so
    this asks ``jax.config.update`` to change :data:`_PROBE_OPTION`, which JAX refuses with a
    ``RuntimeError`` once a backend started, and puts the value back.  A JAX without that option
    counts as not started (the caller then goes ahead, as JAX itself would say if too late)."""
    import jax

    try:
        value = getattr(jax.config, _PROBE_OPTION)
        jax.config.update(_PROBE_OPTION, value + 1)
    except RuntimeError:
        return True
    except (AttributeError, KeyError, TypeError):  # an older JAX without the option
        return False
    jax.config.update(_PROBE_OPTION, value)
    return False


def add_flags(flags: tuple[str, ...], environ: MutableMapping[str, str] | None = None) -> None:
    """Append each of ``flags`` (``--name=value``) to ``XLA_FLAGS`` in ``environ`` (default
    ``os.environ``) unless its name is already there (the user's own value wins).  Effective
    only before JAX's first computation, and only with flags the installed XLA knows (it
    aborts the process on an unknown one)."""
    env = os.environ if environ is None else environ
    given = env.get("XLA_FLAGS", "")
    extra = [f for f in flags if f.split("=")[0] not in given]
    if extra:
        env["XLA_FLAGS"] = " ".join([given, *extra]).strip()


__all__ = [
    "CPU_FLAGS",
    "LAST_JAXLIB",
    "add_flags",
    "backends_started",
    "configure_xla",
    "flags_supported",
]
