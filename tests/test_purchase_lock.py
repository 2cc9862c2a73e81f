"""aws/purchases.py: the purchase lock excludes a second process, and every field of an intent
defines its key (a field left out of the key would let two different purchases share one)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from blackwell_sm.aws.extend_once import ExtendIntent
from blackwell_sm.aws.purchases import intent_key, intent_lock
from blackwell_sm.aws.reserve import reserve_key
from blackwell_sm.errors import BsmError

REPO = Path(__file__).resolve().parents[1]
HOLDER = """
import sys, time
from blackwell_sm.aws.purchases import intent_lock
with intent_lock(sys.argv[1]):
    print("held", flush=True)
    sys.stdin.readline()  # until the test closes our stdin
    print("releasing", flush=True)
"""
WAITER = """
import sys, time
from blackwell_sm.aws.purchases import intent_lock
t0 = time.monotonic()
with intent_lock(sys.argv[1], say=lambda m: print("said", m, flush=True)):
    print(f"acquired after {time.monotonic() - t0:.2f}", flush=True)
"""


def _python(code: str, *args: str, **kw) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-c", code, *args], env=env, text=True, stdout=subprocess.PIPE, **kw
    )


def test_a_second_process_waits_while_the_first_holds_the_lock():
    """A real second process holds the lock: this one waits (says so, naming the holder's pid)
    and gives up at its timeout; once the holder lets go, it gets the lock at once. A shared
    lock (LOCK_SH) would let both in and fail this test."""
    holder = _python(HOLDER, "plan-a", stdin=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "held"
        said: list[str] = []
        t0 = time.monotonic()
        with pytest.raises(BsmError) as e, intent_lock("plan-a", say=said.append, timeout_s=0.5):
            raise AssertionError("the lock was granted while another process held it")
        assert e.value.code == "lock_timeout" and time.monotonic() - t0 >= 0.5
        assert len(said) == 1 and f"(pid {holder.pid} since " in said[0], said
        with intent_lock("plan-b", timeout_s=0.5):  # another resource: not blocked
            pass
        holder.stdin.close()
        assert holder.stdout.readline().strip() == "releasing"
        assert holder.wait(timeout=30) == 0
    finally:
        holder.kill()
    with intent_lock("plan-a", timeout_s=0.5):
        pass


def test_a_waiting_process_gets_the_lock_when_it_is_released():
    """This process holds the lock; a second process started meanwhile waits (says so) and only
    gets it after the release."""
    with intent_lock("plan-c"):
        waiter = _python(WAITER, "plan-c")
        assert waiter.stdout is not None
        first = waiter.stdout.readline()
        assert first.startswith("said waiting for another bsm process on this machine (pid "), first
        time.sleep(0.5)
    out, _ = waiter.communicate(timeout=60)
    assert waiter.returncode == 0
    waited = float(out.strip().removeprefix("acquired after "))
    assert waited >= 0.5, out


FIT = {"instance_type": "ml.p6-b200.48xlarge", "instance_count": 2}
EXTEND = {"until": "2027-01-02T03:04:05+00:00", "to_fit": {**FIT, "hours": 30.0}, "days": 3}
EXTEND |= {"offering_id": "tepo-1", "again_after": "ext-0"}
OTHER = {"until": "2027-01-02T04:04:05+00:00", "to_fit": {**FIT, "hours": 31.0}, "days": 4}
OTHER |= {"offering_id": "tepo-2", "again_after": "ext-1"}
ARN = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p"


def test_every_field_of_an_extend_intent_is_in_its_key():
    base = ExtendIntent.model_validate(EXTEND).key(ARN)
    assert set(EXTEND) == set(ExtendIntent.model_fields)  # a new field must be listed here
    for field in EXTEND:
        other = ExtendIntent.model_validate({**EXTEND, field: OTHER[field]}).key(ARN)
        assert other != base, f"{field} is not in the extension's intent key"
        unset = ExtendIntent.model_validate({**EXTEND, field: None}).key(ARN)
        assert unset != base, f"{field} unset gives the same key"
    assert ExtendIntent.model_validate(EXTEND).key(ARN + "2") != base  # the plan too
    assert ExtendIntent.model_validate(EXTEND).key(ARN) == base  # and the key is stable


def test_every_field_of_a_reservation_is_in_its_key():
    base = reserve_key("us-east-1", "plan-a")
    assert reserve_key("us-west-2", "plan-a") != base
    assert reserve_key("us-east-1", "plan-b") != base
    assert reserve_key(None, "plan-a") != base
    assert base == intent_key("training_plan", name="plan-a", region="us-east-1")  # order-free
    assert base.startswith("training_plan-") and len(base) == len("training_plan-") + 16
