"""The README and the pages under docs/: every relative link points to an existing file (and,
for a Markdown target with a #fragment, to one of its headings), every docs page is linked from
the README, and each README section opens with its command."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]

_FENCE = re.compile(r"^```.*?^```", flags=re.S | re.M)
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    return _FENCE.sub("", text)


def _anchor(heading: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    headings = re.findall(r"^#+\s+(.*)$", _prose(page.read_text()), flags=re.M)
    return {_anchor(h) for h in headings}


def _relative_links(page: Path) -> list[str]:
    links = _LINK.findall(_prose(page.read_text()))
    return [t for t in links if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def test_docs_pages_exist():
    assert len(DOCS) >= 10


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page: Path):
    broken = []
    for target in _relative_links(page):
        path, _, fragment = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.is_file():
            broken.append(f"{target}: no file {resolved}")
        elif fragment and resolved.suffix == ".md" and fragment not in _anchors(resolved):
            broken.append(f"{target}: no heading #{fragment} in {resolved.name}")
    assert not broken, f"{page.name}: " + "; ".join(broken)


def test_link_checker_sees_links():
    """The checker is not vacuous: the README links every docs page and its figures."""
    links = {t.partition("#")[0] for t in _relative_links(README)}
    assert {f"docs/{p.name}" for p in DOCS} <= links
    assert any(t.startswith("docs/figures/") for t in links)
    assert _anchor("Sensitivity: `diffcost sensitivity train|serve`") == (
        "sensitivity-diffcost-sensitivity-trainserve"
    )


def test_readme_sections_open_with_a_command():
    """Each README section after the title opens with a code block (the command it shows),
    except the closing index of the docs pages."""
    sections = re.split(r"^## ", README.read_text(), flags=re.M)[1:]
    for section in sections:
        title, _, body = section.partition("\n")
        if title.strip() == "Documentation":
            continue
        first = body.strip().split("\n", 1)[0]
        assert first.startswith("```"), f"README section {title!r} opens with {first!r}"


@pytest.mark.skipif(
    not (ROOT / ".git").exists() or shutil.which("git") is None, reason="not a git checkout"
)
def test_linked_files_are_not_git_ignored():
    """A linked file that .gitignore hides (a figure: *.png) exists here but not in a clone."""
    targets = sorted(
        {
            (page.parent / t.partition("#")[0]).resolve().relative_to(ROOT).as_posix()
            for page in PAGES
            for t in _relative_links(page)
            if t.partition("#")[0]
        }
    )
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", *targets],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert not ignored, f"linked but git-ignored: {ignored}"
