"""A purchase intent that holds across machines: a claim object in S3, written only if absent.

This machine's lock (`aws/purchases.py`) makes the processes of one machine take turns; two
machines need a guard they share. Right before buying, the buyer writes
`<job.s3_prefix>/purchase-intents/<intent key>/<state>.json` with a conditional write
(`PutObject(IfNoneMatch="*")`): S3 stores it for exactly one writer and answers the others
412 `PreconditionFailed` (real S3 may answer a concurrent writer 409
`ConditionalRequestConflict`: it is retried). `<state>` is a hash of the extension history the
decision was made on, so the machines that read the same history compete for one object, and a
later purchase for the same intent (after the history changed) gets its own.

* The winner buys, then marks the claim `bought` (with the purchase); if it does not buy
  (declined, an error) it deletes its own claim, so that the intent is free again.
* A loser waits until the claim is settled, then reads AWS again and decides as a retry would
  (the plan now ends late enough: nothing bought; `--days`: refused, `already_extended`). A
  claim still open after `wait_s` is an error naming it (exit 5, `intent_claimed`), never a
  second purchase.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from blackwell_sm.aws.errors import translate
from blackwell_sm.aws.purchases import Purchase
from blackwell_sm.errors import ConsentRequiredError
from blackwell_sm.job.names import PURCHASE_INTENTS_FOLDER, canonical_json, sha256_hex

FOLDER = PURCHASE_INTENTS_FOLDER
CONFLICT_TRIES = 8  # 409 ConditionalRequestConflict: real S3's answer to concurrent writers
WAIT_S = 900.0  # a consent prompt can keep a claim open; nobody waits longer than this
POLL_S = 0.2
Sleep = Callable[[float], None]


class SharedIntents(NamedTuple):
    """Where the machines that may buy for one intent meet: an S3 client and the folder."""

    s3: Any
    folder: str


class IntentClaim(BaseModel):
    """The S3 object a buyer writes before buying (and marks `bought` after)."""

    model_config = ConfigDict(extra="forbid")

    key: str = Field(description="The intent key (`purchases.intent_key`).")
    state: str = Field(description="Hash of the AWS state the decision was made on.")
    intent: str = Field(description="The intent in words.")
    status: Literal["claimed", "bought"]
    by: str = Field(description="host and pid of the claiming process.")
    claimed_at: datetime
    purchase: Purchase | None = None


class Claimed(BaseModel):
    """What `claim` got: the claim (`won`), or the other machine's claim."""

    model_config = ConfigDict(extra="forbid")

    won: bool
    uri: str
    claim: IntentClaim | None = Field(None, description="The claim in S3 (None: gone since).")


def intents_uri(s3_prefix: str) -> str:
    """Where a spec's purchase intents live: `<job.s3_prefix>/purchase-intents`."""
    return f"{s3_prefix.rstrip('/')}/{FOLDER}"


def state_token(offering_ids: list[str | None]) -> str:
    """A hash of the extension history (its offering ids, in order): equal on every machine
    that read the same history."""
    return sha256_hex(canonical_json([i or "?" for i in offering_ids]))[:16]


def _split(uri: str) -> tuple[str, str]:
    from blackwell_sm.aws.s3 import split_s3_uri

    return split_s3_uri(uri)


def _code(e: Any) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))


def _read(s3: Any, uri: str) -> IntentClaim | None:
    from blackwell_sm.aws.s3 import get_object_or_none

    data = get_object_or_none(s3, uri)
    return None if data is None else IntentClaim.model_validate_json(data)


def claim(
    s3: Any, folder: str, key: str, state: str, intent: str, *, sleep: Sleep = time.sleep
) -> Claimed:
    """Write the claim for (`key`, `state`) under `folder` if nobody has; else the holder's."""
    from botocore.exceptions import ClientError

    uri = f"{folder}/{key}/{state}.json"
    bucket, obj = _split(uri)
    mine = IntentClaim(
        key=key,
        state=state,
        intent=intent,
        status="claimed",
        by=f"{socket.gethostname()} pid {os.getpid()}",
        claimed_at=datetime.now(UTC),
    )
    body = mine.model_dump_json(indent=2).encode()
    for attempt in range(CONFLICT_TRIES):
        with translate(f"claiming the purchase intent {uri}", service="s3"):
            try:
                s3.put_object(Bucket=bucket, Key=obj, Body=body, IfNoneMatch="*")
                return Claimed(won=True, uri=uri, claim=mine)
            except ClientError as e:
                if _code(e) in ("PreconditionFailed", "412"):
                    return Claimed(won=False, uri=uri, claim=_read(s3, uri))
                if _code(e) not in ("ConditionalRequestConflict", "409"):
                    raise
        sleep(min(2.0, 0.05 * 2**attempt))
    raise ConsentRequiredError(
        f"S3 kept answering ConditionalRequestConflict for {uri} ({CONFLICT_TRIES} tries): "
        "another machine is writing this purchase intent now; nothing was bought",
        code="intent_claimed",
        hint="run the command again in a minute: it finds what the other machine did",
    )


def settle(
    s3: Any, uri: str, mine: IntentClaim, purchase: Purchase, *, say: Callable[[str], None]
) -> None:
    """Mark this process's claim bought. The money is spent by then: a claim that cannot be
    marked is said, never raised (the other machines then wait for it and name it)."""
    from blackwell_sm.errors import AwsError

    bucket, obj = _split(uri)
    done = mine.model_copy(update={"status": "bought", "purchase": purchase})
    try:
        with translate(f"recording the purchase in {uri}", service="s3"):
            s3.put_object(Bucket=bucket, Key=obj, Body=done.model_dump_json(indent=2).encode())
    except AwsError as e:
        say(f"warning: the purchase was made but its claim {uri} could not be marked: {e}")


def release(s3: Any, uri: str, *, say: Callable[[str], None]) -> None:
    """Delete this process's own claim (nothing was bought), so the intent is free again; a
    claim that cannot be deleted is said (the error that stopped the purchase is the one
    raised)."""
    from blackwell_sm.errors import AwsError

    bucket, obj = _split(uri)
    try:
        with translate(f"releasing the purchase intent {uri}", service="s3"):
            s3.delete_object(Bucket=bucket, Key=obj)
    except AwsError as e:
        say(f"warning: nothing was bought, but the claim {uri} could not be deleted: {e}")


def wait_settled(
    s3: Any,
    uri: str,
    *,
    wait_s: float = WAIT_S,
    poll_s: float = POLL_S,
    sleep: Sleep = time.sleep,
    say: Callable[[str], None] | None = None,
) -> IntentClaim | None:
    """Wait until another machine's claim is bought or released (None); exit 5 after `wait_s`."""
    waited, told = 0.0, False
    while True:
        held = _read(s3, uri)
        if held is None or held.status == "bought":
            return held
        if not told and say:
            say(
                f"waiting for {held.by}, which claimed this purchase at {held.claimed_at:%H:%M:%S} UTC ({uri})"
            )
            told = True
        if waited >= wait_s:
            raise ConsentRequiredError(
                f"{held.by} claimed this purchase at {held.claimed_at:%Y-%m-%d %H:%M:%S} UTC "
                f"({uri}) and has not finished after {wait_s:.0f} s; nothing was bought",
                code="intent_claimed",
                hint="if that process is gone without buying (check the plan's extension "
                f"history: `bsm plans describe PLAN`), delete {uri} and run the command again",
            )
        sleep(poll_s)
        waited += poll_s
