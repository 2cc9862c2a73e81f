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
- tracker.wheels_bytes.*: what each choice adds to the job's code bundle;
- tracker.rank0_cpu_us.mlflow_sqlite: what a live MLflow tracker (sqlite store, the real
  `Trackers`: the trackers in their own process) costs rank 0's process per record, in CPU
  time of all its threads; tracker.step_fraction.mlflow_sqlite: that over a ~10 ms CPU step
  (torch matmuls on one thread; target < 0.01); tracker.rss_mib.mlflow_sqlite: what it adds to
  rank 0's peak RSS (in-process it was +238 MiB and steps x1.9-x3.0 slower: the client's imports
  and schema migration, then a SQLAlchemy transaction per record, holding the GIL).
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


def rank0_cost(tmp: Path, recs: list[TrainRecord], n: int = 300) -> None:
    """tracker.rank0_cpu_us.mlflow_sqlite, tracker.step_fraction.mlflow_sqlite and
    tracker.rss_mib.mlflow_sqlite (module docstring)."""
    import resource
    import statistics

    import torch

    sys.path.insert(0, str(HERE.parent / "tests"))
    from train_support import local_plan

    from blackwell_sm.train.tracker_process import Trackers

    torch.set_num_threads(1)
    a = torch.randn(256, 256)

    def step() -> float:
        t0 = time.perf_counter()
        x = a
        for _ in range(20):
            x = torch.tanh(x @ a) * 0.5
        return time.perf_counter() - t0

    steps = [step() for _ in range(50)]
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    uri = f"sqlite:///{tmp}/ratio.db"
    plan = local_plan(training={"report_to": ["mlflow"], "mlflow": {"tracking_uri": uri}})
    live = Trackers(plan, tensorboard_dir=tmp / "tb", out_dir=tmp)
    live.write(recs[0])
    time.sleep(5.0)  # its start (imports, schema) is the child's, not timed here

    def paced(write: bool) -> float:  # this process's CPU (all its threads) over n records
        c0 = time.process_time()
        for s in range(n):
            if write:
                live.write(recs[s % len(recs)])
            time.sleep(0.002)  # a step's pace: the feeding thread runs between writes
        time.sleep(0.2)
        return time.process_time() - c0

    idle = paced(False)
    busy = paced(True)
    live.close("completed")
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    per = max(0.0, busy - idle) / n
    step_s = statistics.median(steps)
    emit(
        "tracker.rank0_cpu_us.mlflow_sqlite",
        round(per * 1e6, 1),
        "us/record",
        detail="rank 0's CPU (queue put + the feeding thread's JSON line) per record",
    )
    emit(
        "tracker.step_fraction.mlflow_sqlite",
        round(per / step_s, 5),
        "of a step",
        target="< 0.01",
        detail=f"of this machine's {step_s * 1e3:.1f} ms CPU step (a GPU step is longer)",
    )
    emit("tracker.rss_mib.mlflow_sqlite", round((rss1 - rss0) / 1024, 1), "MiB", target="< 50")


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

        if importlib.util.find_spec("mlflow") and importlib.util.find_spec("torch"):
            rank0_cost(Path(tmp), recs)

        from blackwell_sm.train import tracker_process as tr

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
