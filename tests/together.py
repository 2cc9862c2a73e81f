"""Run several `bsm` commands as processes that act at the same moment.

Each process imports the toolkit first (the slow part), says it is ready, and waits for one
"go" file; then all run `bsm ARGS` through `main()` together, so that they reach AWS within
milliseconds of each other instead of one import time apart.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

REPO = Path(__file__).resolve().parents[1]
LAUNCH = """
import sys, time
from pathlib import Path
import boto3, blackwell_sm.aws.submit, blackwell_sm.cli.training_plans  # before the go
from blackwell_sm.cli import main
Path(sys.argv[1]).touch()
while not Path(sys.argv[2]).exists():
    time.sleep(0.005)
main(sys.argv[3:])
"""


class Result(NamedTuple):
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def base_env(endpoint: str, home: Path) -> dict[str, str]:
    """A clean environment for a `bsm` process on the endpoint (fake credentials only)."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "PYTHONPATH": str(REPO),
        "AWS_ACCESS_KEY_ID": "AKIAFAKEBSMTEST12345",
        "AWS_SECRET_ACCESS_KEY": "fake",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_CONFIG_FILE": str(home / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(home / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "PYDANTIC_DISABLE_PLUGINS": "__all__",
    }


def run_together(
    commands: list[list[str]], envs: list[dict[str, str]], where: Path, timeout: float = 180
) -> list[Result]:
    """Start every command, wait until all are ready, let them go at once; their results."""
    go = where / "go"
    procs, ready = [], []
    for i, (argv, env) in enumerate(zip(commands, envs, strict=True)):
        flag = where / f"ready-{i}"
        ready.append(flag)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", LAUNCH, str(flag), str(go), *argv],
                env=env,
                cwd=where,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    deadline = time.monotonic() + timeout
    while not all(f.exists() for f in ready):
        if any(p.poll() is not None for p in procs) or time.monotonic() > deadline:
            break  # a process died before the go: its result says why
        time.sleep(0.01)
    go.touch()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        results.append(Result(p.returncode, out, err))
    go.unlink()
    for f in ready:
        f.unlink(missing_ok=True)
    return results


def run_one(argv: list[str], env: dict[str, str], where: Path, timeout: float = 180) -> Result:
    return run_together([argv], [env], where, timeout)[0]
