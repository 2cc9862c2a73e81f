"""Loop overhead: tokens/s of the real training loop against a minimal PyTorch loop, on CPU.

    python benchmarks/loop_overhead.py [--steps 24] [--repeats 3] [--model small|tiny]

Both loops train the same `Transformer` (same shape, init seed, sequences, batch and AdamW with
the same hyperparameters and grad clipping) on one CPU process, interleaved `--repeats` times so
background load hits both alike; each figure is the median over repeats of the steady-state
tokens/s (the first `--warmup` steps of every run are left out).

- real: `blackwell_sm.train.loop.Trainer.run()` exactly as the worker runs it (a one-process gloo
  group, FSDP2 with bf16 compute, synthetic data made in the step, the metrics line, the
  save/stop agreement all-reduces); timed from its own per-step metric records.
- plain: `model(x)`, cross-entropy, backward, clip, `opt.step()` under bf16 autocast, on
  batches made before the clock starts.
- plain_fsdp2 (reference): the plain loop on the same FSDP2-wrapped model, which separates what
  FSDP2 costs on CPU from what the loop itself adds.

Then one checkpoint save and one restore through the real `Checkpointer` (DCP), with bytes on
disk. Target: real >= 0.9 x plain.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import emit, note

TARGET_RATIO = 0.9


@dataclass(frozen=True)
class Rates:
    """Steady-state tokens per wall-clock second and per second of this process's CPU time."""

    wall: float
    cpu: float


# A small llama (about 1.6M parameters) that does real matmul work per token on one CPU thread,
# so the loop's fixed per-step costs are measured against compute rather than against nothing.
SMALL = dict(
    name="bench-small",
    n_layers=4,
    d_model=128,
    n_heads=4,
    n_kv_heads=2,
    ffn_dim=384,
    vocab_size=2048,
    max_seq_len=512,
)


def bench_plan(model: str, *, steps: int, seq_len: int, micro_batch: int, accum: int):
    """A one-process CPU plan pinned to exactly this configuration (`pinned_plan`: the planner's
    models, no search; the planner is not what is measured here)."""
    from blackwell_sm.hardware import local_instance
    from blackwell_sm.planner.api import pinned_plan
    from blackwell_sm.spec import parse_spec

    spec = parse_spec(
        {
            "model": dict(SMALL) if model == "small" else model,
            "training": {
                "seq_len": seq_len,
                "total_steps": steps,
                "precision": "bf16",
                "global_batch_seqs": micro_batch * accum,
                "activation_checkpointing": "none",
                "export_model": False,
                "optimizer": {"lr": 1e-3, "weight_decay": 0.1, "grad_clip": 1.0},
                "schedule": {"warmup_steps": 2, "decay": "cosine"},
                "checkpoint": {
                    "interval_steps": None,
                    "interval_minutes": None,
                    "keep_last": 1,
                    "async_save": False,
                },
                "data": {"source": "synthetic"},
            },
        }
    )
    cfg = dict(
        shard_degree=1,
        replicate_degree=1,
        micro_batch_size=micro_batch,
        grad_accum_steps=accum,
        precision="bf16",
        activation_checkpointing="none",
        compile=False,
        reshard_after_forward=True,
    )
    return pinned_plan(spec, cfg, instance=local_instance(nproc=1))


def _join_group() -> None:
    """A one-process gloo group, as torchrun would set it up for one CPU worker."""
    from blackwell_sm.local import free_port

    os.environ.update(
        RANK="0",
        WORLD_SIZE="1",
        LOCAL_RANK="0",
        LOCAL_WORLD_SIZE="1",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        BSM_DEVICE="cpu",
    )


def _clock() -> tuple[float, float]:
    """(wall, this process's CPU) seconds now."""
    return time.perf_counter(), time.process_time()


def _steady(stamps: list[tuple[float, float]], tokens_per_step: int, warmup: int) -> Rates:
    """Tokens per wall second and per CPU second from the end of step `warmup` to the last."""
    n = (len(stamps) - warmup) * tokens_per_step
    (w0, c0), (w1, c1) = stamps[warmup - 1], stamps[-1]
    return Rates(wall=n / (w1 - w0), cpu=n / (c1 - c0))


@contextlib.contextmanager
def _keep_signal_handlers():
    """The Trainer takes SIGTERM/SIGINT for itself (save and stop); give Ctrl-C back after."""
    saved = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, saved[0])
        signal.signal(signal.SIGINT, saved[1])


def run_real(plan, workdir: Path, warmup: int):
    """The worker's own loop; returns (rates, trainer)."""
    from blackwell_sm.opt_ml import OptMl
    from blackwell_sm.train.distributed import init_distributed
    from blackwell_sm.train.loop import Trainer

    shutil.rmtree(workdir, ignore_errors=True)
    with _keep_signal_handlers():
        trainer = Trainer(plan, OptMl(workdir), init_distributed())
    # Stamp the clocks at each step's metric record (written right after the step, as in a job).
    stamps: list[tuple[float, float]] = []
    record = trainer.metrics.step

    def stamped(*a, **kw):
        stamps.append(_clock())
        return record(*a, **kw)

    trainer.metrics.step = stamped
    # Its step lines go to stderr: our stdout is JSON lines only.
    with _keep_signal_handlers(), contextlib.redirect_stdout(sys.stderr):
        trainer.run()
    tps = trainer.layout.global_batch * plan.config.seq_len
    return _steady(stamps, tps, warmup), trainer


def _batches(plan) -> list[list]:
    """The real loop's sequences for every step (same dataset, same positions)."""
    import torch

    from blackwell_sm.train.data import BatchLayout, SyntheticDataset

    cfg, seed = plan.config, plan.spec.training.seed
    data = SyntheticDataset(cfg.seq_len, plan.spec.model.vocab_size, seed)
    layout = BatchLayout(cfg.micro_batch_size, cfg.grad_accum_steps, 1, cfg.seq_len)
    return [
        [
            torch.from_numpy(data.batch(layout.positions(s, m, 0), seed))
            for m in range(cfg.grad_accum_steps)
        ]
        for s in range(plan.run.steps)
    ]


def run_plain(plan, batches, warmup: int, *, fsdp: bool) -> Rates:
    """A minimal hand-written loop on the same model; returns steady tokens/s."""
    import torch
    import torch.nn.functional as F

    from blackwell_sm.train.model import Transformer

    spec, cfg, tr = plan.spec.model, plan.config, plan.spec.training
    o = tr.optimizer
    torch.manual_seed(tr.seed)
    if fsdp:
        from torch.distributed.device_mesh import init_device_mesh

        from blackwell_sm.train.parallelize import apply_fsdp

        with torch.device("meta"):
            model = Transformer(spec, max_seq_len=cfg.seq_len)
        apply_fsdp(model, init_device_mesh("cpu", (1,)), reshard_after_forward=True)
        model.to_empty(device="cpu")
    else:
        model = Transformer(spec, max_seq_len=cfg.seq_len)
    model.init_weights(tr.seed)
    opt = torch.optim.AdamW(
        model.parameters(), lr=o.lr, betas=o.betas, eps=o.eps, weight_decay=o.weight_decay
    )
    # FSDP2 computes in bf16 through its mixed-precision policy; plain PyTorch does it by autocast.
    amp = contextlib.nullcontext if fsdp else lambda: torch.autocast("cpu", dtype=torch.bfloat16)
    stamps = []
    for step_batches in batches:
        for b in step_batches:
            with amp():
                logits = model(b[:, :-1])
            loss = F.cross_entropy(logits.float().flatten(0, 1), b[:, 1:].flatten())
            (loss / len(step_batches)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), o.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        stamps.append(_clock())
    return _steady(stamps, cfg.global_batch_sequences * cfg.seq_len, warmup)


def data_time_per_step(plan) -> float:
    """Seconds the synthetic dataset takes to make one step's sequences (part of the real loop)."""
    t0 = time.perf_counter()
    _batches(plan.model_copy(update={"run": plan.run.model_copy(update={"steps": 3})}))
    return (time.perf_counter() - t0) / 3


def checkpoint_roundtrip(trainer, workdir: Path) -> dict:
    """Time one save and one restore (into a freshly built model) through the real Checkpointer."""
    import torch

    from blackwell_sm.opt_ml import OptMl
    from blackwell_sm.train.loop import Trainer

    step = trainer.total_steps
    t0 = time.perf_counter()
    path = trainer.ckpt.save(trainer.model, trainer.optimizer, step + 1)
    save_s = time.perf_counter() - t0
    n_bytes = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    with _keep_signal_handlers():
        fresh = Trainer(trainer.plan, OptMl(workdir), trainer.env)
    t0 = time.perf_counter()
    restored_step = fresh.ckpt.load(fresh.model, fresh.optimizer, path)
    load_s = time.perf_counter() - t0
    same = all(
        torch.equal(a.to_local(), b.to_local())
        for a, b in zip(trainer.model.parameters(), fresh.model.parameters(), strict=True)
    )
    return {
        "save_s": save_s,
        "load_s": load_s,
        "bytes": n_bytes,
        "step": restored_step,
        "restored_equal": same,
        "path": path,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny", help="a preset (tiny) or 'small' (1.3M params)")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=3, help="steps left out of each run's rate")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--micro-batch", type=int, default=2)
    ap.add_argument("--accum", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (1: least noisy)")
    args = ap.parse_args(argv)
    if not 0 < args.warmup < args.steps:
        ap.error("--warmup must be between 0 and --steps")

    import torch
    import torch.distributed as dist

    torch.set_num_threads(args.threads)
    plan = bench_plan(
        args.model,
        steps=args.steps,
        seq_len=args.seq_len,
        micro_batch=args.micro_batch,
        accum=args.accum,
    )
    batches = _batches(plan)
    saved_env = dict(os.environ)
    _join_group()
    tmp = Path(tempfile.mkdtemp(prefix="bsm-loop-bench-"))
    runs: dict[str, list[Rates]] = {"plain": [], "real": [], "plain_fsdp2": []}
    try:
        trainer = None
        for r in range(args.repeats):
            runs["plain"].append(run_plain(plan, batches, args.warmup, fsdp=False))
            real, trainer = run_real(plan, tmp / "run", args.warmup)
            runs["real"].append(real)
            runs["plain_fsdp2"].append(run_plain(plan, batches, args.warmup, fsdp=True))
            note(
                f"repeat {r + 1}/{args.repeats}: "
                + ", ".join(
                    f"{k} {v[-1].wall:,.0f} tok/s ({v[-1].cpu:,.0f} per CPU-s)"
                    for k, v in runs.items()
                )
            )
        ck = checkpoint_roundtrip(trainer, tmp / "run")
        data_s = data_time_per_step(plan)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        shutil.rmtree(tmp, ignore_errors=True)
        os.environ.clear()
        os.environ.update(saved_env)  # the rank variables were for this run only

    def med(key: str, clock: str) -> float:
        return statistics.median(getattr(x, clock) for x in runs[key])

    setting = {
        "model": plan.model.name,
        "n_params": plan.model.n_params,
        "seq_len": args.seq_len,
        "micro_batch": args.micro_batch,
        "grad_accum": args.accum,
        "steps": args.steps,
        "warmup": args.warmup,
        "repeats": args.repeats,
        "threads": args.threads,
    }
    for key in runs:
        emit(
            f"loop.{key}_tokens_per_s",
            round(med(key, "wall"), 1),
            "tokens/s",
            per_cpu_second=round(med(key, "cpu"), 1),
            runs=[round(x.wall, 1) for x in runs[key]],
            **({"setting": setting} if key == "plain" else {}),
        )
    # CPU seconds are the fair clock on a shared machine: they count only this process's work.
    emit(
        "loop.real_over_plain_cpu",
        round(med("real", "cpu") / med("plain", "cpu"), 4),
        "ratio",
        target=f">= {TARGET_RATIO}",
        clock="process CPU time",
    )
    emit(
        "loop.real_over_plain_wall",
        round(med("real", "wall") / med("plain", "wall"), 4),
        "ratio",
        target=f">= {TARGET_RATIO}",
        clock="wall",
    )
    emit(
        "loop.real_over_plain_fsdp2_cpu",
        round(med("real", "cpu") / med("plain_fsdp2", "cpu"), 4),
        "ratio",
        reference="plain loop on the same FSDP2-wrapped model: what the loop itself adds",
    )
    step_s = plan.config.global_batch_sequences * args.seq_len / med("real", "wall")
    emit(
        "loop.synthetic_data_share",
        round(data_s / step_s, 4),
        "fraction of a real step",
        reference="SyntheticDataset makes each step's sequences inside the real step",
        data_s_per_step=round(data_s, 5),
    )
    emit(
        "checkpoint.save_s",
        round(ck["save_s"], 4),
        "s",
        bytes=ck["bytes"],
        reference="Checkpointer.save (DCP, synchronous): model + AdamW state + RNG",
    )
    emit(
        "checkpoint.bytes",
        ck["bytes"],
        "bytes",
        reference={"fp32_params_plus_adamw_bytes": plan.model.n_params * 12},
    )
    emit(
        "checkpoint.restore_s",
        round(ck["load_s"], 4),
        "s",
        ok=ck["restored_equal"] and ck["step"] == args.steps + 1,
        reference="Checkpointer.load into a freshly built model; ok = weights equal",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
