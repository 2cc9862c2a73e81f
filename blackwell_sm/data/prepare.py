"""`bsm data prepare`: text or JSONL → token shards (the format in `data/shards.py`).

Tokenizers: the built-in byte-level one (ids 0-255 are the UTF-8 bytes; documents are separated
by id 0, the NUL byte, which text does not contain), or a Hugging Face `tokenizer.json` through
the `tokenizers` library (documents separated by its end-of-text token when it has one), whose
files are kept in `OUT/tokenizer/` (the export ships them beside the model).
The folder is written whole or not at all (`data/staging.py`), with `manifest.json`
(`data/manifest.py`). Imports numpy and tokenizers only: no torch, so it runs anywhere the
client runs.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import numpy as np

from blackwell_sm.atomic_write import write_text
from blackwell_sm.data.channel import file_sha256
from blackwell_sm.data.inputs import (
    check_inputs,
    check_regular,
    check_text,
    jsonl_records,
    read_text_file,
)
from blackwell_sm.data.manifest import (
    MANIFEST_FILE,
    MANIFEST_VERSION,
    Manifest,
    ShardInfo,
    TokenDtype,
)
from blackwell_sm.data.shards import ShardWriter, token_dtype
from blackwell_sm.data.staging import check_out, staged_dir
from blackwell_sm.data.tokenizer_files import TOKENIZER_FILES, tokenizer_sha256
from blackwell_sm.errors import MissingExtraError, SpecError
from blackwell_sm.output_place import read_files

__all__ = ["DEFAULT_SHARD_TOKENS", "TOKENIZER_DIR", "Manifest", "ShardInfo", "prepare"]

TOKENIZER_DIR = "tokenizer"  # under the output folder: the tokenizer that made the shards

DEFAULT_SHARD_TOKENS = 256 * 1024 * 1024
_EOS_NAMES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eot_id|>")


class ByteTokenizer:
    """UTF-8 bytes as token ids 0-255; NUL (0) ends a document."""

    name = "byte-level"
    vocab_size = 256
    eos_id = 0

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))


class HFTokenizer:
    """A Hugging Face `tokenizer.json` (the `tokenizers` library): the file, or a folder with it."""

    def __init__(self, path: Path) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError as e:
            raise MissingExtraError(e.name or "tokenizers", "--tokenizer") from e
        self.file = path / "tokenizer.json" if path.is_dir() else path
        check_regular(self.file, field="--tokenizer", what="tokenizer")  # never /dev/zero
        try:
            self._tok = Tokenizer.from_file(str(self.file))
        except Exception as e:  # the library raises a bare Exception on a bad file
            raise SpecError(f"cannot read tokenizer {self.file}: {e}", field="--tokenizer") from e
        self.name = str(path)
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        self.eos_name = next((n for n in _EOS_NAMES if self._tok.token_to_id(n) is not None), None)
        self.eos_id = None if self.eos_name is None else self._tok.token_to_id(self.eos_name)

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def save(self, folder: Path) -> None:
        """Its files into `folder`, loadable by `transformers.AutoTokenizer`: the tokenizer.json,
        the rest of a Hugging Face tokenizer folder when it came from one, else a minimal
        tokenizer_config.json (a fast tokenizer over the tokenizer.json)."""
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.file, folder / "tokenizer.json")
        if self.file.name == "tokenizer.json":
            for name in TOKENIZER_FILES:
                if name != "tokenizer.json" and (self.file.parent / name).is_file():
                    shutil.copyfile(self.file.parent / name, folder / name)
        if not (folder / "tokenizer_config.json").is_file():
            config: dict[str, str] = {"tokenizer_class": "PreTrainedTokenizerFast"}
            if self.eos_name is not None:
                config["eos_token"] = self.eos_name
            write_text(
                folder / "tokenizer_config.json", json.dumps(config, indent=2) + "\n", flag=None
            )


#: Tabular or binary formats that are not text documents (refused rather than tokenized whole).
NOT_TEXT = frozenset({".csv", ".tsv", ".parquet", ".arrow", ".json", ".xlsx", ".gz", ".zip"})


def iter_documents(path: Path) -> Iterator[str]:
    """Documents of a file: one per JSONL line (its `text` field), or the whole text file; each
    checked (`data/inputs.py`: UTF-8, strict JSON, no NUL), errors naming `file:line`."""
    suffix = path.suffix.lower()
    if suffix in NOT_TEXT:
        raise SpecError(
            f"{path}: a {suffix} file is not text; it would be tokenized as one document, "
            "separators and all",
            field="INPUT",
            hint="export the text column as .txt (one document per file) or .jsonl (a 'text' "
            "field per line)",
        )
    found = False
    if suffix in (".jsonl", ".ndjson"):
        for where, obj in jsonl_records(path):
            if not isinstance(obj.get("text"), str):
                raise SpecError(
                    f"{where}: each JSONL line needs a string field 'text'", field="INPUT"
                )
            found = True
            yield check_text(where, obj["text"])
    else:
        text = read_text_file(path)
        found = bool(text.strip())
        if found:
            yield text
    if not found:
        raise SpecError(
            f"{path} holds no text (it is empty or blank)",
            field="INPUT",
            hint="drop it from the inputs, or check that it is the file you meant",
        )


def shard_info(path: Path, tokens: int) -> ShardInfo:
    """The manifest entry of a shard just written."""
    return ShardInfo(
        file=path.name, tokens=tokens, bytes=path.stat().st_size, sha256=file_sha256(path)
    )


def prepare(
    inputs: list[Path],
    out_dir: Path,
    *,
    tokenizer: Path | None = None,
    shard_tokens: int = DEFAULT_SHARD_TOKENS,
    overwrite: bool = False,
) -> Manifest:
    """Tokenize `inputs` into shards of at most `shard_tokens` tokens; `out_dir` appears only
    when all is written (`data/staging.py`: a non-empty one is refused unless `overwrite`)."""
    check_inputs(inputs)
    check_out(out_dir, overwrite=overwrite, inputs=[*inputs, *read_files(tokenizer)])
    tok = HFTokenizer(tokenizer) if tokenizer else ByteTokenizer()
    for path in inputs:  # every input read and checked before any tokenising
        for _ in iter_documents(path):
            pass
    dtype = token_dtype(tok.vocab_size)
    with staged_dir(out_dir, overwrite=overwrite) as tmp:
        shards: list[ShardInfo] = []
        docs = 0
        # Streamed: one document in memory at a time, however long (shards.ShardWriter).
        writer: ShardWriter | None = None

        def close() -> None:
            nonlocal writer
            if writer is not None:
                done, writer = writer, None  # exited once, even when the exit fails
                done.__exit__(None, None, None)
                shards.append(shard_info(done.path, done.count))

        def write(ids: np.ndarray) -> None:
            nonlocal writer
            while ids.size:
                if writer is None:
                    writer = ShardWriter(tmp / f"shard-{len(shards):05d}.bin", dtype).__enter__()
                room = shard_tokens - writer.count
                writer.append(ids[:room])
                ids = ids[room:]
                if writer.count == shard_tokens:
                    close()

        try:
            for path in inputs:
                for text in iter_documents(path):
                    ids = tok.encode(text)
                    if tok.eos_id is not None:
                        ids.append(tok.eos_id)
                    write(np.asarray(ids, dtype=np.int64))
                    docs += 1
            close()
        finally:
            if writer is not None:  # an error mid-shard: no partial file left behind
                writer.__exit__(RuntimeError, None, None)
        tok_dir = tok_hash = None
        if isinstance(tok, HFTokenizer):
            # The tokenizer travels with the data it made (exported beside the model).
            tok.save(tmp / TOKENIZER_DIR)
            tok_dir, tok_hash = TOKENIZER_DIR, tokenizer_sha256(tmp / TOKENIZER_DIR)
        manifest = Manifest(
            manifest_version=MANIFEST_VERSION,
            tokenizer=tok.name,
            tokenizer_sha256=tok_hash,
            tokenizer_dir=tok_dir,
            vocab_size=tok.vocab_size,
            eos_id=tok.eos_id,
            dtype=cast(TokenDtype, dtype.name),
            documents=docs,
            tokens=sum(s.tokens for s in shards),
            shards=shards,
        )
        write_text(tmp / MANIFEST_FILE, manifest.model_dump_json(indent=2) + "\n", flag=None)
    return manifest
