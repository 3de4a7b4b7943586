"""How an engine runs one iteration under load: where prompts go and what the host adds.

Two engine behaviours that the single-request passes do not see change the iteration of the
load model (:mod:`diffcost._serve.load`); each engine profile (``specs/engines/``) gives them
with its source:

* ``mixed_prefill``: a prompt's chunk rides in the same iteration as the running decodes
  (Sarathi-Serve, OSDI'24; vLLM V1; SGLang with ``--enable-mixed-chunk``), costing them only
  its marginal time ``t(N, p) - t(N, 0)``; or the prompt runs in a prefill-only iteration
  (vLLM V0 without chunked prefill, SGLang's default ``enable_mixed_chunk = False``), and the
  decodes wait for it whole: ``t(N, 0) + t(0, p)`` per chunk.  The decode tokens then do not
  count against the prompt budget.
* ``host_share``: the share ``h`` of an iteration's wall time the host spends scheduling,
  processing outputs and detokenising while the GPU waits, in engines that do not overlap it
  with the GPU; every iteration takes ``t / (1 - h)``.  SGLang v0.4's overlapped
  ("zero-overhead") scheduler raised throughput 1.1x over v0.3 (lmsys.org/blog/2024-12-04-
  sglang-v0-4), so v0.3 spent ``h = 1 - 1 / 1.1`` of its time there; engines with an
  overlapped scheduler (SGLang >= 0.4, TensorRT-LLM's overlap scheduler, vLLM 0.6's async
  output processing) have ``h = 0``.

Absent from a profile, an engine mixes prompts with decodes and pays no host share: the load
model's behaviour before these keys existed.
"""

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from .engine import EngineProfile


class IterationPolicy(eqx.Module):
    """An engine's iteration under load (module docstring).

    Attributes:
        mixed_prefill: prompt chunks ride with the decodes (static: it decides which
            iterations are traced).
        host_share: the share of an iteration's wall time spent on the host, not overlapped
            (dimensionless, in [0, 1)).
    """

    mixed_prefill: bool = eqx.field(static=True)
    host_share: Float[Array, ""]


def iteration_policy(mixed_prefill: bool = True, host_share: float = 0.0) -> IterationPolicy:
    """An :class:`IterationPolicy` from plain values."""
    return IterationPolicy(bool(mixed_prefill), jnp.asarray(float(host_share)))


def profile_policy(profile: EngineProfile) -> IterationPolicy:
    """The :class:`IterationPolicy` an engine profile gives (absent keys: mixed, no host
    share)."""
    caps = profile.caps
    return iteration_policy(caps.get("mixed_prefill", True), caps.get("host_share", 0.0))


def prefill_only(policy: IterationPolicy | None) -> bool:
    """Whether ``policy`` runs prompts in prefill-only iterations (``None``: mixed)."""
    return policy is not None and not policy.mixed_prefill


def host_scaled(t_s: Array, policy: IterationPolicy) -> Array:
    """Wall seconds of an iteration of ``t_s`` GPU seconds: ``t / (1 - h)``."""
    return t_s / (1.0 - policy.host_share)


__all__ = [
    "IterationPolicy",
    "host_scaled",
    "iteration_policy",
    "prefill_only",
    "profile_policy",
]
