"""train/triggers.py: when to save and when to stop."""

from __future__ import annotations

from pathlib import Path

from blackwell_sm.spec.training import CheckpointSpec
from blackwell_sm.train.triggers import EXPIRY_ENV, Triggers, deadline_from_env, parse_unix_time

REPO = Path(__file__).resolve().parents[1]


def test_capacity_expiry_accepts_seconds_and_milliseconds():
    assert parse_unix_time("1767225600") == 1767225600.0
    assert parse_unix_time("1767225600000") == 1767225600.0
    env = {
        EXPIRY_ENV: "1767225600000",
        "BSM_JOB_START_UNIX": "1767200000",
        "BSM_MAX_RUNTIME_S": "3600",
    }
    assert deadline_from_env(env) == (1767203600.0, "job max runtime")
    env["BSM_MAX_RUNTIME_S"] = "86400"
    assert deadline_from_env(env) == (1767225600.0, "capacity block expiry")
    assert deadline_from_env({}) is None


def test_save_triggers():
    spec = CheckpointSpec(interval_steps=5, interval_minutes=1.0, expiry_margin_s=600)
    t = Triggers(spec=spec, last_save_time=0.0)
    assert t.check(5, now_mono=1.0) == (True, False)
    assert t.check(6, now_mono=1.0) == (False, False)
    assert t.check(6, now_mono=61.0) == (True, False)  # M minutes since the last save
    import time

    t = Triggers(spec=spec, deadline=(time.time() + 300, "capacity block expiry"))
    assert t.check(1) == (True, False)  # inside the margin: one insurance save...
    t.saved()
    assert t.check(2) == (False, False)  # ...not one every step
    t.stop_requested = True
    assert t.check(3) == (True, True)
