"""Bad data through the real commands: `bsm data prepare` (text, chat, prompt-completion) and
`bsm data verify`. Each case: exit 2, one JSON error object naming the file (and line, field or
byte), no traceback. Inputs are refused before any tokenising: a bad last line costs a read of
the file, not a pass of the tokenizer over it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_support import run


def refused(result: tuple[int, str, str], *texts: str) -> dict:
    code, out, err = result
    assert code == 2, (code, out, err)
    obj = json.loads(out)["error"]
    assert obj["exit_code"] == 2
    for t in texts:
        assert t in obj["message"], (t, obj["message"])
    assert "Traceback" not in err
    return obj


def prepare(tmp: Path, *inputs: Path, extra: tuple[str, ...] = ()) -> tuple[int, str, str]:
    return run(
        "data", "prepare", *map(str, inputs), "--out", str(tmp / "out"), *extra, "-o", "json"
    )


# -- text: bytes, JSON and documents ------------------------------------------------------------
def _write(name: str, data: bytes) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        (tmp / name).write_bytes(data)
        return tmp / name

    return make


TEXT_CASES: list[tuple[str, Callable[[Path], Path], list[str]]] = [
    ("latin1-text", _write("a.txt", b"line one\ncaf\xe9\n"), ["a.txt:2: not UTF-8: byte 0xe9"]),
    ("utf16-text", _write("a.txt", "hi".encode("utf-16")), ["a.txt:1: not UTF-8: byte 0xff"]),
    (
        "latin1-jsonl",
        _write("b.jsonl", b'{"text": "ok"}\n\n{"text": "caf\xe9"}\n'),
        ["b.jsonl:3: not UTF-8"],
    ),
    ("nul-text", _write("a.txt", b"one\ntwo\x00three\n"), ["a.txt:2: a NUL byte"]),
    (
        "nul-jsonl",
        _write("b.jsonl", b'{"text": "x"}\n{"text": "a\\u0000b"}\n'),
        ["b.jsonl:2: a NUL byte"],
    ),
    (
        "duplicate-key",
        _write("b.jsonl", b'{"text": "a", "text": "b"}\n'),
        ["b.jsonl:1", "duplicate key 'text'"],
    ),
    ("nan", _write("b.jsonl", b'{"text": "a", "w": NaN}\n'), ["b.jsonl:1", "NaN is not JSON"]),
    ("array-line", _write("b.jsonl", b'["text"]\n'), ["b.jsonl:1: expected a JSON object"]),
    ("number-text", _write("b.jsonl", b'{"text": 5}\n'), ["b.jsonl:1: each JSONL line needs"]),
    (
        "huge-int",
        _write("b.jsonl", b'{"text": "a", "n": ' + b"9" * 40 + b"}\n"),
        ["b.jsonl:1", "integer with 40 digits"],
    ),
]


@pytest.mark.parametrize(
    ("make", "expected"), [c[1:] for c in TEXT_CASES], ids=[c[0] for c in TEXT_CASES]
)
def test_bad_text_input_is_refused_naming_file_and_line(tmp_path, make, expected):
    refused(prepare(tmp_path, make(tmp_path)), *expected)
    assert not (tmp_path / "out").exists()


def test_a_bad_last_line_is_found_before_anything_is_tokenised(tmp_path, monkeypatch):
    from blackwell_sm.data import prepare as prep

    calls = []
    monkeypatch.setattr(prep.ByteTokenizer, "encode", lambda self, t: calls.append(t) or [1])
    big = tmp_path / "big.jsonl"
    big.write_text('{"text": "a document"}\n' * 20000 + '{"text": "broken"\n')
    refused(prepare(tmp_path, big), "big.jsonl:20001", "is not valid JSON")
    assert calls == []


@pytest.mark.parametrize(
    ("target", "expected"),
    [("dir", "is a folder; expected a regular file"), ("/dev/null", "not a regular file")],
)
def test_an_input_that_is_not_a_regular_file_is_refused(tmp_path, target, expected):
    path = tmp_path if target == "dir" else Path(target)
    refused(prepare(tmp_path, path), expected)


@pytest.mark.parametrize("fmt", ["text", "chat"])
@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_a_tokenizer_that_is_not_a_regular_file_is_refused_before_reading(tmp_path, fmt, kind):
    src = tmp_path / "in.jsonl"
    src.write_text(
        '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", '
        '"content": "yes"}]}\n'
    )
    tok = Path("/dev/zero")
    if kind == "fifo":
        tok = tmp_path / "tokenizer.json"
        os.mkfifo(tok)  # opening it for reading would block: it must never be opened
    extra = ("--tokenizer", str(tok), "--format", fmt) + (
        ("--seq-len", "16") if fmt == "chat" else ()
    )
    refused(prepare(tmp_path, src, extra=extra), str(tok), "not a regular file")


# -- fine-tuning samples --------------------------------------------------------------------
@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory) -> Path:
    from hf_support import save_tiny_tokenizer

    folder = tmp_path_factory.mktemp("tok")
    save_tiny_tokenizer(folder)
    return folder


def _chat(*messages: tuple[str, str], **extra: object) -> str:
    return json.dumps({"messages": [{"role": r, "content": c} for r, c in messages], **extra})


GOOD = _chat(("user", "hi"), ("assistant", "yes"))
CHAT_CASES: list[tuple[str, str, str, list[str]]] = [
    (
        "unknown-role",
        "chat",
        _chat(("user", "hi"), ("narrator", "no"), ("assistant", "yes")),
        ["s.jsonl:2: messages.1.role 'narrator' is not one of system, user, assistant, tool"],
    ),
    (
        "capital-role",
        "chat",
        _chat(("User", "hi"), ("assistant", "yes")),
        ["s.jsonl:2: messages.0.role 'User'"],
    ),
    (
        "extra-key",
        "chat",
        json.dumps(
            {
                "messages": [
                    {"role": "user", "content": "hi", "name": "x"},
                    {"role": "assistant", "content": "yes"},
                ]
            }
        ),
        ["s.jsonl:2: messages.0: unknown key(s) name"],
    ),
    (
        "nul-content",
        "chat",
        _chat(("user", "h\0i"), ("assistant", "yes")),
        ["s.jsonl:2: messages.0.content: a NUL byte"],
    ),
    ("duplicate-messages", "chat", '{"messages": [], "messages": []}', ["duplicate key"]),
    ("no-assistant", "chat", _chat(("user", "hi")), ["s.jsonl:2: no assistant turn"]),
    (
        "number-completion",
        "prompt-completion",
        '{"prompt": "hi", "completion": 3}',
        ["s.jsonl:2: --format prompt-completion needs string fields"],
    ),
]


@pytest.mark.parametrize(
    ("fmt", "line", "expected"), [c[1:] for c in CHAT_CASES], ids=[c[0] for c in CHAT_CASES]
)
def test_bad_samples_are_refused_naming_file_and_line(tmp_path, tok_dir, fmt, line, expected):
    good = GOOD if fmt == "chat" else '{"prompt": "hi", "completion": "yes"}'
    src = tmp_path / "s.jsonl"
    src.write_text(f"{good}\n{line}\n")
    extra = ("--tokenizer", str(tok_dir), "--format", fmt, "--seq-len", "16")
    refused(prepare(tmp_path, src, extra=extra), *expected)


def test_too_long_samples_are_named(tmp_path, tok_dir):
    """Cut samples are named in a warning; if every sample lost all its loss tokens, the error
    names them (not just "no sample with a token to learn from")."""
    src = tmp_path / "s.jsonl"
    long = _chat(("user", "hi " * 40), ("assistant", "yes"))
    src.write_text(f"{long}\n")
    extra = ("--tokenizer", str(tok_dir), "--format", "chat", "--seq-len", "16")
    refused(
        prepare(tmp_path, src, extra=extra),
        "no sample with a token to learn from",
        "longer than --seq-len 16: ",
        "s.jsonl:1 (",
    )
    src.write_text(f"{GOOD}\n{long}\n{GOOD}\n")
    code, _out, err = prepare(tmp_path, src, extra=extra)
    assert code == 0, err
    assert "warning: 1 sample(s) longer than --seq-len 16: " in err and "s.jsonl:2 (" in err


# -- bsm data verify: corrupt data is exit 2, and the fine-tuning manifest is checked --------
@pytest.fixture
def rows(tmp_path, tok_dir) -> Path:
    src = tmp_path / "s.jsonl"
    src.write_text("\n".join([GOOD] * 6) + "\n")
    out = tmp_path / "rows"
    code, _, err = run(
        "data",
        "prepare",
        str(src),
        "--out",
        str(out),
        "--tokenizer",
        str(tok_dir),
        "--format",
        "chat",
        "--seq-len",
        "16",
        "-o",
        "json",
    )
    assert code == 0, err
    code, out_json, err = run("data", "verify", str(out), "-o", "json")
    assert code == 0, err
    assert json.loads(out_json)["finetune_checked"]["sequences"] >= 1
    return out


MANIFEST_CASES: list[tuple[str, Callable[[dict], None], list[str]]] = [
    ("vocab-zero", lambda m: m.update(vocab_size=0), ["(vocab_size: Input should be greater"]),
    (
        "tokens-bool",
        lambda m: m.update(documents=True),
        ["(documents: Input should be a valid int"],
    ),
    ("dtype", lambda m: m.update(dtype="int8"), ["(dtype: Input should be 'uint16' or 'uint32'"]),
    ("seq-len-text", lambda m: m.update(seq_len="16"), ["(seq_len: Input should be a valid int"]),
    ("seq-len-huge", lambda m: m.update(seq_len=1 << 40), ["(seq_len: Input should be less"]),
    ("format", lambda m: m.update(format="bsm-tokens-v9"), ["(format: Input should be"]),
    ("data-format", lambda m: m.update(data_format="poems"), ["(data_format: Input should be"]),
    ("packing", lambda m: m.update(packing="zip"), ["(packing: Input should be 'pack' or 'pad'"]),
    (
        "sequences",
        lambda m: m.update(sequences=m["sequences"] + 1),
        ["sequences", "+ one token per shard"],
    ),
    (
        "loss-tokens",
        lambda m: m.update(loss_tokens=m["loss_tokens"] + 1),
        ["loss_tokens", "the shards' flags mark"],
    ),
    ("eos", lambda m: m.update(eos_id=m["vocab_size"]), ["eos_id", "is not below vocab_size"]),
    ("negative-shard", lambda m: m["shards"][0].update(tokens=-1), ["(shards.0.tokens: Input"]),
    ("sha", lambda m: m["shards"][0].update(sha256="xyz"), ["(shards.0.sha256: String should"]),
]


@pytest.mark.parametrize(
    ("edit", "expected"), [c[1:] for c in MANIFEST_CASES], ids=[c[0] for c in MANIFEST_CASES]
)
def test_verify_refuses_a_manifest_field_out_of_bounds(rows, edit, expected):
    manifest = json.loads((rows / "manifest.json").read_text())
    edit(manifest)
    (rows / "manifest.json").write_text(json.dumps(manifest))
    refused(run("data", "verify", str(rows), "-o", "json"), "manifest.json", *expected)


def test_verify_refuses_rows_that_do_not_add_up(rows):
    """A fine-tuning shard whose length is not whole rows (its manifest entry edited to agree
    with the file, so only the row check can tell)."""
    from blackwell_sm.data.shards import read_tokens_and_flags, write_shard

    shard = rows / "shard-00000.bin"
    tokens, flags = read_tokens_and_flags(shard)
    write_shard(shard, tokens[:-3], dtype=tokens.dtype, flags=flags[:-3])
    manifest = json.loads((rows / "manifest.json").read_text())
    manifest["shards"][0].update(tokens=len(tokens) - 3, bytes=shard.stat().st_size)
    manifest["tokens"] -= 3
    (rows / "manifest.json").write_text(json.dumps(manifest))
    refused(run("data", "verify", str(rows), "--no-sha256", "-o", "json"), "manifest.json")


def test_verify_exits_2_on_a_flipped_byte(rows):
    shard = rows / "shard-00000.bin"
    raw = bytearray(shard.read_bytes())
    raw[40] ^= 1
    shard.write_bytes(bytes(raw))
    refused(run("data", "verify", str(rows), "-o", "json"), "shard-00000.bin: sha256 differs")
