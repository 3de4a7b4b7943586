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
"""

import os

#: Flags added to ``XLA_FLAGS`` (each unless the user's value already names it).
CPU_FLAGS: tuple[str, ...] = ("--xla_cpu_use_fusion_emitters=false",)


def configure_xla(environ: dict[str, str] | None = None) -> bool:
    """Add :data:`CPU_FLAGS` to ``XLA_FLAGS`` in ``environ`` (default ``os.environ``) unless
    JAX's backends already started; returns whether the flags are (now) in effect."""
    env = os.environ if environ is None else environ
    try:
        from jax._src import xla_bridge

        if xla_bridge.backends_are_initialized():
            return all(f.split("=")[0] in env.get("XLA_FLAGS", "") for f in CPU_FLAGS)
    except ImportError:  # a JAX without this private helper: set the flag regardless
        pass
    flags = env.get("XLA_FLAGS", "")
    extra = [f for f in CPU_FLAGS if f.split("=")[0] not in flags]
    if extra:
        env["XLA_FLAGS"] = " ".join([flags, *extra]).strip()
    return True


__all__ = ["CPU_FLAGS", "configure_xla"]
