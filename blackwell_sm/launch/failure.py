"""The failure reason: the failing rank's exception (or signal) for `output/failure`."""

from __future__ import annotations

import json
import re
import signal
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


def failure_reason(rc: int, *, topo: Topology, log_dir: Path | None, stderr_tail: list[str]) -> str:
    """The failing rank and its exception (or signal), then supporting detail.

    torchrun's "Root Cause (first observed failure)" names the rank that failed first (a SIGKILLed
    rank, not the peers that then lost their connection); its error file, written by `@record`
    in the worker, holds the exception. Without that block: the oldest error file; last, the
    tail of torchrun's stderr.
    """
    host = topo.current_host
    text = "\n".join(stderr_tail)
    m = _ROOT_CAUSE.search(text, max(0, text.rfind("Root Cause")))
    if m:
        rank, local_rank, code = int(m["rank"]), int(m["local"]), int(m["code"])
        who = f"rank {rank} (host {host}, local rank {local_rank})"
        err = _error_file_message(Path(m["file"])) if m["file"] != "<N/A>" else None
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
