"""Running `bsm` for the CLI tests: in-process, or `bsm run-local` as a process of its own."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from blackwell_sm.cli import main


def run(*args: str) -> tuple[int, str, str]:
    """Run `bsm` in-process through main(): exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as e:
            return int(e.code or 0), out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


REPO = Path(__file__).resolve().parents[1]


def run_local_process(
    spec: Path,
    out: Path,
    *args: str,
    nproc: int = 2,
    env: dict[str, str] | None = None,
    timeout: float = 600,
) -> subprocess.CompletedProcess[str]:
    """`python -m blackwell_sm run-local SPEC --out OUT --nproc N --output json ARGS...` as its
    own process (this checkout first on PYTHONPATH), with its output captured."""
    cmd = [
        sys.executable,
        "-m",
        "blackwell_sm",
        "run-local",
        str(spec),
        "--out",
        str(out),
        "--nproc",
        str(nproc),
        "--output",
        "json",
        *args,
    ]
    env = dict(env if env is not None else os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO)


DEMO = REPO / "templates" / "demo-tiny.yaml"


def demo_spec(path: Path, *changes: tuple[str, str]) -> Path:
    """`make demo`'s spec written to `path` with each (old, new) text change made."""
    text = DEMO.read_text()
    for old, new in changes:
        assert old in text, f"demo-tiny.yaml no longer holds {old!r}"
        text = text.replace(old, new)
    path.write_text(text)
    return path


def bsm_json(*args: str, timeout: float = 120) -> dict:
    """`python -m blackwell_sm ARGS... --output json` as its own process: its JSON (exit 0)."""
    cmd = [sys.executable, "-m", "blackwell_sm", *args, "--output", "json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout)


def capture(cmd: list, **kw: Any) -> subprocess.CompletedProcess[str]:
    """`subprocess.run(cmd)` with its output captured as text (cwd: the repository unless given;
    pass timeout, env, input as subprocess.run takes them)."""
    kw.setdefault("cwd", REPO)
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
