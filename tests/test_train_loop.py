"""The training loop end to end: 2 gloo processes on CPU, the tiny preset, token-shard channels.

The channels hold the learnable synthetic stream written as shards, so the real reader (memory
map, seeded order, disjoint ranks) is what feeds every run. Five short runs (module-scoped, each
shared by several assertions):
  base    - 10 steps, checkpoints every 4 (4, 8, final 10), validation every 5
  skip    - base's checkpoints with step 10's COMPLETE marker removed: set aside, resumes from 8
  stopped - SIGTERM reaches rank 0 during step 5: saves step 5 and stops cleanly; until then
            the same plan as base from nothing again (reproducibility)
  resumed - the stopped run started again: continues from 5 to the end
  single  - one process, micro-batch 4: the same global batch as base's 2 ranks x micro-batch 2;
            its capacity block "expires" as it starts: the check's ETA overruns it (an alert)
"""

from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from train_support import env_worker, local_plan, sigterm_worker, spawn, train_worker

from blackwell_sm.data.shards import write_shard
from blackwell_sm.metrics import METRIC_REGEXES, parse_line
from blackwell_sm.spec import get_preset
from blackwell_sm.train.data import SyntheticDataset
from blackwell_sm.train.export import load_exported
from blackwell_sm.train.model import Transformer

pytestmark = pytest.mark.slow

STEPS = 10
DATA = {
    "source": "channel",
    "train_channel": "train",
    "validation_channel": "validation",
    "validation_interval_steps": 5,
    "validation_steps": 2,
}
PLAN = local_plan(steps=STEPS, training={"data": DATA})


@pytest.fixture(scope="module")
def channels(tmp_path_factory) -> Path:
    """input/data/{train,validation}: the synthetic Markov stream as token shards."""
    root = tmp_path_factory.mktemp("channels")
    stream = SyntheticDataset(seq_len=PLAN.config.seq_len, vocab_size=256, seed=7)
    seqs = stream.batch(np.arange(440), seed=7)[:, :-1]
    (root / "train").mkdir()
    (root / "validation").mkdir()
    write_shard(root / "train/shard-00000.bin", seqs[:250].ravel(), dtype=np.dtype(np.uint16))
    write_shard(root / "train/shard-00001.bin", seqs[250:400].ravel(), dtype=np.dtype(np.uint16))
    write_shard(root / "validation/shard-00000.bin", seqs[400:].ravel(), dtype=np.dtype(np.uint16))
    return root


def _run(tmp: Path, fn=train_worker, *extra, plan=PLAN, nproc=2) -> Path:
    shutil.copytree(_CHANNELS[0], tmp / "input/data", dirs_exist_ok=True)
    spawn(fn, plan.to_json(), str(tmp), *extra, nproc=nproc, tmp=tmp / "errors")
    return tmp


_CHANNELS: list[Path] = []


@pytest.fixture(scope="module", autouse=True)
def _use_channels(channels):
    _CHANNELS[:] = [channels]


def _records(root: Path, kind: str = "train") -> list[dict]:
    lines = (root / "output/data/metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def _losses(root: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in _records(root)}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("base"))


@pytest.fixture(scope="module")
def skip(base, tmp_path_factory):
    root = tmp_path_factory.mktemp("skip")
    shutil.copytree(base / "checkpoints", root / "checkpoints")
    (root / "checkpoints/step-00000010/COMPLETE").unlink()
    return _run(root)


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("stopped"), sigterm_worker, 5)


@pytest.fixture(scope="module")
def resumed(stopped, tmp_path_factory):
    root = tmp_path_factory.mktemp("resumed")
    shutil.copytree(stopped / "checkpoints", root / "checkpoints")
    return _run(root)


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    plan = local_plan(nproc=1, steps=STEPS, micro_batch_size=4, training={"data": DATA})
    expiry = {"SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP": f"{time.time() + 1:.0f}"}
    return _run(tmp_path_factory.mktemp("single"), env_worker, expiry, plan=plan, nproc=1)


def test_loss_falls_on_the_learnable_task(base):
    losses = _losses(base)
    assert sorted(losses) == list(range(1, STEPS + 1))
    assert losses[1] == pytest.approx(math.log(256), abs=0.2)  # starts at chance
    assert losses[STEPS] < losses[1] - 0.8
    val = _records(base, "val")
    assert [v["step"] for v in val] == [5, 10]
    assert val[1]["loss"] < val[0]["loss"] < math.log(256) - 0.3


def test_run_is_reproducible(base, stopped):
    """The stopped run is base's plan started from nothing again: its steps are base's."""
    again = {r["step"]: (r["loss"], r["grad_norm"]) for r in _records(stopped)}
    assert sorted(again) == [1, 2, 3, 4, 5]
    first = {r["step"]: (r["loss"], r["grad_norm"]) for r in _records(base) if r["step"] <= 5}
    assert again == first  # exactly, not approximately


def test_checkpoints_are_complete_and_pruned(base):
    ck = base / "checkpoints"
    assert sorted(p.name for p in ck.iterdir()) == ["step-00000008", "step-00000010"]  # keep 2
    marker = json.loads((ck / "step-00000010/COMPLETE").read_text())
    assert marker["step"] == 10 and marker["world_size"] == 2
    files = sorted(p.name for p in (ck / "step-00000010").iterdir())
    assert {"COMPLETE", ".metadata", "__0_0.distcp", "__1_0.distcp", "rng"} <= set(files)
    rng = sorted(p.name for p in (ck / "step-00000010/rng").iterdir())
    assert rng == ["rank-00000.pt", "rank-00001.pt"]
    # The plan's checkpoint size (the container's disk preflight) is what DCP wrote, give or take
    # the ~1.5 KiB pickle header of each saved item (param, exp_avg, exp_avg_sq, step per tensor
    # per rank; 9 tensors a block + embedding, final norm, head): negligible at real sizes.
    written = sum(f.stat().st_size for f in (ck / "step-00000010").glob("__*_0.distcp"))
    predicted = PLAN.checkpoint.bytes_per_save
    items = 4 * (9 * PLAN.spec.model.n_layers + 3) * 2
    assert predicted <= written <= predicted + 2048 * items, (predicted, written)


def test_a_checkpoint_without_its_marker_is_set_aside_never_overwritten(base, skip):
    """Issue 37: a folder without its marker was skipped, and the run's own step 10 later written
    over it. Now it is named in a WARNING, set aside with its bytes as they were, and step 10 is
    saved anew beside it."""
    out = (skip / "stdout-rank0.log").read_text()
    assert "WARNING: checkpoint folder(s) without a COMPLETE marker" in out
    assert "step-00000010 (a save cut short" in out
    assert "resumed from step-00000008 at step 8" in out
    assert _losses(skip) == {s: v for s, v in _losses(base).items() if s > 8}
    kept, orig = (
        skip / "checkpoints/step-00000010.incomplete-step-10",
        base / "checkpoints/step-00000010",
    )
    files = sorted(str(p.relative_to(orig)) for p in orig.rglob("*") if p.is_file())
    assert all((kept / f).read_bytes() == (orig / f).read_bytes() for f in files if f != "COMPLETE")
    assert not (kept / "COMPLETE").exists() and (kept / "SET_ASIDE").is_file()
    assert (skip / "checkpoints/step-00000010/COMPLETE").is_file()  # the new save, beside it


def test_sigterm_saves_and_stops_cleanly(stopped):
    summary = json.loads((stopped / "output/data/summary.json").read_text())
    assert summary["status"] == "stopped (SIGTERM)" and summary["final_step"] == 5
    assert json.loads((stopped / "checkpoints/step-00000005/COMPLETE").read_text())["step"] == 5
    assert not (stopped / "model").exists()  # not exported: training is not finished


def test_the_log_records_each_launch_save_and_stop(base, stopped, skip):
    """start, save and stop records (records.py): the report reads saves from the log, not from
    the checkpoints still on disk (keep_last 2 of base's saves at 4, 8 and 10)."""
    from blackwell_sm.records import SaveRecord, StartRecord, StopRecord, read_metrics

    def events(root: Path) -> list:
        recs = read_metrics(root / "output/data/metrics.jsonl")  # and every record reads back
        return [r for r in recs if isinstance(r, (StartRecord, SaveRecord, StopRecord))]

    got = [(r.kind, r.step) for r in events(base)]
    assert got == [("start", 0), ("save", 4), ("save", 8), ("save", 10)]
    assert [r.checkpoint for r in events(base)[1:]] == [f"step-{s:08d}" for s in (4, 8, 10)]
    assert [(r.kind, r.step, getattr(r, "reason", None)) for r in events(stopped)] == [
        ("start", 0, None),
        ("save", 4, None),
        ("save", 5, None),
        ("stop", 5, "SIGTERM"),
    ]
    start = events(skip)[0]
    assert (start.step, start.resumed_from_step, start.checkpoint) == (8, 8, "step-00000008")
    assert start.world_size == 2


def test_resume_after_a_stop_equals_an_uninterrupted_run(base, stopped, resumed):
    assert _losses(stopped) == {s: v for s, v in _losses(base).items() if s <= 5}
    assert _losses(resumed) == {s: v for s, v in _losses(base).items() if s > 5}
    summary = json.loads((resumed / "output/data/summary.json").read_text())
    assert summary["status"] == "completed" and summary["resumed_from_step"] == 5


def test_metrics_lines_and_summary(base):
    out = (base / "stdout-rank0.log").read_text().splitlines()
    lines = [ln for ln in out if ln.startswith("[bsm-step]")]
    assert len(lines) == STEPS and not (base / "stdout-rank1.log").read_text().strip()
    parsed = parse_line(lines[-1])  # what SageMaker's metric definitions will read
    assert set(parsed) == {n for n in METRIC_REGEXES if n.startswith("train:")}  # eta_s too
    rec = _records(base)[-1]
    assert parsed["train:loss"] == pytest.approx(rec["loss"], rel=1e-5)
    assert [ln for ln in out if ln.startswith("[bsm-val]")][-1].startswith("[bsm-val] step=10")
    assert rec["memory_kind"] == "cpu_max_rss" and rec["mem_alloc_gib"] > 0
    assert 0 < rec["mfu"] < 1 and rec["tok_s_gpu"] > 0
    # MFU uses ModelSpec.flops_per_token over the plan's peak, as the planner does
    fpt = get_preset("tiny").flops_per_token(PLAN.config.seq_len)
    assert rec["mfu"] == pytest.approx(rec["tok_s_gpu"] * fpt / 0.1e12, rel=1e-9)
    summary = json.loads((base / "output/data/summary.json").read_text())
    assert summary["status"] == "completed" and summary["final_step"] == STEPS
    assert summary["predicted"]["tokens_per_s_per_gpu"] == PLAN.throughput.tokens_per_s_per_gpu
    assert summary["measured"]["tokens_per_s_per_gpu"] > 0
    assert summary["measured"]["memory_kind"] == "cpu_max_rss"


def test_check_line_then_the_eta_on_every_logged_step(base):
    """After 2 warm-up steps, 2 timed and 1 profiled: one [bsm-check] line after step 5, and
    every step line from then on carries eta_s (0 at the last step)."""
    from blackwell_sm.metrics import WARMUP_STEPS
    from blackwell_sm.train.check import PROFILE_STEPS

    at = WARMUP_STEPS + PROFILE_STEPS
    out = (base / "stdout-rank0.log").read_text().splitlines()
    checks = [ln for ln in out if ln.startswith("[bsm-check]")]
    assert len(checks) == 1 and checks[0].startswith(f"[bsm-check] step={at} ")
    parsed = parse_line(checks[0])
    assert parsed["check:tokens_per_s_per_gpu"] > 0 and parsed["check:step_time_s"] > 0
    assert parsed["check:predicted_tokens_per_s_per_gpu"] == PLAN.throughput.tokens_per_s_per_gpu
    assert "timing=cpu_profiler" in checks[0]
    etas = {r["step"]: r.get("eta_s") for r in _records(base)}
    assert all(etas[s] is None for s in range(1, at)) and etas[STEPS] == 0
    assert all(etas[s] > 0 for s in range(at, STEPS))
    assert etas[at] == pytest.approx(parsed["check:eta_s"], rel=1e-5)
    (rec,) = _records(base, "check")
    assert rec["step"] == at and rec["compute_s"] + rec["exposed_comm_s"] <= rec["step_time_s"]
    assert rec["exposed_comm_s"] > 0  # gloo's collectives are not all hidden on 2 CPU processes
    summary = json.loads((base / "output/data/summary.json").read_text())
    assert summary["check"]["tok_s_gpu"] == pytest.approx(rec["tok_s_gpu"])
    assert summary["eta"]["step"] == STEPS and summary["alerts"] == []


def test_an_eta_past_the_capacity_block_is_an_alert_with_what_to_do(single):
    out = (single / "stdout-rank0.log").read_text().splitlines()
    alerts = [ln for ln in out if ln.startswith("[bsm-alert]")]
    assert len(alerts) == 1 and alerts[0].startswith("[bsm-alert] step=5 kind=overrun")
    assert "capacity block expiry" in alerts[0] and "bsm plans extend" in alerts[0]
    assert parse_line(alerts[0])["alert:overrun_s"] > 0
    (rec,) = _records(single, "alert")
    assert rec["alert"] == "overrun" and rec["overrun_s"] > 0
    summary = json.loads((single / "output/data/summary.json").read_text())
    assert summary["eta"]["deadline"] == "capacity block expiry"
    assert summary["alerts"] == [rec] and summary["check"]["memory"] == "in_range"


def _checkpointed_model(step_dir: Path) -> Transformer:
    import torch.distributed.checkpoint as dcp

    model = Transformer(get_preset("tiny"), max_seq_len=PLAN.config.seq_len)
    state = {"model": model.state_dict()}
    dcp.load(state, checkpoint_id=str(step_dir))  # single process: DCP reshards to one rank
    model.load_state_dict(state["model"])
    return model


def test_export_holds_exactly_the_trained_weights(base):
    trained = _checkpointed_model(base / "checkpoints/step-00000010")
    exported = Transformer(get_preset("tiny"), max_seq_len=PLAN.config.seq_len)
    load_exported(exported, base / "model")
    tokens = torch.randint(
        0, 256, (2, PLAN.config.seq_len), generator=torch.Generator().manual_seed(0)
    )
    with torch.no_grad():
        assert torch.equal(trained(tokens), exported(tokens))
    for (n, a), (_, b) in zip(trained.named_parameters(), exported.named_parameters(), strict=True):
        assert torch.equal(a, b), n


def test_export_loads_in_transformers_with_the_same_logits(base):
    from transformers import LlamaForCausalLM

    ours = Transformer(get_preset("tiny"), max_seq_len=PLAN.config.seq_len)
    load_exported(ours, base / "model")
    hf = LlamaForCausalLM.from_pretrained(base / "model", torch_dtype=torch.float32)
    hf.eval()
    tokens = torch.randint(
        0, 256, (2, PLAN.config.seq_len), generator=torch.Generator().manual_seed(1)
    )
    with torch.no_grad():
        a, b = ours(tokens), hf(tokens).logits
    # both fp32 on CPU; differences are float reassociation only
    torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_loss_is_normalised_by_tokens_across_ranks_and_micro_batches(base, single):
    """2 ranks x 2 micro-batches x 2 sequences and 1 rank x 2 x 4 see the same 8 sequences per
    step, and the init does not depend on sharding: the runs agree up to bf16 rounding."""
    a, b = _losses(base), _losses(single)
    assert a[1] == pytest.approx(b[1], abs=2e-3)
    for s in a:
        assert a[s] == pytest.approx(b[s], abs=3e-2), s


def test_another_runs_checkpoint_is_refused(base, tmp_path):
    """SageMaker restores whatever the checkpoint S3 URI holds: a different seed must not resume."""
    shutil.copytree(base / "checkpoints", tmp_path / "checkpoints")
    other = local_plan(nproc=1, steps=STEPS, micro_batch_size=4, training={"data": DATA, "seed": 1})
    with pytest.raises(AssertionError, match=r"belongs to another run \(seed: 0 there, 1 in this"):
        _run(tmp_path, plan=other, nproc=1)
    assert not (tmp_path / "output/data/metrics.jsonl").exists()
