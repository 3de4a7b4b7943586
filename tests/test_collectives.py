"""Collective algorithms (diffcost._terms.collectives): closed forms, selection, availability.

Generic properties (finite, positive, gradients, transforms, monotone in bandwidth, exact at
integer plans) are in tests/test_extension_points.py, for every algorithm in the registry.
"""

import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffcost as dc
from diffcost import COLLECTIVES, EXACT, RELAXED, AbstractCollective, SpecError, with_collective
from diffcost.testing import (
    DEFAULT_COLLECTIVE,
    NVLS,
    AbstractExtension,
    HierarchicalRing,
    Ring,
    Tree,
    all_gather_s,
    all_reduce_s,
    collective_of,
    registry,
)

B = 1e8


@pytest.fixture(scope="module")
def h100():
    """64 H100 in 8-chip NVLink domains (NVSwitch gen 3: declares NVLink SHARP)."""
    return dc.load_system("dgx-h100", chips=64)


def _links(s):
    frac = float(s.efficiency.link_bandwidth_fraction)
    return (
        float(s.scale_up_bandwidth_bytes_per_s) * frac,
        float(s.scale_out_bandwidth_bytes_per_s) * frac,
        float(s.scale_up_latency_s),
        float(s.scale_out_latency_s),
    )


def test_registry_names():
    assert dict(COLLECTIVES) == {
        "hierarchical": HierarchicalRing,
        "ring": Ring,
        "tree": Tree,
        "nvls": NVLS,
    }


@pytest.mark.parametrize("sm", [EXACT, RELAXED])
def test_default_is_the_hierarchical_ring_to_the_bit(h100, sm):
    """A system that selects nothing prices exactly as one that selects the hierarchical ring
    (every calibrated prediction: `diffcost validate --json` is unchanged)."""
    assert h100.collective is None and collective_of(h100) is DEFAULT_COLLECTIVE
    chosen = with_collective(h100, "hierarchical")
    for g, s in ((8.0, 1.0), (64.0, 1.0), (8.0, 8.0), (4.5, 2.0)):
        assert float(all_reduce_s(B, g, s, chosen, sm)) == float(all_reduce_s(B, g, s, h100, sm))
        assert float(all_gather_s(B, g, s, chosen, sm)) == float(all_gather_s(B, g, s, h100, sm))


def test_hierarchical_closed_form_across_domains(h100):
    """64 ranks, 8 per domain: ``2 (7/8)/up + 2 (7/8)/(8 out)`` per byte, ``2*7*8`` intra and
    ``2*7`` inter steps (Thakur et al. 2005; NCCL tuning.cc step counts)."""
    up, out, a_up, a_out = _links(h100)
    want = B * (2 * 7 / 8 / up + 2 * 7 / (8 * 8) / out) + 2 * 7 * 8 * a_up + 2 * 7 * a_out
    assert float(all_reduce_s(B, 64.0, 1.0, h100, EXACT)) == pytest.approx(want, rel=1e-12)


def test_flat_ring_equals_hierarchical_inside_a_domain_and_is_slower_across(h100):
    ring = with_collective(h100, "ring")
    inside = (8.0, 1.0)
    assert float(all_reduce_s(B, *inside, ring, EXACT)) == pytest.approx(
        float(all_reduce_s(B, *inside, h100, EXACT)), rel=1e-12
    )
    up, out, a_up, a_out = _links(h100)
    want = B * 2 * 63 / 64 / out + 2 * (64 - 8) * a_up + 2 * 7 * a_out
    got = float(all_reduce_s(B, 64.0, 1.0, ring, EXACT))
    assert got == pytest.approx(want, rel=1e-12)
    assert got > float(all_reduce_s(B, 64.0, 1.0, h100, EXACT))


def test_tree_closed_form_and_logarithmic_latency(h100):
    """NCCL's tree: ``2/up + 2/(l out)`` per byte, ``2 ((l-1) alpha_up + log2(r) alpha_out)``."""
    tree = with_collective(h100, "tree")
    up, out, a_up, a_out = _links(h100)
    want = B * (2 / up + 2 / (8 * out)) + 2 * (7 * a_up + 3 * a_out)
    assert float(all_reduce_s(B, 64.0, 1.0, tree, EXACT)) == pytest.approx(want, rel=1e-12)
    # latency-bound messages: the tree's log2(r) steps beat the ring's r - 1 across domains
    assert float(all_reduce_s(0.0, 64.0, 1.0, tree, EXACT)) < float(
        all_reduce_s(0.0, 64.0, 1.0, h100, EXACT)
    )
    # bandwidth-bound: it moves g / (g - 1) times the ring's bytes inside a domain
    big = 1e11
    ratio = float(all_reduce_s(big, 8.0, 1.0, tree, EXACT)) / float(
        all_reduce_s(big, 8.0, 1.0, h100, EXACT)
    )
    assert ratio == pytest.approx(8 / 7, rel=1e-3)


def test_nvls_moves_each_byte_once_each_way(h100):
    """Inside a domain ``B / up + 2 alpha_up``: 2 (l-1)/l = 1.75x less bandwidth time than the
    ring over 8 ranks; its all-gather is the ring's (nothing to reduce)."""
    nvls = with_collective(h100, NVLS())
    up, _, a_up, _ = _links(h100)
    assert float(all_reduce_s(B, 8.0, 1.0, nvls, EXACT)) == pytest.approx(
        B / up + 2 * a_up, rel=1e-12
    )
    assert float(all_gather_s(B, 8.0, 1.0, nvls, EXACT)) == float(
        all_gather_s(B, 8.0, 1.0, h100, EXACT)
    )


def test_nvls_only_where_the_system_declares_it():
    """`[interconnect] in_network_reduction = true` in the NVSwitch gen 3+ system files; the
    DGX A100's second-generation NVSwitch has no in-network reduction."""
    assert dc.load_system("dgx-h100").in_network_reduction
    assert dc.load_system("gb200-nvl72").in_network_reduction
    plain = dc.load_system("dgx-a100")
    assert not plain.in_network_reduction
    with pytest.raises(SpecError, match="collective: nvls needs a system whose scale-up"):
        with_collective(plain, "nvls")
    # a System built with it directly is refused when priced
    forced = dataclasses.replace(plain, collective=NVLS())
    with pytest.raises(SpecError, match="in_network_reduction"):
        all_reduce_s(B, 8.0, 1.0, forced, EXACT)


def test_unknown_name_lists_the_choices():
    with pytest.raises(
        SpecError, match="must be one of hierarchical, ring, tree, nvls; got 'mesh'"
    ):
        with_collective(dc.load_system("dgx-h100"), "mesh")


@pytest.mark.parametrize("name", list(COLLECTIVES))
@pytest.mark.parametrize("sm", [EXACT, RELAXED])
def test_group_of_one_costs_nothing_with_zero_gradient(h100, name, sm):
    system = with_collective(h100, name)
    f = lambda sys: all_reduce_s(B, 1.0, 8.0, sys, sm)
    assert float(f(system)) == 0.0
    grads = jax.tree_util.tree_leaves(eqx.filter_grad(f)(system))
    assert all(np.all(np.asarray(g) == 0.0) for g in grads)


@pytest.mark.parametrize("name", list(COLLECTIVES))
def test_relaxed_gradient_in_the_group_is_finite(h100, name):
    system = with_collective(h100, name)
    for g in (1.5, 5.5, 12.0, 40.0):
        d = float(jax.grad(lambda x: all_reduce_s(B, x, 1.0, system, RELAXED))(g))
        assert np.isfinite(d), (name, g)


def test_the_collective_reaches_training_and_serving(h100, llama70):
    """Selected on the system, it prices the data-parallel all-reduce of a training step and
    the tensor-parallel all-reduce of a serving pass.  Data parallel over ranks 4 apart: 2 per
    domain, 8 domains, where the flat ring pays scale-out bandwidth for all 2 (g-1)/g."""
    plan = dc.train_plan(tp=4, pp=2, dp=8, micro_batch=1)
    base = dc.TrainCost(h100, llama70)(plan)
    ring = dc.TrainCost(with_collective(h100, "ring"), llama70)(plan)
    assert float(ring.dp_comm_time_s) > float(base.dp_comm_time_s)
    assert float(ring.tp_comm_time_s) == float(base.tp_comm_time_s)  # TP stays in a domain
    splan = dc.serve_plan(tp=8, batch=16, input_len=2048, output_len=128)
    s_base = dc.ServeCost(h100, llama70)(splan)
    s_nvls = dc.ServeCost(with_collective(h100, "nvls"), llama70)(splan)
    assert float(s_nvls.tpot_s) < float(s_base.tpot_s)


def test_registry_refuses_abstract_unnamed_and_duplicate_classes():
    with pytest.raises(TypeError, match="abstract"):
        registry(AbstractCollective)

    class AbstractThing(AbstractExtension):
        pass

    class Unnamed(AbstractThing):
        pass

    class One(AbstractThing):
        name = "x"

    class Two(AbstractThing):
        name = "x"

    with pytest.raises(TypeError, match="no name"):
        registry(Unnamed)
    with pytest.raises(TypeError, match="both named 'x'"):
        registry(One, Two)


def test_nvls_in_a_stacked_batch_is_the_ring_where_not_declared(h100):
    """Under vmap the flag is traced: the NVLS cost blends with it, so a system of the batch
    that does not declare in-network reduction is priced by the hierarchical ring."""
    nvls = with_collective(h100, "nvls")
    off = dataclasses.replace(nvls, in_network_reduction=jnp.zeros(()))
    batch = jax.tree_util.tree_map(lambda a, b: jnp.stack([a, b]), nvls, off)
    got = jax.vmap(lambda s: all_reduce_s(B, 8.0, 1.0, s, EXACT))(batch)
    assert float(got[0]) == pytest.approx(float(all_reduce_s(B, 8.0, 1.0, nvls, EXACT)), rel=1e-12)
    assert float(got[1]) == pytest.approx(float(all_reduce_s(B, 8.0, 1.0, h100, EXACT)), rel=1e-12)
    assert float(got[0]) < float(got[1])
