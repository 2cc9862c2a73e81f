"""The trackers run in a process of their own, beside rank 0 (`Trackers`), not in it.

Why: in rank 0's process a live MLflow tracker with a sqlite store slowed steps x1.9 to x3.0 and
raised rank 0's peak RSS by 238 MiB (benchmarks/tracker_cost.py `tracker.step_ratio`, 2-core CPU
sandbox, 2026-12-05): the client's imports and its store's schema migration at start, then a
SQLAlchemy transaction per record, all Python, all holding the GIL the training loop needs; and
MLflow's server-side store (SQLAlchemy, alembic) lives in the process that imports it. Here
rank 0 pays one queue put per record (`write`); a thread writes each record as one JSON line to
the child's stdin; the child (`python -m blackwell_sm.train.tracker_process`) feeds the trackers
(`TrackerThread`, `train/trackers.py`). A full queue drops records (one warning), never blocks.

A tracker that hangs (a server that does not answer) is named at the end, with what is lost:
the child waits `timeout_s` for its trackers to drain, then says which tracker, where, and how
many records it never sent (all of them stay in metrics.jsonl), and exits; the parent kills a
child that outlives that by `KILL_GRACE_S`.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from blackwell_sm.planner.plan import Plan
from blackwell_sm.records import Record
from blackwell_sm.records.codec import parse_record, to_json
from blackwell_sm.train.trackers import Tracker, make_tracker, warn, where_of

QUEUE_MAX = 10_000  # records waiting for the trackers; beyond it they are dropped (one warning)
CLOSE_TIMEOUT_S = 30.0  # how long the end of the run waits for the trackers to drain
KILL_GRACE_S = 10.0  # past the child's own timeout, before the parent kills it
_CLOSE = object()


class _BoundedQueue:
    """A queue of records that never blocks its writer: past QUEUE_MAX it drops, said once."""

    queue: queue.Queue[Any]
    dropped: int

    def write(self, rec: Record) -> None:
        """Queue `rec`; never blocks."""
        try:
            self.queue.put_nowait(rec)
        except queue.Full:
            self.dropped += 1
            if self.dropped == 1:
                warn(
                    f"the trackers are {QUEUE_MAX} records behind: dropping records until "
                    "they catch up (training goes on)"
                )


class TrackerThread(_BoundedQueue):
    """The trackers behind one queue and one thread (in the child process)."""

    def __init__(self, plan: Plan, *, tensorboard_dir: Path, out_dir: Path) -> None:
        self.plan, self.tensorboard_dir, self.out_dir = plan, tensorboard_dir, out_dir
        self.names = list(plan.spec.training.report_to)
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=QUEUE_MAX)
        self.live: list[Tracker] = []
        self.dropped = 0
        self.busy: str | None = None  # "NAME (WHERE)" of the tracker being called (if it hangs)
        self.thread = threading.Thread(target=self._run, name="bsm-trackers", daemon=True)
        self.thread.start()

    def _failed(self, t: Tracker | str, e: BaseException, when: str) -> None:
        name = t if isinstance(t, str) else f"{t.name} ({t.where})"
        self.busy = None
        warn(
            f"tracker {name} failed {when} ({type(e).__name__}: {str(e)[:300]}); it is off "
            "for the rest of the run, training goes on"
        )

    def _run(self) -> None:
        for name in self.names:
            self.busy = f"{name} ({where_of(name, self.plan, self.tensorboard_dir)})"
            try:
                self.live.append(make_tracker(name, self.plan, self.tensorboard_dir, self.out_dir))
            except Exception as e:  # any failure of a tracker: warned, never raised
                self._failed(self.busy, e, "to start")
        while True:
            item = self.queue.get()
            if isinstance(item, tuple) and item[0] is _CLOSE:
                for t in list(self.live):
                    self.busy = f"{t.name} ({t.where})"
                    try:
                        t.close(item[1])
                    except Exception as e:
                        self._failed(t, e, "to close")
                self.busy = None
                return
            for t in list(self.live):
                self.busy = f"{t.name} ({t.where})"
                try:
                    t.record(item)
                except Exception as e:
                    self._failed(t, e, f"at step {item.step}")
                    self.live.remove(t)
            self.busy = None

    def close(self, status: str, timeout_s: float = CLOSE_TIMEOUT_S) -> bool:
        """Let the trackers drain and close; False (naming the tracker that hangs and what it
        did not send) if they did not within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        with contextlib.suppress(queue.Full):  # a queue that stays full: the join times out
            self.queue.put((_CLOSE, status), timeout=timeout_s)
        self.thread.join(max(0.0, deadline - time.monotonic()))
        if not self.thread.is_alive():
            return True
        busy, pending = self.busy, self.queue.qsize()
        who = f"tracker {busy}" if busy is not None else "the trackers"
        warn(
            f"{who} did not answer in {timeout_s:.0f} s: the run ends without it; the "
            f"{pending} record(s) still queued for it are not sent (every record is in "
            "metrics.jsonl)"
        )
        return False


class Trackers(_BoundedQueue):
    """Rank 0's side: a queue, one thread writing to the child's stdin (module docstring)."""

    def __init__(self, plan: Plan, *, tensorboard_dir: Path, out_dir: Path) -> None:
        self.queue: queue.Queue[Any] = queue.Queue(maxsize=QUEUE_MAX)
        self.dropped = 0
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[2])  # this package importable in the child
        env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
        cmd = [sys.executable, "-m", __name__, str(tensorboard_dir), str(out_dir)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, text=True, env=env)
        assert self.proc.stdin is not None
        self.stdin: IO[str] = self.proc.stdin
        self.thread = threading.Thread(
            target=self._feed, args=(plan.model_dump_json(),), name="bsm-trackers", daemon=True
        )
        self.thread.start()

    def _feed(self, plan_line: str) -> None:
        try:
            self.stdin.write(plan_line + "\n")
            while True:
                item = self.queue.get()
                if isinstance(item, tuple) and item[0] is _CLOSE:
                    self.stdin.write(json.dumps({"close": item[1], "timeout_s": item[2]}) + "\n")
                    self.stdin.close()
                    return
                self.stdin.write(to_json(item) + "\n")
                self.stdin.flush()
        except (OSError, ValueError) as e:  # the child is gone: said once, training goes on
            warn(f"the trackers' process ended early ({type(e).__name__}: {e}); training goes on")

    def close(self, status: str, timeout_s: float = CLOSE_TIMEOUT_S) -> bool:
        """Let the trackers drain and close (the child names a tracker that hangs); False if
        they did not within `timeout_s`."""
        deadline = time.monotonic() + timeout_s + KILL_GRACE_S
        try:
            self.queue.put((_CLOSE, status, timeout_s), timeout=timeout_s)
        except queue.Full:
            warn(f"the trackers did not drain in {timeout_s:.0f} s; the run ends without them")
            self.proc.kill()
            return False
        try:
            rc = self.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            warn(f"the trackers' process did not end in {timeout_s:.0f} s; stopped")
            self.proc.kill()
            self.proc.wait()
            return False
        return rc == 0


def child_main(argv: list[str]) -> int:
    """The child: the plan's line, then one record per line, then {"close": status}."""
    tb, out = Path(argv[0]), Path(argv[1])
    plan = Plan.model_validate_json(sys.stdin.readline())
    trackers = TrackerThread(plan, tensorboard_dir=tb, out_dir=out)
    for line in sys.stdin:
        data = json.loads(line)
        if "close" in data:
            ok = trackers.close(data["close"], float(data["timeout_s"]))
            return 0 if ok else 3
        trackers.write(parse_record(data, "the trackers' input"))
    return 0 if trackers.close("stopped", 5.0) else 3  # the parent went away


if __name__ == "__main__":
    code = child_main(sys.argv[1:])
    sys.stdout.flush()
    os._exit(code)  # a hung tracker's thread must not keep the process alive
