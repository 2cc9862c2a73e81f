"""What `bsm plan`'s default view shows (issue 37 item 10): every warning that changes what the
user should do (quota, batch rounding, jobs, fit) in full, within 30 lines of 80 columns; the
rest counted and behind -v."""

from __future__ import annotations

import json

import pytest
from cli_support import run

from blackwell_sm.planner.summary import DECISIVE, MAX_LINES


@pytest.fixture(autouse=True)
def _eighty_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")


@pytest.mark.parametrize(
    ("args", "codes"),
    [
        (
            ["--model", "llama-3.1-70b", "--instance-count", "30"],
            {"quota_instances_per_job", "batch_rounded"},
        ),
        (["--model", "llama-3.1-8b", "--global-batch-tokens", "1000000"], {"batch_rounded"}),
        (["--model", "llama-3.1-70b", "--seq-len", "2048"], {"memory_high", "over_max_runtime"}),
    ],
)
def test_the_default_view_prints_every_decisive_warning(args: list[str], codes: set[str]) -> None:
    code, js, _ = run("plan", *args, "-o", "json")
    notes = [n for n in json.loads(js)["notes"] if n["kind"] == "warning"]
    decisive = [n for n in notes if n["code"] in DECISIVE]
    assert codes <= {n["code"] for n in decisive}
    code, out, _ = run("plan", *args)
    lines = out.splitlines()
    assert code == 0 and len(lines) <= MAX_LINES and max(map(len, lines)) <= 80
    flat = " ".join(out.split())
    assert [n["code"] for n in decisive if " ".join(n["text"].split()) not in flat] == []
    others = len(notes) - len(decisive)
    if others:
        assert f"{others} more warning" in flat and "bsm plan -v" in flat
