"""An engine's scheduler caps as the engine sets them, and the plan a loaded server runs.

Under a stream of requests a continuous-batching server runs as many sequences as arrive
(Little's law: ``N = lambda L_out T``), up to its scheduler's caps: the most sequences it runs
at once (vLLM ``max_num_seqs``, TensorRT-LLM ``max_batch_size``, SGLang
``max_running_requests``) and the most tokens one iteration schedules (vLLM
``max_num_batched_tokens``, TensorRT-LLM ``max_num_tokens``, SGLang ``chunked_prefill_size``).
A user who sets neither runs with the engine's defaults, which each engine profile
(``specs/engines/``) records with the file and release that set them, including the rules that
make them depend on the device (vLLM V1: larger caps on a chip of >= 70 GiB not named A100;
SGLang 0.4: a larger chunk from 25,000 MiB) or on the model (vLLM 0.6 without chunked
prefill: a budget of at least the model's context).

:func:`engine_caps` resolves those rules for one chip and model (static: Python values, before
any tracing); :func:`capped_plan` gives the plan whose ``batch`` is the sequence cap and whose
``prefill_chunk`` is the iteration's token budget, the two numbers
:func:`diffcost._serve.load.under_load` reads as caps, except where the user gave them
(``given``).  The new plan has the same structure and array types, so the compiled load
program is reused: nothing is traced again per engine, chip or rate.
"""

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import equinox as eqx
import jax.numpy as jnp

from .._inputs.hardware import strong_float
from .engine import DEFAULT_ENGINE, EngineProfile, load_engine
from .plan import ServePlan

#: The caps a profile sets (its top level and ``[large_device]``).
CAP_KEYS = ("max_seqs", "token_budget", "prefill_chunk")


@dataclass(frozen=True)
class SchedulerCaps:
    """The scheduler defaults of one engine on one chip for one model (static).

    Attributes:
        engine: the profile's name.
        max_seqs: sequences running at once, ``None`` where the profile has none.
        token_budget: tokens per iteration, decode tokens included (raised to the model's
            context where the engine does so), ``None`` where the profile has none.
        prefill_chunk: the longest piece of one prompt per iteration, ``None``: not split.
        preemption: ``recompute``, ``swap``, ``none`` or ``None`` (not found).
        rule: which of the profile's values apply, in words (``default`` for a profile without
            a device rule, else the base or the larger caps and the rule's condition).
        source: the profile's source string of each cap.
    """

    engine: str
    max_seqs: int | None
    token_budget: int | None
    prefill_chunk: int | None
    preemption: str | None
    rule: str
    source: dict[str, str] = field(default_factory=dict)

    @property
    def iteration_tokens(self) -> int | None:
        """The load model's budget of one iteration (``ServePlan.prefill_chunk`` under load):
        the token budget, or the chunk where it is smaller; ``None`` without a budget."""
        if self.token_budget is None:
            return None
        return min(self.token_budget, self.prefill_chunk or self.token_budget)


def _large_device(profile: EngineProfile, chip: str, memory_bytes: float) -> bool:
    """Whether the profile's ``[large_device]`` rule holds for the chip: at least its memory,
    and a name (lower case) containing none of its excluded names."""
    rule = profile.large_device
    if rule is None or memory_bytes < rule["min_memory_bytes"]:
        return False
    return not any(name.lower() in chip.lower() for name in rule.get("excluded_chips", ()))


def _rule_text(profile: EngineProfile) -> str:
    """``chips of >= 70 GiB not named a100``: the profile's ``[large_device]`` condition."""
    rule = profile.large_device or {}
    text = f"chips of >= {rule['min_memory_bytes'] / 2**30:.4g} GiB"
    excluded = rule.get("excluded_chips", ())
    return text + (f" not named {', '.join(excluded)}" if excluded else "")


def scheduler_caps(
    profile: EngineProfile, chip: str, memory_bytes: float, context_tokens: float
) -> SchedulerCaps:
    """The caps ``profile`` sets on a chip named ``chip`` with ``memory_bytes`` of memory, for
    a model of ``context_tokens`` context: its top-level values, overridden by its
    ``[large_device]`` table where that rule holds; a budget that covers the context
    (``budget_covers_context``) is ``max(budget, context)``."""
    values: dict[str, Any] = {k: profile.caps.get(k) for k in (*CAP_KEYS, "preemption")}
    rule = "default"
    if _large_device(profile, chip, memory_bytes):
        assert profile.large_device is not None
        values |= {k: profile.large_device[k] for k in CAP_KEYS if k in profile.large_device}
        rule = f"the larger caps for {_rule_text(profile)}"
    elif profile.large_device is not None:
        rule = f"the base caps (the larger ones need {_rule_text(profile)})"
    budget = values["token_budget"]
    if budget is not None and profile.caps.get("budget_covers_context"):
        budget = max(budget, int(context_tokens))
        rule += f"; budget at least the model's context ({int(context_tokens)} tokens)"
    keys = (*CAP_KEYS, "preemption", "budget_covers_context", "large_device")
    return SchedulerCaps(
        engine=profile.name,
        max_seqs=values["max_seqs"],
        token_budget=budget,
        prefill_chunk=values["prefill_chunk"],
        preemption=values["preemption"],
        rule=rule,
        source={k: profile.source[k] for k in keys if k in profile.source},
    )


def engine_caps(
    engine: str | None, chip: str, memory_bytes: float, context_tokens: float
) -> SchedulerCaps:
    """:func:`scheduler_caps` of a built-in engine name or a profile file (``None``:
    :data:`~diffcost._serve.engine.DEFAULT_ENGINE`).

    Raises:
        SpecError: an unknown engine or an invalid profile (file, key and reason).
    """
    profile = load_engine(DEFAULT_ENGINE if engine is None else engine)
    return scheduler_caps(profile, chip, memory_bytes, context_tokens)


def capped_plan(
    plan: ServePlan, caps: SchedulerCaps, given: Collection[str] = ()
) -> tuple[ServePlan, dict[str, str]]:
    """The plan a loaded server runs: ``batch`` = the engine's sequence cap and
    ``prefill_chunk`` = its iteration budget (:attr:`SchedulerCaps.iteration_tokens`), each
    unless named in ``given`` (the user set it) or the profile has none (every row of a stacked
    plan alike); and where each came from, ``{"batch": "engine" | "plan", "prefill_chunk":
    ...}``.  Leaves keep their shapes and dtypes: a compiled load program takes the new plan
    without tracing again."""
    wanted = {"batch": caps.max_seqs, "prefill_chunk": caps.iteration_tokens}
    take = {k: v for k, v in wanted.items() if v is not None and k not in given}
    origin = {k: "engine" if k in take else "plan" for k in wanted}
    if not take:
        return plan, origin
    names = tuple(take)
    # a stacked plan keeps its shape
    new = tuple(
        jnp.broadcast_to(strong_float(float(take[k])), jnp.shape(getattr(plan, k))) for k in names
    )
    out = eqx.tree_at(lambda p: tuple(getattr(p, k) for k in names), plan, new)
    return out, origin


def caps_summary(caps: SchedulerCaps, origin: Mapping[str, str]) -> dict[str, Any]:
    """The ``caps`` block of ``diffcost serve --qps``: the caps the load model ran with and
    where each came from."""
    return {
        "engine": caps.engine,
        "rule": caps.rule,
        "max_seqs": caps.max_seqs,
        "token_budget": caps.token_budget,
        "prefill_chunk": caps.prefill_chunk,
        "preemption": caps.preemption,
        "batch_from": origin["batch"],
        "prefill_chunk_from": origin["prefill_chunk"],
        "source": dict(caps.source),
    }


__all__ = [
    "CAP_KEYS",
    "SchedulerCaps",
    "capped_plan",
    "caps_summary",
    "engine_caps",
    "scheduler_caps",
]
