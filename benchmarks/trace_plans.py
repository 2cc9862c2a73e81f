"""The plans `bsm plan` prints, traced through the command itself (issues 33 and 34): each case
runs `bsm plan --model M --seq-len S --trace -o json` (the GPU form, warm-up on) and sets the
trace beside the printed total less its runtime and fragmentation allowance, with the command's
wall time. One figure per case on stdout; `--write` also renders
`benchmarks/results/trace_plans.{jsonl,md}` (the table docs/planner.md and docs/lora.md quote).

    .venv/bin/python benchmarks/trace_plans.py                 # every case (about 15 min, 2 cores)
    .venv/bin/python benchmarks/trace_plans.py --only 70b --write

Target: within 5 % of the printed figure, and the 70B plan at 131,072 in under 5 minutes.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import REPO, emit, machine, note, run_cmd

RESULTS = REPO / "benchmarks" / "results"
LORA = ["--set", "training.task=finetune", "--set", "training.peft.method=lora"]
BIG = ["--model", "llama-3.1-70b", "--seq-len", "32768", "--total-tokens", "20000000000"]
#: (name, the arguments after `bsm plan`)
CASES: list[tuple[str, list[str]]] = [
    ("llama-3.2-1b@8192", ["--model", "llama-3.2-1b", "--seq-len", "8192"]),
    ("llama-3.2-1b@131072", ["--model", "llama-3.2-1b", "--seq-len", "131072"]),
    ("llama-3.1-8b@8192", ["--model", "llama-3.1-8b", "--seq-len", "8192"]),
    ("llama-3.1-8b@131072", ["--model", "llama-3.1-8b", "--seq-len", "131072"]),
    ("llama-3.1-70b@131072", ["--model", "llama-3.1-70b", "--seq-len", "131072"]),
    ("llama-3.1-70b-lora@131072", ["--model", "llama-3.1-70b", "--seq-len", "131072", *LORA]),
    # the README's example (2 nodes) and templates users start from (packed chat fine-tune)
    ("readme-70b@32768-2-nodes", [*BIG, "--instance-count", "auto"]),
    ("qwen3-8b-finetune.yaml", ["templates/qwen3-8b-finetune.yaml"]),
    ("llama-3.1-8b-64k.yaml", ["templates/llama-3.1-8b-64k.yaml"]),
    ("llama-3.2-3b.yaml", ["templates/llama-3.2-3b.yaml"]),
]


def _config(c: dict) -> str:
    parts = [f"mb {c['micro_batch_size']}", f"ga {c['grad_accum_steps']}"]
    if c["cp_degree"] > 1:
        parts.append(f"cp {c['cp_degree']}")
    parts += [c["activation_checkpointing"], c["precision"]]
    parts += ["compile"] * c["compile"] + ["offload"] * c.get("offload", False)
    return ", ".join(parts)


def trace_case(name: str, args: list[str]) -> dict:
    """One case through the CLI: the trace check's figures and the command's wall seconds."""
    bsm = str(Path(sys.executable).parent / "bsm")
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    done = run_cmd([bsm, "plan", *args, "--trace", "-o", "json"], timeout=1800)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{name}: exit {done.returncode}: {done.stderr[-2000:]}")
    out = json.loads(done.stdout)
    tr = out["trace"]
    return {
        "case": name,
        "command": "bsm plan " + " ".join(args) + " --trace -o json",
        "config": _config(out["plan"]["config"]),
        "form": tr["form"],
        "printed_gib": tr["plan_total_gib"],
        "printed_less_allowance_gib": tr["plan_tracked_gib"],
        "predicted_gib": tr["predicted_gib"],
        "traced_gib": tr["traced_gib"],
        "plan_error": tr["plan_error"],
        "error": tr["error"],
        "peak_at": tr["peak_at"],
        "host_gib": round(tr["trace"].get("host_bytes", 0) / 2**30, 2),
        "wall_s": round(wall, 1),
        "load_before": round(load, 2),
    }


def render(rows: list[dict], meta: dict) -> str:
    head = (
        "| case | config | printed less allowance | traced | error | host GiB | command s |\n"
        "| --- | --- | --- | --- | --- | --- | --- |\n"
    )
    body = "".join(
        f"| {r['case']} | {r['config']} | {r['printed_less_allowance_gib']:.2f} | "
        f"{r['traced_gib']:.2f} | {100 * r['plan_error']:+.1f} % | {r['host_gib'] or '—'} | "
        f"{r['wall_s']:.0f} |\n"
        for r in rows
    )
    return (
        "# `bsm plan --trace` of the plans the planner prints (issues 33, 34)\n\n"
        "Rendered by `benchmarks/trace_plans.py --write`; GiB per GPU; error is "
        "(printed less allowance - traced) / traced; the GPU form on fake CPU tensors. "
        f"{meta['date']}, {meta['machine']}, load before each row in the jsonl.\n\n" + head + body
    )


def write(rows: list[dict]) -> None:
    """Merge `rows` into the results files (earlier rows of other cases kept)."""
    meta = {"date": dt.date.today().isoformat(), "machine": json.dumps(machine())}
    path = RESULTS / "trace_plans.jsonl"
    kept = {}
    if path.exists():
        kept = {r["case"]: r for r in map(json.loads, path.read_text().splitlines())}
    kept |= {r["case"]: {**r, **meta} for r in rows}
    order = [n for n, _ in CASES if n in kept]
    path.write_text("".join(json.dumps(kept[n]) + "\n" for n in order))
    (RESULTS / "trace_plans.md").write_text(render([kept[n] for n in order], meta))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="Cases whose name contains this.")
    ap.add_argument("--write", action="store_true", help="Render the results files.")
    a = ap.parse_args()
    for name, args in CASES:
        if a.only and a.only not in name:
            continue
        note(f"tracing {name}")
        r = trace_case(name, args)
        emit(
            f"trace_plans.{name}.abs_plan_error",
            abs(r["plan_error"]),
            "fraction",
            target="< 0.05",
            **r,
        )
        if "70b" in name and "131072" in name:
            emit(f"trace_plans.{name}.wall_s", r["wall_s"], "s", target="< 300")
        if a.write:  # after each case: a later case's failure keeps what was traced
            write([r])


if __name__ == "__main__":
    main()
