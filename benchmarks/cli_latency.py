"""CLI latency: wall time of `bsm` commands beside the SageMaker SDK's own import, same run.

    python benchmarks/cli_latency.py [--repeats 5] [--no-bytecode]

Each command runs as a fresh subprocess (what a user or CI pays), `--repeats` times after one
untimed warm-up, interleaved so that background load hits every command alike; the figure is
the median (wall; the child's CPU seconds ride along as `cpu_s`, which a loaded machine barely
moves). Targets: `bsm plan` < 0.25 s and < 1/10 of `from sagemaker.train import ModelTrainer`.
For every bsm command the heaviest top-level imports (`python -X importtime`) ride along in the
JSON line, so a missed target names its cause, and `cli.bsm_plan_phases` times the phases of one
`bsm plan` in process (interpreter, pydantic, click, the spec's models, the catalog, the Plan's
models, the planner, planning, JSON).

Children run with Python's bytecode cache, as an installed package has it (pip compiles on
install; an editable install writes `__pycache__` on first import): `PYTHONDONTWRITEBYTECODE` is
cleared for them, and the warm-up round writes the cache. `--no-bytecode` measures a tree that is
compiled from source on every start (as in a sandbox that sets the variable).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REPO, emit, note, run_cmd

PLAN_TARGET_S = 0.25
SDK_FRACTION = 0.1
_IMPORTTIME = re.compile(r"^import time:\s+(\d+)\s+\|\s+(\d+)\s+\|\s*(\S+)")


def bsm_argv() -> list[str]:
    """How a user starts `bsm`: the console script beside this Python, else `-m blackwell_sm`."""
    script = Path(sys.executable).with_name("bsm")
    if script.exists():
        return [sys.executable, str(script)]
    return [sys.executable, "-m", "blackwell_sm"]


def commands() -> dict[str, list[str]]:
    bsm = bsm_argv()
    return {
        "python_startup": [sys.executable, "-c", "pass"],
        "bsm_help": [*bsm, "--help"],
        "bsm_plan": [*bsm, "plan", "--model", "llama-3.1-8b", "--output", "json"],
        "bsm_submit_dry_run": [
            *bsm,
            "submit",
            "--dry-run",
            "templates/llama-3.1-8b.yaml",
        ],
        "sdk_import": [sys.executable, "-c", "from sagemaker.train import ModelTrainer"],
    }


def child_env(bytecode: bool) -> dict[str, str]:
    """The children's environment: with the bytecode cache (default) or without."""
    env = dict(os.environ)
    if bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


#: One `bsm plan --model llama-3.1-8b -o json`, in process, its phases timed (milliseconds).
PHASES = r"""
import json, time
t = [("start", time.perf_counter())]
def mark(name): t.append((name, time.perf_counter()))
import pydantic
class _M(pydantic.BaseModel):
    a: int
mark("pydantic and its first model")
import click
mark("click")
import blackwell_sm.spec
mark("spec models (RunSpec and its parts)")
import blackwell_sm.hardware
mark("catalog")
import blackwell_sm.planner.plan
mark("Plan models")
import blackwell_sm.planner.pipeline, blackwell_sm.planner.profile, blackwell_sm.cli.plan
mark("planner and CLI modules")
from blackwell_sm.planner.pipeline import make_plan
from blackwell_sm.spec import parse_spec
plan = make_plan(parse_spec({"model": "llama-3.1-8b"}, source="--model"))
mark("planning")
plan.model_dump_json(indent=2)
mark("JSON")
print(json.dumps({b[0]: round((b[1] - a[1]) * 1e3, 1) for a, b in zip(t, t[1:])}))
"""


def phases(env: dict[str, str], repeats: int) -> dict[str, float]:
    """Median milliseconds of each phase over `repeats` fresh processes."""
    runs = []
    for _ in range(repeats + 1):
        proc = run_cmd([sys.executable, "-c", PHASES], env=env)
        if proc.returncode == 0:
            runs.append(json.loads(proc.stdout))
    runs = runs[1:]  # the first wrote the bytecode cache
    return {k: round(statistics.median(r[k] for r in runs), 1) for k in runs[0]} if runs else {}


def heaviest_imports(argv: list[str], top: int = 6) -> list[dict[str, float | str]]:
    """The `top` costliest imports when running `argv` (`-X importtime`), by cumulative time.

    Third-party modules are grouped by top-level package, this project's by subpackage
    (`blackwell_sm.planner`), each at its outermost (largest) import.
    """
    env = dict(os.environ, PYTHONPROFILEIMPORTTIME="1")
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    proc = run_cmd(argv, env=env)
    cost: dict[str, int] = {}
    for line in proc.stderr.splitlines():
        m = _IMPORTTIME.match(line)
        if not m:
            continue
        parts = m.group(3).split(".")
        key = ".".join(parts[:2]) if parts[0] == "blackwell_sm" else parts[0]
        if key in ("blackwell_sm", "site", "encodings"):
            continue
        cost[key] = max(cost.get(key, 0), int(m.group(2)))
    rows = sorted(cost.items(), key=lambda kv: -kv[1])[:top]
    return [{"module": k, "cumulative_s": round(us / 1e6, 4)} for k, us in rows]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="timed runs per bsm command (median)")
    ap.add_argument(
        "--sdk-repeats", type=int, default=3, help="timed runs of the ~8 s SDK import (0: skip it)"
    )
    ap.add_argument(
        "--no-bytecode", action="store_true", help="children compile from source every start"
    )
    args = ap.parse_args(argv)
    env = child_env(not args.no_bytecode)

    cmds = commands()
    times: dict[str, list[float]] = {k: [] for k in cmds}
    cpu: dict[str, list[float]] = {k: [] for k in cmds}
    failed: dict[str, str] = {}
    for round_ in range(args.repeats + 1):  # round 0 warms the page cache and .pyc files
        for key, cmd in cmds.items():
            skip_sdk = key == "sdk_import" and (args.sdk_repeats == 0 or round_ > args.sdk_repeats)
            if key in failed or skip_sdk:
                continue
            r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
            proc = run_cmd(cmd, env=env)
            dt = time.perf_counter() - t0
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            dcpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
            if proc.returncode != 0:
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
                failed[key] = f"exit {proc.returncode}: " + " | ".join(tail)
                note(f"{key} failed: {failed[key]}")
            elif round_ > 0:
                times[key].append(dt)
                cpu[key].append(dcpu)
    med = {k: statistics.median(v) for k, v in times.items() if v and k not in failed}
    sdk = med.get("sdk_import")
    cmd_str = {
        k: " ".join(Path(c).name if i < 2 else c for i, c in enumerate(v)) for k, v in cmds.items()
    }

    def figure(key: str, **kw) -> None:
        if key in failed:
            emit(
                f"cli.{key}_s",
                None,
                "s",
                ok=False,
                status="missing or failing",
                error=failed[key],
                command=cmd_str[key],
                **kw,
            )
            return
        if key not in med:
            emit(f"cli.{key}_s", None, "s", status="skipped (--sdk-repeats 0)", **kw)
            return
        # CPU seconds (user + system of the child) barely move with other tenants' load.
        extra = {
            "cpu_s": round(statistics.median(cpu[key]), 4),
            "runs_s": [round(t, 4) for t in times[key]],
            "command": cmd_str[key],
        }
        if key.startswith("bsm"):
            extra["heaviest_imports"] = heaviest_imports(cmds[key])
        emit(f"cli.{key}_s", round(med[key], 4), "s", **kw, **extra)

    figure("python_startup", reference="interpreter start-up alone")
    emit(
        "cli.bsm_plan_phases",
        phases(env, args.repeats),
        "ms",
        bytecode=not args.no_bytecode,
        reference="medians of one bsm plan's phases, in process",
    )
    figure("bsm_help", reference={"sdk_import_s": sdk and round(sdk, 4)})
    figure("bsm_plan", target=f"< {PLAN_TARGET_S}", bytecode=not args.no_bytecode)
    figure("bsm_submit_dry_run", reference={"sdk_import_s": sdk and round(sdk, 4)})
    figure("sdk_import", reference="from sagemaker.train import ModelTrainer")
    if "bsm_plan" in med and sdk:
        emit(
            "cli.bsm_plan_over_sdk_import",
            round(med["bsm_plan"] / sdk, 4),
            "ratio",
            target=f"< {SDK_FRACTION}",
        )
        emit(
            "cli.bsm_plan_over_sdk_import_cpu",
            round(statistics.median(cpu["bsm_plan"]) / statistics.median(cpu["sdk_import"]), 4),
            "ratio",
            target=f"< {SDK_FRACTION}",
            clock="child CPU seconds",
        )
    else:
        emit(
            "cli.bsm_plan_over_sdk_import",
            None,
            "ratio",
            target=f"< {SDK_FRACTION}",
            ok=False,
            status="not measured: " + (", ".join(sorted(failed)) or "SDK import skipped"),
        )
    note(f"cli latency measured from {REPO} with {args.repeats} runs per command")
    return 0


if __name__ == "__main__":
    sys.exit(main())
