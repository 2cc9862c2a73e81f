"""The failure reason: the failing rank's exception (or signal) for `output/failure`."""

from __future__ import annotations

import json
import re
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from blackwell_sm.launch.topology import Topology
from blackwell_sm.opt_ml import FAILURE_LIMIT, OptMl


def _read_error_files(log_dir: Path) -> list[tuple[int, float, str, str]]:
    """(local_rank, timestamp, message, traceback) from torchelastic error files, oldest first."""
    found = []
    for path in log_dir.glob("*/attempt_*/*/error.json"):
        try:
            data = json.loads(path.read_text())
            local_rank = int(path.parent.name)
        except (OSError, ValueError):
            continue
        msg = data.get("message", data)
        if isinstance(msg, dict):
            text = str(msg.get("message", ""))
            extra = msg.get("extraInfo", {}) or {}
            tb = str(extra.get("py_callstack", ""))
            ts = float(extra.get("timestamp", 0) or 0)
        else:
            text, tb, ts = str(msg), "", 0.0
        found.append((local_rank, ts, text, tb))
    return sorted(found, key=lambda x: (x[1], x[0]))


def _stderr_tail(log_dir: Path, local_rank: int, lines: int = 12) -> str:
    files = sorted(log_dir.glob(f"*/attempt_*/{local_rank}/stderr.log"))
    if not files:
        return ""
    text = files[-1].read_text(errors="replace").splitlines()
    return "\n".join(ln for ln in text[-lines:] if ln.strip())


def _error_file_message(path: Path) -> tuple[str, str] | None:
    """(exception message, innermost `File ...` line) from a torchelastic error file."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    msg = data.get("message", data)
    if not isinstance(msg, dict):
        return str(msg), ""
    tb = str((msg.get("extraInfo") or {}).get("py_callstack", ""))
    frames = [ln.strip() for ln in tb.splitlines() if ln.strip().startswith("File ")]
    return str(msg.get("message", "")), (frames[-1] if frames else "")


@dataclass(frozen=True)
class RankFailure:
    """One entry of torchrun's failure summary."""

    rank: int
    local_rank: int
    exitcode: int
    pid: int | None
    error_file: str


_FAILURE_ENTRY = re.compile(
    r"rank\s*:\s*(?P<rank>\d+)\s*\(local_rank\s*:\s*(?P<local>\d+)\)\s*\n"
    r"\s*exitcode\s*:\s*(?P<code>-?\d+)(?:\s*\(pid:\s*(?P<pid>\d+)\))?[^\n]*\n"
    r"\s*error_file\s*:\s*(?P<file>\S+)"
)


def _entry(m: re.Match[str]) -> RankFailure:
    return RankFailure(
        int(m["rank"]),
        int(m["local"]),
        int(m["code"]),
        int(m["pid"]) if m["pid"] else None,
        m["file"],
    )


def root_cause(text: str) -> RankFailure | None:
    """torchrun's "Root Cause (first observed failure)" entry of its last failure summary."""
    at = text.rfind("Root Cause")
    m = _FAILURE_ENTRY.search(text, at) if at >= 0 else None
    return _entry(m) if m else None


def torchrun_failures(stderr_tail: list[str]) -> list[RankFailure]:
    """Every failed rank of torchrun's last failure summary ("Failures:" and "Root Cause")."""
    text = "\n".join(stderr_tail)
    start = text.rfind("Failures:")
    if start < 0:
        return []
    return [_entry(m) for m in _FAILURE_ENTRY.finditer(text, start)]


def _failed_at(f: RankFailure, exit_times: Mapping[int, float]) -> float | None:
    """When rank `f` failed: its error file's modification time when it raised (written the
    moment the exception left the worker, to the nanosecond), else when its process ended."""
    if f.error_file != "<N/A>":
        try:
            return Path(f.error_file).stat().st_mtime_ns / 1e9
        except OSError:
            pass
    return exit_times.get(f.pid) if f.pid is not None else None


# A peer's death as another rank sees it (gloo's pair.cc read/write errors, NCCL's remote
# errors), or torchelastic's SignalException for torchrun's SIGTERM to the survivors.
_PEER_LOST = re.compile(
    r"Connection (reset|closed) by peer|Broken pipe|Connection refused|ECONNRESET|"
    r"remote process exited|ncclRemoteError|communicator was aborted|got signal: (15|Signals\.SIGTERM)\b",
    re.I,
)


def _secondary(f: RankFailure) -> bool:
    """A failure caused by another rank's: its peer vanished (the exception says so), or
    torchrun's SIGTERM to the survivors after the first failure."""
    err = _error_file_message(Path(f.error_file)) if f.error_file != "<N/A>" else None
    if err and err[0]:  # what it raised, even if torchrun's SIGTERM ended it afterwards
        return bool(_PEER_LOST.search(err[0]))
    return f.exitcode == -signal.SIGTERM


def first_failure(
    failures: list[RankFailure], exit_times: Mapping[int, float]
) -> RankFailure | None:
    """The rank that failed first, or None when a failed rank's time is unknown.

    Ranks whose failure only reports a lost peer (or torchrun's SIGTERM to the survivors) are
    effects; the cause is looked for among the others first. Then time decides:
    `exit_times` (pid -> wall-clock seconds) from the supervisor's pidfd watch, or for a rank
    that raised, its error file's modification time (it may linger in teardown after raising).
    torchrun's own "Root Cause" compares whole seconds: the error file's timestamp for a rank
    that raised, the moment it noticed for a rank killed by a signal, so a peer's "Connection
    reset by peer", raised a few milliseconds after rank 0 was SIGKILLed, could be blamed. Time
    alone cannot settle that either: a killed process's sockets close (and its peer raises)
    a few milliseconds before its exit is visible, hence the effects are set aside first.
    """
    causes = [f for f in failures if not _secondary(f)] or failures
    timed = [(_failed_at(f, exit_times), f.rank, f) for f in causes]
    if not timed or any(t is None for t, _, _ in timed):
        return None
    return min(timed, key=lambda x: (x[0], x[1]))[2]


def failure_timeline(failures: list[RankFailure], exit_times: Mapping[int, float]) -> str:
    """The failed ranks by time, each marked when it only lost its peer (the launcher's log)."""
    timed = sorted(
        ((_failed_at(f, exit_times), f.rank, f) for f in failures),
        key=lambda x: (x[0] is None, x[0] or 0.0, x[1]),
    )
    parts = []
    for t, rank, f in timed:
        how = "raised" if f.error_file != "<N/A>" and f.exitcode >= 0 else f"exit {f.exitcode}"
        how += ", lost its peer" if _secondary(f) else ""
        parts.append(f"rank {rank} ({how}) at " + ("?" if t is None else f"{t:.3f}"))
    return ", then ".join(parts)


def failure_reason(
    rc: int,
    *,
    topo: Topology,
    log_dir: Path | None,
    stderr_tail: list[str],
    exit_times: Mapping[int, float] | None = None,
) -> str:
    """The failing rank and its exception (or signal), then supporting detail.

    The first rank to fail is the one whose process ended first (`first_failure`, from the
    supervisor's `exit_times`); without those, torchrun's "Root Cause (first observed
    failure)". Its error file, written by `@record` in the worker, holds the exception. Without
    a failure summary: the oldest error file; last, the tail of torchrun's stderr.
    """
    host = topo.current_host
    text = "\n".join(stderr_tail)
    failures = torchrun_failures(stderr_tail)
    chosen = first_failure(failures, exit_times or {}) or root_cause(text)
    if chosen is not None:
        rank, local_rank, code, efile = (
            chosen.rank,
            chosen.local_rank,
            chosen.exitcode,
            chosen.error_file,
        )
        who = f"rank {rank} (host {host}, local rank {local_rank})"
        err = _error_file_message(Path(efile)) if efile != "<N/A>" else None
        if err and err[0]:
            return f"{who}: {err[0]}" + (f"\nat {err[1]}" if err[1] else "")
        sig = signal_name(-code).removeprefix("signal ")
        what = f"was killed by signal {sig}" if code < 0 else f"exited with code {code}"
        tail = _stderr_tail(log_dir, local_rank) if log_dir is not None else ""
        return f"{who} {what}" + (f"; its last stderr lines:\n{tail}" if tail else "")
    if log_dir is not None:
        errors = _read_error_files(log_dir)
        if errors:
            local_rank, _, msg, tb = errors[0]
            rank = topo.node_rank * topo.nproc_per_node + local_rank
            frames = [ln.strip() for ln in tb.splitlines() if ln.strip().startswith("File ")]
            where = f"\nat {frames[-1]}" if frames else ""
            return f"rank {rank} (host {host}, local rank {local_rank}): {msg}{where}"
    lines = [ln for ln in stderr_tail if ln.strip()][-12:]
    return f"torchrun on host {host} exited with code {rc}; last stderr lines:\n" + "\n".join(lines)


def signal_name(signum: int) -> str:
    """SIGKILL for 9; "signal N" for a number with no name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def write_failure(opt_ml: Path, reason: str) -> bool:
    """`opt_ml/output/failure`: SageMaker shows the first 1024 characters as FailureReason.
    Never raises: when the file cannot be written (a read-only output folder is one of the
    failures it reports), the reason goes to stderr and False is returned."""
    path = OptMl(opt_ml).failure
    text = reason.strip()
    if len(text) > FAILURE_LIMIT:
        text = text[: FAILURE_LIMIT - 3] + "..."
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    except OSError as e:
        sys.stderr.write(f"[bsm-launch] could not write {path} ({e}); the reason: {text}\n")
        return False
    return True
