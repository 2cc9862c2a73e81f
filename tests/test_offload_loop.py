"""The offload path in the loop (FSDP2's CPUOffloadPolicy, `training.pins.offload`), 2 gloo
processes in fp32 compute (the test hook BSM_TEST_FP32_COMPUTE): `bsm run-local` of a spec that
pins offload (the real launcher, the plan run-local makes) trains to the same losses as that plan
without offload, step for step, and checkpoints are interchangeable both ways, each resume
continuing exactly as the uninterrupted run."""

from __future__ import annotations

import json
import os

import pytest
import yaml
from cli_support import run_local_process
from long_support import loop_runs_worker
from train_support import assert_same_losses, free_port, local_plan, spawn, train_losses

from blackwell_sm.local import plan_local
from blackwell_sm.opt_ml import ENV_TEST_FP32_COMPUTE
from blackwell_sm.spec import load_spec

pytestmark = pytest.mark.slow

STEPS = 4
REL = 1e-6  # fp32; the same unfused AdamW on the host either way
TRAINING = {
    "export_model": False,
    "checkpoint": {"interval_steps": 2, "interval_minutes": None, "keep_last": 2},
}


def _spec_file(path):
    """What a user writes for the tiny plan of `local_plan`, offload pinned on."""
    p = local_plan(
        nproc=2,
        steps=STEPS,
        training={**TRAINING, "checkpoint": {**TRAINING["checkpoint"], "async_save": False}},
    )
    training = p.spec.training.model_dump(mode="json", exclude_unset=True)
    training["pins"] = {"micro_batch_size": 2, "grad_accum_steps": 2, "offload": True}
    path.write_text(yaml.safe_dump({"model": "tiny", "training": training}, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("offload")
    d = {k: root / k for k in ("plain", "offload", "to_offload", "to_plain")}
    spec = _spec_file(root / "offload.yaml")
    env = {**os.environ, ENV_TEST_FP32_COMPUTE: "1"}
    done = run_local_process(spec, d["offload"], env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    offload = plan_local(load_spec(spec), nproc=2)  # the plan run-local made
    assert offload.config.offload and json.loads((d["offload"] / "plan.json").read_text())[
        "config"
    ] == offload.config.model_dump(mode="json")
    plain = offload.model_copy(
        update={"config": offload.config.model_copy(update={"offload": False})}
    )
    ck = lambda name: str(d[name] / "checkpoints" / "step-00000002")  # noqa: E731
    jobs = [
        (plain.to_json(), str(d["plain"]), None),
        (offload.to_json(), str(d["to_offload"]), ck("plain")),
        (plain.to_json(), str(d["to_plain"]), ck("offload")),
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
