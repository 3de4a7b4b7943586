"""Memory-bound kernels of one layer and kernel launches: the terms besides GEMMs and attention.

Per token and layer a transformer runs elementwise kernels that stream 16-bit tensors: two norms
(read and write ``h``), two residual/dropout adds (read ``2 h``, write ``h``) and the MLP
activation (read ``(n_mat - 1) f / t``, write ``f / t``), ``10 h + n_mat f / t`` elements read
or written (Korthikanti et al. 2022, §4 counts the same tensors).  8-bit GEMMs quantize each
16-bit input first (Transformer Engine / TensorRT-LLM FP8 recipes).  On a GPU every kernel pays
a launch latency (``kernel_launch_s``), which dominates tiny decode steps.  Systolic and dataflow
chips run one compiled program per step: XLA compiles the whole jitted step into one TPU
executable whose ops the TensorCore sequencer issues with no per-op host dispatch (JAX docs,
"Asynchronous dispatch"; XLA "Operation semantics"/fusion; Gaudi's graph compiler likewise runs
a compiled "recipe"), and the Groq TSP executes a statically scheduled instruction stream with
no launches at all (Abts et al., ISCA 2020, §2).  They launch no kernels, but no operation
takes zero time: each dependent operation still waits for its operands to cross the chip and
for the array pipeline to fill and drain, the chip's ``op_latency_s`` (spec key
``[execution] op_latency_us``, derived per chip in its ``[source]``: Cerebras WSE, partial sums
crossing a layer's region of the 2D core mesh at one hop per cycle, Lie, "Cerebras
Architecture Deep Dive", Hot Chips 34, 2022; Groq TSP, a stream crossing the functional slices
of a superlane at one slice per cycle, Abts et al. ISCA 2020, §2-3; TPU and Gaudi, the array's
fill/drain plus the first operand tile's on-chip transfer, Kung 1982, Jouppi et al. ISCA 2017).
The one host dispatch per step (tens of us) is not per layer and is left out.
"""

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike

from .._inputs.hardware import System
from .._inputs.model import Model

#: Kernels launched per layer forward (2 norms, QKV, rotary/bias, attention, projection,
#: 2 residual/dropout, MLP in, activation, MLP out, one collective): an op count, not a fit.
KERNELS_PER_LAYER_FORWARD = 12.0
#: Weight GEMMs per layer (QKV, output projection, MLP in, MLP out): one (de)quantization
#: kernel each when the engine quantizes activations or dequantizes weights separately.
GEMMS_PER_LAYER = 4.0
#: 16-bit elements read or written per token per layer by norms and residual adds, per ``h``.
_ELEMENTWISE_PER_HIDDEN = 10.0


def elementwise_elements(
    tokens: ArrayLike, model: Model, tp: ArrayLike, replicated: ArrayLike = 1.0
) -> Array:
    """16-bit elements the elementwise kernels of one layer read or write, count.

    ``tokens * (10 h r + n_mat f / t + phi 2 (1 + k) h)``: norms and residual adds over the
    hidden state (``r``: the fraction of it on this chip, ``1 / t`` with sequence parallelism,
    else 1), a MoE block's token permutation and un-permutation, and the MLP
    activation over the local ``f / t`` (``f`` the MLP width a token runs through, its top-k
    experts' for a mixture of experts: :meth:`~diffcost._inputs.model.Model.active_ffn_hidden`).
    Bytes are twice this (16-bit).
    """
    h, f = model.hidden, model.active_ffn_hidden()
    return jnp.asarray(tokens) * (
        _ELEMENTWISE_PER_HIDDEN * h * replicated
        + model.mlp_matrices * f / tp
        + permute_elements_per_token(model)
    )


def permute_elements_per_token(model: Model) -> Array:
    """16-bit elements a MoE block's token permutation and un-permutation read or write per
    token, count: ``phi 2 (1 + k) h`` (``phi`` the share of MoE layers).  Each gathers the
    token's ``k`` copies into expert order or scatters the weighted results back, reading and
    writing ``(1 + k) h`` elements (Megatron-Core ``moe_utils.permute`` / ``unpermute``; Hwang
    et al., "Tutel", MLSys 2023, §2); the backward moves the same."""
    return model.moe_fraction() * 2.0 * (1.0 + model.experts_per_token) * model.hidden


def quantize_bytes(
    tokens: ArrayLike,
    model: Model,
    tp: ArrayLike,
    quantized: ArrayLike,
    out_bytes: ArrayLike,
) -> Array:
    """Bytes the input-quantization kernels of one layer move before 8-bit GEMMs.

    ``q (2 + a) tokens (2 h + (heads e + f) / t)``: read 2 bytes and write ``a`` per element of
    the QKV and MLP-in inputs (``h`` each, after the sequence-parallel all-gather), the
    projection input (``heads e / t``) and the MLP-out input (``f / t``); ``q`` is 1 when the
    GEMMs run in an 8-bit or narrower format (Transformer Engine FP8 casts; Micikevicius et al.,
    "FP8 Formats for Deep Learning", 2022); ``f`` the active MLP width.
    """
    h, a, e, f = model.hidden, model.heads, model.v_head_dim, model.active_ffn_hidden()
    return jnp.asarray(quantized) * (2.0 + out_bytes) * tokens * (2.0 * h + (a * e + f) / tp)


def launch_s(extra_kernels: ArrayLike, system: System) -> Array:
    """Launch latency of one layer's kernels (or latency floor of its operations), seconds.

    ``(12 + extra) * (w_gpu * kernel_launch_s + (1 - w_gpu) * op_latency_s)``:
    :data:`KERNELS_PER_LAYER_FORWARD` plus ``extra`` (separate quantization or dequantization
    kernels), each paying the GPU launch latency ``kernel_launch_s`` on a GPU (``w_gpu`` = 1,
    the chip's GPU class weight) and the per-operation latency floor ``op_latency_s`` of a
    compiled systolic or dataflow program otherwise (module docstring).  On a GPU the second
    term is ``0 * 0`` and the result is bit for bit ``kernels * kernel_launch_s``.
    """
    chip = system.chip
    kernels = jnp.asarray(KERNELS_PER_LAYER_FORWARD + extra_kernels)
    w_gpu = chip.gpu_weight()
    gpu = kernels * system.efficiency.kernel_launch_s * w_gpu
    return gpu + kernels * (1.0 - w_gpu) * chip.op_latency_s


__all__ = [
    "GEMMS_PER_LAYER",
    "KERNELS_PER_LAYER_FORWARD",
    "elementwise_elements",
    "launch_s",
    "permute_elements_per_token",
    "quantize_bytes",
]
