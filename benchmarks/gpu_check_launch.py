"""The GPU check's launches: the real launcher as a subprocess (SIGTERM after a save for the
resume run), nvidia-smi's peak memory while it runs, and loading an export in transformers."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any


class SmiPeak:
    """Polls nvidia-smi's memory.used (MiB) while a run goes; None where it cannot be read."""

    def __init__(self, enabled: bool) -> None:
        self.peak_mib: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True) if enabled else None

    def _poll(self) -> None:
        cmd = ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"]
        while not self._stop.wait(0.5):
            try:
                v = float(subprocess.run(cmd, capture_output=True, text=True, timeout=5).stdout)
            except (OSError, ValueError, subprocess.SubprocessError):
                return
            self.peak_mib = max(self.peak_mib or 0.0, v)

    def __enter__(self) -> SmiPeak:
        if self._thread:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()


def launch(plan_path: Path, out: Path, *, dry: bool, timeout: float, stop_after_save: bool) -> int:
    """Run the real launcher; with `stop_after_save`, SIGTERM it once a checkpoint is saved."""
    from blackwell_sm.local import free_port, launcher_command, launcher_env

    env = launcher_env(master_port=free_port(), extra={"BSM_DEVICE": "cpu" if dry else "cuda"})
    proc = subprocess.Popen(
        launcher_command(plan_path, out),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # stdout is JSON lines only: the run's log goes to stderr
            sys.stderr.write(line)
            if stop_after_save and re.search(r"checkpoint step \d+ saved", line):
                proc.send_signal(signal.SIGTERM)
                stop_after_save = False
        return proc.wait()
    finally:
        timer.cancel()


def load_export(model_dir: Path) -> dict[str, Any]:
    """Load the exported model with transformers; its parameter count, or why it could not."""
    try:
        from transformers import AutoModelForCausalLM
    except ImportError as e:
        return {"loaded": None, "why": f"transformers not importable: {e}"}
    try:
        m = AutoModelForCausalLM.from_pretrained(model_dir)
    except Exception as e:  # any failure to load is the finding
        return {"loaded": False, "why": f"{type(e).__name__}: {e}"[:500]}
    return {"loaded": True, "params": sum(p.numel() for p in m.parameters())}
