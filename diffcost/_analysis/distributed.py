"""Processes joined by ``jax.distributed``: joining, and agreeing on one number.

One sweep over the devices of several hosts runs as one process per host, each calling
:func:`join` before anything starts the XLA backend; ``jax.devices()`` then lists every
process's devices and ``jax.local_devices()`` this process's own.  Every process must make the
same compiled calls with the same shapes (a chunk size decided from local memory is agreed on
with :func:`agree_min`), and arrays sent to every device must be equal in every process
(``jax.device_put`` checks it; ``NaN != NaN``, hence ``sweep_spec.UNSET``).
"""

import jax
import numpy as np

from .._core.errors import Problem, SpecError
from .._core.xla import backends_started


def join(
    coordinator: str | None = None, num_processes: int | None = None, process_id: int | None = None
) -> None:
    """Join this process to the others with ``jax.distributed.initialize``.

    ``coordinator`` (``HOST:PORT`` of process 0), ``num_processes`` and ``process_id``: each
    ``None`` is read from the environment as JAX detects it (``JAX_COORDINATOR_ADDRESS``,
    SLURM, Open MPI, Kubernetes, TPU pods).  On CPUs the processes' collectives go over TCP with
    gloo (``jax_cpu_collectives_implementation``, set unless already chosen).  Must run before
    any JAX computation: a backend already started is an input error naming ``--distributed``.
    """
    reason = "JAX already started its devices in this process: join before any computation"
    if backends_started():
        raise SpecError([Problem("<flags>", "distributed", reason)])
    if getattr(jax.config, "jax_cpu_collectives_implementation", None) is None:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    try:
        jax.distributed.initialize(coordinator, num_processes, process_id)
    except ValueError as err:  # nothing given and no cluster detected
        why = (
            f"{err} (JAX: no coordinator given and no cluster detected): give --coordinator "
            "HOST:PORT of process 0, --num-processes and --process-id, or run under a launcher "
            "JAX detects (SLURM, Open MPI, Kubernetes, a TPU pod)"
        )
        raise SpecError([Problem("<flags>", "distributed", why)]) from None
    except RuntimeError:  # JAX's own check that no backend started (a JAX the probe misses)
        raise SpecError([Problem("<flags>", "distributed", reason)]) from None


def agree_min(value: float) -> float:
    """The smallest of every process's ``value`` (itself in a single process): a tiny
    all-gather, so every process reaches the same decision from its own measurement."""
    if jax.process_count() == 1:
        return value
    from jax.experimental import multihost_utils

    every = multihost_utils.process_allgather(np.asarray([value], np.float64), tiled=True)
    return float(np.min(np.asarray(every)))


def is_writer() -> bool:
    """Whether this process writes the outputs and prints (process 0)."""
    return jax.process_index() == 0
