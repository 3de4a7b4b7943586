"""The posterior stored beside a calibration (``<name>.posterior.json``) and what a prediction
reads of it: the covariance of the log constants of a chip's basis and the discrepancy variance
of its regime (:mod:`diffcost._analysis.uncertainty` computes and writes it, and explains the
model; a p90 search ranks by :func:`required_risk`).
"""

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._core.errors import Problem, SpecError
from . import calibration as C
from .loader import load_spec, resolve

#: Chip families of the discrepancy regimes: the calibration's families, then every other chip.
REGIME_FAMILIES = (*C.FAMILY_NAMES, "other")
#: Fewer held-out points than this: a regime takes at least its kind's pooled variance.
MIN_POINTS = 3
#: Parallel-layout discrepancy regimes of training (:mod:`diffcost._analysis.uncertainty`),
#: stored as extra keys of the ``train_throughput`` discrepancy.
LAYOUT_REGIMES = ("zero3_multinode",)
#: Prefix of an engine regime's key (:mod:`diffcost._analysis.uncertainty`), stored under each
#: serving kind.
ENGINE_REGIME = "engine "
#: Regime of every published point of a mixture-of-experts model and of every prediction for
#: one: the MoE layer's kernel efficiency is not modelled beyond its GEMM rooflines (issue 12),
#: so MoE errors are their own, not their chip family's.
MOE_REGIME = "mixture of experts"


def engine_regime(engine: str) -> str:
    """The discrepancy regime key of a serving engine profile's name."""
    return ENGINE_REGIME + engine


@dataclass(frozen=True)
class Posterior:
    """Uncertainty of a calibration: covariance of the log constants per basis (``global``,
    each family, ``prior``: a chip whose constants are a per-chip prior) in the order of
    :data:`diffcost._analysis.calibrate.NAMES`, and the discrepancy variance of log outputs per
    kind and regime family (``default``: for a regime with no held-out data)."""

    log_cov: dict[str, np.ndarray]
    discrepancy: dict[str, dict[str, float]]
    default: float
    counts: dict[str, dict[str, int]]
    s2: float
    source: str = ""

    def cov_for(self, basis: str) -> np.ndarray:
        return self.log_cov.get(basis, self.log_cov["prior"])

    def variance(self, kind: str, family: str) -> float:
        return self.discrepancy.get(kind, {}).get(family, self.default)

    def layout_variance(self, regime: str) -> float:
        """Discrepancy variance of a training layout regime (:data:`LAYOUT_REGIMES`); the
        default where the stored posterior predates it."""
        return self.variance("train_throughput", regime)

    def moe_variance(self, kind: str) -> float:
        """Discrepancy variance of a mixture-of-experts prediction of ``kind``: its regime's,
        at least the worst family's (``default``) where it has fewer than :data:`MIN_POINTS`
        or none."""
        own = self.discrepancy.get(kind, {}).get(MOE_REGIME)
        if own is None or self.counts.get(kind, {}).get(MOE_REGIME, 0) < MIN_POINTS:
            return max(own or 0.0, self.default)
        return own

    def engine_variance(self, kind: str, engine: str | None) -> float | None:
        """Discrepancy variance of serving ``kind`` on an engine with its own regime (None:
        the engine has none, the chip family's applies)."""
        if engine is None:
            return None
        return self.discrepancy.get(kind, {}).get(engine_regime(engine))


def regime_family(chip: str) -> str:
    """The discrepancy regime family of a chip (``"other"`` outside the fitted families)."""
    return REGIME_FAMILIES[C.family_of(chip)]


def posterior_path(calibration: str | Path) -> Path:
    """Where a calibration's posterior lives: ``<calibration stem>.posterior.json`` beside it."""
    path = resolve("calibration", calibration)
    return path.with_name(path.stem + ".posterior.json")


@cache
def _load(path: str) -> Posterior | None:
    p = Path(path)
    if not p.is_file():
        return None
    d = json.loads(p.read_text())
    if list(d["constants"]) != list(C.NAMES):
        return None  # written for another set of fitted constants: not this model's
    return Posterior(
        {k: np.asarray(v, dtype=float) for k, v in d["log_covariance"].items()},
        d["discrepancy_log_variance"],
        float(d["default_log_variance"]),
        d["held_out_points"],
        float(d["s2"]),
        d["source"],
    )


def clear_cache() -> None:
    """Forget the posteriors read so far (after one is written)."""
    _load.cache_clear()


def load_posterior(calibration: str | Path = "default") -> Posterior | None:
    """The stored posterior of a calibration (None when it has none)."""
    return _load(str(posterior_path(calibration).resolve()))


def basis_of(chip: str, calibration: str | Path) -> str:
    """Which covariance of a posterior applies to a chip: its family's, ``prior`` (a chip with
    its own prior in the calibration file) or ``global``."""
    spec = load_spec("calibration", calibration)
    if chip in spec.info.source:
        return "prior"
    if chip in spec.values.get("overrides", {}) and C.family_of(chip) < len(C.FAMILIES):
        return C.FAMILY_NAMES[C.family_of(chip)]
    return "global"


class Risk(eqx.Module):
    """What the upper quantile of one output needs, as arrays (traceable in a search): the
    log-constant covariance of the chip's basis ``(n, n)``, the family's discrepancy variance
    and the ``zero3_multinode`` layout regime's (training step time; 0 weight for serving)."""

    cov: jax.Array
    family_var: jax.Array
    layout_var: jax.Array


def risk_for(chip: str, calibration: str | Path, metric: str) -> Risk | None:
    """The :class:`Risk` of outputs of ``metric`` kind on ``chip`` (None: no posterior)."""
    post = load_posterior(calibration)
    if post is None:
        return None
    fam = regime_family(chip)
    layout = post.layout_variance(LAYOUT_REGIMES[0]) if metric == "train_throughput" else 0.0
    return Risk(
        jnp.asarray(post.cov_for(basis_of(chip, calibration))),
        jnp.asarray(post.variance(metric, fam)),
        jnp.asarray(layout),
    )


def required_risk(chip: str | None, calibration: Any, kind: str) -> Any:
    """:func:`risk_for` of a p90 search, or a :class:`SpecError` naming the search space's
    ``objective`` when there is no chip name or no stored posterior to rank by."""
    risk = risk_for(chip, calibration, kind) if chip else None
    if risk is None:
        reason = (
            "p90 needs the chip name (chip=...) and a calibration with a stored "
            "posterior (python -m diffcost._analysis.uncertainty --write)"
        )
        raise SpecError([Problem("<search space>", "objective", reason)])
    return risk


__all__ = [
    "ENGINE_REGIME",
    "LAYOUT_REGIMES",
    "MIN_POINTS",
    "MOE_REGIME",
    "REGIME_FAMILIES",
    "Posterior",
    "Risk",
    "basis_of",
    "clear_cache",
    "engine_regime",
    "load_posterior",
    "posterior_path",
    "regime_family",
    "required_risk",
    "risk_for",
]
