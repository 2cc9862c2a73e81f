"""What resume refuses, in-process (gloo, one rank; the launcher-level runs are in
tests/reliability/): a checkpoint file changed behind its marker (same size, other bytes: only
the sha256 sees it), and data changed behind an unchanged manifest (one token near a shard's
tail: only the identity's sample of the shard's end sees it), refused unless accepted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.distributed as dist

from blackwell_sm.data.prepare import prepare
from blackwell_sm.data.shards import HEADER_BYTES
from blackwell_sm.errors import BsmError
from blackwell_sm.train.checkpoint import MARKER, Checkpointer
from blackwell_sm.train.data import ShardDataset
from blackwell_sm.train.distributed import Env

ENV = Env(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
TEXT = "the cat sat on the mat and the dog ran fast. " * 1000  # 45,000 bytes: 3 shards


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory):
    """A gloo process group of this process alone (what Checkpointer's collectives need)."""
    store = tmp_path_factory.mktemp("pg") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _model() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 16))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, 16)).sum().backward()
    opt.step()
    return model, opt


def _channel(root: Path) -> Path:
    src, ch = root / "corpus.txt", root / "train"
    src.write_text(TEXT)
    prepare([src], ch, shard_tokens=16_384)
    return ch


def _change_token_near_the_tail(shard: Path, from_end: int) -> None:
    tokens = np.memmap(shard, dtype="<u2", mode="r+", offset=HEADER_BYTES)
    i = len(tokens) - from_end
    tokens[i] = tokens[i] ^ 1  # another byte value: in the vocabulary, same size
    tokens.flush()


def test_one_token_changed_near_a_shard_tail_changes_the_data_identity(tmp_path):
    ch = _channel(tmp_path)
    shards = sorted(ch.glob("*.bin"))
    assert len(shards) == 3 and shards[0].stat().st_size > 3 * 4096
    manifest = (ch / "manifest.json").read_bytes()
    before = ShardDataset(ch, seq_len=16).identity
    _change_token_near_the_tail(shards[0], from_end=100)
    after = ShardDataset(ch, seq_len=16).identity  # opens: sizes and manifest agree
    assert (ch / "manifest.json").read_bytes() == manifest
    assert {k for k in before if before[k] != after[k]} == {"sample_sha256"}


def test_a_resume_on_data_changed_behind_its_manifest_is_refused_unless_accepted(
    one_rank, tmp_path
):
    ch = _channel(tmp_path)
    before = {"train": ShardDataset(ch, seq_len=16).identity}
    model, opt = _model()
    Checkpointer(tmp_path / "ck", ENV, keep_last=2, async_save=False, data=before).save(
        model, opt, 3
    )
    _change_token_near_the_tail(sorted(ch.glob("*.bin"))[-1], from_end=7)
    after = {"train": ShardDataset(ch, seq_len=16).identity}

    def resume(accept: bool) -> tuple[Checkpointer, list[str], Any]:
        ckpt = Checkpointer(
            tmp_path / "ck",
            ENV,
            keep_last=2,
            async_save=False,
            data=after,
            accept_changed_data=accept,
        )
        logged: list[str] = []
        return ckpt, logged, ckpt.resume(model, opt, log=logged.append)

    with pytest.raises(BsmError) as e:
        resume(accept=False)
    assert e.value.code == "data_changed" and e.value.field == "training.data"
    assert "checkpoint step-00000003 in " in e.value.message
    assert "(data.train.sample_sha256: " in e.value.message
    assert "manifest_sha256" not in e.value.message  # the manifest did not change

    ckpt, logged, found = resume(accept=True)
    assert found == (3, tmp_path / "ck" / "step-00000003")
    assert any("resuming on changed data, accepted by" in m for m in logged), logged
    ckpt.save(model, opt, 4)
    (event,) = json.loads((tmp_path / "ck" / "step-00000004" / MARKER).read_text())["history"]
    assert event["event"] == "data_changed" and event["step"] == 3
    assert event["changes"][0].startswith("data.train.sample_sha256: ")


def test_a_checkpoint_file_changed_in_place_fails_its_sha256_and_is_set_aside(one_rank, tmp_path):
    """Same size, one byte flipped: only the marker's sha256 sees it; the checkpoint is set
    aside naming the file and the previous one loads, with the state it saved."""
    model, opt = _model()
    ckpt = Checkpointer(tmp_path, ENV, keep_last=3, async_save=False)
    ckpt.save(model, opt, 2)
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    model(torch.randn(4, 16)).sum().backward()
    opt.step()
    ckpt.save(model, opt, 4)
    shard = tmp_path / "step-00000004" / "__0_0.distcp"
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    shard.write_bytes(bytes(raw))

    logged: list[str] = []
    assert ckpt.resume(model, opt, log=logged.append) == (2, tmp_path / "step-00000002")
    (warning,) = [m for m in logged if "WARNING" in m]
    assert "step-00000004 failed to load (rank 0: __0_0.distcp: sha256 " in warning, warning
    assert (tmp_path / "step-00000004.corrupt-step-4").is_dir()
    assert all(torch.equal(v, saved[k]) for k, v in model.state_dict().items())
