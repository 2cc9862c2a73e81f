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
    h = hashlib.sha256()
    for f in tokenizer_files(folder):
        h.update(f.name.encode() + b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()
