"""`manifest.json`: what `bsm data prepare` wrote into a channel folder, and reading it back.

Version 2 (this code writes it) lists every shard with its token count, byte size and sha256, and
the tokenizer's identity: its name (or the path given), a hash of its files, its vocabulary, and
the subfolder its files travel in (`tokenizer/`, exported beside the model).

Version 1 manifests (no `manifest_version` field: byte sizes and tokenizer hash absent) still
read: their shard list and token counts are enough to refuse stale or missing shards, and the
size check falls back to the shard's own header. A version newer than this code is refused.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from blackwell_sm.data.shards import FORMAT_NAME
from blackwell_sm.errors import BsmError

MANIFEST_FILE = "manifest.json"
MANIFEST_VERSION = 2
FINETUNE_FORMAT_NAME = "bsm-tokens-v2"
MAX_MANIFEST_BYTES = 64 << 20  # ~400k shards; the safe loader's 1 MiB default is for specs


def _plain_name(name: str) -> str:
    # A name inside the channel folder, never a path out of it.
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        raise ValueError(f"{name!r} is not a plain file name in the channel folder")
    return name


class ShardInfo(BaseModel):
    """One shard file as prepare wrote it."""

    model_config = ConfigDict(extra="forbid")
    file: str = Field(description="File name inside the channel folder.")
    tokens: int = Field(ge=0, description="Tokens in the shard (its header's count).")
    bytes: int | None = Field(
        default=None, ge=0, description="File size in bytes (absent in version 1 manifests)."
    )
    sha256: str = Field(description="sha256 of the whole file (`bsm data verify` checks it).")

    _name = field_validator("file")(_plain_name)


class Manifest(BaseModel):
    """`manifest.json` beside the shards: what made them and what they hold."""

    model_config = ConfigDict(extra="forbid")
    manifest_version: int = Field(
        default=1, description="2 since shard sizes and the tokenizer's identity are listed."
    )
    format: str = FORMAT_NAME
    tokenizer: str = Field(description="`byte-level`, or the tokenizer path given to prepare.")
    tokenizer_sha256: str | None = Field(
        default=None, description="sha256 over the tokenizer's files (names and contents)."
    )
    tokenizer_dir: str | None = Field(
        default=None,
        description="Subfolder holding the tokenizer's files (exported beside the model).",
    )
    vocab_size: int
    eos_id: int | None
    dtype: str
    documents: int
    tokens: int
    shards: list[ShardInfo]

    @field_validator("shards")
    @classmethod
    def _unique(cls, v: list[ShardInfo]) -> list[ShardInfo]:
        names = [s.file for s in v]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"shards listed more than once: {', '.join(twice)}")
        return v

    @field_validator("tokenizer_dir")
    @classmethod
    def _dir_name(cls, v: str | None) -> str | None:
        return None if v is None else _plain_name(v)


class FinetuneManifest(Manifest):
    """`manifest.json` of fine-tuning rows: the text manifest's fields and how rows were made."""

    format: str = FINETUNE_FORMAT_NAME
    data_format: str
    seq_len: int
    packing: str
    sequences: int  # rows: what `training.data.sequences` (for epochs) takes
    samples: int
    loss_tokens: int
    truncated: int
    dropped: int


def load_manifest(directory: Path) -> Manifest | None:
    """The channel folder's manifest (a `FinetuneManifest` for fine-tuning rows), or None when
    it has none. A manifest that does not parse, or is newer than this code, is an error."""
    from blackwell_sm.safe_load import load_mapping

    path = Path(directory) / MANIFEST_FILE
    if not path.exists():
        return None
    data = load_mapping(path, field=str(path), fmt="json", max_bytes=MAX_MANIFEST_BYTES)
    version = data.get("manifest_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version > MANIFEST_VERSION:
        raise BsmError(
            f"{path}: manifest_version {version!r} is not one this blackwell_sm reads "
            f"(1..{MANIFEST_VERSION})",
            hint="use the blackwell_sm version that prepared the data, or prepare it again",
        )
    cls = FinetuneManifest if "data_format" in data else Manifest
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top)"
        raise BsmError(
            f"{path}: not a manifest written by `bsm data prepare` ({where}: {err['msg']})",
            hint="prepare the data again, or remove manifest.json to read every *.bin in name "
            "order unchecked",
        ) from e
