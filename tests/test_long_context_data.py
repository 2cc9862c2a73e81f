"""Data at long context (issue 23): `bsm data prepare` and the reader at sequences of 128k
tokens and more, holding no more than a few sequences in memory (tracemalloc counts Python
objects and numpy buffers alike).

- pretraining prepare streams each document into the shards (`shards.ShardWriter`): its peak is
  a document's worth, not a shard's;
- fine-tuning rows come one at a time (`finetune.iter_rows`), whole rows of 131,072 tokens;
- the reader (`train/data.py`) reads a batch of 131,073-token rows from memory-mapped shards,
  with their loss masks and document ids, and the context-parallel shard of a row keeps the
  documents that cross its chunk edges.
"""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest

from blackwell_sm.data.finetune import Sample, iter_rows
from blackwell_sm.data.prepare import prepare
from blackwell_sm.data.shards import FLAG_LOSS, FLAG_START, ShardWriter, read_tokens_and_flags

SEQ = 131_072
MIB = 1 << 20


def _peak(fn):
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_pretraining_prepare_streams_documents_of_300k_tokens(tmp_path):
    """Eight documents take no more memory than one: one document is in flight at a time, never
    a shard's worth of ids (the old buffer of 2.4M ids was 19 MiB of pointers alone). The one
    thing that grows is the checksum's read of the finished shard (16 MiB blocks: 2.4 MB here)."""
    docs = [bytes([65 + i]) * 300_000 for i in range(8)]  # 2.4M tokens, all in one 2^22 shard
    peaks = {}
    for n in (1, 8):
        src = tmp_path / f"long{n}.jsonl"
        src.write_text("".join(json.dumps({"text": d.decode()}) + "\n" for d in docs[:n]))
        m, peaks[n] = _peak(
            lambda src=src, n=n: prepare([src], tmp_path / f"out{n}", shard_tokens=1 << 22)
        )
    assert [s.tokens for s in m.shards] == [8 * 300_001]
    shard_bytes = (tmp_path / "out8" / m.shards[0].file).stat().st_size
    assert peaks[8] < peaks[1] + shard_bytes + MIB, peaks
    flat = read_tokens_and_flags(tmp_path / "out8" / m.shards[0].file)[0]
    want = np.concatenate([np.frombuffer(d + b"\0", dtype=np.uint8) for d in docs])
    assert np.array_equal(flat, want)


def _samples(n: int, length: int):
    for i in range(n):
        toks = [(i * 7 + j) % 1000 for j in range(length)]
        yield Sample(toks, [0] * 10 + [1] * (length - 10))


def test_finetune_rows_of_128k_come_one_at_a_time():
    counts: dict[str, int] = {}
    rows = iter_rows(_samples(5, 50_000), SEQ, 0, "pack", counts)

    def first_two():
        return next(rows), next(rows)

    (r0, r1), peak = _peak(first_two)
    assert r0[0].shape == r1[0].shape == (SEQ,)
    # two samples per row (100k tokens), the rest padding: its own document, never a target
    assert int((r0[1] & FLAG_START > 0).sum()) == 3 and r0[1][100_000] == FLAG_START
    assert not (r0[1][100_000:] & FLAG_LOSS).any()
    assert peak < 16 * MIB, peak  # a row and a sample (~7 MiB as Python lists), not the set
    rest = list(rows)
    assert len(rest) == 1 and counts == {
        "rows": 3,
        "samples": 5,
        "truncated": 0,
        "dropped": 0,
        "loss_tokens": 5 * (50_000 - 10),
    }


def test_reader_at_131k_with_documents_across_cp_chunks(tmp_path):
    torch = pytest.importorskip("torch")
    from blackwell_sm.train.context_parallel import CpGroup
    from blackwell_sm.train.data import ShardDataset
    from blackwell_sm.train.loss import counted_targets

    rows = 3
    n = rows * SEQ + 1
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 50_000, n)
    flags = np.full(n, FLAG_LOSS, dtype=np.uint8)
    flags[rng.choice(n, 40, replace=False)] |= FLAG_START  # documents of ~10k tokens
    flags[:: SEQ // 4 + 5] |= FLAG_START
    ch = tmp_path / "ch"
    ch.mkdir()
    with ShardWriter(ch / "shard-00000.bin", np.dtype(np.uint16), flags=True) as w:
        for lo in range(0, n, 100_000):  # written piece by piece
            w.append(tokens[lo : lo + 100_000], flags[lo : lo + 100_000])
    data = ShardDataset(ch, SEQ, vocab_size=50_000)
    assert len(data) == rows

    (tok, mask, docs), peak = _peak(lambda: data.batch(np.arange(2), seed=0))
    assert tok.shape == mask.shape == docs.shape == (2, SEQ + 1)
    assert peak < 12 * MIB, peak  # 2 rows x 3 arrays x 1 MiB (int64) and their making
    assert (np.diff(docs, axis=1) >= 0).all()
    # context parallelism: each of 4 ranks keeps two chunks; the counted targets add up and a
    # document crossing a chunk edge keeps its id on both sides (masks use global ids)
    t, mk, d = (torch.from_numpy(a) for a in (tok, mask, docs))
    shares = [counted_targets(t, mk, d, cp=CpGroup(4, r)) for r in range(4)]
    assert sum(shares) == counted_targets(t, mk, d)
    edge = SEQ // 8  # the end of chunk 0 (rank 0) and the start of chunk 1 (rank 1)
    crossing = int((d[:, edge - 1] == d[:, edge]).sum())
    assert crossing >= 1
