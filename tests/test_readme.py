"""The README's Python code runs as written."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.slow  # ~15 s: runs every README Python block (default run budget)
def test_readme_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks
    for block in blocks:
        exec(compile(block, str(README), "exec"), {})


def test_readme_quick_start_is_two_commands():
    text = README.read_text()
    start = text.index("## Quick start")
    section = text[start : text.index("##", start + 5)]
    commands = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    assert [c.strip() for c in commands] == [
        "pip install . && diffcost train",
        'pip install ".[test]" && python -m pytest',
    ]
