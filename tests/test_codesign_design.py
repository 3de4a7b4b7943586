"""The parametric chip: mapping to a Chip the cost models accept, gradients, physics, validation
against published chips, and the technology file's errors."""

import math
import tomllib

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import pytest

import diffcost as dc
from diffcost import EXACT, RELAXED, ChipDesign, design_chip, design_system, load_technology
from diffcost.testing import (
    chip_as_design,
    design_area_mm2,
    design_cost_usd,
    design_power_w,
    reference_chip,
    reference_technology,
    technology_path,
)
from diffcost.testing import design as D

LEAVES = [k for k in ChipDesign.__dataclass_fields__ if k != "counting"]


@pytest.fixture(scope="module")
def tech():
    return load_technology("n4", hbm="hbm3")


@pytest.fixture(scope="module")
def h100_design(tech):
    return chip_as_design("h100-sxm", tech)


def _with(design, **fields):
    names = list(fields)
    return eqx.tree_at(
        lambda d: [getattr(d, n) for n in names],
        design,
        [jnp.asarray(float(v)) for v in fields.values()],
    )


def test_peaks_area_closed_form(tech, h100_design):
    """bf16 peak = area / (mm^2 per FLOP/cycle) x clock; area adds the parts (hand-derived)."""
    chip = design_chip(h100_design, tech)
    assert float(chip.peak_flop_per_s[2]) == pytest.approx(989.4e12, rel=1e-9)
    assert float(chip.peak_flop_per_s[4]) == pytest.approx(2 * 989.4e12, rel=1e-9)
    # 5 HBM3 stacks of 16 GiB; SRAM adds 50 MB; "no LPDDR" is ABSENT x16 channels of 4 GiB
    cap = 5 * 17.18e9 + 50e6 + D.ABSENT * 4.295e9
    assert float(chip.memory_capacity_bytes) == pytest.approx(cap, rel=1e-9)
    area = 989.4e12 / 1.83e9 * 1.319e-3 + 50 * 0.25 + 5 * 12 + (450 + 50) * 0.032
    area += D.ABSENT  # absent int arrays (mm^2); no LPDDR PHY: ABSENT channels are bought as 0
    assert float(design_area_mm2(h100_design, tech)) == pytest.approx(area, rel=1e-6)


SERVE = dict(batch=8, input_len=256, output_len=64)


def test_system_runs_serve_and_more_stacks_decode_faster(tech, h100_design):
    """design_system output is a System ServeCost accepts (finite results and gradients), it is
    the `like` system except for the chip and link numbers, and more HBM stacks (bandwidth)
    make a memory-bound decode faster."""
    like = dc.load_system("dgx-h100", chips=8)
    system = design_system(h100_design, tech, like)
    assert float(system.num_chips) == 8.0
    assert float(system.scale_up_bandwidth_bytes_per_s) == pytest.approx(450e9)
    assert jtu.tree_all(jtu.tree_map(lambda a, b: bool(a == b), system.efficiency, like.efficiency))
    model = dc.load_model("llama-2-7b")

    def tpot(d):
        out = dc.ServeCost(design_system(d, tech, like), model)(dc.serve_plan(**SERVE))
        return out.tpot_s, out

    (_, out), grad = jax.jit(jax.value_and_grad(tpot, has_aux=True))(h100_design)
    for value in (out.tpot_s, out.ttft_s, out.energy_per_token_j):
        assert math.isfinite(float(value)) and float(value) > 0
    assert all(math.isfinite(float(x)) for x in jtu.tree_leaves(grad))
    assert float(grad.hbm_stacks) < 0  # more stacks: more bandwidth, a faster decode step


def test_jit_and_grad_finite(tech, h100_design):
    """jit == eager, and the gradients of area, power, cost (exact and relaxed) and of a train
    step time (TrainCost on design_system) w.r.t. every design leaf are finite; a design
    without HBM too."""
    for f in (design_area_mm2, design_power_w, design_cost_usd):
        assert float(jax.jit(f)(h100_design, tech)) == pytest.approx(float(f(h100_design, tech)))
    no_hbm = _with(h100_design, hbm_stacks=D.ABSENT, sram_mb=500)
    for d in (h100_design, no_hbm):
        for f in (
            design_area_mm2,
            design_power_w,
            lambda d, t: design_cost_usd(d, t, RELAXED),
            lambda d, t: design_cost_usd(d, t, EXACT),
        ):
            g = jax.grad(lambda d, f=f: jnp.log(f(d, tech)))(d)
            assert all(math.isfinite(float(x)) for x in jtu.tree_leaves(g))
    like = dc.load_system("dgx-h100", chips=8)
    model, plan = dc.load_model("llama-2-7b"), dc.train_plan(dp=8, global_batch=64)

    def step(d):
        out = dc.TrainCost(design_system(d, tech, like), model)(plan)
        return out.step_time_s, out.energy_j

    (t, energy), g = jax.jit(jax.value_and_grad(step, has_aux=True))(h100_design)
    assert math.isfinite(float(t)) and float(t) > 0
    # activity energy from the design's ChipEnergy, at most chips x TDP x time
    tdp = float(design_power_w(h100_design, tech))
    assert 0 < float(energy) <= 8 * tdp * float(t) * (1 + 1e-9)
    assert all(math.isfinite(float(x)) for x in jtu.tree_leaves(g))
    assert float(g.matrix_area_mm2) < 0  # more matrix units: a shorter step


def test_monotone(tech, h100_design):
    """More SRAM -> more area; more stacks -> more bandwidth, power, cost; a faster clock ->
    more power per FLOP (voltage rises with it)."""
    base = h100_design
    big_sram = _with(base, sram_mb=100)
    assert float(design_area_mm2(big_sram, tech)) > float(design_area_mm2(base, tech))
    more = _with(base, hbm_stacks=6)
    for f in (design_power_w, design_cost_usd):
        assert float(f(more, tech)) > float(f(base, tech))
    bw = lambda d: float(design_chip(d, tech).memory_bandwidth_bytes_per_s)
    assert bw(more) > bw(base)
    assert float(D.memory_figures(more, tech)[1]) > float(D.memory_figures(base, tech)[1])
    fast = _with(base, clock_ghz=2.2)
    j = lambda d: float(design_chip(d, tech).energy.flop_j[2])
    assert j(fast) > j(base)


def test_yield_falls_with_area_and_dies_split_at_reticle(tech):
    areas = jnp.asarray([50.0, 200.0, 400.0, 800.0])
    yields = [float(D.die_yield(a, tech)) for a in areas]
    assert all(a > b for a, b in zip(yields, yields[1:], strict=False))
    # Murphy at A D0 = 0.8 (800 mm^2, 0.1/cm^2): ((1 - e^-0.8) / 0.8)^2
    assert yields[-1] == pytest.approx(((1 - math.exp(-0.8)) / 0.8) ** 2, rel=1e-9)
    # relaxed die count == exact at an integer number of reticles
    base = chip_as_design("h100-sxm", tech)
    extra = 2 * 858.0 - 1e-6 - float(design_area_mm2(base, tech))
    d = _with(base, matrix_area_mm2=float(base.matrix_area_mm2) + extra)
    assert float(D.dies(d, tech, EXACT)) == pytest.approx(2.0)
    assert float(D.dies(d, tech, RELAXED)) == pytest.approx(2.0)


CATALOGUE = ("h100-sxm", "h200", "b200", "mi300x", "groq-lpu", "jetson-agx-orin")


@pytest.mark.parametrize("name", CATALOGUE)
def test_catalogue_design_matches_its_chip_spec(name):
    """chip_as_design reproduces the catalogue chip's bf16/fp16 peak exactly and its memory
    capacity and bandwidth within the stack/channel granularity (validation; errors of area,
    power and cost are reported by benchmarks/codesign_chips.py)."""
    tech = reference_technology(name)
    chip = design_chip(chip_as_design(name, tech), tech)
    real = dc.load_chip(name)
    assert float(chip.peak_flop_per_s[3]) == pytest.approx(float(real.peak_flop_per_s[3]))
    cap = float(chip.memory_capacity_bytes) / float(real.memory_capacity_bytes)
    full_bw = float(D.memory_figures(chip_as_design(name, tech), tech)[1])  # a full memory
    bw = full_bw / float(real.memory_bandwidth_bytes_per_s)
    assert 0.9 < cap < 1.15 and 0.8 < bw < 1.3, (cap, bw)


def test_gpu_area_power_cost_within_published_bounds():
    """Published H100/H200/B200/MI300X die area, TDP and cost (technology.toml [chip.*],
    sourced) against the model: H100 is the area calibration point and H200 the same die
    (within 5%); the others are out of sample and must stay within 50% (area) and 25% (cost).
    Every unit at full rate at once draws more than the TDP (1.4-3.3x): the limit binds before
    the peak, as measured on the H100 (dense bf16 products at 700 W and 64% of the peak), and
    the running floor is a fraction of it."""
    for name, area_tol in (("h100-sxm", 0.05), ("h200", 0.05), ("b200", 0.5), ("mi300x", 0.5)):
        tech, ref = reference_technology(name), reference_chip(name)
        d = chip_as_design(name, tech)
        assert float(design_area_mm2(d, tech)) / ref["die_area_mm2"] == pytest.approx(
            1, abs=area_tol
        )
        assert 1.2 < float(design_power_w(d, tech)) / ref["tdp_w"] < 4.0
        assert 0.1 < float(D.idle_power_w(d, tech)) / ref["tdp_w"] < 0.35
        assert float(design_cost_usd(d, tech)) / ref["cost_usd"] == pytest.approx(1, abs=0.25)


def test_design_power_at_the_operating_points_measured_on_an_h100():
    """The H100 design's power at each phase measured on an H100 SXM (its clock, FLOP rate and
    DRAM rate; ``specs/power/h100-sxm-phases.toml``) against the board: in sample (the n4
    energies are derived from these phases), so this checks that the design model's sum
    (running floor ``f V^2``, FLOP energy ``V^2``, memory device + on-die path) carries them.
    Measured: the running floor within 10%, the tensor-core weight streams (decode-shaped
    products, b = 1-64) within 11%; plain HBM copies and reductions cost less per byte than a
    stream into the tensor cores (over-predicted by 17-40%, a known limit); a throttled phase
    (below the full clock: the board at its 700 W limit) within 20% of the limit; products on
    zeros (data-dependent energy, half of random data's) are not compared."""
    from diffcost.testing import measured_phases, phase_power_w, throttled

    tech = reference_technology("h100-sxm")
    d = chip_as_design("h100-sxm", tech)
    phases = [p for p in measured_phases() if not p["name"].endswith("_zeros")]
    assert len(phases) == 19
    for p in phases:
        ratio = phase_power_w(d, tech, p) / p["power_w"]
        if throttled(p):
            assert ratio == pytest.approx(1.0, abs=0.2), p["name"]
        elif p["name"].startswith("hbm_"):
            assert 1.0 < ratio < 1.45, p["name"]
        else:  # busy_l2 (the floor) and decode_b1..b64
            assert ratio == pytest.approx(1.0, abs=0.11), p["name"]


def _write(tmp_path, old, new):
    text = technology_path().read_text()
    assert old in text
    path = tmp_path / "technology.toml"
    path.write_text(text.replace(old, new, 1))
    return path


def test_bad_technology_file_names_file_key_and_reason(tmp_path):
    path = _write(tmp_path, "wafer_usd = 16988", "wafer_usd = -1")
    with pytest.raises(dc.SpecError, match=r"technology\.toml: node\.n4\.wafer_usd: must be posi"):
        load_technology("n4", path=path)
    path = _write(tmp_path, "sram_mm2_per_mb = 0.25\n", "")
    with pytest.raises(dc.SpecError, match=r"node\.n4\.sram_mm2_per_mb: missing"):
        load_technology("n4", path=path)
    path = _write(tmp_path, "wafer_usd = \"CSET, Khan & Mann, 'AI", 'x = "')
    with pytest.raises(dc.SpecError, match=r"source\.node\.n4\.wafer_usd: missing source"):
        load_technology("n4", path=path)
    with pytest.raises(dc.SpecError, match=r"\[node\.n9\]: table missing"):
        load_technology("n9")
    with pytest.raises(dc.SpecError, match=r"chip\.h999: no such chip"):
        reference_chip("h999")


def test_technology_file_problems_come_all_at_once_from_the_spec_checker(tmp_path):
    """The technology file goes through the one spec checker: every problem of the whole file
    (not only of the tables asked for), each naming file, key and reason, in one error."""
    text = technology_path().read_text()
    text = text.replace("wafer_usd = 16988", "wafer_usd = -1", 1)  # node.n4
    text = text.replace("[node.n7]\nmatrix_mm2", "[node.n7]\nmatrix_mm3", 1)  # a typo
    text = text.replace('node = "n5"', 'node = "n6"', 1)  # mi300x
    text = text.replace("pj_per_byte = 44", 'pj_per_byte = "44"', 1)  # links
    path = tmp_path / "technology.toml"
    path.write_text(text)
    with pytest.raises(dc.SpecError) as err:
        load_technology("n3", path=path)
    where = {(p.file, p.key) for p in err.value.problems}
    assert {key for file, key in where if file == str(path)} >= {
        "node.n4.wafer_usd",
        "node.n7.matrix_mm3_per_tflop_per_s_per_ghz",
        "node.n7.matrix_mm2_per_tflop_per_s_per_ghz",
        "chip.mi300x.node",
        "links.pj_per_byte",
    }
    message = str(err.value)
    assert "node.n7.matrix_mm3_per_tflop_per_s_per_ghz: unknown key; did you mean" in message
    assert "chip.mi300x.node: no [node.n6] table" in message
    assert "links.pj_per_byte: must be a number, got '44'" in message


def test_technology_schema_and_unit_factors_name_the_same_keys():
    from diffcost.testing import schema as S
    from diffcost.testing import technology as T

    assert set(S.TECHNOLOGY_NODE) == set(T.NODE_KEYS)
    assert set(S.TECHNOLOGY_HBM) == set(T.HBM_KEYS)
    assert set(S.TECHNOLOGY_LPDDR) == set(T.LPDDR_KEYS)
    assert set(S.TECHNOLOGY_FORMATS) == set(T.FORMAT_KEYS)
    assert set(S.TECHNOLOGY_LINKS) == set(T.LINK_KEYS)
    assert set(S.TECHNOLOGY_PACKAGE) == set(T.PACKAGE_KEYS)


def test_design_is_a_positive_float_pytree(h100_design):
    leaves = jtu.tree_leaves(h100_design)
    assert len(leaves) == 8 and all(float(x) > 0 for x in leaves)
    assert isinstance(h100_design, ChipDesign)


@pytest.mark.parametrize("f", [design_area_mm2, design_power_w, design_cost_usd])
def test_gradient_matches_finite_differences(tech, h100_design, f):
    """Autodiff == central differences (float64) for every design leaf of area, power, cost."""
    grad = jax.grad(lambda d: f(d, tech))(h100_design)
    for name in LEAVES:
        x = float(getattr(h100_design, name))
        h = 1e-6 * max(x, 1.0)  # absolute step for the ABSENT (1e-6) leaves
        up = f(_with(h100_design, **{name: x + h}), tech)
        down = f(_with(h100_design, **{name: x - h}), tech)
        fd = float(up - down) / (2 * h)
        assert float(getattr(grad, name)) == pytest.approx(fd, rel=1e-5, abs=1e-9), name


def test_vmap_over_stacked_designs_equals_loop(tech):
    """vmap over stacked designs (e.g. a sweep of SRAM sizes) == a Python loop."""
    base = chip_as_design("h100-sxm", tech)
    designs = [_with(base, sram_mb=s, hbm_stacks=k) for s, k in ((10, 4), (50, 5), (400, 8))]
    stacked = jtu.tree_map(lambda *xs: jnp.stack(xs), *designs)
    for f in (design_area_mm2, design_power_w, design_cost_usd):
        batched = jax.vmap(lambda d, f=f: f(d, tech))(stacked)
        loop = [float(f(d, tech)) for d in designs]
        assert [float(x) for x in batched] == pytest.approx(loop, rel=1e-12)


def test_every_table_of_the_file_loads_sourced():
    """Every node, HBM and LPDDR table passes the loader (values positive, each sourced), and
    every catalogue reference chip names existing tables."""
    doc = tomllib.loads(technology_path().read_text())
    for node in doc["node"]:
        for hbm in doc["hbm"]:
            for lpddr in doc["lpddr"]:
                tech = load_technology(node, hbm=hbm, lpddr=lpddr)
                assert all(bool(jnp.all(x > 0)) for x in jtu.tree_leaves(tech))
    assert set(doc["chip"]) == set(CATALOGUE)
    for name in CATALOGUE:
        reference_technology(name)


def test_buildable_neighbours_have_whole_stacks_and_channels(h100_design):
    """Floor and ceiling of each count; below one stack or channel is none (ABSENT)."""
    frac = eqx.tree_at(
        lambda d: (d.hbm_stacks, d.lpddr_channels),
        h100_design,
        (jnp.asarray(0.4), jnp.asarray(4.5)),
    )
    got = {(float(d.hbm_stacks), float(d.lpddr_channels)) for d in D.buildable(frac)}
    assert got == {(D.ABSENT, 4.0), (D.ABSENT, 5.0), (1.0, 4.0), (1.0, 5.0)}
    whole = D.buildable(h100_design)  # already whole: itself only
    assert len(whole) == 1 and float(whole[0].hbm_stacks) == float(h100_design.hbm_stacks)


def test_bought_counts_are_ceiling_of_use_minus_tolerance_relaxed_exact_off_the_first_step():
    """Exact ``ceil(n - 0.0105)``; relaxed equal at every whole count, outside the first step
    ``(0.0105, 0.1105)`` up to one part and from 1.05 parts on (the count itself); inside the
    step rising from 0 to 1."""
    ns = [1e-6, 0.01, 0.012, 0.3, 0.9, 1.0, 1.006, 1.06, 3.0, 11.999, 12.0]
    h100 = chip_as_design("h100-sxm", load_technology("n4"))

    def bought(n, counting):
        return float(D.bought_counts(_counts(h100, n, n, counting))[0])

    assert [bought(n, EXACT) for n in ns] == [0, 0, 1, 1, 1, 1, 1, 2, 3, 12, 12]
    relaxed = [bought(n, RELAXED) for n in ns]
    assert relaxed == pytest.approx([0, 0, 0, 1, 1, 1, 1.006, 1.06, 3, 11.999, 12], abs=3e-3)
    step = [bought(n, RELAXED) for n in (0.02, 0.04, 0.06, 0.08, 0.1)]
    assert all(0 < a < b < 1 for a, b in zip(step, step[1:], strict=False))


def _counts(design, stacks, channels, counting=EXACT):
    return D.relaxed_counting(_with(design, hbm_stacks=stacks, lpddr_channels=channels), counting)


@pytest.mark.parametrize("stacks,channels", [(D.ABSENT, 8), (0.01, 4), (1, 0.01), (5, 1), (12, 32)])
def test_relaxed_counting_equals_exact_at_whole_counts(tech, h100_design, stacks, channels):
    """At whole stacks and channels (and at none: ABSENT or the optimizer's box end 0.01) the
    relaxed staircase is the hard model; just above and below them (both sides) it is close
    (continuous: the relaxed count above one part is the count itself)."""
    fs = (design_area_mm2, design_power_w, lambda d, t: design_cost_usd(d, t, EXACT))
    for eps in (0.0, 1e-7, -1e-7):
        if stacks + eps <= 0 or channels + eps <= 0:
            continue
        counts = (stacks + eps, channels + eps)
        hard, soft = (_counts(h100_design, *counts, c) for c in (EXACT, RELAXED))
        bought = [[float(n) for n in D.bought_counts(d)] for d in (soft, hard)]
        assert bought[0] == pytest.approx(bought[1], abs=2 * abs(eps))
        for f in fs:
            rel = 1e-6 if eps else 1e-12
            assert float(f(soft, tech)) == pytest.approx(float(f(hard, tech)), rel=rel)
    # none is bought as none: the box's low end costs no stack
    if stacks < 1:
        assert float(D.bought_counts(_counts(h100_design, stacks, channels, RELAXED))[0]) == 0.0


def test_fraction_of_a_stack_is_paid_as_a_whole_one_but_gives_its_fraction(tech, h100_design):
    """0.6 stacks: price, PHY area and standby of 1 stack (exact; relaxed past its step),
    bandwidth of 0.6; a stack just past the tolerance is bought whole (exact)."""
    half, one = _counts(h100_design, 0.6, D.ABSENT), _counts(h100_design, 1, D.ABSENT)
    for counting in (EXACT, RELAXED):
        d = D.relaxed_counting(half, counting)
        assert float(design_cost_usd(d, tech)) == pytest.approx(float(design_cost_usd(one, tech)))
        assert float(design_area_mm2(d, tech)) == pytest.approx(float(design_area_mm2(one, tech)))
    bw = lambda d: float(D._external(d, tech)[1])  # external memory's bandwidth
    assert bw(half) == pytest.approx(0.6 * bw(one), rel=1e-5)  # (+ the ABSENT channels)
    assert float(D.bought_counts(_counts(h100_design, 1.02, D.ABSENT))[0]) == 2.0


@pytest.mark.parametrize("stacks", [0.01, 0.0105, 0.02, 0.1, 0.5, 1.0, 1.0105, 2.0, 4.3, 12.0])
def test_relaxed_counting_gradients_finite(tech, h100_design, stacks):
    """Finite gradients of area, power and cost w.r.t. every leaf with relaxed counting, at the
    box's low end, at the step's edges, inside it and at whole counts; positive inside."""
    d = _counts(h100_design, stacks, stacks, RELAXED)
    for f in (design_area_mm2, design_power_w, lambda d, t: design_cost_usd(d, t, RELAXED)):
        g = jax.grad(lambda d, f=f: jnp.log(f(d, tech)))(d)
        assert all(math.isfinite(float(x)) for x in jtu.tree_leaves(g))
    if stacks == 0.1:  # inside the step: more stacks cost more
        assert float(jax.grad(lambda d: design_cost_usd(d, tech, RELAXED))(d).hbm_stacks) > 0
