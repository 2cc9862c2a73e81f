"""Bad data inputs through the real launcher (launcher -> torchrun -> worker, CPU, `tiny`).

Each case fails before step 0: exit != 0, no checkpoint, no step line, and an `output/failure`
that names the problem (and the file). One process per run (about 6 s each on a 2-core CPU:
the checks are per rank, the same on every rank); the same checks without the launcher, and a
folder without a manifest, are in `tests/test_train_data.py` and `tests/test_data.py`.
A good channel with a tokenizer trains, and the export carries the tokenizer `AutoTokenizer`
loads: the positive control that the suite's setup is sound.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from harness import STEP_LINE, OptMlHost, free_port, metric_records
from train_support import local_plan

from blackwell_sm.data.prepare import prepare
from blackwell_sm.data.shards import write_shard
from blackwell_sm.opt_ml import OptMl

pytestmark = pytest.mark.slow

PLAN = local_plan(
    nproc=1,
    steps=3,
    seq_len=16,
    micro_batch_size=1,
    grad_accum_steps=1,
    training={
        "data": {"source": "channel"},
        "checkpoint": {
            "interval_steps": 1,
            "interval_minutes": None,
            "keep_last": 2,
            "async_save": False,
        },
    },
)
TEXT = "the cat sat on the mat and the dog ran fast. " * 60  # 2700 bytes: 3 shards of 1024


def _prepared(ch: Path, tokenizer: Path | None = None) -> None:
    src = ch.parents[2] / "corpus.txt"  # beside input/, outside the channel
    src.write_text(TEXT)
    prepare([src], ch, tokenizer=tokenizer, shard_tokens=1024)


def _missing(ch: Path) -> None:
    pass


def _empty(ch: Path) -> None:
    ch.mkdir(parents=True)


def _bad_header(ch: Path) -> None:
    _prepared(ch)
    with open(ch / "shard-00001.bin", "r+b") as f:
        f.write(b"GARBAGE!")  # the size still matches the manifest: only the header tells


def _truncated(ch: Path) -> None:
    _prepared(ch)
    raw = (ch / "shard-00002.bin").read_bytes()
    (ch / "shard-00002.bin").write_bytes(raw[: len(raw) // 2])


def _out_of_range(ch: Path) -> None:
    ch.mkdir(parents=True)
    tokens = np.arange(2000) % 200
    tokens[1500] = 300  # the model's vocab_size is 256
    write_shard(ch / "shard-00000.bin", tokens, dtype=np.dtype(np.uint16))


def _stale(ch: Path) -> None:
    _prepared(ch)
    write_shard(ch / "shard-00007.bin", np.arange(4096) % 256, dtype=np.dtype(np.uint16))


CASES: list[tuple[str, Callable[[Path], None], str]] = [
    ("missing-channel", _missing, r"the channel folder .*/input/data/train does not exist"),
    ("empty-channel", _empty, r"no token shards \(\*\.bin\) in .*/train \(it is empty\)"),
    ("bad-header", _bad_header, r"shard-00001\.bin: not a blackwell_sm token shard"),
    ("truncated", _truncated, r"shard-00002\.bin: \d+ bytes, manifest\.json lists \d+ \(truncated"),
    (
        "out-of-range-id",
        _out_of_range,
        r"shard-00000\.bin: token id 300 \(token 1500\) is not below the model's vocab_size 256",
    ),
    (
        "stale-shard",
        _stale,
        r"not listed in manifest\.json: shard-00007\.bin \(stale shard from an earlier prepare\?\)",
    ),
]


@pytest.mark.parametrize(("make", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_data_fails_before_step_0_with_the_reason(tmp_path, make, expected):
    host = OptMlHost.create(tmp_path / "run", PLAN)
    make(OptMl(host.root).channel("train"))
    launch = host.start(port=free_port())
    rc = launch.wait(timeout=120)
    assert rc != 0, launch.tail()
    failure = host.failure()
    assert failure is not None, launch.tail()
    assert re.search(expected, failure), failure
    assert not STEP_LINE.search(launch.output)
    assert metric_records(host.root) == []
    assert list(OptMl(host.root).checkpoints.iterdir()) == []


def test_a_good_channel_trains_and_exports_its_tokenizer(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import AutoTokenizer

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([TEXT], trainers.WordLevelTrainer(special_tokens=["<unk>", "</s>"]))
    tok.save(str(tmp_path / "tokenizer.json"))
    host = OptMlHost.create(tmp_path / "run", PLAN)
    ch = OptMl(host.root).channel("train")
    src = tmp_path / "corpus.txt"
    src.write_text(TEXT * 2)
    prepare([src], ch, tokenizer=tmp_path, shard_tokens=100)
    launch = host.start(port=free_port())
    assert launch.wait(timeout=180) == 0, launch.tail()
    assert host.failure() is None
    assert [r["step"] for r in metric_records(host.root)] == [1, 2, 3]
    loaded = AutoTokenizer.from_pretrained(OptMl(host.root).model)
    ids = tok.encode("the dog sat", add_special_tokens=False).ids
    assert loaded("the dog sat", add_special_tokens=False)["input_ids"] == ids


def test_a_resume_on_changed_data_is_refused_unless_accepted(tmp_path):
    """The checkpoint records what the train channel was (its manifest's shard hashes, the
    tokenizer's identity, a sample of the bytes). Shards replaced between a stop and a resume:
    refused before step 0, naming what changed. With training.data.accept_changed_data the run
    resumes, says so, and the acceptance is in the next checkpoint's history."""
    import json
    import shutil

    from blackwell_sm.opt_ml import COMPLETE_MARKER

    host = OptMlHost.create(tmp_path / "run", PLAN)
    ch = OptMl(host.root).channel("train")
    _prepared(ch)
    first = host.start(port=free_port())
    assert first.wait(timeout=120) == 0, first.tail()

    shutil.rmtree(ch)
    other = tmp_path / "other.txt"
    other.write_text("a completely different corpus of words. " * 70)
    prepare([other], ch, shard_tokens=1024)
    refused = host.start(port=free_port())
    assert refused.wait(timeout=120) != 0
    failure = host.failure() or ""
    assert "checkpoint step-00000003 in " in failure, failure
    assert "was trained on other data than this run's (data.train.manifest_sha256: " in failure
    assert "data.train.sample_sha256: " in failure and "accept_changed_data" in failure
    assert not STEP_LINE.search(refused.output)

    accepting = local_plan(
        nproc=1,
        steps=5,
        seq_len=16,
        micro_batch_size=1,
        grad_accum_steps=1,
        training={
            "data": {"source": "channel", "accept_changed_data": True},
            "checkpoint": {
                "interval_steps": 1,
                "interval_minutes": None,
                "keep_last": 2,
                "async_save": False,
            },
        },
    )
    host2 = OptMlHost.create(tmp_path / "run", accepting)
    OptMl(host2.root).failure.unlink()
    resumed = host2.start(port=free_port())
    assert resumed.wait(timeout=120) == 0, resumed.tail()
    assert "resuming on changed data, accepted by training.data.accept_changed_data" in (
        resumed.output
    )
    assert "resumed from step-00000003 at step 3" in resumed.output
    assert sorted(resumed.losses()) == [4, 5]
    marker = json.loads(
        (OptMl(host2.root).checkpoints / "step-00000005" / COMPLETE_MARKER).read_text()
    )
    (event,) = marker["history"]
    assert event["event"] == "data_changed" and event["step"] == 3
    assert any(c.startswith("data.train.manifest_sha256: ") for c in event["changes"])
