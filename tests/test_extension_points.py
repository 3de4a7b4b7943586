"""Generic tests of every extension point (diffcost._core.extension): each implementation listed
in each registry passes them, so a new implementation is tested by adding it to its registry.

An extension point contributes :func:`probes`: for an implementation, scalar costs of a few
representative inputs, each as ``value(spec, sm)`` of a differentiable spec and ``scaled(spec,
theta)``, the spec with the resource the cost is inversely monotone in (link bandwidths for a
collective, peak FLOP/s for an execution class) multiplied by ``theta``.  The tests, per probe:

1. finite and positive, exact and relaxed;
2. gradients: finite with respect to every spec leaf, and the derivative along ``theta``
   matches central finite differences (float64);
3. transforms: ``jit(f) == f``, ``vmap(f)`` over ``theta`` equals the loop;
4. physics: more of the resource is never slower;
5. exact limit: relaxed equals exact at the probe's integer inputs;

and per registry: every implementation is final (subclassing it raises), the registry lists
every concrete implementation of its interface, and names are unique.
"""

import dataclasses
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffcost as dc
from diffcost import (
    COLLECTIVES,
    EXACT,
    RELAXED,
    AbstractCollective,
    Smoothing,
    builtin_names,
    with_collective,
)
from diffcost.testing import (
    ARCHITECTURES,
    ENGINE_BEHAVIOURS,
    EXECUTION_CLASSES,
    PLACEMENTS,
    AbstractEngineBehaviour,
    AbstractExecutionClass,
    AbstractExtension,
    AbstractPlacement,
    NearMemory,
    all_gather_s,
    all_reduce_s,
    is_abstract,
    placed_bandwidth_bytes_per_s,
)


@dataclasses.dataclass(frozen=True)
class Probe:
    """One cost of one implementation: ``value(scaled(spec, theta), sm)``, a scalar."""

    id: str
    spec: Any
    value: Callable[[Any, Smoothing], jax.Array]
    scaled: Callable[[Any, jax.Array], Any]
    integer: bool = True  # the inputs are an integer plan: relaxed == exact

    def at(self, theta: Any, sm: Smoothing) -> jax.Array:
        return self.value(self.scaled(self.spec, jnp.asarray(theta)), sm)


# --- collectives -----------------------------------------------------------------------------
def _faster_network(system: dc.System, theta: jax.Array) -> dc.System:
    return eqx.tree_at(
        lambda s: (s.scale_up_bandwidth_bytes_per_s, s.scale_out_bandwidth_bytes_per_s),
        system,
        (
            system.scale_up_bandwidth_bytes_per_s * theta,
            system.scale_out_bandwidth_bytes_per_s * theta,
        ),
    )


#: (group, stride) on a 64-chip system of 8-chip domains: inside one domain, two ranks of one,
#: a group spilling over two domains, data parallel across 8 domains, the whole cluster.
_GROUPS = ((8.0, 1.0), (2.0, 4.0), (16.0, 1.0), (8.0, 8.0), (64.0, 1.0))


def collective_probes(cls: type[AbstractCollective]) -> Iterator[Probe]:
    # 64 H100 in 8-chip NVLink domains; its NVSwitch declares in-network reduction (NVLS)
    system = with_collective(dc.load_system("dgx-h100", chips=64), cls())
    for op, fn in (("all_reduce", all_reduce_s), ("all_gather", all_gather_s)):
        for g, s in _GROUPS:
            yield Probe(
                f"{op}-g{g:g}-s{s:g}",
                system,
                lambda sys, sm, fn=fn, g=g, s=s: fn(1e8, g, s, sys, sm),
                _faster_network,
            )


# --- execution classes (a chip family's efficiency law) ---------------------------------------
def _faster_chip(system: dc.System, theta: jax.Array) -> dc.System:
    return eqx.tree_at(
        lambda s: s.chip.peak_flop_per_s, system, system.chip.peak_flop_per_s * theta
    )


@functools.cache
def _system_of_class(index: int) -> dc.System:
    """The first built-in system whose chip is of the execution class ``index``."""
    for name in builtin_names("system"):
        system = dc.load_system(name)
        if float(system.chip.architecture[index]) == 1.0:
            return system
    raise AssertionError(f"no built-in system of class {ARCHITECTURES[index]}")


#: (m, n, k): a decode GEMV, a square GEMM, a skinny one, dimensions off every tile size.
_SHAPES = (
    (1.0, 8192.0, 8192.0),
    (4096.0, 8192.0, 8192.0),
    (7.0, 1280.0, 8192.0),
    (512.0, 300.0, 129.0),
)


def execution_probes(cls: type[AbstractExecutionClass]) -> Iterator[Probe]:
    system = _system_of_class(ARCHITECTURES.index(cls.name))
    law = cls()
    for m, n, k in _SHAPES:

        def compute_s(sys, sm, m=m, n=n, k=k):
            eff = law.matmul_efficiency(jnp.asarray(m), n, k, sys.chip, sys.efficiency, sm)
            return 2.0 * m * n * k / (sys.chip.peak_flop_per_s[2] * eff)  # bf16 peak

        yield Probe(f"gemm-{m:g}x{n:g}x{k:g}", system, compute_s, _faster_chip)


# --- memory placement laws ------------------------------------------------------------------
def _faster_memory(system: dc.System, theta: jax.Array) -> dc.System:
    chip = system.chip
    return eqx.tree_at(
        lambda s: (s.chip.memory_bandwidth_bytes_per_s, s.chip.near_memory.bandwidth_bytes_per_s),
        system,
        (chip.memory_bandwidth_bytes_per_s * theta, chip.near_memory.bandwidth_bytes_per_s * theta),
    )


def placement_probes(cls: type[AbstractPlacement]) -> Iterator[Probe]:
    """An H100 given a 50 MB, 20 TB/s near level (no catalogue chip has one); working sets
    inside it, past it and far past it."""
    h100 = dc.load_system("dgx-h100")
    near = NearMemory(
        capacity_bytes=jnp.asarray(5e7), bandwidth_bytes_per_s=jnp.asarray(2e13), placement=cls()
    )
    system = eqx.tree_at(lambda s: s.chip.near_memory, h100, near)
    for w in (1e7, 1e9, 1e11):
        yield Probe(
            f"stream-{w:g}B",
            system,
            lambda sys, sm, w=w: w / placed_bandwidth_bytes_per_s(sys.chip, w, sm),
            _faster_memory,
        )


# --- engine behaviours -----------------------------------------------------------------------
def _faster_hardware(system: dc.System, theta: jax.Array) -> dc.System:
    """Every rate of the system times ``theta``: peaks, memory and links."""
    chip = system.chip
    return eqx.tree_at(
        lambda s: (
            s.chip.peak_flop_per_s,
            s.chip.memory_bandwidth_bytes_per_s,
            s.scale_up_bandwidth_bytes_per_s,
            s.scale_out_bandwidth_bytes_per_s,
        ),
        system,
        (
            chip.peak_flop_per_s * theta,
            chip.memory_bandwidth_bytes_per_s * theta,
            system.scale_up_bandwidth_bytes_per_s * theta,
            system.scale_out_bandwidth_bytes_per_s * theta,
        ),
    )


def engine_probes(cls: type[AbstractEngineBehaviour]) -> Iterator[Probe]:
    """The serving TPOT of a GQA model with int8 weight-only GEMMs at batch 1 (static: every
    behaviour has an effect there), with the behaviour switched off and on."""
    system, model = dc.load_system("dgx-h100", chips=2), dc.load_model("llama-3-8b")
    for on in (False, True):
        plan = dc.serve_plan(
            tp=2,
            batch=1,
            input_len=512,
            output_len=128,
            weight_format="int8",
            mode="static",
            **{cls.name: on},
        )
        yield Probe(
            f"tpot-{'on' if on else 'off'}",
            system,
            lambda sys, sm, plan=plan: dc.ServeCost(sys, model, smoothing=sm)(plan).tpot_s,
            _faster_hardware,
        )


# --- the registries --------------------------------------------------------------------------
POINTS: dict[str, tuple[type[AbstractExtension], Mapping[str, Any], Callable]] = {
    "collective": (AbstractCollective, COLLECTIVES, collective_probes),
    "execution": (AbstractExecutionClass, EXECUTION_CLASSES, execution_probes),
    "placement": (AbstractPlacement, PLACEMENTS, placement_probes),
    "engine": (AbstractEngineBehaviour, ENGINE_BEHAVIOURS, engine_probes),
}

CASES = [
    pytest.param(cls, probe, id=f"{point}-{name}-{probe.id}")
    for point, (_, reg, probes) in POINTS.items()
    for name, cls in reg.items()
    for probe in probes(cls)
]
IMPLEMENTATIONS = [
    pytest.param(interface, name, cls, id=f"{point}-{name}")
    for point, (interface, reg, _) in POINTS.items()
    for name, cls in reg.items()
]


@pytest.mark.parametrize("sm", [EXACT, RELAXED], ids=["exact", "relaxed"])
@pytest.mark.parametrize(("cls", "probe"), CASES)
def test_finite_and_positive(cls, probe: Probe, sm):
    value = float(probe.at(1.0, sm))
    assert np.isfinite(value) and value > 0.0, (cls.__name__, value)


@pytest.mark.parametrize(("cls", "probe"), CASES)
def test_gradients_are_finite_and_match_finite_differences(cls, probe: Probe):
    grads = eqx.filter_grad(probe.value)(probe.spec, RELAXED)
    leaves = jax.tree_util.tree_leaves(grads)
    assert leaves and all(np.all(np.isfinite(np.asarray(g))) for g in leaves), cls.__name__
    f = lambda theta: probe.at(theta, RELAXED)
    h = 1e-5
    fd = (float(f(1.0 + h)) - float(f(1.0 - h))) / (2 * h)
    assert float(jax.grad(f)(1.0)) == pytest.approx(fd, rel=1e-5, abs=1e-12 * abs(float(f(1.0))))


@pytest.mark.parametrize(("cls", "probe"), CASES)
def test_jit_equals_eager_and_vmap_equals_loop(cls, probe: Probe):
    thetas = jnp.array([0.5, 1.0, 2.0, 4.0])
    f = lambda theta: probe.at(theta, RELAXED)
    loop = np.array([float(f(t)) for t in thetas])
    assert float(jax.jit(f)(1.0)) == pytest.approx(float(f(1.0)), rel=1e-12)
    np.testing.assert_allclose(np.asarray(jax.vmap(f)(thetas)), loop, rtol=1e-12)


@pytest.mark.parametrize("sm", [EXACT, RELAXED], ids=["exact", "relaxed"])
@pytest.mark.parametrize(("cls", "probe"), CASES)
def test_more_bandwidth_is_never_slower(cls, probe: Probe, sm):
    values = [float(probe.at(t, sm)) for t in (0.5, 1.0, 2.0, 4.0)]
    assert all(b <= a for a, b in zip(values, values[1:], strict=False)), (cls.__name__, values)


@pytest.mark.parametrize(("cls", "probe"), CASES)
def test_relaxed_equals_exact_at_integer_inputs(cls, probe: Probe):
    if not probe.integer:
        pytest.skip("not an integer plan")
    exact, relaxed = float(probe.at(1.0, EXACT)), float(probe.at(1.0, RELAXED))
    assert relaxed == pytest.approx(exact, rel=1e-12), cls.__name__


@pytest.mark.parametrize(("interface", "name", "cls"), IMPLEMENTATIONS)
def test_implementations_are_final_and_named(interface, name, cls):
    assert issubclass(cls, interface) and cls.name == name and not is_abstract(cls)
    with pytest.raises(TypeError, match="final implementation"):
        type("Sub", (cls,), {})


def _concrete_subclasses(cls: type) -> Iterator[type]:
    for sub in cls.__subclasses__():
        if not is_abstract(sub):
            yield sub
        yield from _concrete_subclasses(sub)


@pytest.mark.parametrize("point", list(POINTS))
def test_registry_lists_every_implementation(point):
    interface, reg, _ = POINTS[point]
    defined = {c for c in _concrete_subclasses(interface) if c.__module__.startswith("diffcost")}
    assert defined == set(reg.values())


def test_execution_classes_follow_the_architecture_order():
    """``Chip.architecture`` weights the laws by position."""
    assert tuple(EXECUTION_CLASSES) == ARCHITECTURES
