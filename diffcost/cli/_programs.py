"""The command line's compiled entry points, each an
:class:`~diffcost._core.exported.ExportedProgram`: traced once per structure and, once
:func:`diffcost.cli.main` has enabled it, read from disk by later processes instead of traced."""

from functools import partial
from typing import Any

from .._analysis.uncertainty import predict_linearised
from .._core.exported import ExportedProgram
from .._inputs.hardware import strong_float
from .._serve.load import goodput_qps_jit, under_load


def _at_slo(cost: Any, plan: Any, ttft_s: Any, tpot_s: Any) -> Any:
    """The best batch of ``plan`` within the TTFT and TPOT limits (``ServeCost.at_slo``)."""
    return cost.at_slo(plan, ttft_s, tpot_s)


#: A prediction and its interval's linearisation, from one trace of the model.
PREDICT = {
    kind: ExportedProgram(partial(predict_linearised, kind=kind), f"{kind}-predict")
    for kind in ("train", "serve")
}
_AT_SLO = ExportedProgram(_at_slo, "serve-at-slo")


def AT_SLO(cost: Any, plan: Any, ttft_s: float, tpot_s: float) -> Any:  # noqa: N802
    """:func:`_at_slo` with the limits as array inputs: one program for every limit."""
    return _AT_SLO(cost, plan, strong_float(ttft_s), strong_float(tpot_s))


UNDER_LOAD = ExportedProgram(under_load, "serve-under-load")
GOODPUT_QPS = goodput_qps_jit
