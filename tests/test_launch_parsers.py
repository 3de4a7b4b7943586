"""Every emitted launch line parses with its framework's real argument table.

The tables in ``tests/data/launch/`` were read from the real parsers (each file's ``source``:
Megatron-LM ``add_megatron_arguments`` at commit d98e8a64ddf3 and vLLM 0.33.0's ``vllm serve``
parser, by walking ``parser._actions``; TensorRT-LLM's ``trtllm-serve`` click options
transcribed from ``tensorrt_llm/commands/serve.py``).  Here each option of each line of
:mod:`tests.launch_cases` must exist, carry the right number of values, parse as its type and
lie in its choices.  The real parsers themselves (``parse_args`` + ``validate_args``;
``vllm serve`` + ``EngineArgs``) run in the optional job ``.ci/parsers/run``.
"""

import json
from pathlib import Path

import pytest
from launch_cases import TRAIN_SEARCHES, serve_lines, train_layout_lines, train_search_lines

_DATA = Path(__file__).parent / "data" / "launch"


def _table(name: str) -> dict:
    return json.loads((_DATA / f"{name}.json").read_text())


def _groups(args: tuple[str, ...]) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for token in args:
        if token.startswith("--"):
            out.append((token, []))
        else:
            assert out, f"value {token!r} before any option"
            out[-1][1].append(token)
    return out


_CAST = {"int": int, "float": float, "optional:int": int, "optional:float": float}


def problems(args: tuple[str, ...], flags: dict, extra: dict | None = None) -> list[str]:
    """What a parser with these option specs would reject in ``args`` (empty: nothing)."""
    out = []
    for option, values in _groups(args):
        spec = flags.get(option)
        if spec is None:
            out.append(f"{option}: no such option")
            continue
        nargs, kind = spec["nargs"], str(spec["type"])
        want = {0: 0, None: 1, 1: 1}.get(nargs)
        if want is not None and len(values) != want:
            out.append(f"{option}: takes {want} value(s), got {values}")
        if nargs in ("+",) and not values:
            out.append(f"{option}: needs at least one value")
        for v in values:
            if kind in _CAST:
                try:
                    _CAST[kind](v)
                except ValueError:
                    out.append(f"{option}: {v!r} is not {kind}")
            if spec["choices"] and v not in spec["choices"]:
                out.append(f"{option}: {v!r} not in {spec['choices']}")
            allowed = (extra or {}).get(option.lstrip("-").replace("-", "_"))
            if allowed and v not in allowed:
                out.append(f"{option}: {v!r} is not a valid value ({len(allowed)} known)")
            if "loads" in kind:
                json.loads(v)
    return out


_TRAIN = train_layout_lines()
_SERVE = serve_lines()


def _check_megatron(line, world):
    assert not line.refused
    assert problems(line.args, _table("megatron")["flags"]) == []
    assert line.program[-1] == "pretrain_gpt.py"
    nodes, per_node = int(line.program[2]), int(line.program[4])
    assert nodes * per_node == world


@pytest.mark.parametrize("name,line,world", _TRAIN, ids=[c[0] for c in _TRAIN])
def test_megatron_line_parses(name, line, world):
    _check_megatron(line, world)


@pytest.mark.slow  # three exact searches, ~22 s on 2 cores: the default run checks the layouts
@pytest.mark.parametrize("index", range(len(TRAIN_SEARCHES)), ids=[c[0] for c in TRAIN_SEARCHES])
def test_searched_megatron_lines_parse(index):
    lines = train_search_lines(index)
    assert len(lines) == 3  # the best plan and two runners-up
    for _, line, world in lines:
        _check_megatron(line, world)


@pytest.mark.parametrize("name,line", _SERVE, ids=[f"{c[1].framework} {c[0]}" for c in _SERVE])
def test_serving_line_parses(name, line):
    if line.framework == "vLLM":
        table = _table("vllm")
        assert problems(line.args, table["flags"], table["extra_valid_values"]) == []
        assert line.program[:2] == ("vllm", "serve")
    else:
        assert problems(line.args, _table("trtllm")["flags"]) == []
        assert line.program[0] == "trtllm-serve" and len(line.program) == 2


def test_the_checker_rejects_what_a_parser_would():
    """The table check has teeth: unknown options, missing values, bad types and choices."""
    flags = _table("megatron")["flags"]
    assert problems(("--fp32",), flags) == ["--fp32: no such option"]
    assert problems(("--tensor-model-parallel-size",), flags)
    assert problems(("--tensor-model-parallel-size", "two"), flags)
    assert problems(("--fp8-format", "e5m2"), flags)
    assert problems(("--sequence-parallel", "1"), flags)
    vllm = _table("vllm")
    assert problems(("--quantization", "fp4"), vllm["flags"], vllm["extra_valid_values"])
    assert problems(("--quantization", "fp8"), vllm["flags"], vllm["extra_valid_values"]) == []
    assert problems(("--tp-size", "2"), _table("trtllm")["flags"])  # click: underscores only
