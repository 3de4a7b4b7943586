"""Memory-bound kernels, launches, the TP all-reduce and the runtime reserve
(diffcost._terms.kernels, .comm, diffcost._inputs.reserve): one definition each for
training and serving."""

import equinox as eqx
import jax
import numpy as np
import pytest

import diffcost as dc
from diffcost import EXACT, RELAXED
from diffcost.testing import (
    KERNELS_PER_LAYER_FORWARD,
    all_reduce_s,
    elementwise_elements,
    launch_s,
    quantize_bytes,
    runtime_reserve_bytes,
    tp_all_reduce_s,
)


@pytest.fixture(scope="module")
def gpt3():
    return dc.load_model("gpt3-175b")


def test_elementwise_closed_form(gpt3):
    """GPT-3 (h 12288, f 4h, 2 MLP matrices): tokens (10 h r + 2 f / t)."""
    h = 12288.0
    assert float(elementwise_elements(100.0, gpt3, 8.0)) == 100 * (10 * h + 2 * 4 * h / 8)
    sp = float(elementwise_elements(100.0, gpt3, 8.0, 1.0 / 8.0))
    assert sp == pytest.approx(100 * (10 * h / 8 + 2 * 4 * h / 8), rel=1e-14)


def test_quantize_bytes_closed_form(gpt3):
    """Read 2 bytes, write 1 (fp8) for inputs of 2h + (a e + f) / t elements per token."""
    h = 12288.0
    got = float(quantize_bytes(10.0, gpt3, 4.0, 1.0, 1.0))
    assert got == pytest.approx(3 * 10 * (2 * h + (h + 4 * h) / 4), rel=1e-14)
    assert float(quantize_bytes(10.0, gpt3, 4.0, 0.0, 1.0)) == 0.0  # 16-bit GEMMs: no casts


def test_launches():
    system = dc.load_system("dgx-h100")
    launch = float(system.efficiency.kernel_launch_s)
    assert float(launch_s(0.0, system)) == pytest.approx(12 * launch, rel=1e-14)
    assert float(launch_s(4.0, system)) == pytest.approx(16 * launch, rel=1e-14)
    assert KERNELS_PER_LAYER_FORWARD == 12.0


def test_tp_all_reduce_is_the_16bit_activation_all_reduce(gpt3):
    system = dc.load_system("dgx-h100", chips=8)
    h = gpt3.hidden
    for tp in [1.0, 2.0, 8.0]:
        got = tp_all_reduce_s(512.0, h, tp, system, EXACT)
        assert float(got) == float(all_reduce_s(2.0 * 512.0 * h, tp, 1.0, system, EXACT))
    assert float(tp_all_reduce_s(512.0, h, 1.0, system, EXACT)) == 0.0
    f = lambda tokens: tp_all_reduce_s(tokens, h, 8.0, system, RELAXED)
    assert float(jax.jit(f)(512.0)) == pytest.approx(float(f(512.0)), rel=1e-14)
    assert np.isfinite(float(jax.grad(f)(512.0))) and float(jax.grad(f)(512.0)) > 0.0


def test_runtime_reserve_closed_form():
    gpu, sram = dc.load_system("dgx-h100"), dc.load_system("cerebras-cs3")
    eff, cap = gpu.efficiency, gpu.chip.memory_capacity_bytes
    expect = float(eff.memory_reserved_bytes + eff.memory_fragmentation_fraction * cap)
    assert float(runtime_reserve_bytes(gpu)) == pytest.approx(expect, rel=1e-14)
    assert float(runtime_reserve_bytes(sram)) == 0.0  # static SRAM plan: no reserve
    g = eqx.filter_grad(lambda s: runtime_reserve_bytes(s))(gpu)
    assert float(g.efficiency.memory_reserved_bytes) == 1.0


@pytest.mark.parametrize("system", ["dgx-h100", "cerebras-cs3", "groqrack"])
def test_training_and_serving_reserve_the_same_memory(system):
    """One term: the issue found SRAM chips charged a reserve in training but not in serving."""
    s = dc.load_system(system)
    model = dc.load_model("llama-2-7b")
    train = dc.TrainCost(s, model)(dc.train_plan(global_batch=1)).memory.reserved_bytes
    serve = dc.ServeCost(s, model)(dc.serve_plan(batch=1)).memory.reserved_bytes
    assert float(train) == float(serve) == float(runtime_reserve_bytes(s))
