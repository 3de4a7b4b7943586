"""The README's and the docs pages' Python code runs as written; the quick start is two commands."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))


@pytest.mark.slow  # ~15 s: runs every Python block of the README and docs/ (default run budget)
@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_python_blocks_run(page: Path):
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
    for block in blocks:
        exec(compile(block, str(page), "exec"), {})


def test_python_blocks_exist():
    """The README and the docs pages keep their Python examples (each run by the slow test)."""
    pages = [p for p in [README, *DOCS] if "```python\n" in p.read_text()]
    names = {p.relative_to(ROOT).as_posix() for p in pages}
    assert {"README.md", "docs/library.md", "docs/uncertainty.md"} <= names


def test_readme_quick_start_is_two_commands():
    text = README.read_text()
    start = text.index("## Quick start")
    section = text[start : text.index("##", start + 5)]
    commands = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    assert [c.strip() for c in commands] == [
        "pip install . && diffcost train",
        'pip install ".[test]" && python -m pytest',
    ]
