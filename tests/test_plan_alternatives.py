"""alternatives[]: every row of every template carries the `--set` flags that select it, and
`bsm plan` with those flags reproduces the row's memory and speed (issue 13, item 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import run

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = sorted((ROOT / "templates").glob("*.yaml"))


def _plan(*args: str) -> dict:
    code, out, err = run("plan", *args, "--output", "json")
    assert out, err
    data = json.loads(out)
    if code == 3:  # infeasible: the error object carries the plan
        return data["plan"]
    assert code == 0, err
    return data


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.stem)
def test_every_alternative_round_trips(template):
    base = _plan(str(template))
    assert base["alternatives"], "a searched plan has runner-ups"
    for alt in base["alternatives"]:
        assert alt["set"], alt
        flags = [a for f in alt["set"] for a in ("--set", f)]
        again = _plan(str(template), *flags)
        assert again["config"] == alt["config"], (alt["set"], again["config"])
        assert again["memory_gib"]["total"] == pytest.approx(alt["memory_total_gib"], abs=0.01)
        assert again["throughput"]["tokens_per_s_per_gpu"] == pytest.approx(
            alt["tokens_per_s_per_gpu"], abs=0.1
        )
        assert again["feasible"] == alt["feasible"] or not alt["feasible"]
