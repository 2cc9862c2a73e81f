"""Atomic, resumable checkpoints with torch.distributed.checkpoint (DCP).

Layout under `DIR/checkpoints/`:

    step-00000120/          a finished checkpoint
        .metadata           DCP metadata (rank 0)
        __<rank>_0.distcp   model + optimizer shards, one file per rank (unique names)
        rng/rank-<r>.pt     each rank's RNG states
        COMPLETE            JSON {step, world_size, ...}: written LAST, after a barrier
    .step-00000130.tmp/     a save in progress (renamed to step-00000130 when all ranks are done)

A directory without `COMPLETE` is never resumed from (it is reported and skipped). On hosts that
do not share a filesystem (SageMaker gives each host its own /opt/ml/checkpoints, merged in S3),
each host renames its own temp directory and rank 0 writes the marker on its host.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from blackwell_sm.errors import BsmError
from blackwell_sm.opt_ml import COMPLETE_MARKER
from blackwell_sm.planner.plan import Plan
from blackwell_sm.train.distributed import Env

_STEP_DIR = re.compile(r"^step-(\d{8})$")
MARKER = COMPLETE_MARKER


def step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


def list_checkpoints(root: Path) -> list[tuple[int, Path, bool]]:
    """(step, path, complete) for every `step-XXXXXXXX` directory, newest first."""
    out = []
    if root.is_dir():
        for p in root.iterdir():
            m = _STEP_DIR.match(p.name)
            if m and p.is_dir():
                out.append((int(m.group(1)), p, (p / MARKER).is_file()))
    return sorted(out, reverse=True)


def find_latest(root: Path, log=print) -> tuple[int, Path] | None:
    """The newest complete checkpoint; incomplete newer ones are logged and skipped."""
    for step, path, complete in list_checkpoints(root):
        if complete:
            return step, path
        log(f"[bsm] skipping incomplete checkpoint {path.name} (no {MARKER} marker)")
    return None


def run_identity(plan: Plan) -> dict[str, Any]:
    """What makes a checkpoint belong to this run: the model, the seed and the data stream.

    Optimizer, schedule, step count, checkpoint policy and the world size may change between a
    run and its resumption (DCP reshards); these may not.
    """
    tr, cfg = plan.spec.training, plan.config
    return {
        "model": plan.spec.model.model_dump(mode="json"),
        "seed": tr.seed,
        "seq_len": cfg.seq_len,
        "global_batch_sequences": cfg.global_batch_sequences,
        "data": {"source": tr.data.source, "train_channel": tr.data.train_channel},
    }


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


def _rng_state() -> dict[str, Any]:
    import random

    import numpy as np

    state = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": np.random.get_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def _set_rng_state(state: dict[str, Any]) -> None:
    import random

    import numpy as np

    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


class Checkpointer:
    """Saves and restores model + optimizer + step + RNG; keeps the last `keep_last`."""

    def __init__(
        self,
        root: Path,
        env: Env,
        *,
        keep_last: int,
        async_save: bool,
        identity: dict[str, Any] | None = None,
    ) -> None:
        self.root, self.env, self.keep_last = root, env, keep_last
        self.identity = identity or {}
        self.async_save = async_save
        self._pending: tuple[Any, int, Path] | None = None
        self.marker_error: str | None = None  # the newest complete one's, from latest_step()
        self._async_group = None
        if async_save:
            # Async saves run collectives from a background thread: give them their own gloo group.
            self._async_group = dist.new_group(backend="gloo")
        self.root.mkdir(parents=True, exist_ok=True)

    # -- state -------------------------------------------------------------------------------
    @staticmethod
    def _state(model: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_sd, optim_sd = get_state_dict(model, optimizer)
        return {"model": model_sd, "optim": optim_sd, "train": {"step": torch.tensor(step)}}

    # -- save --------------------------------------------------------------------------------
    def save(self, model: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> Path:
        """Save after `step` optimizer steps (collective: every rank calls it)."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.api import CheckpointException

        from blackwell_sm.train.guard import all_finite

        self.wait()  # finish (and mark) a previous async save first
        if not all_finite(model, self.env.device):
            raise BsmError(
                f"refusing to save checkpoint step {step} to {self.root}: the weights are not "
                "finite (NaN or Inf); the last complete checkpoint is kept",
                hint="resume from the last checkpoint with a lower training.optimizer.lr",
                code="non_finite",
            )
        final = self.root / step_dir_name(step)
        tmp = self.root / f".{final.name}.tmp"
        if self.env.local_rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(final, ignore_errors=True)  # a stale incomplete save of the same step
            (tmp / "rng").mkdir(parents=True, exist_ok=True)
        dist.barrier()
        try:
            (tmp / "rng").mkdir(parents=True, exist_ok=True)  # hosts without a shared filesystem
            torch.save(_rng_state(), tmp / "rng" / f"rank-{self.env.rank:05d}.pt")
            state = self._state(model, optimizer, step)
            if self.async_save:
                future = dcp.async_save(
                    state, checkpoint_id=str(tmp), process_group=self._async_group
                )
                self._pending = (future, step, tmp)
            else:
                dcp.save(state, checkpoint_id=str(tmp))
        # DCP's CheckpointException derives from BaseException, not Exception.
        except (Exception, CheckpointException) as e:
            raise self._save_error(e, step) from e
        if not self.async_save:
            self._finish(step, tmp)
        return final

    def _save_error(self, e: BaseException, step: int) -> BsmError:
        """A failed write as an error that says where, and whether the disk is full.

        Writers report ENOSPC in many shapes (torch.save says only "unexpected pos"), so the free
        space left is measured too, not only parsed from the message.
        """
        free = shutil.disk_usage(self.root).free
        text = f"{e} {e.__cause__} {e.__context__}"
        full = free < 2**20 or "No space left" in text or "Errno 28" in text
        head = "No space left on device: " if full else ""
        return BsmError(
            f"{head}checkpoint save of step {step} to {self.root} failed on rank "
            f"{self.env.rank}: {type(e).__name__}: {str(e)[:300]} "
            f"(free space there: {free / 2**20:.0f} MiB)",
            hint="give the job a larger volume (job.volume_size_gb) or keep fewer checkpoints "
            "(training.checkpoint.keep_last)"
            if full
            else None,
        )

    def wait(self) -> None:
        """Block until a pending async save is on disk, then mark it complete."""
        if self._pending is not None:
            pending, step, tmp = self._pending
            self._pending = None
            # async_save returns a Future, or an AsyncSaveResponse holding one.
            from torch.distributed.checkpoint.api import CheckpointException

            try:
                getattr(pending, "upload_completion", pending).result()
            except (Exception, CheckpointException) as e:
                raise self._save_error(e, step) from e
            self._finish(step, tmp)

    def _finish(self, step: int, tmp: Path) -> None:
        final = self.root / step_dir_name(step)
        dist.barrier()  # every rank's files are written
        if self.env.local_rank == 0 and tmp.exists():
            # OSError: another host sharing this directory renamed it first.
            with contextlib.suppress(OSError):
                tmp.rename(final)
        dist.barrier()
        if self.env.is_main:
            marker = {"step": step, "world_size": self.env.world_size, "time": time.time(),
                      "run": self.identity}  # fmt: skip
            _write_atomic(final / MARKER, json.dumps(marker))
            self._prune()
        dist.barrier()

    def _prune(self) -> None:
        """Keep the newest `keep_last` complete checkpoints; drop older ones and any incomplete
        directory older than the newest complete one (it can never be resumed from)."""
        found = list_checkpoints(self.root)
        complete = [(s, p) for s, p, ok in found if ok]
        for _, p in complete[self.keep_last :]:
            shutil.rmtree(p, ignore_errors=True)
        newest = complete[0][0] if complete else None
        for s, p, ok in found:
            if not ok and newest is not None and s < newest:
                shutil.rmtree(p, ignore_errors=True)
        for p in self.root.glob(".step-*.tmp"):
            shutil.rmtree(p, ignore_errors=True)

    # -- load --------------------------------------------------------------------------------
    def latest_step(self, log=print) -> tuple[int, Path] | None:
        """Rank 0 picks the newest complete checkpoint and every rank follows its choice.

        A checkpoint of another run (different model, seed or data) is refused, on every rank:
        resuming it would silently train the wrong model.
        """
        choice: list[Any] = [None]
        self.marker_error = None
        if self.env.is_main:
            found = find_latest(self.root, log=log)
            if found is not None:
                differs, unreadable = None, None
                try:
                    marker = json.loads((found[1] / MARKER).read_text())
                    if not isinstance(marker, dict):
                        raise ValueError(f"not a JSON object: {type(marker).__name__}")
                    differs = other_run(marker, self.identity)
                except (OSError, ValueError) as e:  # a broken marker: resume() moves it aside
                    unreadable = f"its {MARKER} marker is unreadable: {type(e).__name__}: {e}"
                choice = [(found[0], str(found[1]), differs, unreadable)]
        dist.broadcast_object_list(choice, src=0)
        if choice[0] is None:
            return None
        step, path, differs, self.marker_error = choice[0]
        if differs:
            raise BsmError(
                f"checkpoint {Path(path).name} in {self.root} belongs to another run ({differs}); "
                "refusing to resume from it",
                hint="use a fresh checkpoint location for this run, or remove the old checkpoints",
            )
        return step, Path(path)

    def resume(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, log=print
    ) -> tuple[int, Path] | None:
        """Load the newest complete checkpoint that loads; (step, path), or None if there is none.

        A complete checkpoint that fails to load on any rank is named in a warning and moved
        aside to `step-XXXXXXXX.corrupt-step-N` (every rank agrees first; the local rank 0 of
        each host renames its copy), and the previous complete one is tried. If checkpoints
        were there but none loads, the run fails naming each one tried.
        """
        from torch.distributed.checkpoint.api import CheckpointException

        tried: list[str] = []
        while True:
            found = self.latest_step(log=log)
            if found is None:
                if tried:
                    raise BsmError(
                        f"no complete checkpoint in {self.root} could be loaded; tried (and moved "
                        "aside): " + "; ".join(tried),
                        hint="start a fresh run in an empty checkpoint location, or restore a "
                        "good checkpoint from S3",
                        code="checkpoint_unreadable",
                    )
                return None
            step, path = found
            err, start = self.marker_error, None
            try:
                if err is None:
                    start = self.load(model, optimizer, path)
            except (Exception, CheckpointException) as e:  # CheckpointException: BaseException
                lines = str(e).strip().splitlines() or [""]
                err = f"{type(e).__name__}: {lines[0][:300]}"
            errors: list[Any] = [None] * self.env.world_size
            dist.all_gather_object(errors, err)  # every rank takes the same branch
            bad = [f"rank {r}: {m}" for r, m in enumerate(errors) if m]
            if not bad:
                assert start is not None
                return start, path
            aside = path.with_name(f"{path.name}.corrupt-step-{step}")
            log(f"[bsm] WARNING: complete checkpoint {path} failed to load ({bad[0]}); moving it "
                f"to {aside.name} and trying the previous one")  # fmt: skip
            if self.env.local_rank == 0 and path.exists():
                with contextlib.suppress(OSError):  # another host sharing the folder moved it
                    path.rename(aside)
            dist.barrier()
            tried.append(f"{path.name} ({bad[0]})")

    def load(self, model: nn.Module, optimizer: torch.optim.Optimizer, path: Path) -> int:
        """Restore model, optimizer and RNG from `path`; returns the step to continue from."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_state_dict

        state = self._state(model, optimizer, 0)
        dcp.load(state, checkpoint_id=str(path))
        set_state_dict(
            model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"]
        )
        rng = path / "rng" / f"rank-{self.env.rank:05d}.pt"
        if rng.exists():  # absent when resuming on a different world size
            _set_rng_state(torch.load(rng, weights_only=False))
        return int(state["train"]["step"])


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
