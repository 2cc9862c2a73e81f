"""train/checkpoint.py: atomic saves, the COMPLETE marker, pruning, run identity."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from train_support import async_checkpoint_worker, local_plan, spawn

REPO = Path(__file__).resolve().parents[1]


def test_async_save_marks_complete_only_after_the_write(tmp_path):
    spawn(async_checkpoint_worker, str(tmp_path / "ck"), tmp=tmp_path / "errors")


def test_prune_keeps_the_last_complete_and_find_latest_skips_unmarked(tmp_path):
    from blackwell_sm.train.checkpoint import MARKER, Checkpointer, find_latest
    from blackwell_sm.train.distributed import Env

    for step, complete in [(2, True), (4, False), (6, True), (8, True), (9, False)]:
        d = tmp_path / f"step-{step:08d}"
        d.mkdir()
        if complete:
            (d / MARKER).write_text(json.dumps({"step": step}))
    (tmp_path / ".step-00000010.tmp").mkdir()
    env = Env(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
    Checkpointer(tmp_path, env, keep_last=2, async_save=False)._prune()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "step-00000006", "step-00000008", "step-00000009",
    ]  # fmt: skip
    logged: list[str] = []
    assert find_latest(tmp_path, log=logged.append) == (8, tmp_path / "step-00000008")
    assert logged == ["[bsm] skipping incomplete checkpoint step-00000009 (no COMPLETE marker)"]


def test_run_identity_names_what_differs():
    from blackwell_sm.train.checkpoint import other_run, run_identity

    mine = run_identity(local_plan())
    assert other_run({"step": 4}, mine) is None  # a marker from before run identities
    assert other_run({"run": mine}, mine) is None
    assert run_identity(local_plan(training={"optimizer": {"lr": 1e-4}})) == mine  # may change
    theirs = run_identity(local_plan(training={"seed": 5}))
    assert other_run({"run": theirs}, mine) == "seed: 5 there, 0 in this plan"
