"""A parametric chip: its design choices -> a :class:`Chip` the cost models accept, and its die
area, power and manufacturing cost from the sourced figures of a :class:`Technology`.

First-order physics, each step with its reference:

- Peak rate = units' area / area per (op per cycle) x clock (an array of MACs does a fixed
  number of operations per cycle; Jouppi et al., ISCA 2017, TPU v1 §2).
- Power = running floor + energy per op x ops/s + bytes/s x energy per byte (Choi et al.,
  IPDPS 2013), with energy ~ C V^2 and V linear in f above threshold (Sakurai & Newton,
  alpha-power law, IEEE JSSC 1990); the floor = leakage x area + clock distribution and uncore
  (~ f V^2) + memory standby; an external byte costs the device's energy and the on-die
  path's.  The N4 figures are measured on an H100 (``specs/codesign/technology.toml``).
- Die cost = wafer price / (gross dies per wafer x yield), gross dies
  ``pi (d/2)^2 / A - pi d / sqrt(2 A)`` (Hennessy & Patterson, *Computer Architecture*, 6th ed.,
  §1.6), Murphy's yield ``((1 - exp(-A D0)) / (A D0))^2`` (Murphy, Proc. IEEE 52, 1964);
  designs larger than the reticle are split into equal dies (``ceil(A / reticle)``).

Validation (``benchmarks/codesign_chips.py``, one set of constants; H100 calibrates the matrix
area, the interposer price and the N4 energies): GPU die areas within ~10% except MI300X (-42%:
its N6 I/O dies are not modelled), costs within 10%; power at 19 operating points measured on
an H100 (:mod:`~diffcost._codesign.power_points`) within 11% for the running floor and the
tensor-core weight streams, +17..+40% for plain HBM copies and reductions, -19..+7% for phases
at the 700 W limit; the Groq LPU is ~2.8x too large (matrix logic is derived from GPU SMs, far
less dense than a systolic array).  Not modelled: die-to-die links of split designs, speed
binning (the clock changes power, not cost), harvesting of partly defective dies, the host CPU
of an edge module, the power limit's throttling (a design's power budget is checked against
its workloads' power, which the optimizer keeps within it by the clock).
"""

import dataclasses
import math

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Float

from .._core.smooth import EXACT, RELAXED, Smoothing, ceil, clip01, relu, smax
from .._inputs.hardware import Chip, ChipEnergy, NearMemory, System, one_hot_architecture
from .._inputs.loader import load_spec
from .._terms.memory_levels import placement_share
from .technology import Technology, reference_chip

#: Value standing for "none" of a design quantity (the design's leaves stay positive).
ABSENT = 1e-6
#: Stacks or channels within this of a whole number above it are bought as that number
#: (:func:`bought_counts`): the optimizer's "none" is the low end of its box, 0.01.
COUNT_TOLERANCE = 0.0105
#: Width (in stacks or channels) of the relaxed step from none to one bought part (measured:
#: 0.5 left the edge optimum on 0.17 of an HBM stack, 0.25 on 0.06, 0.1 on 0.02, all from none).
COUNT_WIDTH = 0.1


class ChipDesign(eqx.Module):
    """Design choices of one chip (all positive float scalars: an optimizer works on their logs).

    Attributes:
        matrix_area_mm2: training-capable matrix units (bf16/fp16/fp8 with transpose and fp32
            accumulate paths, and the logic that feeds them), mm^2.
        int_area_mm2: inference-only int8/int4 arrays, mm^2.
        sram_mb: on-chip SRAM, MB (1e6 bytes).
        hbm_stacks: HBM stacks (a small positive value stands for none).
        lpddr_channels: x16 LPDDR channels.
        scale_up_gb_per_s: scale-up link bandwidth per chip per direction, GB/s (1e9 bytes/s).
        scale_out_gb_per_s: scale-out link bandwidth per chip per direction, GB/s.
        clock_ghz: clock, GHz; the voltage follows it.
        counting: how whole stacks and channels are bought (static; :func:`bought_counts`):
            EXACT, the hard ceiling (the default, every chip that can be built); RELAXED, its
            smooth staircase (the co-design optimizer's designs).
    """

    matrix_area_mm2: Float[Array, ""]
    int_area_mm2: Float[Array, ""]
    sram_mb: Float[Array, ""]
    hbm_stacks: Float[Array, ""]
    lpddr_channels: Float[Array, ""]
    scale_up_gb_per_s: Float[Array, ""]
    scale_out_gb_per_s: Float[Array, ""]
    clock_ghz: Float[Array, ""]
    counting: Smoothing = eqx.field(static=True, default=EXACT)


def bought_counts(design: ChipDesign) -> tuple[Array, Array]:
    """HBM stacks and LPDDR channels paid for: ``ceil(n - COUNT_TOLERANCE)`` of the counts
    ``n`` in use (relaxed when ``design.counting`` is RELAXED, below).

    Memory is bought in whole parts: an HBM3 stack (JEDEC JESD238: 8- or 12-high, a 1024-bit
    interface of 16 channels) is priced, placed on the interposer, wired to its PHY and kept
    in standby as a whole, and so is an x16 LPDDR channel (JESD209-5).  So the price, the
    interposer footprint, the PHY area and the standby power follow the bought count, while
    capacity, bandwidth and access energy follow the count in use (a fraction of a stack is
    a stack with part of its channels wired, as an H100 ships 5 of 6 stacks).  Both agree
    at whole counts, where the model is the hard one.

    Relaxed (the optimizer's designs): from none to one part a C1 step of width
    :data:`COUNT_WIDTH` after the tolerance (the first part is paid whole as soon as it is
    used: a continuous count bought 0.18 of an HBM stack for a Jetson-class chip, 3x the
    latency of the buildable chip); above one part the count itself (``smooth.ceil``'s
    relaxation).  Stepping every whole count left plateaus on which a gradient descent from
    5 stacks stopped at 2-3 stacks (serve: 8.7-11.9 USD s/token instead of 6.7).  The box's
    low end 0.01 is bought as none.
    """
    sm = design.counting

    def buy(n: Array) -> Array:
        if not sm.relaxed:
            return ceil(n - COUNT_TOLERANCE, sm)
        first = clip01((n - COUNT_TOLERANCE) / COUNT_WIDTH, sm)  # none -> one part: smoothstep
        return first + relu(n - 1.0, sm, scale=1.0)  # above one part: smooth.ceil: n

    return buy(design.hbm_stacks), buy(design.lpddr_channels)


def _clock_hz(design: ChipDesign) -> Array:
    return design.clock_ghz * 1e9


def energy_scale(design: ChipDesign, tech: Technology) -> Array:
    """Dynamic energy per op relative to the nominal clock: ``(V/V_nom)^2`` with
    ``V/V_nom = a + (1 - a) f/f_nom`` (dimensionless; ``E = C V^2``, V linear in f above the
    threshold voltage: Sakurai & Newton, IEEE JSSC 25(2), 1990)."""
    a = tech.threshold_voltage_fraction
    v = a + (1.0 - a) * _clock_hz(design) / tech.nominal_clock_hz
    return v * v


def matrix_flop_per_s(design: ChipDesign, tech: Technology) -> Array:
    """Dense bf16 peak of the matrix units, FLOP/s: area / (mm^2 per FLOP/cycle) x clock."""
    return design.matrix_area_mm2 / tech.matrix_mm2_per_flop_per_cycle * _clock_hz(design)


def int_op_per_s(design: ChipDesign, tech: Technology) -> Array:
    """Dense int8 peak of the inference-only arrays, op/s (same law as the matrix units)."""
    return design.int_area_mm2 / tech.int_mm2_per_op_per_cycle * _clock_hz(design)


def peak_flop_per_s(design: ChipDesign, tech: Technology) -> Float[Array, "8"]:
    """Dense peaks by :data:`diffcost.FORMATS`, FLOP/s.  Matrix units: bf16 = fp16 = M, tf32
    and fp32 fractions of M, fp8 and int8 multiples of M (H100 whitepaper Table 3 ratios); fp4
    runs at the fp8 rate (no fp4 units).  Int arrays add I to int8 and ``int4_per_int8 I`` to
    int4; int4 on matrix units runs at their int8 rate."""
    m, i = matrix_flop_per_s(design, tech), int_op_per_s(design, tech)
    fp8, int8 = tech.fp8_per_bf16 * m, tech.int8_per_bf16 * m
    return jnp.stack(
        [tech.fp32_per_bf16 * m, tech.tf32_per_bf16 * m, m, m, fp8, int8 + i, fp8,
         int8 + tech.int4_per_int8 * i]
    )  # fmt: skip


def _external(design: ChipDesign, tech: Technology) -> tuple[Array, Array, Array]:
    """Off-chip memory: capacity bytes, bandwidth bytes/s, power at full bandwidth W: the
    devices' J/byte plus the on-die path's (``memory_path_j_per_byte`` x ``(V/V_nom)^2``,
    logic at the die's voltage; measured together on an H100 as 141 pJ/byte of a weight
    stream into the tensor cores, ``specs/codesign/technology.toml``)."""
    cap = design.hbm_stacks * tech.hbm_capacity_bytes + (
        design.lpddr_channels * tech.lpddr_capacity_bytes
    )
    hbm_bw = design.hbm_stacks * tech.hbm_bandwidth_bytes_per_s
    lpddr_bw = design.lpddr_channels * tech.lpddr_bandwidth_bytes_per_s
    path = (hbm_bw + lpddr_bw) * tech.memory_path_j_per_byte * energy_scale(design, tech)
    power = hbm_bw * tech.hbm_j_per_byte + lpddr_bw * tech.lpddr_j_per_byte + path
    return cap, hbm_bw + lpddr_bw, power


def sram_bandwidth_bytes_per_s(design: ChipDesign, tech: Technology) -> Array:
    """Aggregate SRAM bandwidth, bytes/s: bytes per cycle per byte of SRAM x SRAM x clock
    (banked SRAM: bandwidth grows with capacity; Groq LPU 80 TB/s for 230 MB at 0.9 GHz)."""
    return design.sram_mb * 1e6 * tech.sram_bytes_per_cycle_per_byte * _clock_hz(design)


def memory_figures(design: ChipDesign, tech: Technology) -> tuple[Array, Array, Array, Array]:
    """The design's memory filled to capacity: capacity bytes, bandwidth bytes/s, J/byte, SRAM
    share of the bytes.

    Capacity is external memory + SRAM.  A full memory (SRAM and the bought stacks and
    channels, :func:`bought_counts`: an :data:`ABSENT` part holds nothing) is placed over the
    two levels for the fastest stream
    (:func:`diffcost._terms.memory_levels.placement_share`: SRAM holds
    ``f = min(S / C, B_sram / (B_sram + B_ext))`` of them), so the bandwidth is
    ``B_ext / (1 - f)`` and the energy per byte ``f e_sram + (1 - f) e_ext``: a small SRAM
    beside HBM adds ``S / C`` of the HBM bandwidth, an SRAM-only chip (Groq's) streams at the
    SRAM's.  These are the figures of :func:`design_power_w`; a workload sees the bandwidth of
    its own working set (the cost models place it: :func:`design_chip` gives them both
    levels).  ``S / C`` is also the chip's ``on_chip_sram`` (a flag that is 1 only when SRAM
    holds everything; a relaxation in between).
    """
    ext_cap, ext_bw, ext_power = _external(design, tech)
    sram_bytes = design.sram_mb * 1e6
    capacity = ext_cap + sram_bytes
    stacks, channels = bought_counts(design)  # a full memory: of the parts bought, not ABSENT
    bought = stacks * tech.hbm_capacity_bytes + channels * tech.lpddr_capacity_bytes
    f = placement_share(
        sram_bytes, sram_bandwidth_bytes_per_s(design, tech), ext_bw, bought + sram_bytes, EXACT
    )
    ext_j = ext_power / ext_bw
    j_per_byte = ext_j + f * (tech.sram_j_per_byte - ext_j)
    return capacity, ext_bw / (1.0 - f), j_per_byte, sram_bytes / capacity


def near_memory(design: ChipDesign, tech: Technology) -> NearMemory:
    """The design's SRAM as the chip's near memory level (:class:`NearMemory`): its bytes,
    its full bandwidth (:func:`sram_bandwidth_bytes_per_s`) and its J/byte."""
    return NearMemory(
        capacity_bytes=design.sram_mb * 1e6,
        bandwidth_bytes_per_s=sram_bandwidth_bytes_per_s(design, tech),
        j_per_byte=tech.sram_j_per_byte,
    )


def design_area_mm2(design: ChipDesign, tech: Technology) -> Array:
    """Total logic-die area, mm^2: matrix + int units + SRAM + memory PHYs + link SerDes."""
    links = (design.scale_up_gb_per_s + design.scale_out_gb_per_s) * 1e9
    stacks, channels = bought_counts(design)
    return (
        design.matrix_area_mm2
        + design.int_area_mm2
        + design.sram_mb * 1e6 * tech.sram_mm2_per_byte
        + stacks * tech.hbm_phy_mm2
        + channels * tech.lpddr_phy_mm2
        + links * tech.serdes_mm2_per_byte_per_s
    )


def idle_power_w(design: ChipDesign, tech: Technology) -> Array:
    """Power of a running chip with no work, W (the Choi et al. 2013 ``P_0``): leakage x die
    area + the running floor (clock distribution, uncore, idle cores: ``floor_w_per_mm2`` x
    area x ``(f/f_nom) (V/V_nom)^2``, dynamic power) + standby of the bought stacks and
    channels.  At the H100's 1.98 GHz it is the 128 W measured there (``technology.toml``)."""
    stacks, channels = bought_counts(design)
    running = tech.floor_w_per_mm2 * _clock_hz(design) / tech.nominal_clock_hz
    return (
        (tech.leakage_w_per_mm2 + running * energy_scale(design, tech))
        * design_area_mm2(design, tech)
        + stacks * tech.hbm_idle_w
        + channels * tech.lpddr_idle_w
    )


def activity_power_w(
    design: ChipDesign,
    tech: Technology,
    flop_per_s: Float[Array, "8"],
    memory_bytes_per_s: ArrayLike,
    link_bytes_per_s: ArrayLike = 0.0,
    memory_j_per_byte: ArrayLike | None = None,
) -> Array:
    """Power of the design doing work at the given rates, W: ``P_0 + sum_f r_f e_f (V/V_nom)^2
    + Q e_mem + L e_link`` (Choi, Bedard, Fowler, Vuduc, 'A roofline model of energy', IPDPS
    2013, eq. 3 per second), ``r_f`` FLOP/s by :data:`diffcost.FORMATS`, ``Q`` external-memory
    bytes/s at the external memory's J/byte (or ``memory_j_per_byte``), ``L`` link bytes/s."""
    if memory_j_per_byte is None:
        _, ext_bw, ext_power = _external(design, tech)
        memory_j_per_byte = ext_power / ext_bw
    compute = jnp.sum(jnp.asarray(flop_per_s) * tech.flop_j) * energy_scale(design, tech)
    return (
        idle_power_w(design, tech)
        + compute
        + memory_bytes_per_s * memory_j_per_byte
        + link_bytes_per_s * tech.link_j_per_byte
    )


def design_power_w(design: ChipDesign, tech: Technology) -> Array:
    """Power with every unit at full rate at once, W (:func:`activity_power_w` of matrix units
    at the bf16 peak, int arrays at the int8 peak, the weights' memory at full bandwidth
    (:func:`memory_figures`: a full memory placed over external memory and SRAM; SRAM used as
    a cache adds area and leakage, not streaming power) and links sending at full rate).

    No workload reaches it: a compute-bound one leaves the memory mostly idle and the reverse,
    and a real board caps its power below it and throttles (an H100 SXM's dense bf16 products
    hit its 700 W limit at 64% of the peak).  So it is the chip's power limit only where a
    design names none; a power *budget* is checked against the workloads' own activity power
    (:func:`diffcost._codesign.workloads.relaxed_objective`)."""
    rates = jnp.zeros(8).at[2].set(matrix_flop_per_s(design, tech))
    rates = rates.at[5].set(int_op_per_s(design, tech))
    _, bandwidth, mem_j, _ = memory_figures(design, tech)
    links = (design.scale_up_gb_per_s + design.scale_out_gb_per_s) * 1e9
    return activity_power_w(design, tech, rates, bandwidth, links, mem_j)


def dies(design: ChipDesign, tech: Technology, sm: Smoothing = EXACT) -> Array:
    """Dies the design is split into: ``ceil(area / reticle)`` (relaxed: ``area / reticle``,
    floored at one die)."""
    return smax(ceil(design_area_mm2(design, tech) / tech.reticle_mm2, sm), 1.0, sm)


def die_yield(area_mm2: Array, tech: Technology) -> Array:
    """Murphy's yield ``((1 - exp(-A D0)) / (A D0))^2`` of one die of ``area_mm2`` (Murphy,
    'Cost-size optima of monolithic integrated circuits', Proc. IEEE 52(12), 1964)."""
    x = area_mm2 * tech.defect_density_per_mm2
    return (-jnp.expm1(-x) / x) ** 2


def dies_per_wafer(area_mm2: Array, tech: Technology, sm: Smoothing = EXACT) -> Array:
    """Gross dies per wafer ``pi (d/2)^2 / A - pi d / sqrt(2 A)`` (Hennessy & Patterson, 6th
    ed., §1.6), at least one (a wafer-scale die)."""
    d = tech.wafer_diameter_mm
    gross = jnp.pi * (d / 2.0) ** 2 / area_mm2 - jnp.pi * d / jnp.sqrt(2.0 * area_mm2)
    return smax(gross, 1.0, sm)


def die_cost_usd(design: ChipDesign, tech: Technology, sm: Smoothing = EXACT) -> Array:
    """Yield-adjusted logic-die cost, USD: ``n x wafer / (dies per wafer x yield)`` for
    ``n`` dies of area ``A / n`` each."""
    n = dies(design, tech, sm)
    each = design_area_mm2(design, tech) / n
    return n * tech.wafer_usd / (dies_per_wafer(each, tech, sm) * die_yield(each, tech))


def design_cost_usd(design: ChipDesign, tech: Technology, sm: Smoothing = EXACT) -> Array:
    """Manufacturing cost, USD: dies (yield-adjusted) + memory (USD/byte x bytes) + package
    (interposer USD/mm^2 x (die + HBM footprint) + test and assembly), memory and footprint
    of the bought stacks and channels (:func:`bought_counts`)."""
    stacks, channels = bought_counts(design)
    memory = (
        stacks * tech.hbm_capacity_bytes * tech.hbm_usd_per_byte
        + channels * tech.lpddr_capacity_bytes * tech.lpddr_usd_per_byte
    )
    interposer = design_area_mm2(design, tech) + stacks * tech.hbm_footprint_mm2
    package = interposer * tech.interposer_usd_per_mm2 + tech.test_assembly_usd
    return die_cost_usd(design, tech, sm) + memory + package


def design_energy(design: ChipDesign, tech: Technology) -> ChipEnergy:
    """Per-operation energies of the design (:class:`ChipEnergy`), at its clock's voltage;
    the memory figure is the external memory's (the SRAM's is in :func:`near_memory`)."""
    _, ext_bw, ext_power = _external(design, tech)
    return ChipEnergy(
        idle_w=idle_power_w(design, tech),
        flop_j=tech.flop_j * energy_scale(design, tech),
        memory_j_per_byte=ext_power / ext_bw,
        link_j_per_byte=tech.link_j_per_byte,
    )


def design_chip(design: ChipDesign, tech: Technology) -> Chip:
    """The :class:`Chip` of a design: GPU-like execution (kernels launched one by one; the
    fitted efficiency of ``like`` applies), ``array_dim`` 1 and ``op_latency_s`` 0 (unused
    for GPUs), ``tdp_w`` = :func:`design_power_w` (every unit at full rate: a limit no
    workload reaches, so the cost models' activity energy is uncapped); two memory levels: the
    external memory's bandwidth, the SRAM as :func:`near_memory`, capacity both together."""
    ext_cap, ext_bw, _ = _external(design, tech)
    sram_bytes = design.sram_mb * 1e6
    capacity = ext_cap + sram_bytes
    return Chip(
        peak_flop_per_s=peak_flop_per_s(design, tech),
        memory_capacity_bytes=capacity,
        memory_bandwidth_bytes_per_s=ext_bw,
        on_chip_sram=sram_bytes / capacity,
        tdp_w=design_power_w(design, tech),
        architecture=one_hot_architecture("gpu"),
        array_dim=jnp.asarray(1.0),
        op_latency_s=jnp.asarray(0.0),
        energy=design_energy(design, tech),
        near_memory=near_memory(design, tech),
    )


def design_system(design: ChipDesign, tech: Technology, like: System) -> System:
    """``like`` (efficiency, chip count, topology, latencies, price) with the design's chip and
    link bandwidths."""
    return eqx.tree_at(
        lambda s: (s.chip, s.scale_up_bandwidth_bytes_per_s, s.scale_out_bandwidth_bytes_per_s),
        like,
        (
            design_chip(design, tech),
            design.scale_up_gb_per_s * 1e9,
            design.scale_out_gb_per_s * 1e9,
        ),
    )


def buildable(design: ChipDesign) -> list[ChipDesign]:
    """The designs with whole HBM stacks and LPDDR channels next to ``design`` (floor and ceiling
    of each count; none is :data:`ABSENT`): the candidates that can be built, for the exact
    re-evaluation of an optimum whose relaxed counts are fractional.  Areas, SRAM, link
    bandwidths and the clock stay continuous (they are sized in fine steps).  The candidates
    are priced with the hard staircase (``counting`` EXACT)."""

    def whole(n: float) -> Array:
        return jnp.asarray(ABSENT if n < 1.0 else n, design.hbm_stacks.dtype)

    def counts(x: Array) -> list[int]:  # a count within 1e-3 of a whole one (ABSENT: 0) is it
        v = float(x)
        return [round(v)] if abs(v - round(v)) < 1e-3 else [math.floor(v), math.ceil(v)]

    out = []
    for h in counts(design.hbm_stacks):
        for c in counts(design.lpddr_channels):
            out.append(
                eqx.tree_at(
                    lambda d: (d.hbm_stacks, d.lpddr_channels),
                    relaxed_counting(design, EXACT),
                    (whole(h), whole(c)),
                )
            )
    return out


def relaxed_counting(design: ChipDesign, counting: Smoothing = RELAXED) -> ChipDesign:
    """``design`` with its stacks and channels bought by ``counting`` (:func:`bought_counts`)."""
    return dataclasses.replace(design, counting=counting)


def chip_as_design(name: str, tech: Technology) -> ChipDesign:
    """Approximate design of a catalogue chip (``specs/chips/<name>.toml`` for the peaks and
    links, ``[chip.<name>]`` of the technology file for clock, SRAM, stacks and channels).

    Matrix area reproduces the bf16 (else fp16) peak at the chip's clock; int-array area the
    int8 peak beyond the matrix units' ``int8_per_bf16`` share (none for GPUs; a
    remainder under 1% of the bf16 peak is datasheet rounding).  Absent parts
    get :data:`ABSENT`.  Use the chip's own technology
    (:func:`~diffcost._codesign.technology.reference_technology`) to compare with it.
    """
    values = load_spec("chip", name).values
    ref = reference_chip(name)
    compute, links = values["compute"], values["interconnect"]
    clock_hz = float(ref["clock_ghz"]) * 1e9
    bf16 = compute.get("bf16_flop_per_s", compute.get("fp16_flop_per_s", 0.0))
    extra_int8 = compute.get("int8_flop_per_s", 0.0) - float(tech.int8_per_bf16) * bf16
    matrix = bf16 / clock_hz * float(tech.matrix_mm2_per_flop_per_cycle)
    if extra_int8 < 0.01 * bf16:  # rounding of the datasheet ratios, not an int array
        extra_int8 = 0.0
    int_area = extra_int8 / clock_hz * float(tech.int_mm2_per_op_per_cycle)

    def f(x: float) -> Array:
        return jnp.asarray(max(float(x), ABSENT))

    return ChipDesign(
        matrix_area_mm2=f(matrix),
        int_area_mm2=f(int_area),
        sram_mb=f(ref["sram_mb"]),
        hbm_stacks=f(ref["hbm_stacks"]),
        lpddr_channels=f(ref["lpddr_channels"]),
        scale_up_gb_per_s=f(links["scale_up_bandwidth_bytes_per_s"] / 1e9),
        scale_out_gb_per_s=f(links["scale_out_bandwidth_bytes_per_s"] / 1e9),
        clock_ghz=f(ref["clock_ghz"]),
    )


__all__ = [
    "buildable",
    "bought_counts",
    "relaxed_counting",
    "ABSENT",
    "ChipDesign",
    "chip_as_design",
    "design_area_mm2",
    "design_chip",
    "design_cost_usd",
    "activity_power_w",
    "design_power_w",
    "design_system",
]
