"""`make bench`: run the benchmarks in sequence, each printing one JSON line per figure.

    python benchmarks/run_all.py [--only cli_latency,loop_overhead] [--out results.jsonl]

1. planner_accuracy  predicted vs measured memory and tokens/s (shared/reference/measurements.csv)
2. cli_latency       `bsm --help`, `bsm plan`, `bsm submit --dry-run` vs the SageMaker SDK import
3. planner_search    time to plan every preset on every instance type with count auto
4. loop_overhead     the real training loop vs a plain PyTorch loop on CPU; checkpoint save/restore

The GPU check (benchmarks/gpu_check.sh) needs a GPU and is not run here. Each script runs as its
own subprocess; its JSON lines are passed through to stdout (and to --out), its progress to stderr.
A script that is missing or fails is reported as one JSON line with ok=false; the exit code is 1
if any script failed (a missed target is a figure, not a failure).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import REPO, emit, machine, note  # noqa: E402

SCRIPTS = ["planner_accuracy", "cli_latency", "planner_search", "loop_overhead"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated subset of: " + ", ".join(SCRIPTS))
    ap.add_argument("--out", type=Path, help="also write every JSON line to this file")
    args = ap.parse_args(argv)
    chosen = args.only.split(",") if args.only else SCRIPTS
    unknown = sorted(set(chosen) - set(SCRIPTS))
    if unknown:
        ap.error(f"unknown benchmark(s) {', '.join(unknown)}; allowed: {', '.join(SCRIPTS)}")

    lines = [emit("bench.machine", None, "", reference=machine(), date=time.strftime("%Y-%m-%d"))]
    failed = []
    for name in chosen:
        script = HERE / f"{name}.py"
        if not script.is_file():
            lines.append(emit(f"bench.{name}", None, "", ok=False, status="script missing"))
            failed.append(name)
            continue
        note(f"running {name}")
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, str(script)], cwd=REPO, stdout=subprocess.PIPE, text=True
        )
        for line in proc.stdout.splitlines():
            try:
                lines.append(json.loads(line))
            except json.JSONDecodeError:
                note(f"{name}: not a JSON line: {line[:200]}")
                continue
            print(line, flush=True)
        wall = time.perf_counter() - t0
        ok = proc.returncode == 0
        lines.append(
            emit(f"bench.{name}.wall_s", round(wall, 1), "s", ok=ok, exit_code=proc.returncode)
        )
        if not ok:
            failed.append(name)
    if args.out:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in lines))
    missed = [
        r["name"] for r in lines if r.get("ok") is False and not r["name"].startswith("bench.")
    ]
    note(
        f"targets missed: {', '.join(missed) or 'none'}; scripts failed: {', '.join(failed) or 'none'}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
