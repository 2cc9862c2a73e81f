"""Epochs mean epochs (issue 37, item 3): when the planner changes the batch (3 nodes: 128 -> 144
sequences), the steps follow it, so `bsm plan` gives the same epochs on 1 and 3 nodes, says so
in the batch warning, and the container's check of the plan (launch/checks.py) accepts it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cli_support import run

from blackwell_sm.errors import SpecError
from blackwell_sm.launch.checks import check_plan
from blackwell_sm.planner.plan import Plan

EPOCHS, SEQUENCES, BATCH = 3, 50_000, 128


def _plan(tmp_path: Path, count: int) -> dict:
    spec = {
        "model": "llama-3.2-1b",
        "training": {
            "seq_len": 4096,
            "global_batch_seqs": BATCH,
            "epochs": EPOCHS,
            "data": {"sequences": SEQUENCES},
        },
        "compute": {"instance_type": "ml.p6-b200.48xlarge", "instance_count": count},
    }
    path = tmp_path / f"spec-{count}.yaml"
    path.write_text(yaml.safe_dump(spec))
    code, out, err = run("plan", str(path), "--output", "json")
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("count", [1, 3])
def test_the_same_epochs_on_1_and_3_nodes(tmp_path, count):
    plan = _plan(tmp_path, count)
    cfg, steps = plan["config"], plan["run"]["steps"]
    dp = count * 8 // cfg["cp_degree"]  # data-parallel ranks
    batch = cfg["micro_batch_size"] * cfg["grad_accum_steps"] * dp
    assert plan["run"]["tokens"] == steps * batch * 4096
    assert steps == -(-EPOCHS * SEQUENCES // batch)  # ceil: at least the epochs asked
    assert (steps - 1) * batch < EPOCHS * SEQUENCES <= steps * batch  # and not a step more
    if batch != BATCH:  # 3 nodes: 24 GPUs do not split 128; the warning says the epochs hold
        assert count == 3
        said = [w for w in plan["warnings"] if w.startswith(f"global batch is {batch}")]
        assert said and f"training.epochs {EPOCHS} kept: {steps:,} steps" in said[0]
    else:
        assert steps == -(-EPOCHS * SEQUENCES // BATCH)  # the spec's own 1,172
    check_plan(Plan.model_validate(plan), tmp_path / "plan.json")  # the container accepts it


def test_the_container_refuses_steps_that_break_the_epochs(tmp_path):
    plan = _plan(tmp_path, 3)
    plan["run"]["steps"] = -(-EPOCHS * SEQUENCES // BATCH)  # the old count: 3.375 epochs at 144
    plan["run"]["tokens"] = plan["run"]["steps"] * 144 * 4096
    with pytest.raises(SpecError, match=r"training\.epochs 3 over data\.sequences 50000") as e:
        check_plan(Plan.model_validate(plan), tmp_path / "plan.json")
    assert e.value.field == "run.steps"
