"""The long-context envelope: for each preset, the longest sequence the planner fits on one
instance (default ml.p6-b200.48xlarge) at micro-batch 1, without context parallelism
(cp_degree pinned to 1) and with it (cp_degree searched), with the predicted tokens/s per GPU,
and the 70B stretch at 32k. One JSON line per figure; `--markdown` prints the docs table too.

    .venv/bin/python benchmarks/long_context_envelope.py [--markdown] [--only llama-3.2-1b,...]

Sequences are searched in steps of 1,024 tokens up to the model's own max_seq_len (its RoPE
setting: the spec refuses longer), with the planner's default global batch (4 Mi tokens).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import emit, note

STEP = 1024


def plan_at(model: str, seq: int, instance: str, cp: int | None):
    from blackwell_sm.planner.api import make_plan
    from blackwell_sm.spec import parse_spec

    pins: dict = {"micro_batch_size": 1}
    if cp is not None:
        pins["cp_degree"] = cp
    spec = parse_spec(
        {
            "model": model,
            "training": {"seq_len": seq, "pins": pins},
            "compute": {"instance_type": instance, "instance_count": 1},
        }
    )
    return make_plan(spec)


def longest(model: str, max_seq: int, instance: str, cp: int | None):
    """(seq, plan) of the longest multiple of STEP that fits, or (0, None)."""
    lo, hi = 0, max_seq // STEP  # lo fits (0: nothing yet), hi is the model's limit
    best = None
    top = plan_at(model, hi * STEP, instance, cp)
    if top.feasible:
        return hi * STEP, top
    while hi - lo > 1:
        mid = (lo + hi) // 2
        p = plan_at(model, mid * STEP, instance, cp)
        if p.feasible:
            lo, best = mid, p
        else:
            hi = mid
    return lo * STEP, best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instance", default="ml.p6-b200.48xlarge")
    ap.add_argument("--only", default="", help="comma-separated presets (default: all but tiny)")
    ap.add_argument("--markdown", action="store_true", help="also print the docs table (stderr)")
    args = ap.parse_args(argv)
    from blackwell_sm.spec import PRESETS

    names = [n for n in (args.only.split(",") if args.only else PRESETS) if n != "tiny"]
    rows = []
    for name in names:
        limit = PRESETS[name].max_seq_len
        note(f"envelope: {name} (max_seq_len {limit})")
        row = [name, limit]
        for label, cp in (("no_cp", 1), ("cp", None)):
            seq, p = longest(name, limit, args.instance, cp)
            tps = p.throughput.tokens_per_s_per_gpu if p else None
            c = p.config if p else None
            emit(
                f"envelope.{name}.{label}.seq_len",
                seq,
                "tokens",
                tokens_per_s_per_gpu=tps,
                limit=limit,
                config=None
                if c is None
                else {
                    "cp_degree": c.cp_degree,
                    "activation_checkpointing": c.activation_checkpointing,
                    "precision": c.precision,
                },
                memory_gib=None if p is None else p.memory_gib.total,
            )
            row += [seq, tps, c]
        rows.append(row)
    stretch = plan_at("llama-3.1-70b", 32768, args.instance, None)
    emit(
        "envelope.stretch.llama-3.1-70b.32768.memory_gib",
        stretch.memory_gib.total,
        "GiB",
        reference=stretch.memory_gib.usable,
        feasible=stretch.feasible,
        config=stretch.config.model_dump(),
        tokens_per_s_per_gpu=stretch.throughput.tokens_per_s_per_gpu,
    )
    for name in names:
        for seq in (32768, 65536, 131072):
            if seq > PRESETS[name].max_seq_len:
                continue
            r = offload_comparison(name, seq, args.instance)
            if r is not None:
                gain = (r["chosen_step_s"] / r["offload_step_s"] - 1) if r["possible"] else None
                emit(
                    f"offload.{name}.{seq}.gain_vs_plan",
                    gain,
                    "fraction",
                    **{k: v for k, v in r.items() if k != "chosen"},
                    plan_cp=r.get("chosen", {}).get("cp_degree"),
                )
    if args.markdown:
        print(_table(rows), file=sys.stderr)
    return 0


def _cell(seq: int, limit: int, tps: float | None, c) -> str:
    if not seq:
        return "does not fit at 1,024"
    mark = " (limit)" if seq == limit else ""
    how = f"{c.activation_checkpointing}, {c.precision}" + (
        f", cp {c.cp_degree}" if c.cp_degree > 1 else ""
    )
    return f"{seq:,}{mark}: {tps:,.0f} tok/s ({how})"


def _table(rows) -> str:
    out = ["| preset | max_seq_len | longest without CP | longest with CP |", "|---|---|---|---|"]
    for name, limit, s1, t1, c1, s2, t2, c2 in rows:
        out.append(
            f"| {name} | {limit:,} | {_cell(s1, limit, t1, c1)} | {_cell(s2, limit, t2, c2)} |"
        )
    return "\n".join(out)


#: Host link per GPU for activation offloading: PCIe Gen5 x16, 64 GB/s per direction, of which
#: ~50 GB/s is achieved by pinned-memory copies with all 8 GPUs copying at once (an assumption:
#: not measured on p6-b200; the conclusion holds up to ~3x more, see docs/planner.md).
PCIE_GB_S = 50.0


def offload_comparison(model: str, seq: int, instance: str) -> dict | None:
    """The planner's choice (CP searched) against no CP + no checkpointing + offloading the
    activations that do not fit to host memory: the PCIe time per micro-batch (out in forward,
    back in backward), hidden under that micro-batch's compute where it can be, added where not.
    None when no checkpointing already fits without CP (nothing to offload)."""
    from blackwell_sm.hardware import get_instance
    from blackwell_sm.planner.frame import context
    from blackwell_sm.planner.memory import GIB
    from blackwell_sm.planner.search import Candidate, evaluate, usable_bytes
    from blackwell_sm.spec import parse_spec

    chosen = plan_at(model, seq, instance, None)
    if not chosen.feasible:
        return None
    c = chosen.config
    spec = parse_spec(
        {
            "model": model,
            "training": {"seq_len": seq},
            "compute": {"instance_type": instance, "instance_count": 1},
        }
    )
    ctx = context(spec, get_instance(instance))[0]
    world = ctx.instance.gpus_per_instance
    ga = max(1, ctx.global_batch_seqs // world)
    cand = Candidate(1, world, 1, 1, ga, c.precision, "none", c.compile, True, 1)
    e = evaluate(ctx, cand)
    over = e.mem.total - usable_bytes(ctx.instance)
    if over <= 0:
        return None
    host = ctx.instance.host_memory_gib * GIB / world  # each GPU's share of the host's memory
    if over > e.mem.activations or over > 0.8 * host:  # the rest: data, pinned buffers, the OS
        return {"offload_gib": over / GIB, "possible": False}
    transfer = 2 * over / (PCIE_GB_S * 1e9)
    per_mb_compute = e.time.compute_s / ga
    step = e.time.step_s + ga * max(0.0, transfer - per_mb_compute)
    return {
        "offload_gib": over / GIB,
        "possible": True,
        "transfer_s_per_mb": transfer,
        "compute_s_per_mb": per_mb_compute,
        "offload_step_s": step,
        "chosen_step_s": chosen.throughput.step_time_s,
        "chosen": c.model_dump(),
        "offload_faster": step < chosen.throughput.step_time_s,
    }


if __name__ == "__main__":
    raise SystemExit(main())
