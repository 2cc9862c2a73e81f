"""train/checkpoint.py: atomic saves, the COMPLETE marker, pruning, run identity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from train_support import async_checkpoint_worker, fsdp_model_and_optimizer, local_plan, spawn

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_async_save_marks_complete_only_after_the_write(tmp_path):
    spawn(async_checkpoint_worker, str(tmp_path / "ck"), tmp=tmp_path / "errors")


def test_prune_keeps_the_last_complete_and_never_an_unmarked_one(tmp_path):
    from blackwell_sm.train.checkpoint import MARKER, Checkpointer, find_latest
    from blackwell_sm.train.checkpoint_dirs import SET_ASIDE, incomplete_steps, set_aside_incomplete
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
        "step-00000004",  # unverified: never removed (issue 37)
        "step-00000006",
        "step-00000008",
        "step-00000009",
    ]
    logged: list[str] = []
    assert find_latest(tmp_path, log=logged.append) == (8, tmp_path / "step-00000008")
    assert logged == ["[bsm] skipping incomplete checkpoint step-00000009 (no COMPLETE marker)"]
    # a resume sets them aside, with the reason, and no pruning ever removes them
    assert incomplete_steps(tmp_path) == [9, 4]
    moved = set_aside_incomplete(tmp_path, [9, 4])
    assert [p.name for p in moved] == [
        "step-00000009.incomplete-step-9",
        "step-00000004.incomplete-step-4",
    ]
    assert "no COMPLETE marker" in json.loads((moved[0] / SET_ASIDE).read_text())["reason"]
    for step in (10, 12, 14):
        (tmp_path / f"step-{step:08d}").mkdir()
        (tmp_path / f"step-{step:08d}" / MARKER).write_text(json.dumps({"step": step}))
    Checkpointer(tmp_path, env, keep_last=2, async_save=False)._prune()
    assert all(p.is_dir() for p in moved)


def test_run_identity_names_what_differs():
    from blackwell_sm.train.checkpoint import other_run, run_identity

    mine = run_identity(local_plan())
    assert other_run({"step": 4}, mine) is None  # a marker from before run identities
    assert other_run({"run": mine}, mine) is None
    assert run_identity(local_plan(training={"optimizer": {"lr": 1e-4}})) == mine  # may change
    theirs = run_identity(local_plan(training={"seed": 5}))
    assert other_run({"run": theirs}, mine) == "seed: 5 there, 0 in this plan"


def fallback_worker(root: str) -> None:
    """Saves at steps 4 and 8; step 8's shard of rank 0 truncated: its checksums fail before any
    rank loads it, it is set aside with the reason and step 4 loads. A step 12 with a broken
    marker goes the same way, and so does a step 16 whose marker lists no files (saved without
    checksums, or the list removed): never loaded unverified (issue 37). With step 4 corrupted
    too, resume fails naming it."""
    import torch.distributed as dist

    from blackwell_sm.errors import BsmError
    from blackwell_sm.train.checkpoint import MARKER, Checkpointer

    env, model, opt = fsdp_model_and_optimizer()
    base = Path(root)
    ckpt = Checkpointer(base, env, keep_last=3, async_save=False)
    ckpt.save(model, opt, 4)
    ckpt.save(model, opt, 8)
    if env.rank == 0:  # every file of the save is listed, with the sum of its bytes on disk
        from blackwell_sm.train.checkpoint_files import FileSum, hash_file

        d = base / "step-00000008"
        files = json.loads((d / MARKER).read_text())["files"]
        on_disk = {str(f.relative_to(d)) for f in d.rglob("*") if f.is_file()} - {MARKER}
        assert set(files) == on_disk and len(on_disk) == 5  # .metadata, 2 shards, 2 RNG
        assert all(FileSum(**files[k]) == hash_file(d / k) for k in files)

    def corrupt(step: int) -> None:
        if env.rank == 0:
            shard = base / f"step-{step:08d}" / "__0_0.distcp"
            shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
        dist.barrier()

    corrupt(8)
    logged: list[str] = []
    assert ckpt.resume(model, opt, log=logged.append) == (4, base / "step-00000004")
    aside = base / "step-00000008.corrupt-step-8"
    assert aside.is_dir() and not (base / "step-00000008").exists()
    warning = [m for m in logged if "WARNING" in m]
    assert len(warning) == 1 and "step-00000008 failed to load (rank " in warning[0]
    assert "__0_0.distcp: " in warning[0] and "(truncated)" in warning[0], warning[0]
    assert "__0_0.distcp" in json.loads((aside / "SET_ASIDE").read_text())["reason"]

    ckpt.save(model, opt, 12)  # its marker broken: moved aside the same way
    if env.rank == 0:
        (base / "step-00000012" / MARKER).write_text("{")
    dist.barrier()
    assert ckpt.resume(model, opt, log=logged.append) == (4, base / "step-00000004")
    assert "its COMPLETE marker is unreadable: JSONDecodeError" in logged[-1]

    Checkpointer(base, env, keep_last=5, async_save=False, checksums=False).save(model, opt, 16)
    corrupt(16)
    logged.clear()
    assert ckpt.resume(model, opt, log=logged.append) == (4, base / "step-00000004")
    warning = next(m for m in logged if "WARNING" in m)
    assert "step-00000016 failed to load" in warning and "lists no files" in warning, warning

    corrupt(4)
    try:
        ckpt.resume(model, opt, log=logged.append)
        raise AssertionError("resume should have failed")
    except BsmError as e:
        assert f"no complete checkpoint in {base} could be loaded" in e.message
        assert "step-00000004 (rank " in e.message and "__0_0.distcp" in e.message
    assert sorted(p.name for p in base.iterdir()) == [
        "step-00000004.corrupt-step-4",
        "step-00000008.corrupt-step-8",
        "step-00000012.corrupt-step-12",
        "step-00000016.corrupt-step-16",
    ]
    dist.destroy_process_group()


@pytest.mark.slow
def test_unloadable_complete_checkpoint_is_moved_aside_and_the_previous_one_loads(tmp_path):
    spawn(fallback_worker, str(tmp_path / "ck"), tmp=tmp_path / "errors")


def test_set_aside_checkpoints_age_out_like_the_checkpoint_they_were(tmp_path):
    """Retention (checkpoint_dirs.prune): a set-aside checkpoint stays until keep_last complete
    checkpoints newer than it exist, then goes with them (in S3 too: the sync deletes there)."""
    from blackwell_sm.train.checkpoint_dirs import MARKER, SET_ASIDE, prune, set_aside

    def make(step: int, complete: bool = True):
        d = tmp_path / f"step-{step:08d}"
        d.mkdir()
        if complete:
            (d / MARKER).write_text(json.dumps({"step": step}))
        return d

    bad = set_aside(make(4), 4, "rank 0: __0_0.distcp: sha256 differs")
    assert bad.name == "step-00000004.corrupt-step-4"
    assert json.loads((bad / SET_ASIDE).read_text())["reason"].startswith("rank 0: __0_0")
    make(2)
    make(6)
    prune(tmp_path, keep_last=2)  # one complete checkpoint newer than it: it stays
    assert bad.is_dir() and (tmp_path / "step-00000002").is_dir()
    make(8)
    gone = prune(tmp_path, keep_last=2)  # two newer: it goes, as step 2 does
    assert not bad.exists() and bad in gone and tmp_path / "step-00000002" in gone
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000006", "step-00000008"]
    # seeded again from S3 under the same name, a set-aside is replaced, never resumed from
    again = set_aside(make(10), 10, "x")
    assert set_aside(make(10), 10, "y") == again and (again / SET_ASIDE).is_file()
    assert json.loads((again / SET_ASIDE).read_text())["reason"] == "y"


def test_a_marker_whose_file_list_is_malformed_is_unreadable():
    from blackwell_sm.train.checkpoint_files import parse_sums

    good = {"bytes": 3, "sha256": "a" * 64}
    assert parse_sums({"rng/rank-00000.pt": good})["rng/rank-00000.pt"].bytes == 3
    for bad, words in (
        ({"../../etc/x": good}, "not a path inside"),
        ({"/abs": good}, "not a path inside"),
        ({"x": {**good, "bytes": -1}}, "files.x.bytes"),
        ({"x": {**good, "sha256": "zz"}}, "files.x.sha256"),
        ([good], "expected a mapping"),
    ):
        with pytest.raises(ValueError, match=words):
            parse_sums(bad)
