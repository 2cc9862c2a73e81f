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


# --- claims checked against the code (issue 32): figures and names the docs state ---------------


def _memory_figures() -> set[str]:
    """Every GiB figure a GPU's memory may be quoted as: each catalog GPU's device and usable
    figures (1 and 2 decimals), and the H100 96GB rows' usable figure."""
    from blackwell_sm.hardware import CATALOG
    from blackwell_sm.planner import calibration as C

    gib = {i.gpu.memory_gib for i in CATALOG.values()}
    gib |= {g * (1 - C.MEMORY_HEADROOM) for g in gib} | {C.H100_96GB_USABLE_GIB}
    return {f"{g:.1f}" for g in gib} | {f"{g:.2f}" for g in gib}


MEMORY_CLAIM = re.compile(
    r"([\d.]+) GiB usable|usable ([\d.]+) GiB|of the usable ([\d.]+)|([\d.]+) GiB each"
)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_usable_memory_figure_is_the_catalogs(page: Path):
    """ "179 GiB usable" where plans print 173.7 was wrong: each figure is a GPU's own."""
    figures = _memory_figures()
    claims = [next(g for g in m.groups() if g) for m in MEMORY_CLAIM.finditer(page.read_text())]
    assert [c for c in claims if c.rstrip(".") not in figures] == []


def test_install_names_every_extra():
    """docs/install.md names every extra pyproject.toml declares (it named 4 of 7)."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    text = (ROOT / "docs" / "install.md").read_text()
    assert [e for e in extras if f"`[{e}]`" not in text] == []


def test_the_plan_keywords_table_is_plans_signature():
    """docs/python.md's keyword table lists exactly `plan()`'s keywords, each CLI flag named
    being `bsm plan`'s (the `trace=True` contract was wrong there)."""
    import inspect

    from blackwell_sm.api.plan import plan
    from blackwell_sm.api.spec_input import FLAGS

    text = (ROOT / "docs" / "python.md").read_text()
    m = re.search(r"<!-- plan-keywords:begin -->\n(.*?)\n<!-- plan-keywords:end -->", text, re.S)
    assert m, "docs/python.md needs the plan-keywords block"
    rows = [r.split("|")[1:3] for r in m.group(1).splitlines()[2:]]
    named = {k.strip(" `") for k, _ in rows}
    params = inspect.signature(plan).parameters.values()
    assert named == {p.name for p in params if p.kind is p.KEYWORD_ONLY}
    flags = {f.keyword: f.cli for f in FLAGS}
    for keyword, flag in ((k.strip(" `"), f) for k, f in rows):
        if keyword in flags:
            assert f"`{flags[keyword]}`" in flag, keyword


def test_every_api_name_the_docs_use_exists():
    """`bsm.NAME` in the README's and docs/python.md's Python is an attribute the package lists."""
    import blackwell_sm

    used: set[str] = set()
    for page in (README, ROOT / "docs" / "python.md"):
        for block in re.findall(r"```python\n(.*?)```", page.read_text(), re.S):
            used |= set(re.findall(r"\bbsm\.(\w+)", block))
        used |= set(re.findall(r"`bsm\.(\w+)\(", page.read_text()))
    assert used and sorted(used - set(dir(blackwell_sm))) == []


def test_the_readme_example_is_the_real_output(monkeypatch):
    """The README's lead example block is the command's real output (its first lines), at 80
    columns, and says how many lines it leaves out."""
    import shlex

    from cli_support import run

    m = re.search(
        r"## Example[^\n]*\n.*?```bash\n(bsm plan [^\n]*)\n```\n```\n(.*?)\n\.\.\.\n```\n\n"
        r"\(First (\d+) of (\d+) lines",
        README.read_text(),
        re.S,
    )
    assert m, "the README's example: a bsm plan command, its output block, 'First N of M lines'"
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(*shlex.split(m.group(1))[1:])
    lines = out.splitlines()
    assert code == 0
    assert m.group(2).splitlines() == lines[: int(m.group(3))]
    assert len(lines) == int(m.group(4))
