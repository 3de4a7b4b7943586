"""Collective terms (diffcost._terms.comm): a group of one communicates nothing."""

import equinox as eqx
import jax
import numpy as np
import pytest

import diffcost as dc
from diffcost import EXACT, RELAXED
from diffcost.testing import all_reduce_s


@pytest.mark.parametrize("sm", [EXACT, RELAXED])
@pytest.mark.parametrize("system", ["cerebras-cs3", "dgx-h100"])
def test_group_of_one_has_zero_time_and_zero_gradient(system, sm):
    """With ``stride == scale_up_domain_chips`` (Cerebras: one wafer per domain) the clip of the
    local member count sits at a tie; its subgradient charged a one-rank all-reduce for the
    domain size (elasticity of Cerebras batch-1 TPOT to it: -15)."""
    s = dc.load_system(system)
    stride = float(s.scale_up_domain_chips)
    f = lambda sys: all_reduce_s(1e6, 1.0, stride, sys, sm)
    assert float(f(s)) == 0.0
    grads = jax.tree_util.tree_leaves(eqx.filter_grad(f)(s))
    assert all(np.all(np.asarray(g) == 0.0) for g in grads)


def test_larger_groups_are_unchanged():
    """``1 - is_one(g)`` is exactly 1 for every integer group above one: the hierarchical ring
    closed form (Thakur et al. 2005) over 8 ranks of one NVLink domain."""
    s = dc.with_collective(dc.load_system("dgx-h100"), "hierarchical")
    b = 1e8
    beta = float(s.scale_up_bandwidth_bytes_per_s * s.efficiency.link_bandwidth_fraction)
    want = 2 * 7 * (b / (8 * beta) + float(s.scale_up_latency_s))
    assert float(all_reduce_s(b, 8.0, 1.0, s, EXACT)) == pytest.approx(want, rel=1e-6)
