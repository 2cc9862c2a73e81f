"""Issue 32 item 2: capacity is sized once (`job/capacity_need.py`), so `bsm plans search`,
`reserve`, `describe --spec`, `extend` (`--spec`, `--to-fit`) and `submit` agree on the
emulated training-plan API (tests/sagemaker_server.py: moto's server plus the plan calls, every
request and response checked against botocore's model).

The specs are sized near a plan's length: the run's high end exactly on the last hour a plan
of N hours can hold, a little under it, and a little over it (the next plan up). A plan that
`search` sized and `reserve` bought is accepted by `submit` for the same spec; a run just over
it is refused by `describe` and `submit` alike, and `extend --to-fit` makes it fit.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from aws_support import BUCKET, FAKE_KEY_ID, FAKE_SECRET, REGION, spec_dict
from sagemaker_server import SageMakerServer

from blackwell_sm.api.capacity import need_for
from blackwell_sm.cli import main
from blackwell_sm.spec import parse_spec

TARGET_HOURS = 11.0  # the run's high end that fills a 12-hour plan exactly


@pytest.fixture(scope="module")
def server():
    s = SageMakerServer().start()
    boto3.client(
        "s3",
        region_name=REGION,
        endpoint_url=s.url,
        aws_access_key_id=FAKE_KEY_ID,
        aws_secret_access_key=FAKE_SECRET,
    ).create_bucket(Bucket=BUCKET)
    yield s
    s.stop()
    assert s.invalid == []


@pytest.fixture
def bsm(server, monkeypatch, tmp_path, capsys):
    from aws_support import fake_credentials

    fake_credentials(monkeypatch, tmp_path)
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.url)
    monkeypatch.setenv("BSM_STATE_DIR", str(tmp_path / "state"))

    def run(*args: str) -> tuple[int, Any]:
        capsys.readouterr()
        with pytest.raises(SystemExit) as done:
            main([*args, "-o", "json"])
        out = capsys.readouterr().out.strip()
        return done.value.code, json.loads(out) if out else None

    return run


def _spec(steps: int) -> dict:
    d = spec_dict("tiny")
    d["training"] = {"total_steps": steps}
    return d


def _high(steps: int) -> float:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return need_for(parse_spec(_spec(steps)))[1].run_hours


@pytest.fixture(scope="module")
def steps_at() -> int:
    """The fewest steps whose high-end hours reach TARGET_HOURS (hours are kept to 0.001 h)."""
    guess = int(TARGET_HOURS / _high(1_000_000) * 1_000_000)  # hours grow with the steps
    lo, hi = int(guess * 0.98), int(guess * 1.02)
    assert _high(lo) < TARGET_HOURS <= _high(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _high(mid) < TARGET_HOURS else (lo, mid)
    return hi


def _write(tmp_path: Path, steps: int) -> str:
    path = tmp_path / f"spec-{steps}.yaml"
    path.write_text(yaml.safe_dump(_spec(steps)))
    return str(path)


def _bought(server, kind: str, name: str) -> list:
    return [b for b in server.bought if b[0] == kind and b[1] == name]


@pytest.mark.parametrize("where", ["under", "at", "over"])
def test_search_reserve_describe_extend_submit_agree(server, bsm, tmp_path, steps_at, where):
    steps = {"under": int(steps_at * 0.995), "at": steps_at, "over": int(steps_at * 1.005)}[where]
    spec = _write(tmp_path, steps)
    need = need_for(spec)[1]
    assert need.estimate == "high" and "high end" in need.why
    assert need.run_hours > need.central_hours  # the old sizing (central) would buy too little
    if where == "at":
        assert need.run_hours == TARGET_HOURS and need.plan_hours == 12
        assert need.plan_hours - need.reclaim_hours == need.needed_hours  # full to the minute
    assert need.plan_hours == (13 if where == "over" else 12)

    code, found = bsm("plans", "search", spec)
    offers = found["offerings"]
    assert code == 0 and offers[0]["duration_hours"] == need.plan_hours
    assert found["need"] == need.model_dump(mode="json")  # the sizing, in the JSON too
    assert found["duration_hours"] == need.plan_hours
    name = f"agree-{where}"
    code, reserved = bsm(
        "plans", "reserve", offers[0]["offering_id"], spec, "--name", name, "--yes"
    )
    assert code == 0 and reserved["bought"] is not None, reserved
    code, described = bsm("plans", "describe", name, "--spec", spec)
    assert code == 0 and described["fit"]["fits"], described["fit"]
    assert described["fit"]["need"] == need.model_dump(mode="json")
    code, listed = bsm("plans", "extend", name, "--spec", spec)
    assert code == 0 and all(o["run_fits"] for o in listed["offerings"])
    code, extended = bsm("plans", "extend", name, "--to-fit", spec, "--yes")
    assert code == 0 and extended["bought"] is None, extended  # it fits: nothing to buy
    code, job = bsm("submit", spec, "--training-plan", name, "--yes")
    assert code == 0, job
    assert job["training_plan_arn"].endswith(f"/{name}") and job["created"]
    assert _bought(server, "extension", name) == []


def test_a_run_just_over_the_plan_is_refused_alike_and_extend_to_fit_makes_it_fit(
    server, bsm, tmp_path, steps_at
):
    at, over = _write(tmp_path, steps_at), _write(tmp_path, int(steps_at * 1.005))
    code, found = bsm("plans", "search", at)
    name = "agree-short"
    code, _ = bsm(
        "plans", "reserve", found["offerings"][0]["offering_id"], at, "--name", name, "--yes"
    )
    assert code == 0
    code, described = bsm("plans", "describe", name, "--spec", over)
    assert code == 0 and not described["fit"]["fits"] and described["fit"]["extension_hours"] == 1
    code, refused = bsm("submit", over, "--training-plan", name, "--yes")
    assert code == 3 and "extend" in refused["error"]["hint"], refused
    code, extended = bsm("plans", "extend", name, "--to-fit", over, "--yes")
    assert code == 0 and extended["bought"] is not None, extended
    assert len(_bought(server, "extension", name)) == 1
    code, described = bsm("plans", "describe", name, "--spec", over)
    assert described["fit"]["fits"]
    code, job = bsm("submit", over, "--training-plan", name, "--yes")
    assert code == 0 and job["created"], job
