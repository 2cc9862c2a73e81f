"""Before torchrun starts: the plan checks itself, and the host's outputs are writable with room.

Torch-free (the launcher runs it on every host before any worker exists), so a corrupted
plan.json or a read-only volume fails in seconds with `output/failure` naming the field or the
path, not after the model was built or the run trained.

- `check_plan`: `schema_version` is the one this code reads; micro-batch x accumulation x
  data-parallel ranks is the spec's global batch (or the planner rounded it and says so: the
  note `batch_rounded`); `run.steps` >= 1 and agrees with the spec (`epochs` over
  `data.sequences` at the plan's batch, or `total_steps`, or `total_tokens`) and with the plan's
  own token count; `config.seq_len` (the plan's one sequence length) <= the model's `max_seq_len`;
  `cp_degree` divides shard_degree and splits seq_len into 2 x cp_degree chunks.
- `preflight`: `checkpoints/`, `model/` and `output/` take a file (create + remove a probe), and
  the checkpoint volume has room for one save of this host's shards (`plan.checkpoint`).

The precision is checked by the worker (`train/precision.py` `check_precision`, before the model
is built): only torch knows the device.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from blackwell_sm.errors import BsmError, SpecError
from blackwell_sm.launch import log
from blackwell_sm.opt_ml import ENV_TEST_FREE_BYTES, OptMl
from blackwell_sm.planner.plan import PLAN_HINT, SCHEMA_VERSION, Plan

# Test-only: pretend the checkpoint volume has this many free bytes (the too-little-disk tests).
PROBE_NAME = ".bsm-write-probe"


def _fail(path: Path, field: str, message: str) -> SpecError:
    return SpecError(
        f"plan {path}: {field}: {message}",
        field=field,
        hint=PLAN_HINT,
    )


def check_plan(plan: Plan, path: Path) -> None:
    """Refuse a plan that does not agree with itself or with the spec it carries."""
    cfg, run, tr = plan.config, plan.run, plan.spec.training
    if plan.schema_version != SCHEMA_VERSION:
        raise _fail(
            path,
            "schema_version",
            f"{plan.schema_version}, but this container reads schema_version {SCHEMA_VERSION}",
        )
    max_seq = plan.spec.model.max_seq_len
    if cfg.seq_len > max_seq:
        raise _fail(
            path,
            "config.seq_len",
            f"{cfg.seq_len} is above the model's max_seq_len {max_seq} (spec.model.max_seq_len)",
        )

    check_context_parallel(plan, path)
    gb, dp = cfg.global_batch_sequences, cfg.data_parallel_size
    want = tr.global_batch_sequences
    # The planner may round a batch it cannot split over the GPUs, and then says so in a note.
    rounded = plan.has_note("batch_rounded")
    if gb != want and not rounded:
        per_step = cfg.micro_batch_size * dp
        ok = per_step > 0 and want % per_step == 0
        field = "config.grad_accum_steps" if ok else "config.micro_batch_size"
        source = (
            f"training.global_batch_tokens {tr.global_batch_tokens} / seq_len {tr.seq_len}"
            if tr.global_batch_tokens is not None
            else "training.global_batch_seqs"
        )
        raise _fail(
            path,
            field,
            (
                f"micro_batch_size {cfg.micro_batch_size} x grad_accum_steps {cfg.grad_accum_steps} x "
                f"{dp} data-parallel ranks (shard_degree {cfg.shard_degree} x replicate_degree "
                f"{cfg.replicate_degree} / cp_degree {cfg.cp_degree}) = {gb} sequences per step, but "
                "the spec's global batch is "
                f"{want} sequences ({source})"
            ),
        )

    if run.steps < 1:
        raise _fail(path, "run.steps", f"{run.steps}; a run trains at least 1 step")
    steps = tr.steps_at_batch(gb)  # epochs hold at the plan's batch
    if steps is not None:
        if run.steps != steps:
            raise _fail(
                path,
                "run.steps",
                f"{run.steps}, but training.epochs {tr.epochs:g} over data.sequences "
                f"{tr.data.sequences} at {gb} sequences per step is {steps} steps",
            )
    elif tr.total_steps is not None and run.steps != tr.total_steps:
        raise _fail(
            path,
            "run.steps",
            f"{run.steps}, but the spec says training.total_steps {tr.total_steps}",
        )
    if tr.total_tokens is not None:
        steps = -(-tr.total_tokens // (gb * cfg.seq_len))
        if run.steps != steps:
            raise _fail(
                path,
                "run.steps",
                (
                    f"{run.steps}, but the spec's training.total_tokens {tr.total_tokens} at {gb} x "
                    f"{cfg.seq_len} tokens per step is {steps} steps"
                ),
            )
    if run.tokens != run.steps * gb * cfg.seq_len:
        raise _fail(
            path,
            "run.tokens",
            (
                f"{run.tokens}, but run.steps {run.steps} x {gb} sequences x seq_len {cfg.seq_len} = "
                f"{run.steps * gb * cfg.seq_len}: the plan's batch or steps were changed"
            ),
        )


def check_context_parallel(plan: Plan, path: Path) -> None:
    """`config.cp_degree`: a divisor of shard_degree (a CP group lies inside one shard group),
    splitting seq_len into 2 x cp_degree equal chunks, and equal to a pinned cp_degree."""
    cfg, pin = plan.config, plan.spec.training.pins.cp_degree
    cp, s = cfg.cp_degree, cfg.shard_degree
    if s % cp:
        raise _fail(
            path,
            "config.cp_degree",
            (
                f"{cp} does not divide shard_degree {s}: a context-parallel group must lie inside "
                f"one shard group; allowed: {', '.join(str(d) for d in range(1, s + 1) if s % d == 0)}"
            ),
        )
    if cp > 1 and cfg.seq_len % (2 * cp):
        raise _fail(
            path,
            "config.cp_degree",
            (
                f"{cp}: 2 x cp_degree must divide seq_len {cfg.seq_len} (each rank holds two of "
                f"2 x cp_degree equal chunks of every sequence)"
            ),
        )
    if pin is not None and pin != cp:
        raise _fail(
            path, "config.cp_degree", f"{cp}, but the spec pins training.pins.cp_degree {pin}"
        )


def checkpoint_bytes_per_host(plan: Plan) -> int | None:
    """What one save writes on one host (this host's shards), or None if the plan lacks it."""
    ck = plan.checkpoint
    if ck is None:
        return None
    shards = plan.config.shard_degree
    return ck.bytes_per_save * min(plan.instance.gpus_per_instance, shards) // shards


def free_bytes(path: Path) -> int:
    """Free bytes on `path`'s filesystem (`BSM_TEST_FREE_BYTES` overrides it, for tests only)."""
    fake = os.environ.get(ENV_TEST_FREE_BYTES)
    if fake:
        return int(fake)
    return shutil.disk_usage(path).free


def _probe(path: Path) -> str | None:
    """None if a file can be created and removed in `path` (made if missing), else why not."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f"{PROBE_NAME}-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        return e.strerror or str(e)
    return None


def preflight(plan: Plan, opt_ml: Path, host: str) -> list[str]:
    """Writable outputs and room for one checkpoint on this host; returns lines to log."""
    tree = OptMl(opt_ml)
    for name, path in (
        ("checkpoints", tree.checkpoints),
        ("model", tree.model),
        ("output", tree.root / "output"),
    ):
        why = _probe(path)
        if why:
            err = BsmError(
                f"host {host}: {path} is not writable ({why}); the run writes its {name} there",
                hint="give the job a writable volume; nothing was trained",
                field=name,
                code="not_writable",
            )
            if name == "output":  # output/failure cannot be written: the log must say it
                log(f"error: {err.message}")
            raise err
    need = checkpoint_bytes_per_host(plan)
    if need is None:
        return ["the plan has no checkpoint size (plan.checkpoint): disk space not checked"]
    free = free_bytes(tree.checkpoints)
    if free < need:
        raise BsmError(
            f"host {host}: {tree.checkpoints} has {free / 2**30:.3f} GiB ({free:,} bytes) free, "
            f"but one checkpoint of this host's shards is {need / 2**30:.3f} GiB ({need:,} bytes)",
            hint="give the job a larger volume (job.volume_size_gb)",
            field="job.volume_size_gb",
            code="disk_full",
        )
    return [
        f"outputs writable; {free / 2**30:.1f} GiB free for checkpoints of "
        f"{need / 2**30:.3f} GiB each"
    ]


def check_before_launch(plan_path: Path, opt_ml: Path, host: str) -> list[str]:
    """The launcher's checks before torchrun: the plan, then this host's outputs and disk."""
    from blackwell_sm.launch.topology import read_plan

    plan = read_plan(plan_path)
    check_plan(plan, plan_path)
    return preflight(plan, opt_ml, host)
