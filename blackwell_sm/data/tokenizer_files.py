"""A Hugging Face tokenizer's files: which they are, copying them, and their identity (a hash).

One home for the list, shared by `bsm data prepare` (the tokenizer travels beside the shards)
and the container's export (it is copied beside the model). Stdlib only.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

#: The files a Hugging Face tokenizer is saved as (whichever of them a folder has).
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
)


def tokenizer_files(folder: Path) -> list[Path]:
    """The tokenizer files present in `folder`, in `TOKENIZER_FILES` order."""
    return [folder / n for n in TOKENIZER_FILES if (folder / n).is_file()]


def copy_tokenizer(src: Path, out_dir: Path) -> list[Path]:
    """Copy a Hugging Face tokenizer's files from `src` into `out_dir`; returns those copied
    (none when `src` holds no tokenizer). One function for every exporter of a tokenizer."""
    copied = []
    for f in tokenizer_files(src):
        out_dir.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, out_dir / f.name)
        copied.append(out_dir / f.name)
    return copied


def tokenizer_sha256(folder: Path) -> str:
    """The identity of the tokenizer in `folder`: sha256 over each file's name and content."""
    return tokenizer_identity(read_tokenizer_files(folder))


def tokenizer_identity(files: dict[str, bytes]) -> str:
    """`tokenizer_sha256` of a tokenizer's files given as {name: content} (read from a folder,
    or from S3 at submit), taken in `TOKENIZER_FILES` order; other names are ignored."""
    h = hashlib.sha256()
    for name in TOKENIZER_FILES:
        if name in files:
            h.update(name.encode() + b"\0")
            h.update(hashlib.sha256(files[name]).digest())
    return h.hexdigest()


def vocab_identity(files: dict[str, bytes]) -> str | None:
    """What a token id means, as a hash: the token -> id table (and the added tokens' ids) of
    `tokenizer.json`, else of `vocab.json`, else the `tokenizer.model` bytes; None when none is
    there or it does not parse. Unlike `tokenizer_identity` it survives a re-save of the same
    tokenizer (`save_pretrained` rewrites its files, and the merges' layout changed across
    `tokenizers` versions)."""
    import json

    try:
        if "tokenizer.json" in files:
            data = json.loads(files["tokenizer.json"])
            added = sorted((t["id"], t["content"]) for t in data.get("added_tokens") or [])
            table = {"vocab": (data.get("model") or {}).get("vocab"), "added": added}
        elif "vocab.json" in files:
            table = {"vocab": json.loads(files["vocab.json"])}
        elif "tokenizer.model" in files:
            return hashlib.sha256(files["tokenizer.model"]).hexdigest()
        else:
            return None
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    canonical = json.dumps(table, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def read_tokenizer_files(folder: Path) -> dict[str, bytes]:
    """The tokenizer files in `folder` as {name: content}."""
    return {f.name: f.read_bytes() for f in tokenizer_files(folder)}
