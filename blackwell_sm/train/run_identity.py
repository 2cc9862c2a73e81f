"""What makes a checkpoint belong to a run, and what it was trained on.

Two parts go into every `COMPLETE` marker:

- `run`: the model, the seed, the sequence length, the global batch and where the data comes from
  (source and channel names). A checkpoint whose `run` differs is another run's: never resumed.
- `data`: what the data *was*: for each channel, its manifest's identity (a hash over the listed
  shards' names, token counts, sizes and sha256, the tokenizer's hash and vocabulary), the shard and
  token counts, and a hash of a sample of every shard's bytes (its first and last 4 KiB), which
  also catches a shard replaced behind its manifest's back. Resuming on different data is refused
  naming what changed, unless `training.data.accept_changed_data` says so; the acceptance is
  written into the checkpoint's history.

Optimizer, schedule, step count, checkpoint policy and the world size may change between a run and
its resumption (DCP reshards); none of these is here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from blackwell_sm.errors import BsmError
from blackwell_sm.opt_ml import COMPLETE_MARKER
from blackwell_sm.planner.plan import Plan


def run_identity(plan: Plan) -> dict[str, Any]:
    """The run part: what may not change between a run and its resumption."""
    tr, cfg = plan.spec.training, plan.config
    identity = {
        "model": plan.spec.model.model_dump(mode="json"),
        "seed": tr.seed,
        "seq_len": cfg.seq_len,
        "global_batch_sequences": cfg.global_batch_sequences,
        "data": {"source": tr.data.source, "train_channel": tr.data.train_channel},
    }
    if tr.peft is not None:  # adapters of another shape (or a full fine-tune) do not resume
        identity["peft"] = tr.peft.model_dump(mode="json", exclude={"init_adapter"})
    return identity


def _show(v: Any) -> str:
    text = json.dumps(v, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "…"


def differences(theirs: Any, mine: Any, path: str = "") -> list[str]:
    """`path: X there, Y now` for every leaf where two identities differ (dotted paths)."""
    if isinstance(theirs, dict) and isinstance(mine, dict):
        out = []
        for k in sorted(set(theirs) | set(mine), key=str):
            out += differences(theirs.get(k), mine.get(k), f"{path}.{k}" if path else str(k))
        return out
    if theirs == mine:
        return []
    return [f"{path}: {_show(theirs)} there, {_show(mine)} now"]


def other_run(marker: dict[str, Any], identity: dict[str, Any]) -> str | None:
    """None if the marker's run is this one (or predates run identities), else what differs."""
    theirs = marker.get("run")
    if theirs is None or theirs == identity:
        return None
    diffs = [
        f"{k}: {json.dumps(theirs.get(k), sort_keys=True)} there, "
        f"{json.dumps(identity[k], sort_keys=True)} in this plan"
        for k in identity
        if theirs.get(k) != identity[k]
    ]
    return "; ".join(diffs)


def changed_data(marker: dict[str, Any], data: dict[str, Any]) -> list[str]:
    """What differs between the data a checkpoint was trained on and this run's data (empty
    when the same, or when the marker predates data identities)."""
    theirs = marker.get("data")
    if not isinstance(theirs, dict) or not data:
        return []
    return differences(theirs, data, "data")


def data_change(where: str, step: int, diffs: list[str], accepted: bool) -> dict[str, Any]:
    """The history entry of an accepted change of data; BsmError (before step 0) when the
    change was not accepted, naming what changed."""
    if not accepted:
        raise BsmError(
            f"{where} was trained on other data than this run's ({'; '.join(diffs)}); refusing "
            "to resume on changed data before step 0",
            hint="restore the data it was trained on; or, if the change is meant, set "
            "training.data.accept_changed_data: true (recorded in the checkpoint's history); "
            "or start a fresh run in an empty checkpoint location",
            field="training.data",
            code="data_changed",
        )
    return {
        "event": "data_changed",
        "step": step,
        "accepted_by": "training.data.accept_changed_data",
        "changes": diffs,
    }


def read_marker(path: Path, identity: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
    """What resume needs from a checkpoint's marker: `differs` (another run), `data` (what
    changed), `sums` (its files' checksums), `history`; any problem is `unreadable` (the
    checkpoint is then set aside like one that does not load)."""
    from blackwell_sm.train.checkpoint_files import parse_sums

    out: dict[str, Any] = {
        "differs": None,
        "unreadable": None,
        "data": [],
        "sums": None,
        "history": [],
    }
    try:
        marker = json.loads((path / COMPLETE_MARKER).read_text())
        if not isinstance(marker, dict):
            raise ValueError(f"not a JSON object: {type(marker).__name__}")
        out["differs"] = other_run(marker, identity)
        out["data"] = changed_data(marker, data)
        if marker.get("files") is not None:
            out["sums"] = parse_sums(marker["files"])
        history = marker.get("history") or []
        if not isinstance(history, list):
            raise ValueError(f"history: expected a list, got {type(history).__name__}")
        out["history"] = history
    except (OSError, ValueError, ValidationError) as e:
        out["unreadable"] = f"its {COMPLETE_MARKER} marker is unreadable: {type(e).__name__}: {e}"
    return out
