"""What the trackers (training.report_to) cost per logged step, and which TensorBoard writer.

    python benchmarks/tracker_cost.py [--steps 2000]

Figures (one JSON line each, benchmarks/_common.py):
- tracker.enqueue_us: the training thread's cost of `Trackers.write` (a queue put), per record;
- tracker.tensorboard.{bsm,tensorboardx,torch}_us: one logged step written by each TensorBoard
  writer (8 scalars, flushed), in the trackers' thread: the standard-library writer this project
  ships (train/tb_events.py), tensorboardX, torch.utils.tensorboard (the last two only when
  installed);
- tracker.mlflow_sqlite_us: one step's `log_batch` into an MLflow SQLite store (the client's
  own cost, no network);
- tracker.wheels_bytes.*: what each choice adds to the job's code bundle.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
from _common import emit, machine, note  # noqa: E402

from blackwell_sm.records import TrainRecord  # noqa: E402
from blackwell_sm.train.trackers import scalars  # noqa: E402

# Wheel sizes (bytes) of what a writer would add to the bundle, from `pip download --no-deps`
# on 2026-12-03: tensorboard 2.21.0 (needs grpcio, protobuf, tensorboard-data-server, markdown,
# werkzeug besides), tensorboardX 2.6.5 (needs protobuf, ~0.3 MB).
WHEELS = {"bsm": 0, "tensorboardx": 87_510, "torch": 5_516_204}


def record(step: int) -> TrainRecord:
    return TrainRecord(
        step=step,
        loss=3.0 - step * 1e-4,
        lr=3e-4,
        grad_norm=1.0,
        tok_s_gpu=9000.0,
        mfu=0.4,
        step_time_s=1.0,
        mem_alloc_gib=60.0,
        mem_reserved_gib=70.0,
        memory_kind="cuda_max_allocated_reserved",
        time=time.time(),
    )


def per_step_us(write, steps: int) -> float:
    t0 = time.perf_counter()
    for s in range(1, steps + 1):
        write(s)
    return (time.perf_counter() - t0) / steps * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2000)
    args = ap.parse_args(argv)
    n = args.steps
    note(f"tracker cost over {n} steps on {machine()}")
    recs = [record(s) for s in range(1, n + 1)]
    with tempfile.TemporaryDirectory() as tmp:
        from blackwell_sm.train.tb_events import EventWriter

        w = EventWriter(Path(tmp) / "bsm")

        def bsm(s: int) -> None:
            w.scalars(s, scalars(recs[s - 1]))
            w.flush()

        emit(
            "tracker.tensorboard.bsm_us",
            round(per_step_us(bsm, n), 1),
            "us/step",
            target="< 1000",
            detail="train/tb_events.py, 8 scalars + flush",
        )
        if importlib.util.find_spec("tensorboardX"):
            from tensorboardX import SummaryWriter as XWriter

            xw = XWriter(str(Path(tmp) / "x"))

            def tbx(s: int) -> None:
                for k, v in scalars(recs[s - 1]).items():
                    xw.add_scalar(k, v, s)
                xw.flush()

            emit("tracker.tensorboard.tensorboardx_us", round(per_step_us(tbx, n), 1), "us/step")
            xw.close()
        if importlib.util.find_spec("tensorboard"):
            from torch.utils.tensorboard import SummaryWriter as TWriter

            tw = TWriter(str(Path(tmp) / "t"))

            def torch_tb(s: int) -> None:
                for k, v in scalars(recs[s - 1]).items():
                    tw.add_scalar(k, v, s)
                tw.flush()

            emit("tracker.tensorboard.torch_us", round(per_step_us(torch_tb, n), 1), "us/step")
            tw.close()
        for name, size in WHEELS.items():
            emit(f"tracker.wheels_bytes.{name}", size, "bytes")

        if importlib.util.find_spec("mlflow"):
            from mlflow.entities import Metric
            from mlflow.tracking import MlflowClient

            client = MlflowClient(tracking_uri=f"sqlite:///{tmp}/mlflow.db")
            run_id = client.create_run(client.create_experiment("bench")).info.run_id

            def ml(s: int) -> None:
                ms = int(time.time() * 1000)
                client.log_batch(
                    run_id, metrics=[Metric(k, v, ms, s) for k, v in scalars(recs[s - 1]).items()]
                )

            emit(
                "tracker.mlflow_sqlite_us",
                round(per_step_us(ml, min(n, 300)), 1),
                "us/step",
                detail="log_batch of 8 metrics into a SQLite store",
            )

        from blackwell_sm.train import trackers as tr

        q = tr.Trackers.__new__(tr.Trackers)  # the queue alone: what the training thread pays
        import queue

        q.queue, q.dropped = queue.Queue(maxsize=tr.QUEUE_MAX), 0
        emit(
            "tracker.enqueue_us",
            round(per_step_us(lambda s: q.write(recs[s - 1]), min(n, tr.QUEUE_MAX)), 2),
            "us/record",
            target="< 50",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
