"""Run torchrun, forward stop signals to every worker, and report the network NCCL chose."""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

from blackwell_sm.launch import WORKER_MODULE, log
from blackwell_sm.launch.topology import Topology

if TYPE_CHECKING:
    from blackwell_sm.launch.main import LaunchSpec


def child_pids(pid: int) -> list[int]:
    """Direct children of `pid` (Linux /proc)."""
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...; comm may contain spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            out.append(int(entry.name))
    return out


def worker_pids(torchrun_pid: int) -> list[int]:
    """torchrun's worker processes (they run in their own sessions, so signal them directly)."""
    pids = []
    for pid in child_pids(torchrun_pid):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if WORKER_MODULE.encode() in cmd:
            pids.append(pid)
    return pids


class ExitWatch:
    """When each of torchrun's workers ended (wall-clock seconds by pid), seen through pidfds.

    The launcher is not the workers' parent, so it cannot wait for them; a pidfd becomes
    readable the moment its process ends, whoever the parent is. This is the order in which ranks
    died, which torchrun's whole-second "Root Cause" cannot tell (`failure.first_failure`).
    """

    def __init__(self, torchrun_pid: int, expected: int, poll_s: float = 0.2) -> None:
        self.exits: dict[int, float] = {}
        self._torchrun, self._expected, self._poll_ms = torchrun_pid, expected, int(poll_s * 1000)
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        if hasattr(os, "pidfd_open"):  # Linux >= 5.3; without it, torchrun's own order stands
            self.thread.start()

    def _run(self) -> None:
        poller = select.poll()
        fds: dict[int, int] = {}
        seen: set[int] = set()
        while True:
            stopping = self._stop.is_set()  # then one last look without waiting
            if len(seen) < self._expected and not stopping:
                for pid in worker_pids(self._torchrun):
                    if pid in seen:
                        continue
                    seen.add(pid)
                    try:
                        fd = os.pidfd_open(pid)
                    except OSError:  # already gone (reaped) or pidfds unsupported
                        continue
                    fds[fd] = pid
                    poller.register(fd, select.POLLIN)
            for fd, _ in poller.poll(0 if stopping else self._poll_ms):
                self.exits.setdefault(fds.pop(fd), time.time())
                poller.unregister(fd)
                os.close(fd)
            if stopping:
                break
        for fd in fds:
            os.close(fd)

    def stop(self) -> None:
        """Stop watching (after torchrun has exited, when every worker has too)."""
        self._stop.set()
        if self.thread.is_alive():
            self.thread.join(timeout=5)


_NET_PATTERNS = [
    (re.compile(r"NCCL INFO .*Using network (\S[^\r\n]*)"), "network"),
    (re.compile(r"NCCL INFO .*NET/OFI Selected [Pp]rovider is (\w+)"), "ofi_provider"),
    (re.compile(r"NCCL INFO .*NET/Plugin\s*:?\s*(\S[^\r\n]*)"), "plugin"),
]


class OutputPump:
    """Copies a child's stream line by line to ours, keeps a tail, and notes NCCL's choices."""

    def __init__(self, src: Any, dst: Any, *, tail_lines: int, topo: Topology) -> None:
        self.tail: deque[str] = deque(maxlen=tail_lines)
        self.nccl: dict[str, str] = {}
        self._topo = topo
        self._src, self._dst = src, dst
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for raw in iter(self._src.readline, b""):
            line = raw.decode(errors="replace")
            try:
                self._dst.write(line)
                self._dst.flush()
            except (OSError, ValueError):
                pass
            self.tail.append(line.rstrip("\n"))
            if "NCCL INFO" in line:
                self._note_nccl(line)

    def _note_nccl(self, line: str) -> None:
        for rx, key in _NET_PATTERNS:
            m = rx.search(line)
            if m and key not in self.nccl:
                self.nccl[key] = m.group(1).strip()
                if key == "network":
                    net = self.nccl[key]
                    log(f"NCCL network: {net}")
                    if "socket" in net.lower() and self._topo.nnodes > 1 and self._topo.efa:
                        log(
                            "WARNING: NCCL is using TCP sockets between hosts, not EFA: the "
                            "aws-ofi-nccl plugin did not load (check FI_PROVIDER, the image's "
                            "libfabric); training will be slow or hang at scale"
                        )
                elif key == "ofi_provider":
                    log(f"NCCL libfabric provider: {self.nccl[key]}")
                else:
                    log(f"NCCL net plugin: {self.nccl[key]}")


class Supervisor:
    """Runs torchrun, forwards stop signals to every worker, escalates after a grace period."""

    def __init__(self, spec: LaunchSpec, env: dict[str, str], grace_s: float) -> None:
        self.spec = spec
        self.grace_s = grace_s
        self.stop_signal: int | None = None
        self.stop_at: float | None = None
        self._signalled: set[int] = set()
        self.proc = subprocess.Popen(
            spec.torchrun, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self.out = OutputPump(self.proc.stdout, sys.stdout, tail_lines=50, topo=spec.topology)
        self.err = OutputPump(self.proc.stderr, sys.stderr, tail_lines=400, topo=spec.topology)
        self.exit_watch = ExitWatch(self.proc.pid, spec.nproc_per_node)

    def on_signal(self, signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.stop_signal is not None and signum == signal.SIGINT:
            log("second SIGINT: killing the workers now")
            self._kill_all()
            return
        if self.stop_signal is None:
            self.stop_signal = signum
            self.stop_at = time.monotonic() + self.grace_s
            log(
                f"{name} received: asking every worker to finish its step, save and exit "
                f"(SIGKILL in {self.grace_s:.0f} s)"
            )
        self._forward()

    def _forward(self) -> None:
        assert self.stop_signal is not None
        pids = [p for p in worker_pids(self.proc.pid) if p not in self._signalled]
        if not pids and not self._signalled:
            # No worker started yet: torchrun itself shuts the (future) workers down.
            _send(self.proc.pid, self.stop_signal)
            self._signalled.add(self.proc.pid)
            return
        for pid in pids:
            _send(pid, self.stop_signal)
            self._signalled.add(pid)

    def _kill_all(self) -> None:
        for pid in worker_pids(self.proc.pid):
            _send(pid, signal.SIGKILL)
        _send(self.proc.pid, signal.SIGKILL)

    def wait(self) -> int:
        while True:
            try:
                return self.proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                pass
            if self.stop_signal is not None:
                self._forward()  # workers that appeared after the signal
                if self.stop_at is not None and time.monotonic() > self.stop_at:
                    log(f"workers did not exit within {self.grace_s:.0f} s of the stop: SIGKILL")
                    self._kill_all()
                    self.stop_at = None

    def finish(self) -> None:
        self.exit_watch.stop()
        self.out.thread.join(timeout=5)
        self.err.thread.join(timeout=5)


def _send(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
