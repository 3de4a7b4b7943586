"""Results cached on disk between runs: reused while their input files are unchanged."""

from diffcost import load_measurements
from diffcost.testing import builtin_index, cached_json, index


def test_cached_result_is_reused_until_an_input_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("DIFFCOST_CACHE_DIR", str(tmp_path / "cache"))
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "a.toml").write_text("x = 1\n")
    calls = []

    def compute():
        calls.append(1)
        return {"n": len(calls)}

    assert cached_json("r", [inputs], compute) == {"n": 1}
    assert cached_json("r", [inputs], compute) == {"n": 1} and len(calls) == 1
    (inputs / "a.toml").write_text("x = 2\n")
    assert cached_json("r", [inputs], compute) == {"n": 2}
    monkeypatch.setenv("DIFFCOST_CACHE_DIR", "")  # disabled: computed every time
    assert cached_json("r", [inputs], compute) == {"n": 3}
    assert cached_json("r", [inputs], compute) == {"n": 4}


def test_coverage_index_from_the_cache_equals_the_computed_one(tmp_path, monkeypatch):
    monkeypatch.setenv("DIFFCOST_CACHE_DIR", str(tmp_path))
    fresh = builtin_index.__wrapped__()  # computes and stores
    assert list(tmp_path.glob("coverage-index-*.json"))
    again = builtin_index.__wrapped__()  # reads the stored file
    assert again == fresh == tuple(index(load_measurements()))
    assert all(isinstance(m.features, frozenset) for m in again)
