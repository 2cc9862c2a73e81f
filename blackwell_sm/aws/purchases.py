"""Spending once: intent keys, one lock per machine, and a record of every purchase.

A purchase (a training plan reserved, an extension bought) is an *intent* whose key a retry, a
second terminal or a second CI runner computes identically from the same command
(`intent_key`). Right before buying, the caller reads what AWS already has (the plan of that
name; the plan's end and its extension history) while holding `intent_lock`, so the processes
of one machine take turns; docs/spending.md says what protects two machines and what does not.
Every purchase is printed by its command and recorded as JSON (`record_purchase`): what was
bought, when, and the key that made it unique.

State folder (locks and records): $BSM_STATE_DIR, else $XDG_STATE_HOME/blackwell_sm, else
~/.local/state/blackwell_sm.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from blackwell_sm.errors import BsmError, SpecError
from blackwell_sm.job.names import canonical_json, sha256_hex

LOCK_TIMEOUT_S = 900.0  # a consent prompt can hold the lock; nobody waits longer than this
_POLL_S = 0.1
Notify = Callable[[str], None]


class Purchase(BaseModel):
    """One thing bought: what, when, for how much, and the intent key that made it unique."""

    model_config = ConfigDict(extra="forbid")

    key: str = Field(description="The intent key: the same command computes the same key.")
    kind: Literal["training_plan", "extension"]
    intent: str = Field(description="The intent in words.")
    bought_at: datetime
    region: str | None
    plan_name: str
    plan_arn: str | None = None
    offering_id: str
    duration_hours: float | None = None
    upfront_fee: str | None = None
    currency: str | None = None
    start: datetime | None = None
    end: datetime | None = Field(None, description="The plan's end once this is in force.")
    record: str | None = Field(None, description="The JSON record's path on this machine.")

    def describe(self) -> str:
        fee = f"{self.upfront_fee} {self.currency or ''}".strip() if self.upfront_fee else "?"
        what = "training plan" if self.kind == "training_plan" else "extension of"
        hours = f"{self.duration_hours:g} h, " if self.duration_hours is not None else ""
        return (
            f"bought {what} {self.plan_name} ({hours}offering {self.offering_id}, fee {fee}) "
            f"at {self.bought_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC; key {self.key}"
        )


def intent_key(kind: str, **fields: Any) -> str:
    """`<kind>-<16 hex>`: a hash of the intent's defining fields (order and spacing ignored)."""
    body = canonical_json({"kind": kind, **{k: v for k, v in fields.items() if v is not None}})
    return f"{kind}-{sha256_hex(body)[:16]}"


def state_dir() -> Path:
    """Where locks and purchase records live (see the module docstring)."""
    if os.environ.get("BSM_STATE_DIR"):
        return Path(os.environ["BSM_STATE_DIR"])
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "blackwell_sm"


def _state_var() -> str | None:
    """The variable naming the state folder, when one does (an error's field)."""
    return "BSM_STATE_DIR" if os.environ.get("BSM_STATE_DIR") else None


def _folder(name: str) -> Path:
    """state_dir()/name, made if missing; SpecError (exit 2) when it cannot be."""
    folder = state_dir() / name
    var = _state_var()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".probe-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as e:
        raise SpecError(
            f"cannot use {folder} for purchase locks and records ({e.strerror or e}); nothing "
            "was bought",
            field=var,
            code="bad_setting" if var else "bad_input",
            hint="set BSM_STATE_DIR to a folder this user can write",
        ) from None
    return folder


def _safe(resource: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", resource)[:120]


@contextlib.contextmanager
def intent_lock(
    resource: str, *, say: Notify | None = None, timeout_s: float = LOCK_TIMEOUT_S
) -> Iterator[None]:
    """Hold this machine's lock on `resource` (a plan name, a checkpoint prefix): the processes
    of one machine that buy or create for it take turns. Waiting is said once."""
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks here; said, not hidden
        if say:
            say(f"note: no lock on this system; another process may act on {resource} too")
        yield
        return
    from blackwell_sm.state_files import open_state

    path = _folder("locks") / f"{_safe(resource)}.lock"
    with open_state(path, "a+", field=_state_var()) as f:  # never through a symlink
        waited, told = 0.0, False
        while True:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not told and say:
                    f.seek(0)
                    holder = f.read().strip() or "?"
                    say(
                        f"waiting for another bsm process on this machine ({holder}) that is "
                        f"acting on {resource}"
                    )
                    told = True
                if waited >= timeout_s:
                    raise BsmError(
                        f"gave up after {timeout_s:.0f} s waiting for the lock on {resource} "
                        f"({path}); nothing was bought",
                        code="lock_timeout",
                        hint="another bsm process holds it (a consent prompt left open?)",
                    ) from None
                time.sleep(_POLL_S)
                waited += _POLL_S
        try:
            f.seek(0)
            f.truncate()
            f.write(f"pid {os.getpid()} since {datetime.now(UTC):%H:%M:%S} UTC")
            f.flush()
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def record_purchase(purchase: Purchase, *, say: Notify | None = None) -> Purchase:
    """Write the purchase's JSON record (atomically) and return it with `record` set. The money
    is spent already: a record that cannot be written is said, never raised."""
    from blackwell_sm.atomic_write import write_text
    from blackwell_sm.state_files import check_state_entry

    name = f"{purchase.bought_at.astimezone(UTC):%Y%m%dT%H%M%S}-{purchase.key}.json"
    try:
        path = _folder("purchases") / name
        check_state_entry(path, field=_state_var())  # never written through a link
        out = purchase.model_copy(update={"record": str(path)})
        write_text(path, out.model_dump_json(indent=2) + "\n", flag=None)
        return out
    except BsmError as e:
        if say:
            say(f"warning: the purchase was made but its record could not be written: {e}")
        return purchase


def purchases(key: str | None = None) -> list[Purchase]:
    """The purchases recorded on this machine (oldest first), optionally one key's."""
    folder = state_dir() / "purchases"
    if not folder.is_dir():
        return []
    from pydantic import ValidationError

    from blackwell_sm.safe_load import load_mapping
    from blackwell_sm.state_files import check_state_entry

    found = []
    for path in sorted(folder.glob(f"*-{key}.json" if key else "*.json")):
        with contextlib.suppress(SpecError, ValidationError):  # not ours, or damaged: skipped
            check_state_entry(path)  # a link, FIFO or folder is not read through
            found.append(Purchase.model_validate(load_mapping(path, field="purchase record")))
    return found
