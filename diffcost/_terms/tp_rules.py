"""The tensor-parallel split rules, each declared once.

Megatron-LM, vLLM and TensorRT-LLM split the attention heads, the MLP width and the KV heads
over the tensor-parallel ranks: the heads and the MLP width must divide by ``tp``, the KV heads
(query groups) must be a multiple or a divisor of ``tp`` (``TransformerConfig.__post_init__``,
``megatron/core/transformer/transformer_config.py``; TP beyond the KV heads replicates them).

Each rule is one :class:`TpRule`; its three forms are derived from it: the exact indicator
(:meth:`TpRule.holds`, on numbers, numpy or JAX arrays: the discrete search's candidate degrees
and masks), the relaxed violation (:meth:`TpRule.violation`, zero exactly where it holds: the
relaxed search's penalty) and the message a user sees (:meth:`TpRule.problem`).
"""

from dataclasses import dataclass
from typing import Any, final

from jaxtyping import Array

from .._core.smooth import Smoothing, divisibility_violation


@final
@dataclass(frozen=True)
class TpRule:
    """``key`` (a model integer: ``heads``, ``ffn_hidden``, ``kv_heads``) divisible by ``tp``;
    with ``either_way`` also valid when ``tp`` is a multiple of it (KV heads replicated).

    ``framework``: who refuses, named in the message of an ``either_way`` rule; ``layout``: a
    serving expert-layout rule applies only when the plan's ``expert_parallel`` is this
    (``None``: always); ``remainder`` and ``note``: what the message adds."""

    key: str
    either_way: bool = False
    framework: str = "Megatron-LM"
    layout: bool | None = None
    remainder: bool = True
    note: str = ""

    def holds(self, n: Any, tp: Any) -> Any:
        """The exact rule for ``n`` (the model's ``key``) and ``tp`` (numbers or arrays)."""
        ok = n % tp == 0
        return ok | (tp % n == 0) if self.either_way else ok

    def violation(self, n: Any, tp: Any, sm: Smoothing) -> Array:
        """0 where the rule holds, else positive: ``div(n / t)``, with ``either_way``
        ``div(n / t) * div(t / n)`` (either one an integer makes the product 0)."""
        v = divisibility_violation(n / tp, sm)
        return v * divisibility_violation(tp / n, sm) if self.either_way else v

    def problem(self, n: float, tp: float) -> str | None:
        """What the user reads when the rule fails for an exact plan (``None`` when it holds)."""
        if self.holds(n, tp):
            return None
        if self.either_way:
            return (
                f"{self.key} ({n:.0f}) is neither a multiple nor a divisor of tp ({tp:.0f}): "
                f"{self.framework} refuses the query-group split"
            )
        text = f"{self.key} ({n:.0f}) is not divisible by tp ({tp:.0f})"
        text += f": remainder {n % tp:.0f}" if self.remainder else ""
        return f"{text} {self.note}" if self.note else text


#: The rules, in the order their problems are reported.
TP_RULES: tuple[TpRule, ...] = (
    TpRule("heads"),
    TpRule("ffn_hidden"),
    TpRule("kv_heads", either_way=True),
)


#: A mixture of experts' layout over the tp ranks of a serving instance: whole experts spread
#: (``expert_parallel``: vLLM ``FusedMoE`` with EP puts ``experts / tp`` whole experts on each
#: rank), or every expert split by width (tensor-parallel experts).
EXPERT_LAYOUT_RULES: tuple[TpRule, ...] = (
    TpRule(
        "experts",
        layout=True,
        remainder=False,
        note="(expert parallel puts experts / tp whole experts on each rank)",
    ),
    TpRule(
        "expert_ffn_hidden", layout=False, note="(or spread whole experts with expert_parallel)"
    ),
)


def tp_allowed(model: Any, tp: int) -> bool:
    """Every rule holds for ``tp`` on ``model`` (its integers)."""
    return all(r.holds(int(getattr(model, r.key)), tp) for r in TP_RULES)


__all__ = ["EXPERT_LAYOUT_RULES", "TP_RULES", "TpRule", "tp_allowed"]
