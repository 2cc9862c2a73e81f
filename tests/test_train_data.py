"""train/data.py: the data order over token shards and the synthetic stream (no torch needed)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from blackwell_sm.data.shards import write_shard
from blackwell_sm.errors import BsmError
from blackwell_sm.train.data import BatchLayout, ShardDataset, SyntheticDataset


def test_ranks_and_micro_batches_read_disjoint_positions():
    lay = BatchLayout(micro_batch_size=3, grad_accum_steps=2, dp_size=4, seq_len=8)
    seen = []
    for step in range(3):
        for m in range(2):
            for r in range(4):
                seen.extend(lay.positions(step, m, r).tolist())
    assert sorted(seen) == list(range(3 * lay.global_batch))  # disjoint and gap-free


def _dataset(tmp_path, seq_len=4):
    # two shards of different lengths; sequence i of a shard starts at i * seq_len
    write_shard(tmp_path / "a.bin", np.arange(0, 21), dtype=np.dtype(np.uint16))  # 5 seqs
    write_shard(tmp_path / "b.bin", np.arange(100, 113), dtype=np.dtype(np.uint16))  # 3 seqs
    return ShardDataset(tmp_path, seq_len=seq_len)


def test_shard_dataset_sequences_stay_within_a_shard(tmp_path):
    ds = _dataset(tmp_path)
    assert len(ds) == 8
    assert ds.sequence(0).tolist() == [0, 1, 2, 3, 4]
    assert ds.sequence(4).tolist() == [16, 17, 18, 19, 20]
    assert ds.sequence(5).tolist() == [100, 101, 102, 103, 104]
    assert ds.sequence(7).tolist() == [108, 109, 110, 111, 112]


def test_order_is_a_pure_function_of_seed_and_step(tmp_path):
    ds = _dataset(tmp_path)
    lay = BatchLayout(micro_batch_size=2, grad_accum_steps=1, dp_size=2, seq_len=4)
    # one epoch = 8 sequences = 2 steps: every sequence exactly once, in a seeded order
    firsts = [
        int(ds.batch(lay.positions(s, 0, r), seed=3)[i, 0])
        for s in (0, 1)
        for r in (0, 1)
        for i in (0, 1)
    ]
    assert sorted(firsts) == sorted(int(ds.sequence(i)[0]) for i in range(8))
    again = ShardDataset(tmp_path, seq_len=4)  # a "resumed" process: only step and seed known
    np.testing.assert_array_equal(
        ds.batch(lay.positions(5, 0, 1), seed=3), again.batch(lay.positions(5, 0, 1), seed=3)
    )
    orders = {tuple(ds.batch(np.arange(8), seed=s)[:, 0]) for s in range(4)}
    assert len(orders) > 1  # the seed changes the order
    # the next epoch is a different permutation of the same sequences
    e0, e1 = ds.batch(np.arange(8), seed=3)[:, 0], ds.batch(np.arange(8, 16), seed=3)[:, 0]
    assert sorted(e0) == sorted(e1) and list(e0) != list(e1)


def _prepared(tmp_path, text="abcdefgh" * 300):
    from blackwell_sm.data.prepare import prepare

    (tmp_path / "in.txt").write_text(text)
    return prepare([tmp_path / "in.txt"], tmp_path / "ch", shard_tokens=1024)


def test_manifest_vocab_larger_than_model_is_refused(tmp_path):
    _prepared(tmp_path)
    with pytest.raises(
        BsmError, match="vocabulary of 256 tokens but the model's vocab_size is 100"
    ):
        ShardDataset(tmp_path / "ch", seq_len=4, vocab_size=100)


def test_reader_reads_the_manifest_list_and_refuses_stale_shards(tmp_path):
    m = _prepared(tmp_path)
    ch = tmp_path / "ch"
    assert len(m.shards) == 3
    ds = ShardDataset(ch, seq_len=4, vocab_size=256)
    assert len(ds) == sum((s.tokens - 1) // 4 for s in m.shards)
    # an earlier prepare's shard left beside the new ones (the 96 % stale data)
    write_shard(ch / "shard-00007.bin", np.arange(50), dtype=np.dtype(np.uint16))
    write_shard(ch / "old.bin", np.arange(50), dtype=np.dtype(np.uint16))
    with pytest.raises(
        BsmError,
        match=r"2 shard file\(s\) not listed in manifest.json: "
        r"old.bin, shard-00007.bin \(stale shard from an earlier prepare\?\)",
    ):
        ShardDataset(ch, seq_len=4)
    (ch / "old.bin").unlink()
    (ch / "shard-00007.bin").unlink()
    # the manifest's order, not the names': listed order wins
    data = json.loads((ch / "manifest.json").read_text())
    data["shards"].reverse()
    (ch / "manifest.json").write_text(json.dumps(data))
    rev = ShardDataset(ch, seq_len=4)
    assert rev.sequence(0).tolist() == ds.sequence(len(ds) - (m.shards[2].tokens - 1) // 4).tolist()


def test_reader_refuses_a_missing_or_resized_listed_shard(tmp_path):
    _prepared(tmp_path)
    ch = tmp_path / "ch"
    raw = (ch / "shard-00001.bin").read_bytes()
    (ch / "shard-00001.bin").unlink()
    with pytest.raises(
        BsmError,
        match=r"1 shard file\(s\) listed in manifest.json are missing: "
        "shard-00001.bin",
    ):
        ShardDataset(ch, seq_len=4)
    (ch / "shard-00001.bin").write_bytes(raw[:-10])
    with pytest.raises(
        BsmError,
        match=rf"shard-00001.bin: {len(raw) - 10} bytes, manifest.json "
        rf"lists {len(raw)} \(truncated",
    ):
        ShardDataset(ch, seq_len=4)
    # a whole shard of another size, consistent in itself: the manifest still tells
    write_shard(ch / "shard-00001.bin", np.arange(10), dtype=np.dtype(np.uint16))
    with pytest.raises(BsmError, match=r"longer than prepared|truncated"):
        ShardDataset(ch, seq_len=4)


def test_old_manifests_read_newer_and_foreign_ones_are_refused(tmp_path):
    _prepared(tmp_path)
    ch = tmp_path / "ch"
    data = json.loads((ch / "manifest.json").read_text())
    # a version 1 manifest: no version, no sizes, no tokenizer identity
    v1 = {
        k: v
        for k, v in data.items()
        if k not in ("manifest_version", "tokenizer_sha256", "tokenizer_dir")
    }
    v1["shards"] = [{k: v for k, v in s.items() if k != "bytes"} for s in v1["shards"]]
    (ch / "manifest.json").write_text(json.dumps(v1))
    assert len(ShardDataset(ch, seq_len=4)) > 0
    write_shard(ch / "stale.bin", np.arange(50), dtype=np.dtype(np.uint16))
    with pytest.raises(BsmError, match=r"stale\.bin"):
        ShardDataset(ch, seq_len=4)
    (ch / "stale.bin").unlink()
    v1["shards"][0]["tokens"] += 1  # its header is the size check now; the count still tells
    v1["tokens"] += 1  # (the total must agree with the list, or the manifest itself is refused)
    (ch / "manifest.json").write_text(json.dumps(v1))
    with pytest.raises(BsmError, match=r"shard-00000\.bin: 1024 tokens, manifest\.json lists 1025"):
        ShardDataset(ch, seq_len=4)
    (ch / "manifest.json").write_text(json.dumps({**data, "manifest_version": 3}))
    with pytest.raises(BsmError, match="manifest_version 3 is not one this blackwell_sm reads"):
        ShardDataset(ch, seq_len=4)
    (ch / "manifest.json").write_text(json.dumps({"vocab_size": 50000}))
    with pytest.raises(BsmError, match=r"not a manifest written by `bsm data prepare` \(tokenizer"):
        ShardDataset(ch, seq_len=4)
    twice = {**data, "shards": [data["shards"][0], *data["shards"]]}
    (ch / "manifest.json").write_text(json.dumps(twice))
    with pytest.raises(BsmError, match=r"shards listed more than once: shard-00000\.bin"):
        ShardDataset(ch, seq_len=4)
    bad = {**data, "shards": [{**data["shards"][0], "file": "../../etc/passwd"}]}
    (ch / "manifest.json").write_text(json.dumps(bad))
    with pytest.raises(BsmError, match=r"shards\.0\.file"):
        ShardDataset(ch, seq_len=4)


def test_token_ids_are_checked_against_vocab_size_when_opened(tmp_path, monkeypatch):
    from blackwell_sm.data import channel

    monkeypatch.setattr(channel, "ID_CHUNK", 64)  # the offender in a later chunk
    tokens = np.arange(1000) % 200
    tokens[700] = 300
    tokens[900] = 400
    write_shard(tmp_path / "a.bin", np.arange(100), dtype=np.dtype(np.uint16))
    write_shard(tmp_path / "b.bin", tokens, dtype=np.dtype(np.uint16))
    assert len(ShardDataset(tmp_path, seq_len=4, vocab_size=401)) > 0
    with pytest.raises(
        BsmError,
        match=r"b\.bin: token id 300 \(token 700\) is not below the "
        "model's vocab_size 256",
    ):
        ShardDataset(tmp_path, seq_len=4, vocab_size=256)
    assert channel.first_out_of_range(np.array([5, 1, 9], dtype=np.uint32), 10) is None
    assert channel.first_out_of_range(np.array([], dtype=np.uint16), 10) is None


def test_a_tokenizer_folder_that_is_not_the_one_that_made_the_shards_is_refused(tmp_path):
    from hf_support import save_tiny_tokenizer

    from blackwell_sm.data.prepare import prepare

    save_tiny_tokenizer(tmp_path / "tok")
    (tmp_path / "in.txt").write_text("the cat sat on the mat " * 20)
    prepare([tmp_path / "in.txt"], tmp_path / "ch", tokenizer=tmp_path / "tok")
    ds = ShardDataset(tmp_path / "ch", seq_len=4, vocab_size=64)
    assert ds.tokenizer_dir == tmp_path / "ch" / "tokenizer"
    (tmp_path / "ch/tokenizer/tokenizer_config.json").write_text("{}")
    with pytest.raises(BsmError, match="tokenizer files differ from those that made the shards"):
        ShardDataset(tmp_path / "ch", seq_len=4)
    import shutil

    shutil.rmtree(tmp_path / "ch/tokenizer")
    with pytest.raises(BsmError, match="names the tokenizer folder tokenizer/, which is missing"):
        ShardDataset(tmp_path / "ch", seq_len=4)


def test_synthetic_stream_is_deterministic_and_learnable():
    ds = SyntheticDataset(seq_len=64, vocab_size=256, seed=1)
    a, b = ds.batch(np.arange(4), seed=1), SyntheticDataset(64, 256, 1).batch(np.arange(4), 1)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a[0], a[1])
    follows = np.mean(ds.table[a[:, :-1]] == a[:, 1:])
    assert follows > 0.8  # mostly the successor: a model can learn it


@pytest.mark.skipif(not os.environ.get("BSM_LONG"), reason="long mode: BSM_LONG=1 (writes 1 GiB)")
def test_open_time_check_cost(tmp_path, capsys):
    """The cost of the checks at open, recorded in docs/training-loop.md: the vocab check (one
    np.max per chunk of the memory map) and, for comparison, the sha256 it does not do."""
    import time

    from blackwell_sm.data.channel import file_sha256, open_channel
    from blackwell_sm.data.prepare import shard_info

    rng = np.random.default_rng(0)
    infos = []
    for k in range(4):  # 4 x 256 MiB of uint16 tokens
        path = tmp_path / f"shard-{k:05d}.bin"
        write_shard(path, rng.integers(0, 50000, 128 << 20), dtype=np.dtype(np.uint16))
        infos.append(shard_info(path, 128 << 20).model_dump())
    manifest = {
        "manifest_version": 2,
        "tokenizer": "t",
        "vocab_size": 50000,
        "eos_id": None,
        "dtype": "uint16",
        "documents": 1,
        "tokens": 4 * (128 << 20),
        "shards": infos,
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    size = sum(i["bytes"] for i in infos)
    open_channel(tmp_path, vocab_size=50000)  # warm the page cache: the figures are CPU cost
    t = time.perf_counter()
    open_channel(tmp_path, vocab_size=50000)
    check = size / (time.perf_counter() - t) / 1e6
    t = time.perf_counter()
    for i in infos:
        assert file_sha256(tmp_path / i["file"]) == i["sha256"]
    sha = size / (time.perf_counter() - t) / 1e6
    with capsys.disabled():
        print(f"\nopen with vocab check: {check:,.0f} MB/s; sha256: {sha:,.0f} MB/s")
    assert check > 5 * sha  # why the container checks ids at open and hashes only on request
