"""train/guard.py: a non-finite step is skipped on every rank, and too many in a row stop the run
without saving the bad state (2 gloo processes; the NaN comes from the test-only hook
BSM_TEST_NAN_STEPS, which poisons rank 0's loss of the named steps)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from train_support import local_plan, spawn, train_worker

from blackwell_sm.opt_ml import ENV_TEST_NAN_STEPS
from blackwell_sm.records import read_metrics


def _records(root: Path) -> list[dict]:
    """metrics.jsonl as written (the file's own JSON, to check its format)."""
    path = root / "output/data/metrics.jsonl"
    return [json.loads(line, parse_constant=_refuse) for line in path.read_text().splitlines()]


def _refuse(word: str) -> None:
    raise AssertionError(f"metrics.jsonl holds {word}: not strict JSON")


@pytest.mark.slow
def test_one_nan_step_is_skipped_and_training_goes_on(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_TEST_NAN_STEPS, "3")
    plan = local_plan(
        steps=6,
        training={"checkpoint": {"interval_steps": 3, "keep_last": 2, "interval_minutes": None}},
    )
    root = tmp_path / "run"
    spawn(train_worker, plan.to_json(), str(root), tmp=tmp_path / "err")
    recs = _records(root)
    train = {r["step"]: r for r in recs if r["kind"] == "train"}
    bad = [r for r in recs if r["kind"] == "bad_step"]
    assert sorted(train) == [1, 2, 4, 5, 6]  # step 3 has no train record ...
    # ... but this, in strict JSON: the non-finite loss is null, named under non_finite
    assert [(r["step"], r["in_row"], r["loss"], r["non_finite"]) for r in bad] == [
        (3, 1, None, {"loss": "nan", "grad_norm": "nan"})
    ]
    assert all(math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) for r in train.values())
    [typed] = [r for r in read_metrics(root / "output/data/metrics.jsonl") if r.kind == "bad_step"]
    assert math.isnan(typed.loss) and typed.step == 3  # the reader gives the NaN back
    summary = json.loads((root / "output/data/summary.json").read_text())
    assert summary["status"] == "completed" and summary["final_step"] == 6
    out = (root / "stdout-rank0.log").read_text()
    assert "step 3: loss nan / grad norm nan is not finite; optimizer step skipped" in out
    # The interval save due right after the skipped step is dropped; the next ones are made.
    assert not (root / "checkpoints/step-00000003").exists()
    assert (root / "checkpoints/step-00000006/COMPLETE").is_file()


@pytest.mark.slow
def test_max_bad_steps_in_a_row_stop_the_run_without_a_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_TEST_NAN_STEPS, "all")
    plan = local_plan(
        steps=6,
        training={
            "max_bad_steps": 2,
            "checkpoint": {"interval_steps": 1, "keep_last": 2, "interval_minutes": None},
        },
    )
    root = tmp_path / "run"
    with pytest.raises(AssertionError) as info:
        spawn(train_worker, plan.to_json(), str(root), tmp=tmp_path / "err")
    msg = str(info.value)
    assert "2 steps in a row (steps 1..2) had a non-finite loss or gradient norm" in msg
    assert "training.max_bad_steps 2" in msg
    assert not list((root / "checkpoints").glob("step-*"))  # nothing saved from the bad state
    assert not (root / "output/data/summary.json").exists()
    bad = [r["step"] for r in _records(root) if r["kind"] == "bad_step"]
    assert bad == [1, 2]


def test_a_checkpoint_of_non_finite_weights_is_refused(tmp_path):
    import torch

    from blackwell_sm.errors import BsmError
    from blackwell_sm.train.checkpoint import Checkpointer
    from blackwell_sm.train.distributed import Env

    model = torch.nn.Linear(4, 4)
    opt = torch.optim.AdamW(model.parameters())
    env = Env(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
    ckpt = Checkpointer(tmp_path, env, keep_last=2, async_save=False)
    with torch.no_grad():
        model.weight[1, 2] = math.inf
    with pytest.raises(BsmError, match=r"refusing to save checkpoint step 7 .* not finite"):
        ckpt.save(model, opt, 7)
    assert list(tmp_path.iterdir()) == []


def test_bad_steps_that_are_not_in_a_row_never_add_up(tmp_path):
    """Good steps between bad ones reset the count: bad, good, bad, good, bad with
    max_bad_steps 2 trains on; two bad in a row then stop (a counter that never resets after a
    good step would stop at the second bad step)."""
    import torch

    from blackwell_sm.errors import BsmError
    from blackwell_sm.train.guard import NanGuard
    from blackwell_sm.train.metrics_log import MetricsLog

    log = MetricsLog(tmp_path, local_plan(), torch.device("cpu"), is_main=True)
    guard = NanGuard(2, rank=0, metrics=log, is_main=True)
    nan, one = torch.tensor(math.nan), torch.tensor(1.0)
    verdicts = [guard.step_ok(s, nan if s % 2 == 0 else one, one) for s in range(5)]
    assert verdicts == [False, True, False, True, False]
    assert [r.in_row for r in log.records if r.kind == "bad_step"] == [1, 1, 1]
    assert guard.total == 3 and guard.in_row == 1
    with pytest.raises(BsmError, match=r"2 steps in a row \(steps 5\.\.6\)"):
        guard.step_ok(5, one, nan)  # a non-finite gradient norm counts the same
