"""When to save and when to stop: step/minute intervals, SIGTERM, capacity expiry, max runtime.

Each rank evaluates the triggers locally; the loop all-reduces the result so every rank takes the
same decision at the same step.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from blackwell_sm.opt_ml import ENV_CAPACITY_EXPIRY, ENV_JOB_START_UNIX, ENV_MAX_RUNTIME_S
from blackwell_sm.spec.training import CheckpointSpec

EXPIRY_ENV = ENV_CAPACITY_EXPIRY


def parse_unix_time(text: str) -> float:
    """A Unix timestamp in seconds or milliseconds (the docs disagree; accept both)."""
    value = float(text.strip())
    return value / 1000.0 if value > 1e11 else value  # 1e11 s is the year 5138; ms since 1973


def deadline_from_env(env: Mapping[str, str]) -> tuple[float, str] | None:
    """The earliest hard end of this job (unix seconds) and what it is, if the environment says."""
    ends: list[tuple[float, str]] = []
    if env.get(EXPIRY_ENV, "").strip():
        ends.append((parse_unix_time(env[EXPIRY_ENV]), "capacity block expiry"))
    start, runtime = env.get(ENV_JOB_START_UNIX, ""), env.get(ENV_MAX_RUNTIME_S, "")
    if start.strip() and runtime.strip():
        ends.append((parse_unix_time(start) + float(runtime), "job max runtime"))
    return min(ends) if ends else None


@dataclass
class Triggers:
    """Save/stop decisions for one rank."""

    spec: CheckpointSpec
    deadline: tuple[float, str] | None = None
    last_save_time: float = field(default_factory=time.monotonic)
    deadline_saved: bool = False
    stop_requested: bool = False
    stop_reason: str | None = None

    @classmethod
    def from_env(cls, spec: CheckpointSpec, env: Mapping[str, str] | None = None) -> Triggers:
        return cls(spec=spec, deadline=deadline_from_env(os.environ if env is None else env))

    def install_signal_handlers(self) -> None:
        """SIGTERM (SageMaker stop / max runtime) and SIGINT: finish the step, save, exit 0."""

        def handler(signum: int, _frame: object) -> None:
            self.stop_requested = True
            self.stop_reason = signal.Signals(signum).name

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def deadline_due(self, now: float | None = None) -> bool:
        if self.deadline is None or self.deadline_saved:
            return False
        now = time.time() if now is None else now
        return now >= self.deadline[0] - self.spec.expiry_margin_s

    def check(self, step: int, now_mono: float | None = None) -> tuple[bool, bool]:
        """(save, stop) after `step` optimizer steps, as this rank sees it."""
        now_mono = time.monotonic() if now_mono is None else now_mono
        save = bool(self.spec.interval_steps and step % self.spec.interval_steps == 0)
        if self.spec.interval_minutes is not None:
            save |= now_mono - self.last_save_time >= 60.0 * self.spec.interval_minutes
        save |= self.deadline_due()
        save |= self.stop_requested
        return save, self.stop_requested

    def saved(self) -> None:
        self.last_save_time = time.monotonic()
        if self.deadline_due():
            # One insurance save ahead of the deadline; the SIGTERM that follows saves again.
            self.deadline_saved = True
