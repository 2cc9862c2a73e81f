"""Shared pieces of the benchmark scripts: the one-JSON-line-per-figure emitter and timers.

Every figure is printed on stdout as one JSON object:

    {"name": "cli.plan_s", "value": 0.21, "unit": "s", "target": "< 0.3", "ok": true, ...}

`target` is the goal the figure is held to (a string such as "< 0.3" or ">= 0.9"), `reference`
a figure it is shown beside (no goal); `ok` is true/false against the target, or null when there
is none. Extra keys (e.g. `detail`) are allowed. Human-readable progress goes to stderr, so the
stdout of any script is machine-readable JSON lines only.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": lambda v, t: v < t,
    "<=": lambda v, t: v <= t,
    ">": lambda v, t: v > t,
    ">=": lambda v, t: v >= t,
}


def check(value: float | None, target: str | None) -> bool | None:
    """Whether `value` meets `target` ("< 0.3", ">= 0.9", "within 10%" is not parsed: None)."""
    if value is None or target is None:
        return None
    op, _, num = target.strip().partition(" ")
    if op not in _OPS:
        return None
    try:
        return _OPS[op](float(value), float(num))
    except ValueError:
        return None


def emit(
    name: str,
    value: float | int | str | None,
    unit: str,
    *,
    target: str | None = None,
    reference: Any = None,
    ok: bool | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Print one figure as a JSON line on stdout and return it."""
    if ok is None and isinstance(value, int | float):
        ok = check(value, target)
    rec: dict[str, Any] = {"name": name, "value": value, "unit": unit}
    if target is not None:
        rec["target"] = target
    if reference is not None:
        rec["reference"] = reference
    rec["ok"] = ok
    rec.update(extra)
    print(json.dumps(rec), flush=True)
    return rec


def note(msg: str) -> None:
    """Progress for humans, on stderr."""
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def median_wall(fn: Callable[[], Any], repeats: int) -> tuple[float, list[float]]:
    """(median, all) wall seconds of `repeats` calls of `fn`."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def run_cmd(argv: Sequence[str], *, env: dict[str, str] | None = None, timeout: float = 120.0):
    """Run `argv` from the repo root, output captured; returns the CompletedProcess."""
    return subprocess.run(
        list(argv), cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


def machine() -> dict[str, Any]:
    """What the figures were measured on (for the README and the JSON lines)."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "cpus": os.cpu_count(),
    }
    try:
        import torch

        info["torch"] = torch.__version__
        if torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name()
    except ImportError:
        pass
    return info
