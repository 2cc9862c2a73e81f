"""Calibration on this machine's own runs: two `bsm run-local` runs of the tiny model (different
batches) -> `bsm calibrate` -> a profile that predicts a third run (another sequence length and
batch) closer than the uncalibrated planner does. Three short runs, module-scoped (~15 s each on
2 cores). CI tolerance is generous (the machine is shared); the figure measured on a quiet machine
is in benchmarks/README.md ("What calibration buys").
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_support import bsm_json, run_local_process

from blackwell_sm.planner.profile import load_profile
from blackwell_sm.runs.calibrate import predict_with
from blackwell_sm.runs.calibrate_sources import run_rows

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
#: (name, seq_len, global batch): two to fit, the third to predict.
SHAPES = (("fit-a", 128, 8), ("fit-b", 128, 16), ("third", 96, 12))
STEPS = 10


def _spec(seq: int, batch: int) -> str:
    return (
        "model: tiny\ntraining:\n"
        f"  seq_len: {seq}\n  global_batch_seqs: {batch}\n  total_steps: {STEPS}\n"
        "  precision: bf16\n  activation_checkpointing: none\n"
        "  schedule: {warmup_steps: 2, decay: cosine, min_lr_ratio: 0.1}\n"
        "  checkpoint: {interval_steps: null, interval_minutes: null, keep_last: 1, "
        "async_save: false}\n"
        "  data: {source: synthetic}\n"
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("calib")
    out = {}
    for name, seq, batch in SHAPES:
        spec = root / f"{name}.yaml"
        spec.write_text(_spec(seq, batch))
        d = root / name
        proc = run_local_process(spec, d, timeout=240)
        assert proc.returncode == 0, proc.stderr[-4000:]
        out[name] = d
    return out


def test_a_profile_from_two_runs_predicts_a_third_better(runs, tmp_path):
    prof_path = tmp_path / "profile.yaml"
    res = bsm_json("calibrate", str(runs["fit-a"]), str(runs["fit-b"]), "--out", str(prof_path))
    assert {r["id"] for r in res["rows"]} == {str(runs["fit-a"]), str(runs["fit-b"])}
    profile = load_profile(prof_path)
    entry = profile.gpus["cpu"]
    assert "matmul_efficiency.bf16" in entry.fitted and entry.peak_tflops
    [third] = run_rows(runs["third"])
    measured = third.tokens_per_s_per_gpu
    before = abs(predict_with(None, third) / measured - 1)
    after = abs(predict_with(profile, third) / measured - 1)
    print(f"third run: uncalibrated error {before:.1%}, calibrated {after:.1%}")
    # CI tolerance: the three runs share 2 cores with the rest of the suite, which moves a CPU's
    # rate between runs (seen: 55% calibrated against 191% uncalibrated at full load); on a quiet
    # machine it is within 14% (benchmarks/README.md).
    assert after < before / 2
    assert after < 0.75
