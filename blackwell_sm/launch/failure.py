"""The failure reason: the failing rank's exception (or signal) for `output/failure`."""

from __future__ import annotations

import json
import re
import signal
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


_ROOT_CAUSE = re.compile(
    r"Root Cause.*?rank\s*:\s*(?P<rank>\d+)\s*\(local_rank\s*:\s*(?P<local>\d+)\)"
    r".*?exitcode\s*:\s*(?P<code>-?\d+).*?error_file\s*:\s*(?P<file>\S+)",
    re.S,
)


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


def torchrun_failures(stderr_tail: list[str]) -> list[RankFailure]:
    """Every failed rank of torchrun's last failure summary ("Failures:" and "Root Cause")."""
    text = "\n".join(stderr_tail)
    start = text.rfind("Failures:")
    if start < 0:
        return []
    return [
        RankFailure(
            int(m["rank"]),
            int(m["local"]),
            int(m["code"]),
            int(m["pid"]) if m["pid"] else None,
            m["file"],
        )
        for m in _FAILURE_ENTRY.finditer(text, start)
    ]


def first_failure(
    failures: list[RankFailure], exit_times: Mapping[int, float]
) -> RankFailure | None:
    """The rank that failed first by when its process ended (`exit_times`: pid -> time, from
    the supervisor's pidfd watch), or None when a failed rank's exit time is unknown.

    torchrun's own "Root Cause" compares whole seconds: the error file's timestamp for a rank
    that raised, the moment it noticed for a rank killed by a signal. A peer's "Connection reset
    by peer", written a few milliseconds after rank 0 was SIGKILLed, often lands in an earlier
    second than torchrun's notice of the kill, and the peer was blamed. Process end times order
    them right: the peer's exception comes after the death that caused it.
    """
    timed = [(exit_times[f.pid], f.rank, f) for f in failures if f.pid in exit_times]
    if not timed or len(timed) < len(failures):
        return None
    return min(timed, key=lambda x: (x[0], x[1]))[2]


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
    first = first_failure(torchrun_failures(stderr_tail), exit_times or {})
    m = _ROOT_CAUSE.search(text, max(0, text.rfind("Root Cause")))
    if first is not None or m:
        if first is not None:
            rank, local_rank, code, efile = (
                first.rank,
                first.local_rank,
                first.exitcode,
                first.error_file,
            )
        else:
            assert m is not None
            rank, local_rank, code, efile = (
                int(m["rank"]),
                int(m["local"]),
                int(m["code"]),
                m["file"],
            )
        who = f"rank {rank} (host {host}, local rank {local_rank})"
        err = _error_file_message(Path(efile)) if efile != "<N/A>" else None
        if err and err[0]:
            return f"{who}: {err[0]}" + (f"\nat {err[1]}" if err[1] else "")
        if code < 0:
            try:
                what = f"was killed by signal {signal.Signals(-code).name}"
            except ValueError:
                what = f"was killed by signal {-code}"
        else:
            what = f"exited with code {code}"
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


def write_failure(opt_ml: Path, reason: str) -> None:
    """`opt_ml/output/failure`: SageMaker shows the first 1024 characters as FailureReason."""
    path = OptMl(opt_ml).failure
    path.parent.mkdir(parents=True, exist_ok=True)
    text = reason.strip()
    if len(text) > FAILURE_LIMIT:
        text = text[: FAILURE_LIMIT - 3] + "..."
    path.write_text(text + "\n")
