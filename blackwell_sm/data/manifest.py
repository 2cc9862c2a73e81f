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
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from blackwell_sm.errors import DataError

MANIFEST_FILE = "manifest.json"
# The shard format's name (data/shards.py reads it from here: this module stays numpy-free, for
# the client's checks before a run, data/agree.py).
FORMAT_NAME: Literal["bsm-tokens-v1"] = "bsm-tokens-v1"
MANIFEST_VERSION = 2
FINETUNE_FORMAT_NAME = "bsm-tokens-v2"
MAX_MANIFEST_BYTES = 64 << 20  # ~400k shards; the safe loader's 1 MiB default is for specs
MAX_COUNT = 1 << 62  # tokens, bytes, documents: far above any real dataset, below int64's end
MAX_SHARDS = 1_000_000
MAX_SEQ_LEN = 1 << 24
TokenDtype = Literal["uint16", "uint32"]
SHA256 = r"^[0-9a-f]{64}$"


def _plain_name(name: str) -> str:
    # A name inside the channel folder, never a path out of it.
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        raise ValueError(f"{name!r} is not a plain file name in the channel folder")
    return name


class ShardInfo(BaseModel):
    """One shard file as prepare wrote it."""

    model_config = ConfigDict(extra="forbid", strict=True)
    file: str = Field(max_length=255, description="File name inside the channel folder.")
    tokens: int = Field(ge=0, le=MAX_COUNT, description="Tokens in the shard (its header's count).")
    bytes: int | None = Field(
        default=None,
        ge=0,
        le=MAX_COUNT,
        description="File size in bytes (absent in version 1 manifests).",
    )
    sha256: str = Field(
        pattern=SHA256, description="sha256 of the whole file (`bsm data verify` checks it)."
    )

    _name = field_validator("file")(_plain_name)


class Manifest(BaseModel):
    """`manifest.json` beside the shards: what made them and what they hold."""

    model_config = ConfigDict(extra="forbid", strict=True)
    manifest_version: int = Field(
        default=1,
        ge=1,
        le=2,
        description="2 since shard sizes and the tokenizer's identity are listed.",
    )
    format: Literal["bsm-tokens-v1"] = FORMAT_NAME
    tokenizer: str = Field(
        max_length=4096, description="`byte-level`, or the tokenizer path given to prepare."
    )
    tokenizer_sha256: str | None = Field(
        default=None,
        pattern=SHA256,
        description="sha256 over the tokenizer's files (names and contents).",
    )
    tokenizer_dir: str | None = Field(
        default=None,
        description="Subfolder holding the tokenizer's files (exported beside the model).",
    )
    vocab_size: int = Field(ge=1, le=1 << 32, description="Token ids are below this.")
    eos_id: int | None = Field(ge=0, description="The end-of-document token, below vocab_size.")
    dtype: TokenDtype
    documents: int = Field(ge=0, le=MAX_COUNT)
    tokens: int = Field(ge=0, le=MAX_COUNT, description="The shards' tokens, summed.")
    shards: list[ShardInfo] = Field(max_length=MAX_SHARDS)

    @model_validator(mode="after")
    def _agrees(self) -> Self:
        if self.eos_id is not None and self.eos_id >= self.vocab_size:
            raise ValueError(f"eos_id {self.eos_id} is not below vocab_size {self.vocab_size}")
        listed = sum(s.tokens for s in self.shards)
        if self.tokens != listed:
            raise ValueError(f"tokens {self.tokens}, but the shards listed hold {listed}")
        return self

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

    format: Literal["bsm-tokens-v2"] = FINETUNE_FORMAT_NAME  # type: ignore[assignment]
    data_format: Literal["chat", "prompt-completion"]
    seq_len: int = Field(ge=2, le=MAX_SEQ_LEN, description="Every row's length.")
    packing: Literal["pack", "pad"]
    sequences: int = Field(ge=1, le=MAX_COUNT, description="Rows: `training.data.sequences`.")
    samples: int = Field(ge=0, le=MAX_COUNT)
    loss_tokens: int = Field(ge=0, le=MAX_COUNT)
    truncated: int = Field(ge=0, le=MAX_COUNT)
    dropped: int = Field(ge=0, le=MAX_COUNT)

    @model_validator(mode="after")
    def _rows(self) -> Self:
        # each shard is whole rows plus one padding token (the last row's final target)
        rows = self.tokens - len(self.shards)
        if rows != self.sequences * self.seq_len:
            raise ValueError(
                f"sequences {self.sequences} x seq_len {self.seq_len} + one token per shard "
                f"({len(self.shards)}) is not the {self.tokens} tokens listed"
            )
        if self.loss_tokens > self.tokens:
            raise ValueError(f"loss_tokens {self.loss_tokens} exceed the {self.tokens} tokens")
        return self


def load_manifest(directory: Path) -> Manifest | None:
    """The channel folder's manifest (a `FinetuneManifest` for fine-tuning rows), or None when
    it has none. A manifest that does not parse, or is newer than this code, is an error."""
    from blackwell_sm.safe_load import load_mapping

    path = Path(directory) / MANIFEST_FILE
    if not path.exists():
        return None
    data = load_mapping(path, field=str(path), fmt="json", max_bytes=MAX_MANIFEST_BYTES)
    return parse_manifest(data, str(path))


def parse_manifest(data: dict[str, Any], where: str) -> Manifest:
    """A manifest's parsed JSON (read by `load_manifest`, or from S3 at submit) as a `Manifest`
    (a `FinetuneManifest` for fine-tuning rows); DataError naming `where` when it is not one."""
    version = data.get("manifest_version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version > MANIFEST_VERSION:
        raise DataError(
            f"{where}: manifest_version {version!r} is not one this blackwell_sm reads "
            f"(1..{MANIFEST_VERSION})",
            hint="use the blackwell_sm version that prepared the data, or prepare it again",
        )
    cls = FinetuneManifest if "data_format" in data else Manifest
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "(top)"
        got = f" (got {err['input']!r})" if isinstance(err.get("input"), (str, int, float)) else ""
        raise DataError(
            f"{where}: not a manifest written by `bsm data prepare` ({loc}: "
            f"{err['msg'].removeprefix('Value error, ')}{got})",
            hint="prepare the data again, or remove manifest.json to read every *.bin in name "
            "order unchecked",
        ) from e
