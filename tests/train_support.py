"""Helpers for the training-loop tests: a pinned local plan and a 2-process gloo runner.

The plan is `pinned_plan` (the planner's models, no search) so these tests pin the exact config
they exercise.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from blackwell_sm.hardware import GpuSpec, local_instance
from blackwell_sm.local import free_port
from blackwell_sm.planner.api import pinned_plan
from blackwell_sm.planner.plan import Plan
from blackwell_sm.spec import ModelSpec, parse_spec

__all__ = ["free_port", "local_plan", "spawn"]


def local_plan(
    *,
    nproc: int = 2,
    steps: int = 12,
    seq_len: int = 32,
    micro_batch_size: int = 2,
    grad_accum_steps: int = 2,
    replicate_degree: int = 1,
    precision: str = "bf16",
    activation_checkpointing: str = "none",
    training: dict[str, Any] | None = None,
    gpu: GpuSpec | None = None,
    model: ModelSpec | None = None,
    cp_degree: int = 1,
) -> Plan:
    """`model` (default: the `tiny` preset) on `nproc` CPU processes (or local `gpu`s) with
    exactly this config."""
    t = {
        "seq_len": seq_len,
        "total_steps": steps,
        "global_batch_seqs": micro_batch_size * grad_accum_steps * nproc // cp_degree,
        "precision": precision,
        "activation_checkpointing": activation_checkpointing,
        "optimizer": {"lr": 3e-3, "weight_decay": 0.0, "grad_clip": 1.0},
        "schedule": {"warmup_steps": 2, "decay": "cosine", "min_lr_ratio": 0.1},
        "checkpoint": {
            "interval_steps": 4,
            "interval_minutes": None,
            "keep_last": 2,
            "async_save": False,
        },
        "data": {"source": "synthetic"},
    }
    t.update(training or {})
    m = "tiny" if model is None else model.model_dump(exclude_unset=True)
    spec = parse_spec({"model": m, "training": t})
    cfg = dict(
        shard_degree=nproc // replicate_degree,
        replicate_degree=replicate_degree,
        micro_batch_size=micro_batch_size,
        grad_accum_steps=grad_accum_steps,
        precision=precision,
        activation_checkpointing=activation_checkpointing,
        compile=False,
        reshard_after_forward=True,
        cp_degree=cp_degree,
    )
    device = "cpu" if gpu is None else "cuda"
    return pinned_plan(spec, cfg, instance=local_instance(nproc=nproc, device=device, gpu=gpu))


def _worker(rank: int, world: int, port: int, fn, args: tuple, errdir: str) -> None:
    os.environ.update(
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        BSM_DEVICE="cpu",
    )
    import torch

    torch.set_num_threads(1)
    try:
        fn(*args)
    except BaseException:
        Path(errdir, f"rank{rank}.err").write_text(traceback.format_exc())
        raise
    # As the container's own entry does (train/main.py): leave without the interpreter's
    # teardown, where a process group's C++ threads still joinable abort the process
    # ("terminate called without an active exception": about 1 run in 3 of these workers).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def spawn(fn, *args, nproc: int = 2, tmp: Path) -> None:
    """Run `fn(*args)` in `nproc` fresh processes joined by gloo; re-raise the first failure."""
    import torch.multiprocessing as mp

    tmp.mkdir(parents=True, exist_ok=True)
    try:
        mp.spawn(_worker, args=(nproc, free_port(), fn, args, str(tmp)), nprocs=nproc, join=True)
    except Exception as e:
        errs = sorted(tmp.glob("rank*.err"))
        raise AssertionError("\n".join(p.read_text() for p in errs) or str(e)) from e


def _stdout_to_file(opt_ml: str):
    """The worker's stdout (metric lines, [bsm] log) into OPT_ML/stdout-rank<R>.log."""
    import contextlib

    Path(opt_ml).mkdir(parents=True, exist_ok=True)
    f = open(Path(opt_ml, f"stdout-rank{os.environ['RANK']}.log"), "w")  # noqa: SIM115
    return contextlib.redirect_stdout(f)


def train_worker(plan_json: str, opt_ml: str) -> None:
    """Spawned-process body: run the worker exactly as `python -m blackwell_sm.train.main` does."""
    from blackwell_sm.train.loop import train

    with _stdout_to_file(opt_ml):
        train(Plan.from_json(plan_json), Path(opt_ml))


def env_worker(plan_json: str, opt_ml: str, env: dict[str, str]) -> None:
    """`train_worker` with `env` added to the worker's environment (a job's deadline variables)."""
    os.environ.update(env)
    train_worker(plan_json, opt_ml)


def sigterm_worker(plan_json: str, opt_ml: str, after_step: int) -> None:
    """Like `train_worker`, but rank 0 receives SIGTERM while running step `after_step`.

    The signal arrives mid-step on one rank only, as a stop from SageMaker would reach a worker
    first: the loop must finish the step, agree with the other ranks, save and return.
    """
    import signal

    from blackwell_sm.train import loop

    original = loop.Trainer.train_step

    def train_step(self, step: int):
        if self.env.rank == 0 and step + 1 == after_step:
            os.kill(os.getpid(), signal.SIGTERM)
        return original(self, step)

    loop.Trainer.train_step = train_step
    with _stdout_to_file(opt_ml):
        summary = loop.train(Plan.from_json(plan_json), Path(opt_ml))
    assert summary.status.startswith("stopped"), summary


def fsdp_model_and_optimizer():
    """(env, model, optimizer) for this torchrun-style worker: the local plan's tiny model,
    FSDP2-sharded over every rank, materialised with seed 0, and its AdamW."""
    import torch

    from blackwell_sm.train.distributed import build_mesh, init_distributed
    from blackwell_sm.train.model import Transformer
    from blackwell_sm.train.optim import build_optimizer
    from blackwell_sm.train.parallelize import apply_fsdp, materialize

    env = init_distributed()
    plan = local_plan(nproc=env.world_size)
    with torch.device("meta"):
        model = Transformer(plan.spec.model, max_seq_len=plan.config.seq_len)
    apply_fsdp(model, build_mesh(plan.config, env), reshard_after_forward=True)
    materialize(model, env.device, 0)
    return env, model, build_optimizer(model, plan.spec.training.optimizer, env.device)


def async_checkpoint_worker(root: str) -> None:
    """Checkpointer with async_save on: the marker appears only after wait(), and the saved
    values are the ones at save() time even though training changes them right after."""
    import torch
    import torch.distributed as dist

    from blackwell_sm.train.checkpoint import MARKER, Checkpointer

    env, model, opt = fsdp_model_and_optimizer()
    before = [p.detach().to_local().clone() for p in model.parameters()]
    ckpt = Checkpointer(Path(root), env, keep_last=2, async_save=True)
    ckpt.save(model, opt, 3)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # training goes on while the save is written
    assert not (Path(root) / "step-00000003" / MARKER).exists()
    ckpt.wait()
    assert (Path(root) / "step-00000003" / MARKER).exists()
    assert ckpt.load(model, opt, Path(root) / "step-00000003") == 3
    for a, p in zip(before, model.parameters(), strict=True):
        assert torch.equal(a, p.detach().to_local())
    dist.destroy_process_group()


def train_many_worker(jobs: list[tuple[str, str]], ports: list[int]) -> None:
    """`train_worker` for several (plan JSON, /opt/ml dir) pairs in one set of processes (saves
    the process start per run); each run gets its own rendezvous port."""
    for (plan_json, opt_ml), port in zip(jobs, ports, strict=True):
        os.environ["MASTER_PORT"] = str(port)
        train_worker(plan_json, opt_ml)


def recording_worker(plan_json: str, opt_ml: str, stop_after: int | None = None) -> None:
    """Like `train_worker`, but each rank records the stream positions it trains on at each
    step (OPT_ML/positions-rank<R>.json), and with `stop_after` rank 0 receives SIGTERM during
    that step (as `sigterm_worker`): what a resume on other hardware must reproduce."""
    import json
    import signal

    from blackwell_sm.train import loop

    seen: dict[int, list[int]] = {}
    original_batches, original_step = loop.Trainer._micro_batches, loop.Trainer.train_step

    def micro_batches(self, step: int):
        seen[step + 1] = sorted(
            int(p)
            for m in range(self.cfg.grad_accum_steps)
            for p in self.layout.positions(step, m, self.env.rank)
        )
        return original_batches(self, step)

    def train_step(self, step: int):
        if stop_after is not None and self.env.rank == 0 and step + 1 == stop_after:
            os.kill(os.getpid(), signal.SIGTERM)
        return original_step(self, step)

    loop.Trainer._micro_batches = micro_batches
    loop.Trainer.train_step = train_step
    with _stdout_to_file(opt_ml):
        loop.train(Plan.from_json(plan_json), Path(opt_ml))
    Path(opt_ml, f"positions-rank{os.environ['RANK']}.json").write_text(json.dumps(seen))


def lora_jobs_worker(jobs: list[tuple[str, str, int | None]], ports: list[int]) -> None:
    """`train_many_worker` for (plan JSON, /opt/ml dir, stop after step or None) runs; with a
    stop, rank 0 receives SIGTERM during that step (as `sigterm_worker`). After each run the
    frozen parameters as the trained model holds them go to OPT_ML/frozen-after.pt (rank 0)."""
    import signal

    import torch

    from blackwell_sm.train import loop

    original_run, original_step = loop.Trainer.run, loop.Trainer.train_step
    stop: list[int | None] = [None]

    def train_step(self, step: int):
        if stop[0] is not None and self.env.rank == 0 and step + 1 == stop[0]:
            os.kill(os.getpid(), signal.SIGTERM)
        return original_step(self, step)

    def run(self):
        summary = original_run(self)
        frozen = {}
        for name, p in self.model.named_parameters():
            if not p.requires_grad:
                full = p.full_tensor() if hasattr(p, "full_tensor") else p
                frozen[name] = full.detach().cpu().clone()
        if self.env.is_main:
            torch.save(frozen, self.paths.root / "frozen-after.pt")
        return summary

    loop.Trainer.train_step, loop.Trainer.run = train_step, run
    for (plan_json, opt_ml, stop_after), port in zip(jobs, ports, strict=True):
        os.environ["MASTER_PORT"] = str(port)
        stop[0] = stop_after
        with _stdout_to_file(opt_ml):
            loop.train(Plan.from_json(plan_json), Path(opt_ml))


def train_losses(run_dir: Path) -> dict[int, float]:
    """A finished run's training loss per step, from its metrics.jsonl."""
    lines = (run_dir / "output/data/metrics.jsonl").read_text().splitlines()
    return {r["step"]: r["loss"] for r in map(json.loads, lines) if r["kind"] == "train"}


def assert_same_losses(a: dict[int, float], b: dict[int, float], steps, rel: float) -> None:
    """`a` and `b` agree step for step over `steps`, to `rel`."""
    import pytest

    for s in steps:
        assert a[s] == pytest.approx(b[s], rel=rel), (s, a[s], b[s])
