"""The offload path in the loop (FSDP2's CPUOffloadPolicy, `training.pins.offload`), 2 gloo
processes in fp32 compute (the test hook BSM_TEST_FP32_COMPUTE): the losses equal the run
without offload step for step, and checkpoints are interchangeable both ways, each resume
continuing exactly as the uninterrupted run."""

from __future__ import annotations

import pytest
from long_support import loop_runs_worker
from train_support import assert_same_losses, free_port, local_plan, spawn, train_losses

pytestmark = pytest.mark.slow

STEPS = 4
REL = 1e-6  # fp32; the same unfused AdamW on the host either way
TRAINING = {
    "export_model": False,
    "checkpoint": {"interval_steps": 2, "interval_minutes": None, "keep_last": 2},
}


def _plan(offload: bool):
    p = local_plan(
        nproc=2,
        steps=STEPS,
        training={**TRAINING, "checkpoint": {**TRAINING["checkpoint"], "async_save": False}},
    )
    return p.model_copy(update={"config": p.config.model_copy(update={"offload": offload})})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("offload")
    d = {k: root / k for k in ("plain", "offload", "to_offload", "to_plain")}
    ck = lambda name: str(d[name] / "checkpoints" / "step-00000002")  # noqa: E731
    jobs = [
        (_plan(False).to_json(), str(d["plain"]), None),
        (_plan(True).to_json(), str(d["offload"]), None),
        (_plan(True).to_json(), str(d["to_offload"]), ck("plain")),
        (_plan(False).to_json(), str(d["to_plain"]), ck("offload")),
    ]
    spawn(loop_runs_worker, jobs, [free_port() for _ in jobs], tmp=root / "err")
    return {k: train_losses(v) for k, v in d.items()}


def test_offload_trains_to_the_same_losses(runs):
    assert sorted(runs["offload"]) == list(range(1, STEPS + 1))
    assert_same_losses(runs["offload"], runs["plain"], range(1, STEPS + 1), REL)
    assert runs["offload"][STEPS] < runs["offload"][1]


@pytest.mark.parametrize("resumed, source", [("to_offload", "plain"), ("to_plain", "offload")])
def test_checkpoints_are_interchangeable_and_resume_exactly(runs, resumed, source):
    assert sorted(runs[resumed]) == list(range(3, STEPS + 1))  # resumed after step 2
    assert_same_losses(runs[resumed], runs[source], range(3, STEPS + 1), REL)
