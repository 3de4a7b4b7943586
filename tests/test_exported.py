"""diffcost._core.exported: programs traced once per structure, read back by a later process."""

from functools import partial

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffcost as dc
from diffcost.testing import ExportedProgram, exported, stable_name


class _Pair(eqx.Module):
    a: jax.Array
    b: jax.Array
    scale: float = eqx.field(static=True, default=2.0)


def _combine(p: _Pair, x: jax.Array) -> tuple[_Pair, jax.Array]:
    return _Pair(p.a * p.scale, p.b + x, p.scale), jnp.sum(p.a * x)


@pytest.fixture
def on(tmp_path):
    exported.enable(tmp_path)
    yield tmp_path
    exported.enable(None)


def _files(root):
    return sorted(p.name for p in root.rglob("*.bin"))


def _fresh(fn=_combine, name="combine"):
    """A new instance: nothing in memory, as in a new process."""
    return ExportedProgram(fn, name)


def test_a_later_process_reads_the_program_instead_of_tracing(on, monkeypatch):
    p, x = _Pair(jnp.arange(3.0), jnp.ones(3)), jnp.asarray(0.5)
    first = _fresh()(p, x)
    assert len(_files(on)) == 1

    def no_trace(*_):
        raise AssertionError("traced again")

    monkeypatch.setattr(ExportedProgram, "_export", no_trace)
    again = _fresh()(p, x)
    assert isinstance(again[0], _Pair) and again[0].scale == 2.0
    for u, v in zip(jax.tree.leaves(first), jax.tree.leaves(again), strict=True):
        np.testing.assert_array_equal(u, v)
    np.testing.assert_array_equal(again[1], jnp.sum(p.a * x))


def test_static_values_shapes_and_dtypes_are_part_of_the_key(on):
    x = jnp.asarray(0.5)
    _fresh()(_Pair(jnp.arange(3.0), jnp.ones(3)), x)
    out = _fresh()(_Pair(jnp.arange(3.0), jnp.ones(3), scale=3.0), x)  # another static field
    np.testing.assert_array_equal(out[0].a, 3.0 * jnp.arange(3.0))
    _fresh()(_Pair(jnp.arange(4.0), jnp.ones(4)), x)  # another shape
    _fresh()(_Pair(jnp.arange(3, dtype=jnp.float32), jnp.ones(3, jnp.float32)), x)
    assert len(_files(on)) == 4


def test_unnamed_static_values_and_unreadable_files_fall_back_to_tracing(on):
    p, x = _Pair(jnp.arange(3.0), jnp.ones(3)), jnp.asarray(0.5)
    prog = _fresh(lambda p, f, x: _combine(p, f(x)), "lambda-arg")
    out = prog(p, lambda v: v + 1.0, x)  # a lambda has no name that survives a process
    np.testing.assert_array_equal(out[1], jnp.sum(p.a * 1.5))
    assert _files(on) == []
    _fresh()(p, x)
    (path,) = on.rglob("*.bin")
    path.write_bytes(b"not a program")
    np.testing.assert_array_equal(_fresh()(p, x)[1], jnp.sum(p.a * x))


def test_off_it_is_filter_jit_and_writes_nothing(tmp_path):
    exported.enable(None)
    p = _Pair(jnp.arange(3.0), jnp.ones(3))
    np.testing.assert_array_equal(_fresh()(p, jnp.asarray(2.0))[1], 6.0)
    assert _files(tmp_path) == []


def test_stable_names():
    assert stable_name((1, 2.5, "a", None)) == "(1, 2.5, 'a', None)"
    assert stable_name(_combine) == f"{__name__}._combine"
    assert stable_name(partial(stable_name, 1)) is not None
    assert stable_name(lambda: 0) is None
    assert stable_name(object()) is None
    assert stable_name((1, object())) is None


def test_a_serving_prediction_read_back_equals_the_traced_one(on):
    """The command line's program (cli._programs.PREDICT): breakdown and linearisation."""
    from diffcost.testing import PREDICT

    cost = dc.ServeCost(dc.load_system("dgx-h100", chips=8), dc.load_model("llama-2-7b"))
    plan = dc.serve_plan(tp=1, batch=8, input_len=512, output_len=64)
    traced = PREDICT["serve"](cost, plan)
    read = ExportedProgram(PREDICT["serve"].fn, PREDICT["serve"].name)(cost, plan)
    assert type(read[0]) is type(traced[0])
    for u, v in zip(jax.tree.leaves(traced), jax.tree.leaves(read), strict=True):
        np.testing.assert_array_equal(u, v)
    np.testing.assert_allclose(read[0].tpot_s, cost(plan).tpot_s, rtol=1e-12)


def test_a_quick_program_is_compiled_with_the_quick_options_and_reads_back(on, monkeypatch):
    """``quick=True``: the exported call is compiled through ``quick_jit`` (LLVM -O0 on the
    CPU), written and read back like any other, with the same values."""
    wrapped = []
    real = exported.quick_jit
    monkeypatch.setattr(exported, "quick_jit", lambda f: wrapped.append(f) or real(f))
    p, x = _Pair(jnp.arange(3.0), jnp.ones(3)), jnp.asarray(0.5)
    first = ExportedProgram(_combine, "combine-quick", quick=True)(p, x)
    again = ExportedProgram(_combine, "combine-quick", quick=True)(p, x)  # read from disk
    assert len(wrapped) == 2 and len(_files(on)) == 1
    plain = _fresh()(p, x)
    for u, v, w in zip(*map(jax.tree.leaves, (first, again, plain)), strict=True):
        np.testing.assert_array_equal(u, w)
        np.testing.assert_array_equal(v, w)
