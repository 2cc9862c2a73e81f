"""A harness that runs the real launcher (→ torchrun → workers) on CPU and injects faults.

Reusable by the end-to-end tests and the reliability suite:

    host = OptMlHost.create(tmp / "run", plan)                 # /opt/ml-shaped dir for algo-1
    run = host.start(port=free_port())                          # the launcher, as SageMaker would
    run.wait_for_step(7)                                        # an event: the rank-0 step line
    run.kill_rank(1)                                            # SIGKILL one worker
    assert run.wait() != 0
    run2 = host.start(port=free_port()); assert run2.wait() == 0
    run2.losses()                                               # step -> loss of that launch

Waiting is event driven: the launcher's stdout is read by a thread and each wait blocks on a
condition until a matching line arrives (or the process ends, or the timeout passes).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from blackwell_sm.launch import WORKER_MODULE
from blackwell_sm.launch.supervise import child_pids
from blackwell_sm.local import free_port, host_names, launcher_command, launcher_env, layout_opt_ml
from blackwell_sm.opt_ml import COMPLETE_MARKER, ENV_MASTER_ADDR, OptMl
from blackwell_sm.planner.plan import Plan

__all__ = [
    "Launch",
    "OptMlHost",
    "complete_checkpoints",
    "free_port",
    "losses",
    "metric_records",
    "segments",
    "start_hosts",
    "sync_checkpoints",
]

STEP_LINE = re.compile(r"\[bsm-step\] step=(\d+) ")


class Launch:
    """One running launcher process, with its output captured line by line."""

    def __init__(
        self, cmd: list[str], env: dict[str, str], log_path: Path, metrics_path: Path
    ) -> None:
        self.lines: list[str] = []
        self.metrics_path = metrics_path
        self._metrics_start = _count_lines(metrics_path)
        self._metrics_end: int | None = None
        self._cond = threading.Condition()
        self.log_path = log_path
        # Own session: a signal meant for the launcher never reaches the test process.
        self.proc = subprocess.Popen(
            cmd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with open(self.log_path, "a") as log:
            for raw in iter(self.proc.stdout.readline, b""):
                line = raw.decode(errors="replace").rstrip("\n")
                log.write(line + "\n")
                log.flush()
                with self._cond:
                    self.lines.append(line)
                    self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    @property
    def output(self) -> str:
        with self._cond:
            return "\n".join(self.lines)

    def wait_for(
        self,
        pattern: str | re.Pattern[str],
        timeout: float = 90.0,
        accept: Callable[[re.Match[str]], bool] | None = None,
    ) -> re.Match[str]:
        """Block until a line matches `pattern` (and `accept(match)`); AssertionError if the run
        ends or the time passes first."""
        rx = re.compile(pattern) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for line in self.lines[seen:]:
                    m = rx.search(line)
                    if m and (accept is None or accept(m)):
                        return m
                seen = len(self.lines)
                if not self._reader.is_alive():
                    raise AssertionError(
                        f"launcher ended (rc={self.proc.poll()}) before {rx.pattern!r}:\n"
                        + self.tail()
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {rx.pattern!r} within {timeout} s:\n" + self.tail())
                self._cond.wait(timeout=left)

    def wait_for_step(self, step: int, timeout: float = 90.0) -> None:
        """Block until rank 0 has logged `step` (or a later one)."""
        self.wait_for(STEP_LINE, timeout, accept=lambda m: int(m.group(1)) >= step)

    def worker_pids(self) -> dict[int, int]:
        """Global rank -> pid of each live worker (launcher → torchrun → workers)."""
        out = {}
        for torchrun in child_pids(self.proc.pid):
            for pid in child_pids(torchrun):
                try:
                    cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
                    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                except OSError:
                    continue
                if WORKER_MODULE.encode() not in cmd:
                    continue
                for kv in env:
                    if kv.startswith(b"RANK="):
                        out[int(kv[5:])] = pid
        return out

    def kill_rank(self, rank: int, sig: int = signal.SIGKILL) -> int:
        """Send `sig` to the worker with global `rank`; returns its pid."""
        pids = self.worker_pids()
        if rank not in pids:
            raise AssertionError(f"no live worker with rank {rank}; have {sorted(pids)}")
        os.kill(pids[rank], sig)
        return pids[rank]

    def signal(self, sig: int = signal.SIGTERM) -> None:
        """Signal the launcher itself (what SageMaker does to PID 1 on a stop)."""
        os.kill(self.proc.pid, sig)

    def wait(self, timeout: float = 120.0) -> int:
        """The launcher's exit code; kills it (and fails) if it runs past `timeout`."""
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"launcher still running after {timeout} s:\n{self.tail()}"
            ) from None
        self._reader.join(timeout=10)
        if self._metrics_end is None:
            self._metrics_end = _count_lines(self.metrics_path)
        return rc

    def losses(self) -> dict[int, float]:
        """step -> loss of the steps this launch logged to metrics.jsonl (rank 0's host)."""
        if not self.metrics_path.is_file():
            return {}
        lines = self.metrics_path.read_text().splitlines()[self._metrics_start : self._metrics_end]
        recs = [json.loads(ln) for ln in lines if ln.strip()]
        return {r["step"]: r["loss"] for r in recs if r.get("kind", "train") == "train"}

    def kill(self) -> None:
        """SIGKILL the launcher and its workers (clean-up after a failed test)."""
        for pid in self.worker_pids().values():
            _kill(pid)
        for pid in child_pids(self.proc.pid):
            _kill(pid)
        _kill(self.proc.pid)
        self.proc.wait()

    def tail(self, n: int = 40) -> str:
        with self._cond:
            return "\n".join(self.lines[-n:])


def _count_lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.is_file() else 0


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


@dataclass
class OptMlHost:
    """One host's /opt/ml-shaped directory (resourceconfig.json naming it among `hosts`)."""

    root: Path
    plan_path: Path
    host: str
    hosts: list[str]
    launches: list[Launch] = field(default_factory=list)

    @classmethod
    def create(
        cls, root: Path, plan: Plan, *, host: str = "algo-1", hosts: list[str] | None = None
    ) -> OptMlHost:
        hosts = hosts or host_names(plan.instance.count)
        plan_path = layout_opt_ml(root, plan, current_host=host, hosts=hosts)
        return cls(root=root, plan_path=plan_path, host=host, hosts=hosts)

    def start(self, *, port: int, env: dict[str, str] | None = None) -> Launch:
        """Start this host's launcher with master port `port` (and loopback for multi-host)."""
        extra = {ENV_MASTER_ADDR: "127.0.0.1"} if len(self.hosts) > 1 else {}
        extra.update(env or {})
        launch = Launch(
            launcher_command(self.plan_path, self.root),
            launcher_env(master_port=port, extra=extra),
            self.root / "launcher.log",
            OptMl(self.root).metrics,
        )
        self.launches.append(launch)
        return launch

    def dry_run(self, env: dict[str, str] | None = None) -> dict[str, Any]:
        """The launcher's --dry-run JSON for this host."""
        out = subprocess.run(
            launcher_command(self.plan_path, self.root, dry_run=True),
            env=launcher_env(master_port=29500, extra=env),
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(out.stdout)

    def failure(self) -> str | None:
        p = OptMl(self.root).failure
        return p.read_text() if p.is_file() else None


def start_hosts(hosts: list[OptMlHost], *, port: int) -> list[Launch]:
    """Start one launcher per host, all with the same master port (a multi-host job)."""
    return [h.start(port=port) for h in hosts]


def metric_records(root: Path) -> list[dict[str, Any]]:
    """All training records of `root/output/data/metrics.jsonl`, in file order, read through
    the one reader (blackwell_sm/records): a malformed record fails the test that reads it."""
    from blackwell_sm.records import TrainRecord, read_metrics

    path = OptMl(root).metrics
    if not path.is_file():
        return []
    return [r.model_dump() for r in read_metrics(path) if isinstance(r, TrainRecord)]


def segments(root: Path) -> list[dict[int, float]]:
    """metrics.jsonl split wherever the step does not increase (a resume that repeats steps):
    step -> loss for each. For exact per-launch records use `Launch.losses()`."""
    out: list[dict[int, float]] = []
    last = None
    for r in metric_records(root):
        if last is None or r["step"] <= last:
            out.append({})
        out[-1][r["step"]] = r["loss"]
        last = r["step"]
    return out


def losses(root: Path) -> dict[int, float]:
    """step -> loss over the whole history of `root` (a resumed step's later value wins)."""
    merged: dict[int, float] = {}
    for seg in segments(root):
        merged.update(seg)
    return merged


def sync_checkpoints(hosts: list[OptMlHost]) -> int:
    """Do what SageMaker's checkpoint sync does between attempts: every host uploads its
    `/opt/ml/checkpoints` to one S3 prefix and every host starts with all of it. Two hosts writing
    the same file name with different bytes would lose data there, so that fails here. Returns
    the number of files copied."""
    import hashlib
    import shutil

    seen: dict[str, tuple[str, Path]] = {}
    for h in hosts:
        base = h.root / "checkpoints"
        for f in sorted(p for p in base.rglob("*") if p.is_file()):
            rel = str(f.relative_to(base))
            digest = hashlib.sha256(f.read_bytes()).hexdigest()
            if rel in seen and seen[rel][0] != digest:
                raise AssertionError(f"checkpoint file {rel} differs between hosts")
            seen.setdefault(rel, (digest, f))
    copied = 0
    for h in hosts:
        base = h.root / "checkpoints"
        for rel, (_, src) in seen.items():
            dst = base / rel
            if not dst.exists():
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)
                copied += 1
    return copied


def complete_checkpoints(root: Path) -> list[int]:
    """Steps of the complete checkpoints (COMPLETE marker present), oldest first."""
    steps = []
    for p in OptMl(root).checkpoints.glob("step-*"):
        if (p / COMPLETE_MARKER).is_file():
            steps.append(int(p.name.split("-")[1]))
    return sorted(steps)
