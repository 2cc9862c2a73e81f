"""Issue 15, part 3: a run that moves between hardware. 2 gloo processes, then 4, then 2 again
(another world size, shard degree and micro-batch layout each time, the same global batch),
each resuming from the newest complete checkpoint the previous one left. The resumed run's data
positions and learning rates equal an uninterrupted 2-process run's; its losses agree to
reduction-order tolerance. The run identity allows the topology change and still refuses
another run's checkpoint."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from train_support import local_plan, recording_worker, spawn

from blackwell_sm.train.checkpoint import other_run, run_identity

pytestmark = pytest.mark.slow

STEPS = 6
# 2 processes: micro-batch 2 x 4 accumulation x 2 ranks; 4 processes: 2 x 2 x 4. Both 16.
P2 = local_plan(nproc=2, steps=STEPS, micro_batch_size=2, grad_accum_steps=4)
P4 = local_plan(nproc=4, steps=STEPS, micro_batch_size=2, grad_accum_steps=2)


def _run(
    root: Path, plan, nproc: int, stop_after: int | None = None, seed_from: Path | None = None
):
    if seed_from is not None:  # the next job's /opt/ml/checkpoints, seeded from the same S3 prefix
        shutil.copytree(seed_from / "checkpoints", root / "checkpoints")
    spawn(recording_worker, plan.to_json(), str(root), stop_after, nproc=nproc, tmp=root / "err")
    return root


def _metrics(root: Path) -> dict[int, dict]:
    lines = (root / "output/data/metrics.jsonl").read_text().splitlines()
    return {r["step"]: r for r in map(json.loads, lines) if r["kind"] == "train"}


def _positions(root: Path) -> dict[int, list[int]]:
    """Step -> the sorted stream positions all ranks trained on."""
    out: dict[int, list[int]] = {}
    for f in root.glob("positions-rank*.json"):
        for step, pos in json.loads(f.read_text()).items():
            out.setdefault(int(step), []).extend(pos)
    return {s: sorted(p) for s, p in out.items()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    mk = tmp_path_factory.mktemp
    base = _run(mk("base"), P2, 2)
    first = _run(mk("first"), P2, 2, stop_after=2)  # stopped on 2 processes after step 2
    second = _run(mk("second"), P4, 4, stop_after=4, seed_from=first)  # 4 processes: 3..4
    third = _run(mk("third"), P2, 2, seed_from=second)  # back on 2: 5..6
    return base, first, second, third


def test_2_4_2_resume_equals_an_uninterrupted_run(runs):
    base, first, second, third = runs
    parts = {**_metrics(first), **_metrics(second), **_metrics(third)}
    whole = _metrics(base)
    assert sorted(_metrics(second)) == [3, 4] and sorted(_metrics(third)) == [5, 6]
    assert sorted(parts) == sorted(whole) == list(range(1, STEPS + 1))
    for step in whole:
        assert parts[step]["lr"] == whole[step]["lr"], step  # the schedule, exactly
        assert parts[step]["loss"] == pytest.approx(whole[step]["loss"], rel=1e-4, abs=1e-5), step
    # the data stream, position by position: every step trained on the same 16 sequences
    positions = {**_positions(first), **_positions(second), **_positions(third)}
    assert positions == _positions(base)
    assert all(len(p) == 16 for p in positions.values())
    # each job said where it resumed, and the markers record the world size that wrote them
    assert "resumed from step-00000002 at step 2" in (second / "stdout-rank0.log").read_text()
    assert "resumed from step-00000004 at step 4" in (third / "stdout-rank0.log").read_text()
    marker = json.loads((second / "checkpoints/step-00000004/COMPLETE").read_text())
    assert marker["world_size"] == 4 and marker["run"]["global_batch_sequences"] == 16
    summary = json.loads((third / "output/data/summary.json").read_text())
    assert summary["status"] == "completed" and summary["final_step"] == STEPS


def test_the_identity_allows_the_topology_change_and_refuses_another_run():
    assert P2.config != P4.config and run_identity(P2) == run_identity(P4)
    marker = {"run": run_identity(P2)}
    assert other_run(marker, run_identity(P4)) is None
    other_seed = local_plan(
        nproc=4, steps=STEPS, micro_batch_size=2, grad_accum_steps=2, training={"seed": 1234}
    )
    assert "seed: " in other_run(marker, run_identity(other_seed))
    # another global batch is another run: its data positions and schedule are not this one's
    bigger = local_plan(nproc=4, steps=STEPS, micro_batch_size=2, grad_accum_steps=4)
    assert "global_batch_sequences: 16 there, 32 in this plan" in other_run(
        marker, run_identity(bigger)
    )
