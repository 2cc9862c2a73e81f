"""Advice worth taking (issue 37 item 5): under `--optimize cost` a cost difference inside the
prediction's cost range is a tie, which fewer nodes win, and the plan says the cost is flat; a
fine-tune's `precision: auto` is bf16 unless fp8 is asked for (or bf16 cannot fit, said)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from blackwell_sm.api.plan import plan
from blackwell_sm.planner.plan import Plan

P5 = "ml.p5.48xlarge"
CASES = [
    ("llama-3.1-70b", {}),
    ("llama-3.1-70b", {"instance_type": P5}),
    ("llama-3.1-70b", {"instance_type": P5, "seq_len": 32768}),
    ("codellama-34b", {"seq_len": 16384}),
]


def _plan(model: str, **kw: Any) -> Plan:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan(model, optimize="cost", allow_infeasible=True, **kw)
    assert isinstance(p, Plan)
    return p


@pytest.mark.parametrize(("model", "kw"), CASES, ids=[f"{m}-{k}" for m, k in CASES])
def test_cost_never_buys_nodes_with_a_saving_inside_the_range(model: str, kw: dict) -> None:
    """Every smaller count that fits costs more than the pick even at its range's low end."""
    p = _plan(model, instance_count="auto", **kw)
    assert p.feasible and p.run.cost_usd is not None
    for m in range(1, p.instance.count):
        fewer = _plan(model, instance_count=m, **kw)
        if fewer.memory_gib.total > (fewer.memory_gib.usable or fewer.memory_gib.limit):
            continue  # does not fit: not a choice
        assert fewer.run.cost_usd_range is not None
        low = fewer.run.cost_usd_range[0]
        assert p.run.cost_usd < low * 1.0001, (m, fewer.run.cost_usd, low, p.run.cost_usd)


def test_a_flat_cost_is_said_and_fewer_nodes_win() -> None:
    """The 70B preset: 1 node and the time objective's 46 cost about the same (inside the
    range): cost picks 1 and says the cost is flat across 1-46 instances."""
    p = _plan("llama-3.1-70b", instance_count="auto")
    other = p.other_objective
    assert p.instance.count == 1 and other is not None and other.instance_count > 1
    assert p.run.cost_usd_range and other.cost_usd is not None
    assert p.run.cost_usd_range[0] <= other.cost_usd <= p.run.cost_usd_range[1]
    flat = " ".join(p.summary().split())
    assert f"cost is flat across 1-{other.instance_count} instances" in flat
    why = " ".join(p.reasons)
    assert "inside the prediction's uncertainty" in why and "fewer nodes" in why


def test_a_fine_tune_keeps_bf16_unless_fp8_is_asked_for() -> None:
    """The same 70B run as a pretraining picks fp8 (faster), as a fine-tune keeps bf16 and says
    why and how to take fp8; asked for, fp8 it is."""
    pre = _plan("llama-3.1-70b")
    assert pre.config.precision in ("fp8", "mxfp8")
    tuned = _plan("llama-3.1-70b", **{"training.task": "finetune"})
    assert tuned.config.precision == "bf16"
    why = " ".join(r for r in tuned.reasons if r.startswith("precision"))
    assert "fine-tune" in why and "training.precision: fp8" in why
    asked = _plan("llama-3.1-70b", precision="fp8", **{"training.task": "finetune"})
    assert asked.config.precision == "fp8"


def test_a_fine_tune_takes_fp8_when_bf16_cannot_fit_and_says_so() -> None:
    """With no bf16 configuration fitting, a fine-tune's auto precision takes fp8 and says why
    (the precision step itself: no preset on a catalogued GPU is in that corner today)."""
    from blackwell_sm.planner.frame import frame
    from blackwell_sm.planner.precision import choose_precision
    from blackwell_sm.planner.table import Table
    from blackwell_sm.spec import parse_spec

    spec = parse_spec({"model": "llama-3.1-70b", "training": {"task": "finetune"}})
    problem = frame(spec, None, None)
    table = Table(problem.ctx, problem.pins)
    fp8 = min((e for e in table.evaluated(1, "fp8") if e.fits), key=lambda e: e.hours)
    ctx = problem.ctx
    bests = {"bf16": None, "fp8": fp8, "mxfp8": None}
    chosen, notes = choose_precision(ctx.model.spec, ctx.instance.gpu, bests, finetune=True)
    assert chosen == "fp8"
    assert "bf16 does not fit in memory" in notes[-1].text and "a fine-tune" in notes[-1].text
