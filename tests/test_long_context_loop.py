"""The loop with the chunked loss and with context parallelism (issue 23), 2 gloo processes in
fp32 compute (the test hook BSM_TEST_FP32_COMPUTE), so that paths can be compared step for step:

- the chunked loss's losses equal the full-logits path's at every step;
- context parallelism (cp 2: both ranks share every sequence, FSDP over the same two ranks)
  trains to the same losses as plain FSDP over the same global batch;
- a checkpoint resumes across a change of loss path together with cp 1 -> 2, and across
  cp 2 -> 1: the resumed steps equal the uninterrupted run's.
"""

from __future__ import annotations

import pytest
from long_support import loop_runs_worker
from train_support import assert_same_losses, free_port, local_plan, spawn, train_losses

pytestmark = pytest.mark.slow

STEPS = 6
REL = 1e-5  # fp32, reduction order only
# The same 8 sequences per step: 2 ranks x micro-batch 2 x 2 accumulation, or (cp 2) one
# data-parallel rank x micro-batch 2 x 4 accumulation.
TRAINING = {
    "export_model": False,
    "checkpoint": {
        "interval_steps": 3,
        "interval_minutes": None,
        "keep_last": 3,
        "async_save": False,
    },
}


def _plan(loss: str, cp: int):
    t = {**TRAINING, "loss_impl": loss}
    ga = 2 * cp
    return local_plan(
        nproc=2,
        steps=STEPS,
        seq_len=32,
        micro_batch_size=2,
        grad_accum_steps=ga,
        training=t,
        cp_degree=cp,
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("long")
    d = {k: root / k for k in ("chunked", "full", "cp2", "to_full_cp2", "to_cp1")}
    ck = lambda name: str(d[name] / "checkpoints" / "step-00000003")  # noqa: E731
    jobs = [
        (_plan("chunked", 1).to_json(), str(d["chunked"]), None),
        (_plan("full-logits", 1).to_json(), str(d["full"]), None),
        (_plan("chunked", 2).to_json(), str(d["cp2"]), None),
        # resumed with the other loss path and cp 1 -> 2 at once, and cp 2 -> 1
        (_plan("full-logits", 2).to_json(), str(d["to_full_cp2"]), ck("chunked")),
        (_plan("chunked", 1).to_json(), str(d["to_cp1"]), ck("cp2")),
    ]
    spawn(loop_runs_worker, jobs, [free_port() for _ in jobs], tmp=root / "err")
    return {k: train_losses(v) for k, v in d.items()}


def test_chunked_loss_equals_the_full_logits_path_step_for_step(runs):
    assert sorted(runs["chunked"]) == list(range(1, STEPS + 1))
    assert_same_losses(runs["chunked"], runs["full"], range(1, STEPS + 1), REL)
    assert runs["chunked"][STEPS] < runs["chunked"][1]  # it trains


def test_context_parallel_run_equals_the_plain_one(runs):
    assert_same_losses(runs["cp2"], runs["chunked"], range(1, STEPS + 1), REL)


@pytest.mark.parametrize("resumed, source", [("to_full_cp2", "chunked"), ("to_cp1", "cp2")])
def test_resume_across_loss_path_and_cp_degree(runs, resumed, source):
    assert sorted(runs[resumed]) == list(range(4, STEPS + 1))  # resumed after step 3
    assert_same_losses(runs[resumed], runs[source], range(4, STEPS + 1), REL)
