"""Edge devices and Trainium2 in the catalogue (issue 12): each loads with its published numbers;
an inference-only NPU decodes an int4 8B model at batch 1 bound by its LPDDR bandwidth, at more
tokens per joule than a data-centre GPU serving one user, and no edge device can train the model
(weights, gradients and Adam state exceed its memory)."""

import equinox as eqx
import jax.numpy as jnp
import pytest

import diffcost as dc
from diffcost import ChipEnergy

predict = eqx.filter_jit(lambda cost, plan: cost(plan))

# system -> (chip, int8 peak FLOP/s, memory bytes, memory bytes/s, power W); each from the chip's
# [source]: vendor data sheets and announcements (dense peaks).
EDGE = {
    "mac-mini-m4": ("apple-m4-ane", 38e12, 16e9, 120e9, 2.8),
    "snapdragon-x-elite-laptop": ("snapdragon-x-elite", 45e12, 32e9, 136e9, 12.0),
    "jetson-agx-orin-devkit": ("jetson-agx-orin", 85e12, 64e9, 204.8e9, 60.0),
    "jetson-agx-thor-devkit": ("jetson-agx-thor", 517e12, 128e9, 273e9, 130.0),
}
NPUS = ("mac-mini-m4", "snapdragon-x-elite-laptop")
INT4_BATCH1 = dict(batch=1, input_len=512, output_len=256, mode="static", weight_format="int4")


@pytest.fixture(scope="module")
def llama8():
    return dc.load_model("llama-3-8b")


@pytest.mark.parametrize("system_name", sorted(EDGE))
def test_edge_device_loads_with_the_published_numbers(system_name):
    chip_name, int8, capacity, bandwidth, power = EDGE[system_name]
    system = dc.load_system(system_name)
    assert float(system.num_chips) == 1 and chip_name in dc.builtin_names("chip")
    chip = system.chip
    assert float(chip.peak_flop_per_s[dc.FORMATS.index("int8")]) == pytest.approx(int8)
    assert float(chip.memory_capacity_bytes) == pytest.approx(capacity)
    assert float(chip.memory_bandwidth_bytes_per_s) == pytest.approx(bandwidth)
    assert float(chip.tdp_w) == pytest.approx(power)


def at_tdp(system):
    """``system`` with its chip's energy figures replaced by the TDP x time default."""
    chip = system.chip
    default = ChipEnergy(
        idle_w=chip.tdp_w,
        flop_j=jnp.zeros_like(chip.energy.flop_j),
        memory_j_per_byte=jnp.zeros(()),
        link_j_per_byte=jnp.zeros(()),
    )
    return eqx.tree_at(lambda s: s.chip.energy, system, default)


def _int4_batch1(system_name, model):
    system = dc.load_system(system_name)
    return system, predict(dc.ServeCost(system, model), dc.serve_plan(**INT4_BATCH1))


@pytest.mark.parametrize("system_name", NPUS)
def test_npu_decodes_8b_int4_bound_by_lpddr_within_a_few_watts(system_name, llama8):
    system, out = _int4_batch1(system_name, llama8)
    floor_s = float(out.memory.weights_bytes) / float(system.chip.memory_bandwidth_bytes_per_s)
    assert bool(out.fits())
    assert floor_s <= float(out.tpot_s) < 2.5 * floor_s
    assert float(out.decode_memory_bound_fraction) > 0.95
    watts = float(out.energy_per_token_j) / float(out.tpot_s)
    assert watts < 15


@pytest.mark.parametrize("system_name", NPUS)
def test_npu_gives_more_tokens_per_joule_than_an_h100_at_batch1(system_name, llama8):
    _, npu = _int4_batch1(system_name, llama8)
    # both at TDP x time: the NPUs have no [energy] figures, so compare like with like
    h100 = at_tdp(dc.load_system("dgx-h100", chips=1))
    gpu = predict(dc.ServeCost(h100, llama8), dc.serve_plan(**INT4_BATCH1))
    assert float(npu.energy_per_token_j) < 0.25 * float(gpu.energy_per_token_j)


@pytest.mark.parametrize("system_name", sorted(EDGE))
def test_edge_device_cannot_train_an_8b_model(system_name, llama8):
    system = dc.load_system(system_name)
    out = dc.TrainCost(system, llama8)(dc.train_plan(tp=1, pp=1, dp=1, global_batch=8))
    assert float(out.memory.total_bytes) > float(system.chip.memory_capacity_bytes)
    assert not bool(out.fits())


def test_70b_at_int4_fits_the_large_edge_modules_only():
    """35 GB of int4 weights: over 16-32 GB of NPU laptops, under Orin's 64 and Thor's 128 GB."""
    llama70 = dc.load_model("llama-3-70b")
    fits = {s: bool(_int4_batch1(s, llama70)[1].fits()) for s in EDGE}
    assert fits == {
        "mac-mini-m4": False,
        "snapdragon-x-elite-laptop": False,
        "jetson-agx-orin-devkit": True,
        "jetson-agx-thor-devkit": True,
    }


def test_trainium2_is_a_systolic_16_chip_instance():
    trn2 = dc.load_system("trn2-instance")
    assert float(trn2.num_chips) == 16
    assert float(trn2.scale_up_domain_chips) == 16
    assert float(trn2.chip.peak_flop_per_s[dc.FORMATS.index("fp8")]) == pytest.approx(1299e12)
