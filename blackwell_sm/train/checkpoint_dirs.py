"""The checkpoint folder: which `step-XXXXXXXX` directories exist, which are complete, which were
set aside as unloadable, and what is pruned (torch-free: plain files and JSON).

Retention. After every complete save, `prune` keeps the newest `keep_last` complete checkpoints
and removes older ones and stale `.step-*.tmp` saves. A `step-XXXXXXXX` directory without its
marker is never removed, skipped silently or replaced: nothing says what it holds (a save cut
short, or a checkpoint whose marker was lost). A resume sets it aside loudly
(`set_aside_incomplete`: `step-N.incomplete-step-N`, with its `SET_ASIDE` reason), where it stays,
never pruned, for a person to inspect or remove; the same step saved again is a new folder. A checkpoint set aside as unloadable (`step-N.corrupt-step-N`, with a
`SET_ASIDE` file saying why) is kept for inspection and ages out like the checkpoint it was: it
is removed once `keep_last` complete checkpoints newer than it exist.

The S3 copy. SageMaker syncs `/opt/ml/checkpoints` with `CheckpointConfig.S3Uri` while a job runs,
deletions included ("If a checkpoint is deleted in the SageMaker AI container, it will also be
deleted in the S3 folder", SageMaker developer guide, Checkpoints), and seeds the folder from S3
when the next job starts. So the same rule holds for the S3 copy: a removal here is a removal
there, which is why nothing is removed unless `keep_last` newer complete checkpoints exist (the
only copy of a run is never pruned), and why a set-aside checkpoint is renamed, never left in
place: the name and its `SET_ASIDE` file travel to S3 and back, and a later job does not try it
again.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from blackwell_sm.atomic_write import write_text
from blackwell_sm.errors import BsmError
from blackwell_sm.opt_ml import COMPLETE_MARKER

MARKER = COMPLETE_MARKER
SET_ASIDE = "SET_ASIDE"  # why a checkpoint was set aside (JSON), inside the renamed folder
_STEP_DIR = re.compile(r"^step-(\d{8})$")
_ASIDE_DIR = re.compile(r"^step-(\d{8})\.corrupt-step-\d+$")
INCOMPLETE = "incomplete"  # `step-N.incomplete-step-N`: set aside without a marker, never pruned


def step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


def aside_name(step: int) -> str:
    return f"{step_dir_name(step)}.corrupt-step-{step}"


def list_checkpoints(root: Path) -> list[tuple[int, Path, bool]]:
    """(step, path, complete) for every `step-XXXXXXXX` directory, newest first."""
    out = []
    if root.is_dir():
        for p in root.iterdir():
            m = _STEP_DIR.match(p.name)
            if m and p.is_dir():
                out.append((int(m.group(1)), p, (p / MARKER).is_file()))
    return sorted(out, reverse=True)


def set_aside_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """(step, path) of every checkpoint set aside as unloadable, newest first."""
    out = []
    if root.is_dir():
        for p in root.iterdir():
            m = _ASIDE_DIR.match(p.name)
            if m and p.is_dir():
                out.append((int(m.group(1)), p))
    return sorted(out, reverse=True)


def find_latest(
    root: Path, log: Callable[[str], None] = print, skip: frozenset[Path] = frozenset()
) -> tuple[int, Path] | None:
    """The newest complete checkpoint not in `skip`; incomplete newer ones are logged."""
    for step, path, complete in list_checkpoints(root):
        if path in skip:
            continue
        if complete:
            return step, path
        log(f"[bsm] skipping incomplete checkpoint {path.name} (no {MARKER} marker)")
    return None


def incomplete_steps(root: Path) -> list[int]:
    """Steps of the `step-XXXXXXXX` directories without a marker, newest first."""
    return [step for step, _, complete in list_checkpoints(root) if not complete]


def set_aside_incomplete(root: Path, steps: list[int]) -> list[Path]:
    """Rename each of `steps`' directories (no marker: unverified) to
    `step-N.incomplete-step-N` with a `SET_ASIDE` reason; kept, never pruned (the local rank 0
    of each host calls it for its own copy, with the steps rank 0 found)."""
    moved = []
    for step in steps:
        path = root / step_dir_name(step)
        aside = path.with_name(f"{step_dir_name(step)}.{INCOMPLETE}-step-{step}")
        if not path.is_dir() or aside.exists():
            continue
        with contextlib.suppress(OSError, BsmError):  # another host moved it first
            path.rename(aside)
            write_text(
                aside / SET_ASIDE,
                json.dumps(
                    {
                        "step": step,
                        "reason": f"no {MARKER} marker: a save cut short or a marker lost; its "
                        "bytes are unverified (kept for inspection, never pruned)",
                        "time": time.time(),
                    }
                ),
                flag=None,
            )
            moved.append(aside)
    return moved


def set_aside(path: Path, step: int, reason: str) -> Path:
    """Rename an unloadable checkpoint to `step-N.corrupt-step-N` with a `SET_ASIDE` file giving
    the reason (the local rank 0 of each host calls it for its own copy)."""
    aside = path.with_name(aside_name(step))
    with contextlib.suppress(OSError):  # another host sharing the folder moved it first
        if aside.exists():  # an earlier set-aside of the same step (seeded from S3)
            shutil.rmtree(aside)
        path.rename(aside)
    with contextlib.suppress(OSError, BsmError):
        write_text(
            aside / SET_ASIDE,
            json.dumps({"step": step, "reason": reason, "time": time.time()}),
            flag=None,
        )
    return aside


def prune(root: Path, keep_last: int) -> list[Path]:
    """Apply the retention rule (module docstring); returns what was removed."""
    found = list_checkpoints(root)
    complete = [s for s, _, ok in found if ok]
    kept = set(complete[:keep_last])
    gone = [p for s, p, ok in found if ok and s not in kept]
    gone += [p for s, p in set_aside_checkpoints(root) if sum(c > s for c in complete) >= keep_last]
    gone += list(root.glob(".step-*.tmp"))
    for p in gone:
        shutil.rmtree(p, ignore_errors=True)
    return gone
