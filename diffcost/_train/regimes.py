"""The parallel-layout regimes of a training plan: where the model's error is its own (a
discrepancy regime of :mod:`diffcost._analysis.uncertainty`, flagged as unmodelled by
:mod:`diffcost._analysis.coverage`).
"""

from typing import Any

import jax

from .._core.smooth import EXACT, Smoothing, is_one
from .._terms.comm import spans_domains


def zero3_multinode_weight(plan: Any, system: Any, sm: Smoothing = EXACT) -> jax.Array:
    """Weight of a training plan in the regime of DeepSpeed's ZeRO-3 over nodes (dimensionless,
    0..1): ``deepspeed_zero3 * zero[3] * (1 - is_one(r))`` with ``r = n / l`` the scale-up
    domains (nodes) one ZeRO shard group of ``n = shard_ranks`` ranks, ``tp`` apart
    (Megatron's rank order puts TP innermost), spans and ``l`` its members per domain
    (:func:`diffcost._terms.comm.local_members`, the grouping of the ZeRO-3 collectives in
    :func:`diffcost._train.cost.zero3_s`; the step is taken on the chip counts, ``n tp >
    domain``, by :func:`diffcost._terms.comm.spans_domains`).  Exact 0/1 at integer plans,
    smooth relaxed: the one predicate of the regime, for the UNMODELLED flag here and for its
    discrepancy
    (:mod:`diffcost._analysis.uncertainty`).  PyTorch FSDP over nodes (``deepspeed_zero3 = 0``)
    is outside it: its runs are predicted as well as the one-node ones (issue 42,
    ``llm-foundry-mpt.toml``'s MPT-70B on 32 and 64 A100, ``llm-foundry-mpt-h100.toml``)."""
    shard = plan.shard_ranks()
    spans = spans_domains(shard, plan.tp, system, sm) * (1.0 - is_one(shard, sm))
    return plan.deepspeed_zero3 * plan.zero[..., 3] * spans


__all__ = ["zero3_multinode_weight"]
