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
from typing import Any

from blackwell_sm.planner.plan import Plan


def run_identity(plan: Plan) -> dict[str, Any]:
    """The run part: what may not change between a run and its resumption."""
    tr, cfg = plan.spec.training, plan.config
    return {
        "model": plan.spec.model.model_dump(mode="json"),
        "seed": tr.seed,
        "seq_len": cfg.seq_len,
        "global_batch_sequences": cfg.global_batch_sequences,
        "data": {"source": tr.data.source, "train_channel": tr.data.train_channel},
    }


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
