"""Issue 32 item 3: a purchase intent that holds across machines (aws/purchase_intents.py).

Two "machines" extend one plan at the same moment, each with its own lock (a lock is per
machine, so here none is shared: `intent_lock` is the no-op two machines amount to), against
one endpoint: moto's server for S3 (which honours `IfNoneMatch`) and the emulated training-plan
API (tests/sagemaker_server.py). Every SageMaker call is slowed by `LAG_S` so that both
machines read the plan before either buys, the window in which they used to buy twice.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from datetime import timedelta

import boto3
import pytest
from aws_support import BUCKET, FAKE_KEY_ID, FAKE_SECRET, P6, REGION
from sagemaker_server import SageMakerServer

from blackwell_sm.aws import extend_once as eo
from blackwell_sm.aws import purchase_intents as pi
from blackwell_sm.aws.extensions import Extension
from blackwell_sm.aws.training_plans import describe_plan

ROUNDS = int(os.environ.get("BSM_INTENT_ROUNDS", "20"))
LAG_S = 0.03
FOLDER = f"s3://{BUCKET}/runs/{pi.FOLDER}"


@pytest.fixture(scope="module")
def server():
    s = SageMakerServer().start()
    _client(s, "s3").create_bucket(Bucket=BUCKET)
    yield s
    s.stop()
    assert s.invalid == []


def _client(server, service: str):
    c = boto3.client(
        service,
        region_name=REGION,
        endpoint_url=server.url,
        aws_access_key_id=FAKE_KEY_ID,
        aws_secret_access_key=FAKE_SECRET,
    )
    if service == "sagemaker":
        c.meta.events.register("before-send.sagemaker", lambda **_: time.sleep(LAG_S))
    return c


@pytest.fixture
def machines(server, monkeypatch):
    """Each machine's lock is its own: between two machines it is no lock at all."""
    monkeypatch.setattr(eo, "intent_lock", lambda *_a, **_k: contextlib.nullcontext())
    monkeypatch.setattr(eo, "record_purchase", lambda p, **_k: p)  # records: test_spend_once


def _plan(server, name: str):
    sm = _client(server, "sagemaker")
    offer = sm.search_training_plan_offerings(
        InstanceType=P6, InstanceCount=1, DurationHours=48, TargetResources=["training-job"]
    )["TrainingPlanOfferings"][0]
    sm.create_training_plan(
        TrainingPlanName=name, TrainingPlanOfferingId=offer["TrainingPlanOfferingId"]
    )
    return describe_plan(sm, name)


_CLIENTS: dict[int, tuple] = {}


def _race(server, info, intent, *, shared: bool, machines: int = 2) -> list:
    """Every machine runs `extend_once` for `intent` at once; their outcomes (or errors)."""
    results: list = [None] * machines
    go = threading.Barrier(machines)
    for i in range(machines):  # a machine's clients, made once (boto3 clients are slow to make)
        if i not in _CLIENTS:
            _CLIENTS[i] = (_client(server, "sagemaker"), _client(server, "s3"))

    def machine(i: int) -> None:
        sm, s3 = _CLIENTS[i]
        go.wait()
        try:
            results[i] = eo.extend_once(
                sm,
                info,
                intent,
                consent=True,
                say=lambda _m: None,
                shared=pi.SharedIntents(s3, FOLDER) if shared else None,
            )
        except Exception as e:  # the test reads it
            results[i] = e

    threads = [threading.Thread(target=machine, args=(i,)) for i in range(machines)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def _extensions(server, name: str) -> list:
    return [b for b in server.bought if b[0] == "extension" and b[1] == name]


def test_two_machines_extending_one_plan_buy_once_every_time(server, machines):
    for r in range(ROUNDS):
        info = _plan(server, f"race-until-{r}")
        intent = eo.ExtendIntent(until=info.end_time + timedelta(days=1, hours=5))
        results = _race(server, info, intent, shared=True)
        assert not [x for x in results if isinstance(x, Exception)], results
        assert len(_extensions(server, info.name)) == 1, f"round {r}: {results}"
        won = [x for x in results if x.bought is not None]
        assert len(won) == 1 and won[0].intent_record.startswith(FOLDER + "/extension-")
        lost = next(x for x in results if x.bought is None)
        assert "nothing bought" in lost.reason  # found the winner's claim, or the longer plan
    # the winner's claim says what it bought, for every machine to read
    s3 = _client(server, "s3")
    claim = pi._read(s3, won[0].intent_record)
    assert claim is not None and claim.status == "bought"
    assert claim.purchase.offering_id == won[0].bought.offering_id


def test_days_from_two_machines_buys_once_and_the_other_is_refused_or_told(server, machines):
    for r in range(max(1, ROUNDS // 4)):
        info = _plan(server, f"race-days-{r}")
        results = _race(server, info, eo.ExtendIntent(days=1), shared=True)
        assert len(_extensions(server, info.name)) == 1, results
        others = [x for x in results if not (hasattr(x, "bought") and x.bought)]
        assert len(others) == 1
        other = others[0]
        assert (getattr(other, "code", None) == "already_extended") or (
            "another machine bought it for this intent" in other.reason
        ), other


def test_a_released_claim_frees_the_intent(server, machines):
    """A claim whose buyer declined is deleted: the next buyer claims it and buys."""
    from blackwell_sm.errors import ConsentRequiredError

    info = _plan(server, "race-released")
    intent = eo.ExtendIntent(until=info.end_time + timedelta(hours=5))
    s3, sm = _client(server, "s3"), _client(server, "sagemaker")
    shared = pi.SharedIntents(s3, FOLDER)
    with pytest.raises(ConsentRequiredError):
        eo.extend_once(sm, info, intent, consent=None, say=lambda _m: None, shared=shared)
    assert _extensions(server, info.name) == []
    done = eo.extend_once(sm, info, intent, consent=True, say=lambda _m: None, shared=shared)
    assert done.bought is not None and len(_extensions(server, info.name)) == 1


def test_an_open_claim_of_another_machine_is_waited_for_then_named():
    """A claim never settled (its machine died) stops the purchase with exit 5, naming it."""
    from blackwell_sm.errors import ConsentRequiredError

    with _moto_s3() as s3:
        first = pi.claim(s3, FOLDER, "extension-k", "s0", "extend P")
        assert first.won
        again = pi.claim(s3, FOLDER, "extension-k", "s0", "extend P")
        assert not again.won and again.claim is not None and again.claim.status == "claimed"
        slept: list[float] = []
        with pytest.raises(ConsentRequiredError) as e:
            pi.wait_settled(s3, again.uri, wait_s=1.0, poll_s=0.5, sleep=slept.append)
        assert e.value.code == "intent_claimed" and again.uri in e.value.hint
        assert slept == [0.5, 0.5]
        pi.release(s3, first.uri, say=print)
        assert pi.wait_settled(s3, again.uri, sleep=slept.append) is None
        assert pi.claim(s3, FOLDER, "extension-k", "s0", "extend P").won


@contextlib.contextmanager
def _moto_s3():
    from moto import mock_aws

    with mock_aws():
        s3 = boto3.client(
            "s3",
            region_name=REGION,
            aws_access_key_id=FAKE_KEY_ID,
            aws_secret_access_key=FAKE_SECRET,
        )
        s3.create_bucket(Bucket=BUCKET)
        yield s3


def test_without_the_shared_claim_a_double_purchase_is_always_warned_about(server, machines):
    """Two machines and no shared claim: when both bought (the same offering, here), the
    later buyer's history read after buying names the other purchase (the earlier one may have
    read before the second purchase existed)."""
    doubles = 0
    for r in range(3):
        info = _plan(server, f"race-unguarded-{r}")
        intent = eo.ExtendIntent(until=info.end_time + timedelta(hours=5))
        results = _race(server, info, intent, shared=False)
        bought = [x for x in results if getattr(x, "bought", None)]
        if len(bought) == 2:
            doubles += 1
            assert any(any("appeared meanwhile" in w for w in x.warnings) for x in bought)
    assert doubles >= 1  # the lag makes the race real: this is what the claim prevents


def test_others_since_counts_one_for_one():
    def ext(oid: str, minute: int) -> Extension:
        return Extension.model_validate(
            {
                "offering_id": oid,
                "extended_at": f"2026-12-05T19:{minute:02d}:00Z",
                "start": None,
                "end": None,
                "status": "Active",
                "payment_status": "Paid",
                "duration_hours": 24,
                "upfront_fee": None,
                "currency": None,
            }
        )

    old, a1, a2 = ext("x", 0), ext("a", 1), ext("a", 2)
    assert eo.others_since([old], [old, a1], "a") == []
    assert eo.others_since([old], [old, a1, a2], "a") == [a2]  # the same offering twice
    assert eo.others_since([], [a1, ext("b", 3)], "a")[0].offering_id == "b"
