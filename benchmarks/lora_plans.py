"""LoRA beside a full fine-tune, as the planner sees them on one p6-b200 node (issue 34): the
table docs/lora.md quotes. Each row is `blackwell_sm.plan()` of a fine-tune (1000 steps; 64
sequences per step at 8k, 8 at 128k; LoRA r 16 on all seven block linears). One figure per row
on stdout (JSON lines); `--markdown` prints the table instead.

    .venv/bin/python benchmarks/lora_plans.py --markdown
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import emit

from blackwell_sm import plan
from blackwell_sm.errors import BsmError

ROWS = [(m, s) for m in ("llama-3.1-8b", "llama-3.1-70b") for s in (8192, 131072)]


def row(model: str, seq: int, lora: bool) -> dict:
    """The planner's figures for one fine-tune, or why it does not fit."""
    over = {
        "training.task": "finetune",
        "training.total_steps": 1000,
        "training.global_batch_seqs": 64 if seq <= 8192 else 8,
        "compute.instance_count": 1,
    }
    if lora:
        over["training.peft.method"] = "lora"
    out = {"model": model, "seq": seq, "method": "LoRA r16" if lora else "full"}
    try:
        p = plan(model, seq_len=seq, allow_infeasible=True, **over)
    except BsmError as e:
        return {**out, "error": str(e)}
    c, m = p.config, p.memory_gib
    config = f"{c.precision}, AC {c.activation_checkpointing}"
    config += f", mb {c.micro_batch_size} x ga {c.grad_accum_steps}"
    config += f", cp {c.cp_degree}" if c.cp_degree > 1 else ""
    config += ", offload" if c.offload else ""
    return {
        **out,
        "feasible": p.feasible,
        "config": config,
        "state_gib": round(m.params_fp32 + m.grads_fp32 + m.optimizer_states, 1),
        "peak_gib": round(m.total, 1),
        "tokens_per_s_per_gpu": p.throughput.tokens_per_s_per_gpu,
        "mfu": p.throughput.mfu,
        "hours": round(p.run.hours, 1),
    }


def markdown(rows: list[dict]) -> str:
    lines = [
        "| model | seq | method | configuration | state GiB/GPU | peak GiB/GPU | tokens/s/GPU "
        "| MFU | hours |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        head = f"| {r['model']} | {r['seq']:,} | {r['method']} |"
        if "error" in r or not r["feasible"]:
            why = r.get("error") or f"does not fit ({r['peak_gib']} GiB per GPU at best)"
            lines.append(f"{head} {why} | | | | | |")
            continue
        lines.append(
            f"{head} {r['config']} | {r['state_gib']} | {r['peak_gib']} | "
            f"{r['tokens_per_s_per_gpu']:,.0f} | {r['mfu']:.1%} | {r['hours']} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--markdown", action="store_true", help="Print the docs table.")
    a = ap.parse_args()
    rows = [row(m, s, lora) for m, s in ROWS for lora in (False, True)]
    if a.markdown:
        print(markdown(rows))
        return
    for r in rows:
        name = f"lora_plans.{r['model']}@{r['seq']}.{r['method'].split()[0].lower()}"
        emit(name, r.get("peak_gib"), "GiB", **r)


if __name__ == "__main__":
    main()
