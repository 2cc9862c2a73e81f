"""blackwell_sm/data: the token shard format and `bsm data prepare` (no torch needed)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from blackwell_sm.cli import cli
from blackwell_sm.data.shards import HEADER_BYTES, MAGIC, read_shard, write_shard
from blackwell_sm.errors import BsmError, SpecError
from blackwell_sm.train.data import ShardDataset


@pytest.mark.parametrize(("dtype", "top"), [(np.uint16, 65535), (np.uint32, 2**32 - 1)])
def test_shard_round_trip(tmp_path, dtype, top):
    tokens = np.array([0, 1, 2, top, 7], dtype=np.int64)
    path = tmp_path / "s.bin"
    write_shard(path, tokens, dtype=np.dtype(dtype))
    raw = path.read_bytes()
    assert raw[:8] == MAGIC
    assert int.from_bytes(raw[12:16], "little") == np.dtype(dtype).itemsize
    assert int.from_bytes(raw[16:24], "little") == len(tokens)
    assert len(raw) == HEADER_BYTES + len(tokens) * np.dtype(dtype).itemsize
    back = read_shard(path)
    assert back.dtype == np.dtype(dtype) and back.tolist() == tokens.tolist()


def test_shard_rejects_bad_files(tmp_path):
    (tmp_path / "junk.bin").write_bytes(b"not a shard at all, just bytes...")
    with pytest.raises(BsmError, match="not a blackwell_sm token shard"):
        read_shard(tmp_path / "junk.bin")
    write_shard(tmp_path / "t.bin", np.arange(10), dtype=np.dtype(np.uint16))
    with open(tmp_path / "t.bin", "ab") as f:
        f.write(b"\0\0")
    with pytest.raises(BsmError, match="size"):
        read_shard(tmp_path / "t.bin")
    with pytest.raises(ValueError, match="does not fit"):
        write_shard(tmp_path / "u.bin", np.array([70000]), dtype=np.dtype(np.uint16))
    with pytest.raises(BsmError, match="no token shards"):
        ShardDataset(tmp_path / "empty", seq_len=4)


def test_bsm_data_prepare_text_and_jsonl(tmp_path):
    (tmp_path / "a.txt").write_text("hello world")
    (tmp_path / "b.jsonl").write_text('{"text": "doc one"}\n\n{"text": "é"}\n')
    out = tmp_path / "shards"
    r = CliRunner().invoke(
        cli, ["data", "prepare", str(tmp_path / "a.txt"), str(tmp_path / "b.jsonl"),
              "--out", str(out), "--shard-tokens", "1024", "-o", "json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    manifest = json.loads(r.stdout)
    assert manifest["documents"] == 3 and manifest["vocab_size"] == 256
    tokens = read_shard(out / manifest["shards"][0]["file"]).tolist()
    expected = [*b"hello world", 0, *b"doc one", 0, *"é".encode(), 0]
    assert tokens == expected
    assert manifest["tokens"] == len(expected)
    # the channel reader accepts what prepare wrote
    assert len(ShardDataset(out, seq_len=4, vocab_size=256)) == (len(expected) - 1) // 4


def test_prepare_splits_shards_and_uses_a_hf_tokenizer(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from blackwell_sm.data.prepare import prepare

    text = "the cat sat on the mat. " * 50
    (tmp_path / "t.txt").write_text(text)
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([text], trainers.WordLevelTrainer(special_tokens=["<unk>", "</s>"]))
    tok.save(str(tmp_path / "tokenizer.json"))
    m = prepare([tmp_path / "t.txt"], tmp_path / "out", tokenizer=tmp_path / "tokenizer.json",
                shard_tokens=100)  # fmt: skip
    assert m.eos_id == tok.token_to_id("</s>") and m.vocab_size == tok.get_vocab_size()
    ids = np.concatenate([read_shard(tmp_path / "out" / s.file) for s in m.shards]).tolist()
    assert ids == [*tok.encode(text, add_special_tokens=False).ids, m.eos_id]
    assert [s.tokens for s in m.shards][:-1] == [100] * (len(m.shards) - 1)


def test_prepare_reports_bad_input(tmp_path):
    from blackwell_sm.data.prepare import prepare

    (tmp_path / "bad.jsonl").write_text('{"body": "no text field"}\n')
    with pytest.raises(SpecError, match="'text'"):
        prepare([tmp_path / "bad.jsonl"], tmp_path / "o")
    with pytest.raises(SpecError, match="not found"):
        prepare([tmp_path / "missing.txt"], tmp_path / "o")
    r = CliRunner().invoke(cli, ["data", "prepare", str(tmp_path / "x.txt"), "--out", "o"])
    assert r.exit_code != 0
