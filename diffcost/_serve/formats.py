"""The formats a chip has, and the format a serving plan's GEMMs run in on it.

The loader gives a format that a chip file does not list the peak of the next wider one
(:data:`diffcost._inputs.hardware.FORMAT_FALLBACK`: fp4 -> fp8, fp8 -> bf16), so that every chip
stacks with the same eight peaks.  Serving must not price a GEMM at a rate for a format the
chip has no rate for: an fp4 plan on an H100 was priced at the fp8 peak and labelled fp4,
a kernel no engine runs.  The rules here decide, from the chip file, what runs instead:

* a chip **has** a format when its ``[compute]`` table lists a rate for it; bf16 and fp16 are
  one class (an engine casts the checkpoint to the one the chip has at load: vLLM
  ``--dtype float16`` on GPUs without bf16);
* weights in a format the chip has no GEMM rate for, narrower than 16 bits, run **weight-only**:
  stored and streamed in their format, expanded to the chip's 16-bit format inside the GEMM
  (W8A16, W4A16).  This is what the engines do: vLLM runs NVFP4 checkpoints on GPUs without
  FP4 tensor cores with its Marlin kernel, "NVFP4 weight-only GEMM via Marlin (W4A16)"
  (``vllm/model_executor/kernels/linear/nvfp4/marlin.py``, which logs "Your GPU does not have
  native support for FP4 computation ... Weight-only FP4 compression will be used leveraging
  the Marlin kernel"; ``vllm/model_executor/layers/quantization/utils/marlin_utils_fp4.py``
  at 00d52e9 refuses "NVFP4 weight + INT8/FP8 activation"), and fp8 checkpoints on Ampere
  with its FP8 Marlin kernel (``.../quantization/utils/marlin_utils_fp8.py``: "For GPUs that
  lack FP8 hardware support, we can leverage the Marlin kernel"; vLLM docs, "Supported
  Hardware": Marlin (GPTQ/AWQ/FP8) from Ampere, FP8 (W8A8) from Ada);
* a compute format the chip has no rate for, asked for explicitly, is refused: nothing would
  run it (TensorRT Model Optimizer support matrix: FP4 weights and activations on "Blackwell
  and Later", FP8 on "Ada and Later").

The serving cost model then prices such a plan as it prices any weight-only plan
(:func:`diffcost._serve.passes.consts`: the compute format's peak and activation bytes, the
weight format's bytes, and the dequantisation an engine without fused kernels pays).
"""

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._core.errors import Problem
from .._inputs.hardware import BYTES_PER_ELEMENT, FORMATS
from .._inputs.loader import load_spec
from .plan import default_compute_format

#: The 16-bit formats a weight-only GEMM expands narrower weights into, in order of preference
#: (Marlin and the other weight-only kernels take bf16 or fp16 activations).
WEIGHT_ONLY_COMPUTE: tuple[str, ...] = ("bf16", "fp16")

#: 16-bit formats a chip runs at the rate of the other when it lists only one of them.
_TWIN = {"bf16": "fp16", "fp16": "bf16"}

_SUFFIX = "_flop_per_s"


def listed_formats(compute: Mapping[str, Any]) -> tuple[str, ...]:
    """The formats a chip's ``[compute]`` values (SI keys ``<format>_flop_per_s``) give a rate
    for, in :data:`FORMATS` order."""
    return tuple(f for f in FORMATS if f"{f}{_SUFFIX}" in compute)


def chip_formats(chip: str | Path, where: str = "<arguments>") -> tuple[str, ...]:
    """The formats the chip ``chip`` (a built-in name or a file; ``where``: the file that names
    it) has a rate for: :func:`listed_formats` of its ``[compute]`` table."""
    return listed_formats(load_spec("chip", chip, where).values["compute"])


def hardware_chip_formats(kind: str, name: str | Path) -> tuple[str, tuple[str, ...]]:
    """The chip of a hardware reference (``kind`` ``"system"`` or ``"chip"``, ``name`` a
    built-in name or a file; a system's chip as its file names it) and the formats it has a rate
    for (:func:`chip_formats`)."""
    if kind == "system":
        system = load_spec("system", name)
        spec = load_spec("chip", system.values["chip"], system.info.path)
    else:
        spec = load_spec("chip", name)
    return spec.info.name, chip_formats(spec.info.path)


def has_format(fmt: str, formats: Sequence[str]) -> bool:
    """Whether a chip with the rates ``formats`` runs GEMMs in ``fmt`` (bf16 and fp16 stand
    for each other)."""
    return fmt in formats or _TWIN.get(fmt) in formats


def weight_only(weight_format: str, compute_format: str) -> bool:
    """Whether weights are expanded to a wider compute format inside the GEMM (W8A16, W4A16)."""
    return BYTES_PER_ELEMENT[weight_format] < BYTES_PER_ELEMENT[compute_format]


def compute_format_on(weight_format: str, formats: Sequence[str]) -> str | None:
    """The format the GEMMs of ``weight_format`` weights run in on a chip with the rates
    ``formats``: the weight format's own (:func:`~diffcost._serve.plan.default_compute_format`)
    when the chip has it; else, for weights narrower than 16 bits, weight-only in the first of
    :data:`WEIGHT_ONLY_COMPUTE` the chip lists (then its twin); ``None`` when neither runs."""
    own = default_compute_format(weight_format)
    if has_format(own, formats):
        return own
    if BYTES_PER_ELEMENT.get(weight_format, 2.0) >= 2.0:
        return None
    listed = [f for f in WEIGHT_ONLY_COMPUTE if f in formats]
    twins = [f for f in WEIGHT_ONLY_COMPUTE if has_format(f, formats)]
    return (listed or twins or [None])[0]


def format_note(weight_format: str, compute_format: str, chip: str, formats: Sequence[str]) -> str:
    """What a plan's formats run as, when the chip lacks the weight format's own GEMM rate
    (empty otherwise): ``fp4 weights run weight-only (W4A16): h100-sxm has no fp4 rate ...``."""
    own = default_compute_format(weight_format)
    if own == compute_format or has_format(own, formats):
        return ""
    bits = round(BYTES_PER_ELEMENT[weight_format] * 8)
    acts = round(BYTES_PER_ELEMENT[compute_format] * 8)
    return (
        f"{weight_format} weights run weight-only (W{bits}A{acts}): {chip} has no {own} rate, "
        f"so they are stored and read as {weight_format} and expanded to {compute_format} inside "
        f"each GEMM, priced at the {compute_format} peak (as vLLM's Marlin kernels run them)"
    )


def _lacks(chip: str, fmt: str, formats: Sequence[str]) -> str:
    return f"{chip} has no {fmt} rate (its chip file lists {', '.join(formats) or 'none'})"


def format_problems(
    values: Mapping[str, Any], chip: str, formats: Sequence[str], source: str
) -> list[Problem]:
    """Why a serving plan's formats cannot run on the chip (``values``: the plan's values as
    given; ``formats``: the chip's rates): an explicit ``compute_format`` the chip has no rate
    for, or weights that neither run in their own format nor weight-only (16 bits or wider)."""
    weight = values.get("weight_format", "bf16")
    compute = values.get("compute_format")
    if weight not in FORMATS or (compute is not None and compute not in FORMATS):
        return []  # an unknown format: the plan reports it
    if compute is not None:
        if has_format(compute, formats):
            return []
        fix = compute_format_on(weight, formats)
        hint = f"; leave it out to run {weight} weights in {fix}" if fix else ""
        return [Problem(source, "compute_format", f"{_lacks(chip, compute, formats)}{hint}")]
    if compute_format_on(weight, formats) is not None:
        return []
    reason = (
        f"{_lacks(chip, default_compute_format(weight), formats)}, and {weight} weights are "
        "not narrower than its 16-bit formats, so they cannot run weight-only"
    )
    return [Problem(source, "weight_format", reason)]


__all__ = [
    "WEIGHT_ONLY_COMPUTE",
    "chip_formats",
    "format_note",
    "format_problems",
    "compute_format_on",
    "has_format",
    "listed_formats",
    "weight_only",
]
