"""`bsm data prepare`: text or JSONL → token shards (the format in `data/shards.py`).

Tokenizers: the built-in byte-level one (ids 0-255 are the UTF-8 bytes; documents are separated
by id 0, the NUL byte, which text does not contain), or a Hugging Face `tokenizer.json` through
the `tokenizers` library (documents separated by its end-of-text token when it has one).
Imports numpy and tokenizers only: no torch, so it runs anywhere the client runs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from blackwell_sm.data.shards import FORMAT_NAME, token_dtype, write_shard
from blackwell_sm.errors import SpecError

DEFAULT_SHARD_TOKENS = 256 * 1024 * 1024
_EOS_NAMES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eot_id|>")


class ShardInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")
    file: str
    tokens: int
    sha256: str


class Manifest(BaseModel):
    """`manifest.json` beside the shards: what made them and what they hold."""

    model_config = ConfigDict(extra="forbid")
    format: str = FORMAT_NAME
    tokenizer: str
    vocab_size: int
    eos_id: int | None
    dtype: str
    documents: int
    tokens: int
    shards: list[ShardInfo]


class ByteTokenizer:
    """UTF-8 bytes as token ids 0-255; NUL (0) ends a document."""

    name = "byte-level"
    vocab_size = 256
    eos_id = 0

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))


class HFTokenizer:
    """A Hugging Face `tokenizer.json` (the `tokenizers` library)."""

    def __init__(self, path: Path) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError as e:
            raise SpecError(
                "--tokenizer needs the `tokenizers` package", field="--tokenizer",
                hint="pip install tokenizers",
            ) from e  # fmt: skip
        try:
            self._tok = Tokenizer.from_file(str(path))
        except Exception as e:  # the library raises a bare Exception on a bad file
            raise SpecError(f"cannot read tokenizer {path}: {e}", field="--tokenizer") from e
        self.name = f"tokenizer.json:{path.name}"
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        self.eos_id = next(
            (i for n in _EOS_NAMES if (i := self._tok.token_to_id(n)) is not None), None
        )

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids


def iter_documents(path: Path) -> Iterator[str]:
    """Documents of a file: one per JSONL line (its `text` field), or the whole text file."""
    if path.suffix in (".jsonl", ".ndjson"):
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise SpecError(f"{path}:{n}: not valid JSON ({e.msg})", field="INPUT") from e
                if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                    raise SpecError(
                        f"{path}:{n}: each JSONL line needs a string field 'text'", field="INPUT"
                    )
                yield obj["text"]
    else:
        yield path.read_text(encoding="utf-8")


def prepare(
    inputs: list[Path],
    out_dir: Path,
    *,
    tokenizer: Path | None = None,
    shard_tokens: int = DEFAULT_SHARD_TOKENS,
) -> Manifest:
    """Tokenize `inputs` into shards of at most `shard_tokens` tokens under `out_dir`."""
    missing = [str(p) for p in inputs if not p.is_file()]
    if missing:
        raise SpecError(f"input file(s) not found: {', '.join(missing)}", field="INPUT")
    tok = HFTokenizer(tokenizer) if tokenizer else ByteTokenizer()
    dtype = token_dtype(tok.vocab_size)
    out_dir.mkdir(parents=True, exist_ok=True)
    shards: list[ShardInfo] = []
    buf: list[int] = []
    docs = 0

    def flush(final: bool) -> None:
        while len(buf) >= shard_tokens or (final and buf):
            chunk, buf[:] = buf[:shard_tokens], buf[shard_tokens:]
            path = out_dir / f"shard-{len(shards):05d}.bin"
            write_shard(path, np.asarray(chunk), dtype=dtype)
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            shards.append(ShardInfo(file=path.name, tokens=len(chunk), sha256=digest))

    for path in inputs:
        for text in iter_documents(path):
            buf.extend(tok.encode(text))
            if tok.eos_id is not None:
                buf.append(tok.eos_id)
            docs += 1
            flush(final=False)
    flush(final=True)
    manifest = Manifest(
        tokenizer=tok.name,
        vocab_size=tok.vocab_size,
        eos_id=tok.eos_id,
        dtype=dtype.name,
        documents=docs,
        tokens=sum(s.tokens for s in shards),
        shards=shards,
    )
    (out_dir / "manifest.json").write_text(manifest.model_dump_json(indent=2) + "\n")
    return manifest
