"""The weight GEMMs of one transformer layer, as data that training, serving and plots share.

Megatron tensor parallelism (Shoeybi et al. 2019, §3) splits the QKV and MLP-in weights by
columns and the attention-output and MLP-out weights by rows, so on one of ``t`` ranks the four
GEMMs of a layer over ``m`` tokens are (``m x k @ k x n``):

    QKV            n = (heads + 2 kv_heads) head_dim / t    k = hidden
    attention out  n = hidden                               k = heads head_dim / t
    MLP in         n = (mlp_matrices - 1) ffn_hidden / t    k = hidden   (gate and up for SwiGLU)
    MLP out        n = hidden                               k = ffn_hidden / t

and the output layer (logits) is ``n = vocab / t, k = hidden``.  The ``k x n`` operand is the
weight.  :func:`layer_gemms` is the one definition of these shapes: the training step, the
serving pass and :func:`diffcost._analysis.plots.roofline_ops` all read it.
"""

from typing import NamedTuple

from jaxtyping import Array, ArrayLike

from .._core.smooth import Smoothing
from .._inputs.hardware import System
from .._inputs.model import Model
from .gemm import GemmFormat, gemm_bytes, gemm_flop, gemm_time_s

#: Names of the four weight GEMMs of a layer, in the order of :func:`layer_gemms`.
LAYER_GEMMS = ("QKV", "attention out", "MLP in", "MLP out")


class GemmOp(NamedTuple):
    """``count`` independent ``m x k x n`` GEMMs in the formats ``fmt`` (a pytree of arrays)."""

    m: ArrayLike
    n: ArrayLike
    k: ArrayLike
    fmt: GemmFormat
    count: ArrayLike = 1.0

    def flop(self) -> Array:
        """FLOP: ``2 m n k count`` (:func:`~diffcost._terms.gemm.gemm_flop`)."""
        return gemm_flop(self.m, self.n, self.k, self.count)

    def bytes(self) -> Array:
        """Bytes moved (:func:`~diffcost._terms.gemm.gemm_bytes`)."""
        return gemm_bytes(self.m, self.n, self.k, self.fmt, self.count)

    def time_s(self, system: System, sm: Smoothing) -> Array:
        """Roofline seconds (:func:`~diffcost._terms.gemm.gemm_time_s`)."""
        return gemm_time_s(self.m, self.n, self.k, self.fmt, system, sm, self.count)


def layer_gemms(
    tokens: ArrayLike, model: Model, tp: ArrayLike, fmt: GemmFormat
) -> tuple[GemmOp, GemmOp, GemmOp, GemmOp]:
    """The four weight GEMMs of one layer over ``tokens`` rows on one of ``tp`` ranks.

    Shapes in the module docstring, named by :data:`LAYER_GEMMS`.
    """
    h, a, e, f = model.hidden, model.heads, model.head_dim, model.ffn_hidden
    return (
        GemmOp(tokens, model.attention_width() / tp, h, fmt),
        GemmOp(tokens, h, a * e / tp, fmt),
        GemmOp(tokens, (model.mlp_matrices - 1.0) * f / tp, h, fmt),
        GemmOp(tokens, h, f / tp, fmt),
    )


def logits_gemm(rows: ArrayLike, model: Model, tp: ArrayLike, fmt: GemmFormat) -> GemmOp:
    """The output-layer GEMM of ``rows`` tokens on one of ``tp`` ranks: ``n = vocab / t``,
    ``k = hidden`` (vocabulary-parallel output layer, Megatron)."""
    return GemmOp(rows, model.vocab / tp, model.hidden, fmt)


def layer_gemm_s(
    tokens: ArrayLike,
    model: Model,
    tp: ArrayLike,
    fmt: GemmFormat,
    system: System,
    sm: Smoothing,
) -> Array:
    """Seconds of the four weight GEMMs of one layer: the sum of their rooflines.

    ``sum_i max(2 m n_i k_i / (peak eff_i), bytes_i / bw_eff)`` over :func:`layer_gemms`
    (Williams et al., "Roofline", CACM 2009).
    """
    qkv, out, mlp_in, mlp_out = (
        op.time_s(system, sm) for op in layer_gemms(tokens, model, tp, fmt)
    )
    return qkv + out + mlp_in + mlp_out


__all__ = ["LAYER_GEMMS", "GemmOp", "layer_gemm_s", "layer_gemms", "logits_gemm"]
