"""The README is a front door and the reference lives once, in docs/ (issue 21).

- The README fits one screen to the first answer: at most 150 lines, and it links every page.
- Nothing is said twice: no sentence of 8 words or more, and no run of 3 lines, appears both in
  the README and in a doc page, or in two doc pages. Text is compared after markdown marks,
  case and line breaks are set aside, so a rewrapped copy is still a copy.
- Every `bsm ...` the docs show names a real command and real flags (tests/doc_commands.py).
"""

from __future__ import annotations

import functools
import itertools
import re
from pathlib import Path

import pytest
from doc_commands import check_invocation, markdown_invocations

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS, ROOT / "RELIABILITY.md"]
MIN_WORDS = 8
MIN_LINES = 3


def _plain(text: str) -> str:
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # [words](link) -> words
    text = re.sub(r"[`*_|>#]", " ", text)
    return re.sub(r"\s+", " ", text).strip().lower()


@functools.cache
def sentences(path: Path) -> frozenset[str]:
    """The page's prose sentences of MIN_WORDS words or more, normalised."""
    prose = re.sub(r"```.*?```", " ", path.read_text(), flags=re.S)
    prose = re.sub(r"^#.*$", " ", prose, flags=re.M)  # headings are not sentences
    out = set()
    for s in re.split(r"(?<=[.!?:;])\s+", _plain(prose)):
        s = s.strip(" .;:")
        if len(s.split()) >= MIN_WORDS:
            out.add(s)
    return frozenset(out)


@functools.cache
def line_runs(path: Path) -> frozenset[tuple[str, ...]]:
    """Every run of MIN_LINES consecutive non-blank lines (code and tables included)."""
    lines = [_plain(ln) for ln in path.read_text().splitlines()]
    lines = [ln for ln in lines if len(ln) > 3 and not set(ln) <= set("-: ")]
    return frozenset(tuple(lines[i : i + MIN_LINES]) for i in range(len(lines) - MIN_LINES + 1))


def test_readme_is_one_screen_and_links_every_page():
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    assert text.index("make demo") < text.index("make test") < text.index("## ")  # set-up first
    missing = [p.name for p in DOCS if f"docs/{p.name}" not in text]
    assert missing == []


@pytest.mark.parametrize(
    ("a", "b"),
    list(itertools.combinations([README, *DOCS], 2)),
    ids=lambda p: p.name,
)
def test_nothing_is_said_twice(a: Path, b: Path):
    shared = sorted(sentences(a) & sentences(b))
    assert shared == [], f"{a.name} and {b.name} say the same: keep it in one place"
    runs = sorted(line_runs(a) & line_runs(b))
    assert runs == [], f"{a.name} and {b.name} share lines: keep them in one place"


def test_the_check_catches_a_copy(tmp_path):
    """A rewrapped, re-marked copy of a README sentence counts as the same sentence."""
    line = "The planner answers which configuration, how long and how much before any money"
    a, b = tmp_path / "a.md", tmp_path / "b.md"
    a.write_text(f"# A\n\n{line} is spent.\n")
    b.write_text("# B\n\n" + line.replace(" how long", "\n**how long**") + " is spent. Other.\n")
    assert sentences(a) & sentences(b)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_documented_command_and_flag_exists(page: Path):
    bad = [(n, inv, why) for n, inv in markdown_invocations(page) if (why := check_invocation(inv))]
    assert bad == []
