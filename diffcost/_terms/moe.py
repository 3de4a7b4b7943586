"""Mixture-of-experts terms of one block: expert GEMMs at per-expert token counts, and the
all-to-all that moves tokens to their experts.

Routing (Shazeer et al., "Outrageously Large Neural Networks", ICLR 2017; Fedus et al., "Switch
Transformers", JMLR 2022; Lepikhin et al., "GShard", ICLR 2021): each token is sent to
``k = experts_per_token`` of the ``E`` routed experts.  With routing balanced across experts (the
auxiliary-loss or bias-balanced limit), ``G`` distinct tokens reach
an expert with probability ``1 - (1 - k/E)^G``, so

* the expected number of experts a block runs is ``E (1 - (1 - k/E)^G)``: decode at batch ``B``
  reads only these experts' weights (batch 1 of Mixtral: 2 of 8), training and prefill all of
  them;
* the ``G k`` token-expert assignments split evenly over the active experts: each runs a GEMM of
  ``m = G k / (E p)`` rows (``p`` the active fraction), never fewer than one.

Expert parallelism (EP; Lepikhin et al. 2021 §2.2; Megatron-Core ``--expert-model-parallel-size``)
spreads the experts over ``ep`` ranks (each holds ``E / ep``); with ``ep`` ranks carved from the
data-parallel ones each brings its own tokens (``G = ep T``), and tokens travel by an all-to-all
before the experts (dispatch) and after them (combine)
(:func:`diffcost._terms.comm.all_to_all_s`).  The GEMMs are
:func:`diffcost._terms.layer.expert_gemms`.

An expert layer run eagerly (PyTorch without a captured CUDA graph) does not launch its experts
as one kernel: dropless routing learns the tokens per expert on the host (a device-to-host
synchronisation in the dispatch), and Transformer Engine's ``GroupedLinear`` then issues one
cuBLASLt GEMM per local expert over several streams, each with its own quantization and setup
(:func:`eager_expert_dispatch_s`).  A layer captured in a CUDA graph with static per-rank
expert buffers launches none of this from the host.

Balanced on average is not balanced per step: the ``G k`` assignments fall on the ``ep`` ranks
like balls into bins, and the step waits for the busiest rank, whose expected load exceeds the
mean by a few standard deviations of a binomial load (:func:`expert_imbalance`).  A router
skewed beyond random (popular experts) adds to this statistical floor and is not modelled.
"""

import jax.numpy as jnp
from jax.scipy.special import ndtri
from jaxtyping import Array, ArrayLike

from .._core.shared import once
from .._core.smooth import Smoothing, safe_div, smax, smin
from .._inputs.model import Model


def active_expert_fraction(group_tokens: ArrayLike, model: Model) -> Array:
    """Expected fraction of a block's routed experts that ``group_tokens`` tokens use:
    ``1 - (1 - k/E)^G`` (each token picks ``k`` of ``E``; balanced routing).  0 for a dense
    model; 1 when every expert is picked."""
    return -jnp.expm1(jnp.asarray(group_tokens) * _log_unpicked(model))


@once
def _log_unpicked(model: Model) -> Array:
    """``log(1 - k/E)``, the log-probability that one token leaves an expert unpicked (``k/E``
    kept below 1); once per model and evaluation (:func:`active_expert_fraction`)."""
    ratio = jnp.minimum(safe_div(model.experts_per_token, model.experts), 1.0 - 1e-7)
    return jnp.log1p(-ratio)


def expert_imbalance(assignments: ArrayLike, ep: ArrayLike) -> Array:
    """Expected load of the busiest of ``ep`` expert-parallel ranks over the mean load, when
    ``assignments`` token-expert pairs fall on them uniformly at random (dimensionless, >= 1).

    ``1 + z(ep) sqrt((ep - 1) / A)``: ``ep`` binomial loads of mean ``A / ep`` and standard
    deviation ``sqrt(A / ep (1 - 1/ep))``, Gaussian for ``A >> ep`` (balls into bins: Raab and
    Steger, RANDOM 1998, ``m/n + sqrt(2 m ln(n) / n)`` asymptotically), whose maximum is their
    mean plus ``z(ep)`` deviations, the expected largest of ``ep`` standard normals by Blom's
    formula ``z = Phi^-1((ep - 0.375) / (ep + 0.25))`` (Blom 1958; Royston, Applied
    Statistics 1982; 1.43 at ep = 8 against the exact 1.42; 0 at ep = 1).  The square root is
    offset by 1e-12 so that its gradient stays finite at ``ep = 1``, where the factor is 1.
    """
    ep, z = _busiest_rank_z(ep)
    a = jnp.maximum(jnp.asarray(assignments), 1.0)
    return 1.0 + z * jnp.sqrt((ep - 1.0) / a + 1e-12)


@once
def _busiest_rank_z(ep: ArrayLike) -> tuple[Array, Array]:
    """``(max(ep, 1), z(ep))``: Blom's expected largest of ``ep`` standard normals
    (:func:`expert_imbalance`), once per degree and evaluation."""
    ep = jnp.maximum(jnp.asarray(ep), 1.0)
    return ep, ndtri((ep - 0.375) / (ep + 0.25))


def mixed_active_fraction(
    decode_tokens: ArrayLike,
    prompt_tokens: ArrayLike,
    piece: ArrayLike,
    model: Model,
    sm: Smoothing,
) -> Array:
    """Expected active-expert fraction of an averaged engine iteration.

    Continuous batching averages its iterations: ``prompt_tokens`` per iteration on average
    arrive as chunks of ``piece`` tokens, so a share ``s = min(1, P / piece)`` of the
    iterations carries ``max(P, piece)`` prompt tokens besides the ``D`` decode tokens and the
    rest carry none (Sarathi-Serve, OSDI'24).  The fraction is concave in the tokens, so it is
    averaged over the two kinds of iteration, not taken at the average token count:
    ``(1 - s) a(D) + s a(D + max(P, piece))`` with ``a`` :func:`active_expert_fraction`
    (a batch-1 Mixtral decode reads 2 of 8 experts, not the 6 of 5 averaged tokens).
    """
    share = smin(safe_div(prompt_tokens, piece), 1.0, sm)
    chunk = smax(prompt_tokens, piece, sm)
    decode = jnp.asarray(decode_tokens)
    with_prompt = active_expert_fraction(decode + chunk, model)
    return (1.0 - share) * active_expert_fraction(decode, model) + share * with_prompt


#: Seconds one eagerly dispatched per-expert GEMM call costs beyond its arithmetic: Transformer
#: Engine's per-expert multi-stream cuBLASLt path (``nvte_multi_tensor_gemm``; NVIDIA/
#: TransformerEngine PR #853 introduced it as ``GroupedLinear``) ran 8 experts of 128 tokens,
#: ``N = K = 2048``, in 0.272 ms on SM100 (NVIDIA/TransformerEngine PR #3134, "DISPATCH" row of
#: its TN (fprop) table, ``benchmarks/linear/benchmark_grouped_linear.py``): 34 us per expert,
#: of which the 1.07 GFLOP of each GEMM take about 1 us at the format's peak.
EAGER_EXPERT_CALL_S = 33e-6

#: Weight GEMMs of one expert in a forward pass: the MLP in (gate and up fused) and the MLP out
#: (Megatron-Core ``TEGroupedMLP``: ``linear_fc1`` and ``linear_fc2``).
EXPERT_GEMMS_PER_FORWARD = 2.0


def eager_expert_dispatch_s(
    local_experts: ArrayLike, moe_fraction: ArrayLike, graphed: ArrayLike
) -> Array:
    """Seconds one layer's forward adds by dispatching its local experts' GEMMs one by one.

    ``phi (1 - g) (E / ep) 2 c``: each of a rank's ``E / ep`` routed experts runs its two
    weight GEMMs as separate calls (:data:`EXPERT_GEMMS_PER_FORWARD`), each costing
    ``c =`` :data:`EAGER_EXPERT_CALL_S` beyond its arithmetic, in a share ``phi`` of the layers
    that are MoE blocks; the backward's data- and weight-gradient calls are twice the
    forward's, as for every term of a layer.  ``g = 1`` for an expert layer captured in a CUDA
    graph with static per-rank buffers (no host synchronisation, no per-call host work;
    Megatron-Core ``--cuda-graph-impl full_iteration`` with
    ``--moe-expert-rank-capacity-factor``), for which it is 0.  0 for a dense model
    (``E = 0``).

    The call cost is what the eager path costs beyond the roofline whatever the expert's
    size, so it weighs most on fine-grained experts with few tokens each (the Megatron-Core
    MoE report, arXiv:2603.07685, §1: "small per-expert GEMMs ... many kernel launches",
    host-boundedness, as the compute wall of MoE training).
    """
    calls = jnp.asarray(local_experts) * EXPERT_GEMMS_PER_FORWARD
    return jnp.asarray(moe_fraction) * (1.0 - jnp.asarray(graphed)) * calls * EAGER_EXPERT_CALL_S


def remote_dispatch_bytes(
    token_bytes: ArrayLike, experts_per_token: ArrayLike, group: ArrayLike, local: ArrayLike
) -> Array:
    """Bytes a rank sends out of its scale-up domain per dispatch when each token goes once
    to every remote domain holding any of its experts (DeepEP / HybridEP; DeepSeek-V3
    §3.2.2: "IB once per node, then NVLink forwarding").

    ``B (n - 1) (1 - (1 - 1/n)^k)`` for ``B`` the rank's token bytes (one copy each) over
    ``n = group / local`` domains, each of a token's ``k`` experts in any domain with
    probability ``1/n`` (experts spread evenly).  A plain all-to-all sends all ``k`` copies:
    ``B k (group - local) / group``.
    """
    n = jnp.asarray(group) / jnp.asarray(local)
    # 1/n < 1 kept away from 1: at n = 1 (no remote domain) the factor n - 1 is 0 anyway
    miss = jnp.log1p(-jnp.minimum(1.0 / jnp.maximum(n, 1.0), 1.0 - 1e-7))
    reach = -jnp.expm1(jnp.asarray(experts_per_token) * miss)
    return jnp.asarray(token_bytes) * (n - 1.0) * reach


__all__ = [
    "EAGER_EXPERT_CALL_S",
    "EXPERT_GEMMS_PER_FORWARD",
    "active_expert_fraction",
    "eager_expert_dispatch_s",
    "mixed_active_fraction",
    "remote_dispatch_bytes",
]
