"""One progress display for the long waits of a command: the code bundle's upload, the
container wheels' download, and `--wait` (elapsed time, status, the latest ETA).

The layers below know nothing of rich: they take a plain callback, `progress(key, done, total,
detail)` (`done` and `total` in bytes or items, `total` None when unknown), and this display is
that callback. It is silent under `--output json` and whenever stdout or stderr is not a
terminal (CI logs, pipes), so scripts and logs see only the usual messages. It draws on stderr,
and every text is shown literally (never as rich markup).
"""

from __future__ import annotations

import contextlib
import sys
import time
from types import TracebackType
from typing import Any

from blackwell_sm.planner.units import hours_text


def shown(output: str) -> bool:
    """Whether progress is drawn: a table-output command with both streams on a terminal."""
    return output != "json" and sys.stdout.isatty() and sys.stderr.isatty()


class ProgressDisplay:
    """`with ProgressDisplay(output) as progress:` then pass `progress` where a callback is
    taken; `progress.wait_status(info)` draws a `--wait` poll. Does nothing when not `shown`."""

    def __init__(self, output: str) -> None:
        self.enabled = shown(output)
        self._rich: Any = None
        self._tasks: dict[str, Any] = {}
        self._started = time.monotonic()

    def __enter__(self) -> ProgressDisplay:
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                Progress,
                SpinnerColumn,
                TaskProgressColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            console = Console(stderr=True, highlight=False, markup=False)
            self._rich = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}", markup=False),
                BarColumn(),
                TaskProgressColumn(),
                TimeElapsedColumn(),
                TextColumn("{task.fields[detail]}", markup=False),
                console=console,
            )
            self._rich.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._rich is not None:
            self._rich.stop()
            self._rich = None

    def __call__(self, key: str, done: float, total: float | None = None, detail: str = "") -> None:
        """Report `done` of `total` for the task `key` (created on first report)."""
        if self._rich is None:
            return
        if key not in self._tasks:
            self._tasks[key] = self._rich.add_task(LABELS.get(key, key), total=total, detail="")
        self._rich.update(self._tasks[key], completed=done, total=total, detail=detail)

    def wait_status(self, info: Any, eta_s: float | None = None) -> None:
        """One `--wait` poll: the job's status and, once the in-job check has run, its ETA."""
        status = f"{info.status} / {info.secondary_status or '-'}"
        eta = f", ETA {hours_text(eta_s / 3600)} ([bsm-check])" if eta_s is not None else ""
        self(f"waiting for {info.name}", 0, None, status + eta)


def wait_poller(job: Any, display: ProgressDisplay, every: int = 5) -> Any:
    """An `on_poll` for `TrainingJob.wait`: status on every poll; the ETA of the latest
    `[bsm-check]`/step line read from the logs every `every`-th poll while training (a display
    only: a log read that fails leaves the last ETA)."""
    from blackwell_sm.errors import AwsError

    state: dict[str, Any] = {"polls": 0, "eta": None}

    def on_poll(info: Any) -> None:
        if not display.enabled:
            return
        if info.status == "InProgress" and state["polls"] % every == 0:
            with contextlib.suppress(AwsError):
                state["eta"] = job.progress().eta_s
        state["polls"] += 1
        display.wait_status(info, state["eta"])

    return on_poll


LABELS = {
    "upload": "uploading the code bundle",
    "wheels": "fetching the container's wheels",
}
