"""blackwell_sm/data: the token shard format and `bsm data prepare` (no torch needed)."""

from __future__ import annotations

import json
from typing import NamedTuple

import numpy as np
import pytest
from cli_support import run
from click.testing import CliRunner

from blackwell_sm.cli import cli
from blackwell_sm.data.shards import HEADER_BYTES, MAGIC, read_shard, write_shard
from blackwell_sm.errors import BsmError, SpecError
from blackwell_sm.output_place import RECORD
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
    with pytest.raises(BsmError, match=r"t\.bin: longer than its header says: size 54 bytes"):
        read_shard(tmp_path / "t.bin")
    (tmp_path / "t.bin").write_bytes((tmp_path / "t.bin").read_bytes()[:40])
    with pytest.raises(BsmError, match=r"t\.bin: truncated: size 40 bytes, the header's 10 tokens"):
        read_shard(tmp_path / "t.bin")
    with pytest.raises(ValueError, match="does not fit"):
        write_shard(tmp_path / "u.bin", np.array([70000]), dtype=np.dtype(np.uint16))
    with pytest.raises(BsmError, match="empty does not exist"):
        ShardDataset(tmp_path / "empty", seq_len=4)
    (tmp_path / "empty").mkdir()
    with pytest.raises(BsmError, match=r"no token shards \(\*\.bin\) in .*empty \(it is empty\)"):
        ShardDataset(tmp_path / "empty", seq_len=4)


def test_bsm_data_prepare_text_and_jsonl(tmp_path):
    (tmp_path / "a.txt").write_text("hello world")
    (tmp_path / "b.jsonl").write_text('{"text": "doc one"}\n\n{"text": "é"}\n')
    out = tmp_path / "shards"
    r = CliRunner().invoke(
        cli,
        [
            "data",
            "prepare",
            str(tmp_path / "a.txt"),
            str(tmp_path / "b.jsonl"),
            "--out",
            str(out),
            "--shard-tokens",
            "1024",
            "-o",
            "json",
        ],
    )
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
    m = prepare(
        [tmp_path / "t.txt"],
        tmp_path / "out",
        tokenizer=tmp_path / "tokenizer.json",
        shard_tokens=100,
    )
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


class _Result(NamedTuple):
    exit_code: int
    stdout: str
    stderr: str


def _bsm(*args) -> _Result:
    return _Result(*run(*map(str, args)))


def _prepare(tmp_path, out, *extra) -> _Result:
    return _bsm(
        "data",
        "prepare",
        *sorted(tmp_path.glob("in-*")),
        "--out",
        out,
        "--shard-tokens",
        "1024",
        "-o",
        "json",
        *extra,
    )


def test_prepare_refuses_a_non_empty_out_unless_overwrite(tmp_path):
    (tmp_path / "in-a.txt").write_text("x" * 3000)
    out = tmp_path / "shards"
    assert _prepare(tmp_path, out).exit_code == 0
    assert len(list(out.glob("*.bin"))) == 3
    (tmp_path / "in-a.txt").write_text("y" * 100)  # fewer shards this time
    r = _prepare(tmp_path, out)
    assert r.exit_code == 2
    err = json.loads(r.stdout)["error"]
    assert err["field"] == "--out" and "manifest.json, shard-00000.bin" in err["message"]
    assert "--overwrite" in err["hint"]
    r = _prepare(tmp_path, out, "--overwrite")
    assert r.exit_code == 0, r.output
    # the old shards are gone with the old folder: nothing stale to train on
    assert sorted(p.name for p in out.iterdir()) == [RECORD, "manifest.json", "shard-00000.bin"]
    assert set(read_shard(out / "shard-00000.bin").tolist()) == {ord("y"), 0}
    # an empty folder is fine without --overwrite, and a file is refused
    (tmp_path / "empty").mkdir()
    assert _prepare(tmp_path, tmp_path / "empty").exit_code == 0
    (tmp_path / "f").write_text("")
    r = _prepare(tmp_path, tmp_path / "f", "--overwrite")
    assert r.exit_code == 2 and "not a folder" in r.stdout
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_prepare_failing_mid_way_leaves_nothing_behind(tmp_path):
    (tmp_path / "in-a.txt").write_text("good text " * 300)  # shards get written first
    (tmp_path / "in-b.jsonl").write_text('{"text": "fine"}\n{"text": 3}\n')
    out = tmp_path / "new" / "deeper" / "shards"
    r = _prepare(tmp_path, out)
    assert r.exit_code == 2 and "in-b.jsonl:2" in r.stdout
    assert not (tmp_path / "new").exists()  # not even the parents it made
    # over an existing folder with --overwrite: the old data stays as it was
    (tmp_path / "in-b.jsonl").write_text('{"text": "fine"}\n')
    old = tmp_path / "old"
    assert _prepare(tmp_path, old).exit_code == 0
    before = {p.name: p.read_bytes() for p in old.iterdir()}
    (tmp_path / "in-b.jsonl").write_text("{not json\n")
    r = _prepare(tmp_path, old, "--overwrite")
    assert r.exit_code == 2 and "not valid JSON" in r.stdout
    assert {p.name: p.read_bytes() for p in old.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in-a.txt", "in-b.jsonl", "old"]


def _word_tokenizer(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    text = "the cat sat on the mat. " * 50
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([text], trainers.WordLevelTrainer(special_tokens=["<unk>", "</s>"]))
    (tmp_path / "tok").mkdir()
    tok.save(str(tmp_path / "tok" / "tokenizer.json"))
    return text, tok


def test_manifest_lists_sizes_hashes_and_the_tokenizer(tmp_path):
    import hashlib

    from blackwell_sm.data.manifest import MANIFEST_VERSION, load_manifest
    from blackwell_sm.data.prepare import prepare
    from blackwell_sm.data.tokenizer_files import tokenizer_sha256

    text, _ = _word_tokenizer(tmp_path)
    (tmp_path / "t.txt").write_text(text)
    m = prepare(
        [tmp_path / "t.txt"], tmp_path / "out", tokenizer=tmp_path / "tok", shard_tokens=100
    )
    assert m == load_manifest(tmp_path / "out") and m.manifest_version == MANIFEST_VERSION == 2
    for s in m.shards:
        raw = (tmp_path / "out" / s.file).read_bytes()
        assert s.bytes == len(raw) and s.sha256 == hashlib.sha256(raw).hexdigest()
    assert m.tokenizer == str(tmp_path / "tok") and m.tokenizer_dir == "tokenizer"
    assert m.tokenizer_sha256 == tokenizer_sha256(tmp_path / "out" / "tokenizer")
    assert (tmp_path / "out/tokenizer/tokenizer.json").read_bytes() == (
        tmp_path / "tok/tokenizer.json"
    ).read_bytes()
    # the byte-level tokenizer has no files: nothing travels, no hash
    b = prepare([tmp_path / "t.txt"], tmp_path / "bytes")
    assert b.tokenizer == "byte-level" and b.tokenizer_dir is b.tokenizer_sha256 is None


def test_bsm_data_verify_finds_a_changed_byte(tmp_path):
    (tmp_path / "in-a.txt").write_text("abc " * 1000)
    out = tmp_path / "shards"
    assert _prepare(tmp_path, out).exit_code == 0
    r = _bsm("data", "verify", out, "--vocab-size", "256", "-o", "json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got["shards"] == 4 and got["tokens"] == 4001 and got["sha256_checked"] is True
    raw = bytearray((out / "shard-00001.bin").read_bytes())
    raw[-1] ^= 1  # same size, same header: only the hash can tell
    (out / "shard-00001.bin").write_bytes(bytes(raw))
    r = _bsm("data", "verify", out, "--no-sha256")
    assert r.exit_code == 0 and "sizes, headers OK" in r.stderr + r.stdout
    r = _bsm("data", "verify", out)
    assert r.exit_code == 2 and "shard-00001.bin: sha256 differs" in r.stderr
    r = _bsm("data", "verify", out, "--no-sha256", "--vocab-size", "98")
    assert (
        r.exit_code == 2 and "vocabulary of 256 tokens but the model's vocab_size is 98" in r.stderr
    )
    (out / "manifest.json").unlink()  # hand-made shards: the ids themselves are checked
    r = _bsm("data", "verify", out, "--vocab-size", "98")
    assert r.exit_code == 2
    assert (
        "shard-00000.bin: token id 98 (token 1) is not below the model's vocab_size 98" in r.stderr
    )


def test_staged_dir_refuses_an_out_another_writer_filled_meanwhile(tmp_path):
    from blackwell_sm.data.staging import staged_dir

    out = tmp_path / "o"
    with pytest.raises(SpecError, match="is not empty"), staged_dir(out) as tmp:
        (tmp / "mine").write_text("new")
        out.mkdir()
        (out / "theirs").write_text("someone else's")
    assert [p.name for p in tmp_path.iterdir()] == ["o"]
    assert [p.name for p in out.iterdir()] == ["theirs"]
