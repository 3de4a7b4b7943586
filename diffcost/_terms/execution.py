"""A chip family's efficiency law: an extension point (:mod:`diffcost._core.extension`).

The fraction of peak FLOP/s a GEMM ``(m x k) @ (k x n)`` reaches depends on the chip's execution
class (``Chip.architecture``, one-hot over :data:`~diffcost._inputs.hardware.ARCHITECTURES`);
the model of each class, with its references, is in :mod:`diffcost._terms.gemm`'s docstring:

* :class:`Gpu`: ``f n/(n + d) k/(k + d) m/(m + f d)`` (tile and wave quantization, smoothed);
* :class:`Systolic`: ``k`` and ``n`` padded to the ``R x R`` array, ``R`` fill/drain rows per
  pass (Kung 1982; Jouppi et al., ISCA 2017);
* :class:`Dataflow`: the padding only (Abts et al., ISCA 2020).

Each is a final class of :class:`AbstractExecutionClass` in :data:`EXECUTION_CLASSES`, whose
order is that of ``ARCHITECTURES``; :func:`matmul_efficiency` is the class weights' sum
``sum_i w_i law_i``, so chips of different classes stack (a vmap over the catalogue) and a
one-hot chip gets its own law exactly (the other terms are multiplied by 0).  A new class is a
final class here, its entry in the registry and its name in ``ARCHITECTURES``; the generic tests
(``tests/test_extension_points.py``) test it.
"""

import abc
from collections.abc import Mapping
from typing import final

import jax.numpy as jnp
from jaxtyping import Array, ArrayLike

from .._core.extension import AbstractExtension, registry
from .._core.shared import in_evaluation, once
from .._core.smooth import EXACT, Smoothing, ceil, clip01
from .._inputs.hardware import Chip, Efficiency, System


def sustained_efficiency(fill: ArrayLike, peak_fraction: ArrayLike) -> Array:
    """Fraction of peak FLOP/s of a GEMM whose rows fill ``fill`` of the matrix issue slots.

    ``1 / (1 / f + 1 / u - 1)`` with ``u = fill`` and ``f = peak_fraction`` (dimensionless): the
    useful slots at the sustained rate ``f``, the idle ones at the full rate (module docstring;
    Choi et al., IPDPS 2013).  Equals ``f`` at ``u = 1``, ``u`` at ``f = 1``, tends to ``u`` as
    ``u -> 0``, increasing in both; smooth, so the relaxed and exact models share it.
    """
    u, f = jnp.asarray(fill), jnp.asarray(peak_fraction)
    return f * u / (u + f * (1.0 - u))  # the same, with finite gradients at u = 0


def gpu_fill(m: ArrayLike, n: ArrayLike, k: ArrayLike, eff: Efficiency) -> Array:
    """Fill of an ``m x k x n`` GEMM on a GPU: ``m/(m + d) * n/(n + d) * k/(k + d)``.

    ``d = eff.matmul_half_dim``: tile and wave quantization, smoothed (module docstring).
    """
    d = eff.matmul_half_dim
    m, n, k = (jnp.asarray(x) for x in (m, n, k))
    return (m / (m + d)) * (n / (n + d)) * (k / (k + d))


def gpu_matmul_efficiency(m: ArrayLike, n: ArrayLike, k: ArrayLike, eff: Efficiency) -> Array:
    """Fraction of peak FLOP/s of an ``m x k x n`` GEMM on a GPU (dimensionless, in (0, 1)).

    ``n/(n + d) * k/(k + d) * e(m/(m + d))`` with ``e`` = :func:`sustained_efficiency` at
    ``f = eff.matmul_peak_fraction`` and ``d = eff.matmul_half_dim`` (module docstring):
    ``f * n/(n + d) * k/(k + d) * m / (m + f d)``.
    """
    return half_fill(n, eff) * half_fill(k, eff) * gpu_row_efficiency(m, eff)


def mma_fraction_scale(m: ArrayLike, eff: Efficiency, mma_fraction: ArrayLike) -> Array:
    """Factor on a GPU GEMM's efficiency when its kernel's matrix instructions reach only
    ``r = mma_fraction`` of the tensor peak (warp-level ``mma.sync`` on Hopper, whose peak
    needs warpgroup MMA: :attr:`~diffcost._inputs.hardware.Chip.warp_mma_fraction`).

    The sustained fraction of a large GEMM becomes ``r f``; the row fill ``u = m / (m + d)``
    keeps its cost (:func:`sustained_efficiency`), so a skinny GEMM stays bound by its weight
    read: ``e(u, r f) / e(u, f) = r (u + f (1 - u)) / (u + r f (1 - u))``, ``r`` for a large
    GEMM, 1 as ``u -> 0`` and exactly 1 at ``r = 1``.
    """
    u, f, r = half_fill(m, eff), eff.matmul_peak_fraction, jnp.asarray(mma_fraction)
    return r * (u + f * (1.0 - u)) / (u + r * f * (1.0 - u))


@once
def half_fill(dim: ArrayLike, eff: Efficiency) -> Array:
    """A GPU GEMM dimension's fill ``dim / (dim + d)``, ``d = eff.matmul_half_dim``; once per
    dimension and evaluation (:mod:`diffcost._core.shared`): the GEMMs of a step share their
    rows and widths."""
    dim = jnp.asarray(dim)
    return dim / (dim + eff.matmul_half_dim)


@once
def gpu_row_efficiency(m: ArrayLike, eff: Efficiency) -> Array:
    """:func:`sustained_efficiency` of a GPU GEMM's row fill ``m / (m + d)`` at ``f =
    eff.matmul_peak_fraction``; once per row count and evaluation."""
    return sustained_efficiency(half_fill(m, eff), eff.matmul_peak_fraction)


#: Relative tolerance below which a dimension counts as a multiple of the array side.  Model
#: dimensions are integers computed as float32 ratios (``heads head_dim / tp``); a rounding
#: error or the 1e-6 perturbation of a finite difference must not add a whole tile at an exact
#: multiple.  Exact at every integer dimension up to ``1 / (tol R)`` tiles (1,500 at R = 320).
ALIGN_TOL = 2e-6


@once
def array_tiles(dim: ArrayLike, array_dim: ArrayLike, sm: Smoothing) -> Array:
    """Tiles of side ``R = array_dim`` a dimension of ``dim`` elements needs: ``ceil(dim / R)``.

    Exact: ``ceil(dim / R * (1 - tol))`` (:data:`ALIGN_TOL`), flat at multiples of ``R``.
    Relaxed: ``ceil(dim / R) - 1 + clip01(dim - R (ceil(dim / R) - 1))``, the smooth step
    confined to ``(j R, j R + 1)``, so it equals the exact count at every integer ``dim`` (not
    only at multiples of ``R``), is C1 in ``dim`` and has finite gradients.
    """
    dim, r = jnp.asarray(dim), jnp.asarray(array_dim)
    if not sm.relaxed:
        return ceil(dim / r * (1.0 - ALIGN_TOL), EXACT)
    below = ceil(dim / r, EXACT) - 1.0
    return below + clip01(dim - r * below, sm)


@once
def array_pad(n: ArrayLike, k: ArrayLike, chip: Chip, sm: Smoothing) -> Array:
    """Fraction of an ``R x R`` array a ``k x n`` weight fills: ``k/(R ceil(k/R)) n/(R ceil(n/R))``.

    ``k`` and ``n`` padded to the array side ``R = chip.array_dim`` (systolic: Jouppi et al.
    ISCA 2017 §2; dataflow: the Groq MXM is 320 wide, Abts et al. ISCA 2020).
    """
    return array_side_fill(k, chip, sm) * array_side_fill(n, chip, sm)


@once
def array_side_fill(dim: ArrayLike, chip: Chip, sm: Smoothing) -> Array:
    """Fraction of the array side ``R = chip.array_dim`` a dimension of ``dim`` elements fills,
    ``dim / (R ceil(dim / R))`` (:func:`array_pad`); once per dimension and evaluation (the
    GEMMs of a step share their widths)."""
    r = chip.array_dim
    dim = jnp.asarray(dim)
    return dim / (r * array_tiles(dim, r, sm))


def systolic_fill(m: ArrayLike, n: ArrayLike, k: ArrayLike, chip: Chip, sm: Smoothing) -> Array:
    """Fraction of an ``R x R`` weight-stationary array's cycles that do useful work.

    ``k / (R ceil(k / R)) * n / (R ceil(n / R)) * m / (m + R)``: ``k`` and ``n`` padded to the
    array (:func:`array_pad`), ``m`` streamed with ``R`` cycles of fill and drain per tile pass
    (Kung 1982; Jouppi et al. ISCA 2017 §2).  One row (batch-1 decode) uses ``1 / (1 + R)`` of
    the array's cycles.
    """
    m = jnp.asarray(m)
    return array_pad(n, k, chip, sm) * m / (m + chip.array_dim)


def dataflow_fill(n: ArrayLike, k: ArrayLike, chip: Chip, sm: Smoothing) -> Array:
    """Fraction of a dataflow chip's matrix array a ``k x n`` weight fills (dimensionless).

    :func:`array_pad` with ``R`` the array width (Groq MXM 320 x 320, Abts et al. ISCA 2020):
    no per-pass fill, the compiler pipelines the streams.
    """
    return array_pad(n, k, chip, sm)


@once
def systolic_row_efficiency(m: ArrayLike, chip: Chip, eff: Efficiency) -> Array:
    """:func:`sustained_efficiency` of a systolic pass's row fill ``m / (m + R)`` at ``f =
    eff.matmul_peak_fraction``; once per row count and evaluation."""
    m = jnp.asarray(m)
    return sustained_efficiency(m / (m + chip.array_dim), eff.matmul_peak_fraction)


class AbstractExecutionClass(AbstractExtension):
    """The efficiency law of a chip family: the fraction of peak a GEMM reaches, and the rows a
    skinny GEMM wastes (the serving model's compute-bound batch)."""

    @abc.abstractmethod
    def matmul_efficiency(
        self, m: Array, n: ArrayLike, k: ArrayLike, chip: Chip, eff: Efficiency, sm: Smoothing
    ) -> Array:
        """Achieved fraction of peak FLOP/s of an ``m x k x n`` GEMM, dimensionless in (0, 1]."""

    @abc.abstractmethod
    def wasted_rows(self, chip: Chip, eff: Efficiency) -> ArrayLike:
        """Rows ``d`` a GEMM of large ``k, n`` loses: its fill is ``m / (m + d)`` (rows)."""


@final
class Gpu(AbstractExecutionClass):
    """GPU kernels launched one by one (NVIDIA, AMD): :func:`gpu_matmul_efficiency`,
    ``f n/(n + d) k/(k + d) m/(m + f d)`` with ``d = matmul_half_dim``, ``f =
    matmul_peak_fraction``; wastes ``d`` rows."""

    name = "gpu"

    def matmul_efficiency(
        self, m: Array, n: ArrayLike, k: ArrayLike, chip: Chip, eff: Efficiency, sm: Smoothing
    ) -> Array:
        return gpu_matmul_efficiency(m, n, k, eff)

    def wasted_rows(self, chip: Chip, eff: Efficiency) -> ArrayLike:
        return eff.matmul_half_dim


@final
class Systolic(AbstractExecutionClass):
    """Weight-stationary ``R x R`` arrays (TPU MXU, Gaudi MME): :func:`array_pad` times
    :func:`sustained_efficiency` of the row fill ``m / (m + R)`` (Kung 1982; Jouppi et al.
    ISCA 2017 §2), the fill at the full clock and the padding at the sustained rate; wastes
    ``R`` rows."""

    name = "systolic"

    def matmul_efficiency(
        self, m: Array, n: ArrayLike, k: ArrayLike, chip: Chip, eff: Efficiency, sm: Smoothing
    ) -> Array:
        return array_pad(n, k, chip, sm) * systolic_row_efficiency(m, chip, eff)

    def wasted_rows(self, chip: Chip, eff: Efficiency) -> ArrayLike:
        return chip.array_dim


@final
class Dataflow(AbstractExecutionClass):
    """Compiler-scheduled dataflow with weights in on-chip SRAM (Groq TSP, Cerebras WSE):
    :func:`array_pad` at the sustained fraction ``f`` (Abts et al. ISCA 2020: streams
    software-pipelined, no per-pass fill); wastes no rows."""

    name = "dataflow"

    def matmul_efficiency(
        self, m: Array, n: ArrayLike, k: ArrayLike, chip: Chip, eff: Efficiency, sm: Smoothing
    ) -> Array:
        return array_pad(n, k, chip, sm) * eff.matmul_peak_fraction

    def wasted_rows(self, chip: Chip, eff: Efficiency) -> ArrayLike:
        return 0.0


#: Every execution class, in the order of ``Chip.architecture`` (``ARCHITECTURES``).
EXECUTION_CLASSES: Mapping[str, type[AbstractExecutionClass]] = registry(Gpu, Systolic, Dataflow)

_LAWS: tuple[AbstractExecutionClass, ...] = tuple(cls() for cls in EXECUTION_CLASSES.values())


def matmul_efficiency(
    m: ArrayLike, n: ArrayLike, k: ArrayLike, system: System, sm: Smoothing
) -> Array:
    """Achieved fraction of peak FLOP/s of an ``m x k x n`` GEMM (dimensionless, in (0, 1)).

    ``sum_i w_i law_i(m, n, k)`` over the chip's class weights ``w = Chip.architecture`` and
    the laws of :data:`EXECUTION_CLASSES` (:class:`Gpu`, :class:`Systolic`,
    :class:`Dataflow`).
    """
    chip, eff = system.chip, system.efficiency
    m = jnp.asarray(m)
    with in_evaluation():  # the laws' shared terms (array_pad) once, in any trace
        laws = [law.matmul_efficiency(m, n, k, chip, eff, sm) for law in _LAWS]
    # one contraction (2 equations) rather than a multiply and an add per class; exact for a
    # one-hot chip: the other terms are multiplied by 0
    return jnp.tensordot(chip.architecture, jnp.stack(jnp.broadcast_arrays(*laws)), axes=1)


def wasted_rows(chip: Chip, eff: Efficiency) -> Array:
    """Rows a skinny GEMM wastes on ``chip``: ``sum_i w_i d_i`` (:meth:`AbstractExecutionClass.
    wasted_rows`; a law wasting a constant 0 rows adds nothing to the program)."""
    terms = [(i, law.wasted_rows(chip, eff)) for i, law in enumerate(_LAWS)]
    kept = [chip.architecture[i] * d for i, d in terms if not (isinstance(d, float) and d == 0.0)]
    total = kept[0]
    for term in kept[1:]:
        total = total + term
    return total


__all__ = [
    "ALIGN_TOL",
    "EXECUTION_CLASSES",
    "AbstractExecutionClass",
    "Dataflow",
    "Gpu",
    "Systolic",
    "array_pad",
    "array_tiles",
    "dataflow_fill",
    "gpu_fill",
    "gpu_matmul_efficiency",
    "matmul_efficiency",
    "mma_fraction_scale",
    "sustained_efficiency",
    "systolic_fill",
    "wasted_rows",
]
