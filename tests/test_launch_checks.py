"""launch/checks.py on real plans: the planner's own plans pass (a batch it rounded included), an
edited plan fails naming the field, and the preflight measures what it says (no processes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from blackwell_sm.errors import BsmError, SpecError
from blackwell_sm.launch.checks import (
    ENV_TEST_FREE_BYTES,
    check_plan,
    checkpoint_bytes_per_host,
    preflight,
)
from blackwell_sm.planner.api import make_plan
from blackwell_sm.spec import parse_spec


def _plan(count: int, **training):
    spec = parse_spec(
        {
            "model": "llama-3.2-1b",
            "training": training,
            "compute": {"instance_type": "ml.p6-b200.48xlarge", "instance_count": count},
        }
    )
    return make_plan(spec)


@pytest.mark.parametrize(
    ("count", "training"),
    [
        (1, {}),
        (3, {}),
        (3, {"global_batch_seqs": 100}),
        (1, {"global_batch_tokens": 1_000_000, "seq_len": 3000}),
        (3, {"total_tokens": 4_000_000_001}),
    ],
)
def test_the_planners_plans_pass(count: int, training: dict) -> None:
    plan = _plan(count, **training)
    check_plan(plan, Path("plan.json"))  # 3 x 8 GPUs round 1024 or 100 sequences up: allowed


def test_a_rounded_batch_passes_only_as_the_planner_rounded_it() -> None:
    plan = _plan(3, global_batch_seqs=100)
    assert plan.config.global_batch_sequences == 120
    assert plan.has_note("batch_rounded")
    bad = plan.model_copy(update={"notes": [n for n in plan.notes if n.code != "batch_rounded"]})
    with pytest.raises(SpecError) as e:
        check_plan(bad, Path("plan.json"))
    assert "= 120 sequences per step, but the spec's global batch is 100" in e.value.message


def test_total_tokens_and_steps_must_agree() -> None:
    plan = _plan(1, total_tokens=4_000_000_001)
    run = plan.run.model_copy(update={"steps": plan.run.steps + 1})
    with pytest.raises(SpecError) as e:
        check_plan(plan.model_copy(update={"run": run}), Path("p.json"))
    assert e.value.field == "run.steps"
    assert "training.total_tokens 4000000001" in e.value.message


def test_preflight_measures_free_space_per_host(tmp_path: Path, monkeypatch) -> None:
    plan = _plan(3)
    per_host = checkpoint_bytes_per_host(plan)  # this host's shards: the planner's figure
    assert per_host / 2**30 == pytest.approx(plan.checkpoint.max_gib_per_host, abs=1e-3)
    monkeypatch.setenv(ENV_TEST_FREE_BYTES, str(per_host))
    lines = preflight(plan, tmp_path, "algo-2")
    assert "outputs writable" in lines[0]
    assert (tmp_path / "checkpoints").is_dir() and not list((tmp_path / "checkpoints").iterdir())
    monkeypatch.setenv(ENV_TEST_FREE_BYTES, str(per_host - 1))
    with pytest.raises(BsmError) as e:
        preflight(plan, tmp_path, "algo-2")
    assert e.value.message.startswith(f"host algo-2: {tmp_path / 'checkpoints'} has")
    assert f"({per_host:,} bytes)" in e.value.message
