"""What the checkpoint checksums cost: save time with and without them, and the verify on resume.

    python benchmarks/checkpoint_checksum.py [--params 64] [--repeats 5] [--dir DIR]

One process (a one-rank gloo group), a plain model of `--params` million fp32 parameters with
AdamW's state after one step (about 12 bytes per parameter on disk), saved by the real
`Checkpointer` (DCP, files fsynced) into `--dir` (default: a temporary folder; pass a folder on
the disk you care about). Saves with and without checksums are interleaved `--repeats` times so
background load hits both alike; figures are medians. The checksums are hashed while DCP writes
(`train/checkpoint_files.py`), so their cost is what the hashing adds to the write, not a second
read. Also: the verify a resume runs before loading (every file read back and hashed), beside
the plain load. Target: checksums add < 5 % to the save.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import emit, machine, note

TARGET_PCT = 5.0


def _model(params_m: int):
    import torch
    from torch import nn

    width = 2048
    rows = max(1, params_m * 1_000_000 // width // 8)
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Linear(width, rows, bias=False) for _ in range(8)])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    opt.step()  # AdamW's exp_avg / exp_avg_sq exist: the state a training checkpoint carries
    return model, opt


def _watch(ckpt, waited: list[float]) -> list:
    """The HashingFileSystem of the next save (to read how long it waited for its hashes)."""
    from torch.distributed.checkpoint import FileSystemWriter

    from blackwell_sm.train import checkpoint_files

    seen: list = []
    real = checkpoint_files.HashingFileSystem

    class Seen(real):  # type: ignore[misc, valid-type]
        def __init__(self) -> None:
            super().__init__()
            seen.append(self)

    import blackwell_sm.train.checkpoint as module

    module.HashingFileSystem = Seen  # this process only: the benchmark's own instrument
    del FileSystemWriter
    return seen


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=int, default=64, help="millions of parameters")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--dir", type=Path, default=None)
    args = ap.parse_args(argv)

    import torch
    import torch.distributed as dist

    from blackwell_sm.train.checkpoint import Checkpointer
    from blackwell_sm.train.checkpoint_files import hash_file, verify_share
    from blackwell_sm.train.distributed import Env

    root = Path(args.dir or tempfile.mkdtemp(prefix="bsm-ckpt-bench-"))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29591")
    dist.init_process_group("gloo", rank=0, world_size=1)
    env = Env(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
    model, opt = _model(args.params)
    n = sum(p.numel() for p in model.parameters())
    times: dict[bool, list[float]] = {True: [], False: []}
    cpu: dict[bool, list[float]] = {True: [], False: []}  # this process's CPU s, all threads
    waited: list[float] = []  # the part of each save spent waiting for its hashes
    size = 0
    try:
        for r in range(args.repeats):
            for sums in (False, True) if r % 2 == 0 else (True, False):
                folder = root / ("with" if sums else "without")
                shutil.rmtree(folder, ignore_errors=True)
                ckpt = Checkpointer(folder, env, keep_last=1, async_save=False, checksums=sums)
                fs = _watch(ckpt, waited) if sums else None
                t0, c0 = time.perf_counter(), time.process_time()
                path = ckpt.save(model, opt, r + 1)
                times[sums].append(time.perf_counter() - t0)
                cpu[sums].append(time.process_time() - c0)
                if fs is not None:
                    waited.append(fs[0].waited_s if fs else 0.0)
                size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
                note(f"repeat {r}: checksums={sums} {times[sums][-1]:.2f} s")
        path = root / "with" / f"step-{args.repeats:08d}"
        sums = {
            str(f.relative_to(path)): hash_file(f)
            for f in path.rglob("*")
            if f.is_file() and f.name != "COMPLETE"
        }
        t0 = time.perf_counter()
        assert verify_share(path, sums, 0, 1) is None
        verify_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        ckpt.load(model, opt, path)
        load_s = time.perf_counter() - t0
    finally:
        dist.destroy_process_group()
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    without, with_ = statistics.median(times[False]), statistics.median(times[True])
    pct = 100.0 * (with_ - without) / without
    info = {
        "params": n,
        "bytes": size,
        "repeats": args.repeats,
        "machine": machine(),
        "all_with": times[True],
        "all_without": times[False],
    }
    emit("checkpoint.save_s_without_checksums", round(without, 3), "s", reference="", **info)
    emit("checkpoint.save_s_with_checksums", round(with_, 3), "s", reference="", **info)
    exposed = 100.0 * statistics.median(waited) / with_
    cpu_extra = statistics.median(cpu[True]) - statistics.median(cpu[False])
    emit(
        "checkpoint.checksum_cpu_s",
        round(cpu_extra, 3),
        "s",
        reference="",
        gb_per_cpu_s=round(size / cpu_extra / 1e9, 2) if cpu_extra > 0 else None,
        cpu_with=cpu[True],
        cpu_without=cpu[False],
    )
    emit(
        "checkpoint.checksum_overhead_pct",
        round(pct, 1),
        "%",
        target=f"< {TARGET_PCT}",
        detail="median with vs without: both medians carry this machine's load noise",
    )
    emit(
        "checkpoint.checksum_wait_pct",
        round(exposed, 2),
        "%",
        target=f"< {TARGET_PCT}",
        detail="time the save waited for its hashes after the fsync, share of the save",
        waited_s=waited,
    )
    emit(
        "checkpoint.verify_s",
        round(verify_s, 3),
        "s",
        reference=f"load {load_s:.3f} s",
        gb_per_s=round(size / verify_s / 1e9, 2),
    )


if __name__ == "__main__":
    main()
