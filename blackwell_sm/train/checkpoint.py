"""Atomic, resumable, verified checkpoints with torch.distributed.checkpoint (DCP).

Layout under `DIR/checkpoints/`:

    step-00000120/          a finished checkpoint
        .metadata           DCP metadata (rank 0)
        __<rank>_0.distcp   model + optimizer shards, one file per rank (unique names)
        rng/rank-<r>.pt     each rank's RNG states
        COMPLETE            JSON {step, world_size, run, data, history, files}: written LAST,
                            after a barrier; `files` holds every file's size and sha256
    .step-00000130.tmp/     a save in progress (renamed to step-00000130 when all ranks are done)
    step-00000110.corrupt-step-110/   set aside: it failed its checksums or did not load

A directory without `COMPLETE` is never trusted, skipped silently or overwritten: a resume names it
in a WARNING and sets it aside as `step-N.incomplete-step-N` (kept, never pruned). Before any rank
loads a checkpoint its files are checked against the marker's sums (`checkpoint_files.py`), and
its `run` and `data` against this run's (`run_identity.py`): another run's checkpoint is refused,
and so is a resume on different data unless `training.data.accept_changed_data` says so. A
checkpoint that fails its checksums or does not load is set aside and the previous one tried
(`checkpoint_dirs.py`: the folder, retention, the S3 copy). On hosts that do not share a
filesystem (SageMaker gives each host its own /opt/ml/checkpoints, merged in S3), each host
renames its own temp directory and rank 0 writes the marker on its host.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from blackwell_sm.atomic_write import write_text
from blackwell_sm.errors import BsmError
from blackwell_sm.train.checkpoint_dirs import (
    MARKER,
    find_latest,
    incomplete_steps,
    list_checkpoints,
    prune,
    set_aside,
    set_aside_incomplete,
    step_dir_name,
)
from blackwell_sm.train.checkpoint_files import (
    FileSum,
    HashingFileSystem,
    describe_error,
    hash_file,
    local_world_size,
    save_error,
    verify_share,
)
from blackwell_sm.train.distributed import Env
from blackwell_sm.train.rng_state import rng_state, set_rng_state
from blackwell_sm.train.run_identity import data_change, other_run, read_marker, run_identity

__all__ = [
    "MARKER",
    "Checkpointer",
    "find_latest",
    "list_checkpoints",
    "other_run",
    "run_identity",
    "step_dir_name",
]


class Checkpointer:
    """Saves and restores model + optimizer + step + RNG; keeps the last `keep_last`.

    `identity` is the run's (`run_identity`), `data` what it trains on (channel identities);
    `checksums=False` only for the benchmark that measures what they cost.
    """

    def __init__(
        self,
        root: Path,
        env: Env,
        *,
        keep_last: int,
        async_save: bool,
        identity: dict[str, Any] | None = None,
        data: dict[str, Any] | None = None,
        accept_changed_data: bool = False,
        checksums: bool = True,
    ) -> None:
        self.root, self.env, self.keep_last = root, env, keep_last
        self.identity = identity or {}
        self.data = data or {}
        self.accept_changed_data = accept_changed_data
        self.checksums = checksums
        self.async_save = async_save
        self.history: list[dict[str, Any]] = []  # carried from marker to marker
        self._pending: tuple[Any, int, Path, Any] | None = None
        self.marker_error: str | None = None  # the newest complete one's, from latest_step()
        self._sums: dict[str, FileSum] | None = None  # the newest complete one's file sums
        self._data_note: dict[str, Any] | None = None  # an accepted change of data
        self._async_group = None
        if async_save:
            # Async saves run collectives from a background thread: give them their own gloo group.
            self._async_group = dist.new_group(backend="gloo")
        self.root.mkdir(parents=True, exist_ok=True)

    # -- state -------------------------------------------------------------------------------
    @staticmethod
    def _state(model: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_sd, optim_sd = get_state_dict(model, optimizer, options=_options(model))
        return {"model": model_sd, "optim": optim_sd, "train": {"step": torch.tensor(step)}}

    # -- save --------------------------------------------------------------------------------
    def save(self, model: nn.Module, optimizer: torch.optim.Optimizer, step: int) -> Path:
        """Save after `step` optimizer steps (collective: every rank calls it)."""
        import shutil

        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint import FileSystemWriter
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
            rng = f"rng/rank-{self.env.rank:05d}.pt"
            torch.save(rng_state(), tmp / rng)
            own = {rng: hash_file(tmp / rng)} if self.checksums else {}
            writer = FileSystemWriter(str(tmp))
            if self.checksums:
                writer.fs = HashingFileSystem()  # sums each file as DCP writes it
            state = self._state(model, optimizer, step)
            if self.async_save:
                future = dcp.async_save(
                    state, storage_writer=writer, process_group=self._async_group
                )
                self._pending = (future, step, tmp, (writer, own))
            else:
                dcp.save(state, storage_writer=writer)
        # DCP's CheckpointException derives from BaseException, not Exception.
        except (Exception, CheckpointException) as e:
            raise self._save_error(e, step) from e
        if not self.async_save:
            self._finish(step, tmp, self._written(writer, own))
        return final

    def _written(self, writer: Any, own: dict[str, FileSum]) -> dict[str, FileSum]:
        sums = getattr(writer.fs, "sums", None)
        return {**own, **sums} if sums is not None else {}

    def _save_error(self, e: BaseException, step: int) -> BsmError:
        return save_error(e, step=step, root=self.root, rank=self.env.rank)

    def wait(self) -> None:
        """Block until a pending async save is on disk, then mark it complete."""
        if self._pending is not None:
            pending, step, tmp, (writer, own) = self._pending
            self._pending = None
            # async_save returns a Future, or an AsyncSaveResponse holding one.
            from torch.distributed.checkpoint.api import CheckpointException

            try:
                getattr(pending, "upload_completion", pending).result()
            except (Exception, CheckpointException) as e:
                raise self._save_error(e, step) from e
            self._finish(step, tmp, self._written(writer, own))

    def _finish(self, step: int, tmp: Path, sums: dict[str, FileSum]) -> None:
        import contextlib

        final = self.root / step_dir_name(step)
        every: list[Any] = [None] * self.env.world_size
        dist.all_gather_object(every, {k: v.model_dump() for k, v in sums.items()})
        dist.barrier()  # every rank's files are written
        if self.env.local_rank == 0 and tmp.exists():
            # OSError: another host sharing this directory renamed it first.
            with contextlib.suppress(OSError):
                tmp.rename(final)
        dist.barrier()
        if self.env.is_main:
            files = {k: v for part in every for k, v in sorted(part.items())}
            marker = {
                "step": step,
                "world_size": self.env.world_size,
                "time": _now(),
                "run": self.identity,
                "data": self.data,
                "history": self.history,
                "files": files if self.checksums else None,
            }
            write_text(final / MARKER, json.dumps(marker), flag=None)  # the one atomic writer
            prune(self.root, self.keep_last)
        dist.barrier()

    def _prune(self) -> None:
        prune(self.root, self.keep_last)

    # -- load --------------------------------------------------------------------------------
    def latest_step(
        self, log=print, skip: frozenset[Path] = frozenset()
    ) -> tuple[int, Path] | None:
        """Rank 0 picks the newest complete checkpoint and every rank follows its choice.

        A checkpoint of another run (different model, seed or data source) is refused, on every
        rank: resuming it would silently train the wrong model. So is one trained on other data
        (its channels' identities), unless `accept_changed_data`.
        """
        choice: list[Any] = [None]
        self.marker_error, self._sums, self._data_note = None, None, None
        self._set_aside_incomplete(log)
        if self.env.is_main:
            found = find_latest(self.root, log=log, skip=skip)
            if found is not None:
                choice = [
                    (found[0], str(found[1]), read_marker(found[1], self.identity, self.data))
                ]
        dist.broadcast_object_list(choice, src=0)
        if choice[0] is None:
            return None
        step, path, m = choice[0]
        self.marker_error, self._sums = m["unreadable"], m["sums"]
        if m["differs"]:
            raise BsmError(
                f"checkpoint {Path(path).name} in {self.root} belongs to another run "
                f"({m['differs']}); refusing to resume from it",
                hint="use a fresh checkpoint location for this run, or remove the old checkpoints",
            )
        if m["data"]:
            where = f"checkpoint {Path(path).name} in {self.root}"
            self._data_note = data_change(where, step, m["data"], self.accept_changed_data)
        if m["unreadable"] is None:
            self.history = list(m["history"])
        return step, Path(path)

    def _set_aside_incomplete(self, log) -> None:
        """Folders without a marker (rank 0's list), named and set aside on every host."""
        steps: list[Any] = [incomplete_steps(self.root) if self.env.is_main else []]
        dist.broadcast_object_list(steps, src=0)
        if not steps[0]:
            return
        names = ", ".join(step_dir_name(s) for s in steps[0])
        log(
            f"[bsm] WARNING: checkpoint folder(s) without a {MARKER} marker in {self.root}: "
            f"{names} (a save cut short or a marker lost, bytes unverified): not resumed from, "
            "set aside as step-N.incomplete-step-N (kept, never pruned; remove them once "
            "inspected)"
        )
        if self.env.local_rank == 0:
            set_aside_incomplete(self.root, steps[0])
        dist.barrier()

    def _agree(self, err: str | None) -> list[str]:
        """Every rank's error (or None) gathered: each rank takes the same branch."""
        errors: list[Any] = [None] * self.env.world_size
        dist.all_gather_object(errors, err)
        return [f"rank {r}: {m}" for r, m in enumerate(errors) if m]

    def _verify(self, path: Path, log) -> list[str]:
        """Every file of `path` against its marker's sums, split over this host's ranks."""
        if self._sums is None:  # every rank: the sums came from rank 0's broadcast
            return [
                f"its {MARKER} marker lists no files (saved without checksums, or the list "
                "was removed): its bytes cannot be verified"
            ]
        local = local_world_size(self.env.world_size)
        return self._agree(verify_share(path, self._sums, self.env.local_rank, local))

    def resume(
        self, model: nn.Module, optimizer: torch.optim.Optimizer, log=print
    ) -> tuple[int, Path] | None:
        """Load the newest complete checkpoint that verifies and loads; (step, path), or None.

        Its files are checked against the marker's checksums before any rank loads it. One that
        fails the check or does not load on any rank is named in a warning with the cause and
        set aside (`checkpoint_dirs.set_aside`: every rank agrees first; the local rank 0 of
        each host renames its copy), and the previous complete one is tried. If checkpoints
        were there but none loads, the run fails naming each one tried.
        """
        from torch.distributed.checkpoint.api import CheckpointException

        tried: list[str] = []
        skip: set[Path] = set()
        while True:
            found = self.latest_step(log=log, skip=frozenset(skip))
            if found is None:
                if tried:
                    raise BsmError(
                        f"no complete checkpoint in {self.root} could be loaded; tried (and set "
                        "aside): " + "; ".join(tried),
                        hint="start a fresh run in an empty checkpoint location, or restore a "
                        "good checkpoint from S3",
                        code="checkpoint_unreadable",
                    )
                return None
            step, path = found
            bad = self._agree(self.marker_error) or self._verify(path, log)
            start = None
            if not bad:
                err = None
                try:
                    start = self.load(model, optimizer, path)
                except (Exception, CheckpointException) as e:  # CheckpointException: BaseException
                    err = describe_error(e)
                bad = self._agree(err)
            if not bad:
                assert start is not None
                self._note_data_change(log)
                return start, path
            log(
                f"[bsm] WARNING: complete checkpoint {path} failed to load ({bad[0]}); setting "
                "it aside and trying the previous one"
            )
            if self.env.local_rank == 0 and path.exists():
                set_aside(path, step, bad[0])
            dist.barrier()
            skip.add(path)
            tried.append(f"{path.name} ({bad[0]})")

    def _note_data_change(self, log) -> None:
        if self._data_note is not None:
            self.history.append({**self._data_note, "time": _now()})
            log(
                "[bsm] WARNING: resuming on changed data, accepted by "
                "training.data.accept_changed_data (kept in the checkpoint's history): "
                + "; ".join(self._data_note["changes"])
            )

    def load(self, model: nn.Module, optimizer: torch.optim.Optimizer, path: Path) -> int:
        """Restore model, optimizer and RNG from `path`; returns the step to continue from."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_state_dict

        state = self._state(model, optimizer, 0)
        dcp.load(state, checkpoint_id=str(path))
        set_state_dict(
            model,
            optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optim"],
            options=_options(model),
        )
        rng = path / "rng" / f"rank-{self.env.rank:05d}.pt"
        if rng.exists():  # absent when resuming on a different world size
            set_rng_state(torch.load(rng, weights_only=False))
        return int(state["train"]["step"])


def _options(model: nn.Module) -> Any:
    """DCP's state-dict options: with frozen base weights (LoRA, train/lora.py) the checkpoint
    holds the trainable parameters and their optimizer state only."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    from blackwell_sm.train.lora import trainable_only

    if trainable_only(model):
        return StateDictOptions(ignore_frozen_params=True, strict=False)
    return None


def _now() -> float:
    import time

    return time.time()
