"""Open a channel folder of token shards, checked before anything trains on it.

With a `manifest.json` the shards are the ones it lists, in its order: a `*.bin` it does not
list is refused (a stale shard from an earlier prepare), as is a listed one that is missing or
whose byte size or token count differs. Without a manifest every `*.bin` is read in name order.
Every shard's header is checked (magic, version, width, and the file's size against its token
count: a truncated copy), and with `vocab_size` each shard's largest token id is checked against
it, vectorised over the memory map in chunks (12-19 GB/s from the page cache on a 2-core
sandbox CPU; reading from disk is the bound). The sha256 of every byte costs about 1 GB/s on the
same CPU, so the container does not hash at open; `bsm data verify DIR` does, on request.

numpy only: the client (`bsm data verify`) and the container (`train/data.py`) share it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from blackwell_sm.data.manifest import FinetuneManifest, Manifest, ShardInfo, load_manifest
from blackwell_sm.data.shards import FLAG_LOSS, read_tokens_and_flags
from blackwell_sm.data.tokenizer_files import tokenizer_sha256
from blackwell_sm.errors import DataError

SAMPLE_BYTES = 4096  # of each shard's start and end, hashed into the channel's identity
ID_CHUNK = 1 << 24  # tokens per np.max: 32-64 MiB, big enough to run at memory speed
_SHOWN = 5  # file names listed in an error before "and N more"


@dataclass(frozen=True)
class Shard:
    """One opened shard: its tokens (and version 2 flags), memory-mapped."""

    path: Path
    tokens: np.ndarray
    flags: np.ndarray | None


@dataclass(frozen=True)
class Channel:
    """A checked channel folder: its manifest (if any) and its shards in reading order."""

    directory: Path
    manifest: Manifest | None
    shards: list[Shard] = field(default_factory=list)

    @property
    def tokenizer_dir(self) -> Path | None:
        """The folder of the tokenizer that made the shards, when it travels with them."""
        if self.manifest is None or self.manifest.tokenizer_dir is None:
            return None
        return self.directory / self.manifest.tokenizer_dir


def _names(names: list[str]) -> str:
    more = f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else ""
    return ", ".join(names[:_SHOWN]) + more


def first_out_of_range(tokens: np.ndarray, vocab_size: int) -> tuple[int, int] | None:
    """(position, id) of the first token id >= `vocab_size`, or None; one np.max per chunk,
    and a search only inside a chunk that has one."""
    for lo in range(0, len(tokens), ID_CHUNK):
        chunk = tokens[lo : lo + ID_CHUNK]
        if int(chunk.max()) >= vocab_size:
            i = int(np.argmax(chunk >= vocab_size))
            return lo + i, int(chunk[i])
    return None


def file_sha256(path: Path) -> str:
    """sha256 of a file, read in 16 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(16 << 20):
            h.update(block)
    return h.hexdigest()


def shard_files(directory: Path, manifest: Manifest | None) -> list[tuple[Path, ShardInfo | None]]:
    """The shards to read, in order, each with its manifest entry (None without a manifest)."""
    found = sorted(p for p in directory.glob("*.bin") if p.is_file())
    if manifest is None:
        if not found:
            contents = sorted(p.name for p in directory.iterdir())
            held = f" (it holds: {_names(contents)})" if contents else " (it is empty)"
            raise DataError(
                f"no token shards (*.bin) in {directory}{held}",
                hint="point the channel at the output of `bsm data prepare`, or use "
                "training.data.source: synthetic",
            )
        return [(p, None) for p in found]
    listed = {s.file for s in manifest.shards}
    stale = [p.name for p in found if p.name not in listed]
    if stale:
        raise DataError(
            f"{directory}: {len(stale)} shard file(s) not listed in manifest.json: "
            f"{_names(stale)} (stale shard from an earlier prepare?)",
            hint="prepare into a fresh folder (`bsm data prepare --out NEW`, or --overwrite), "
            "or delete the unlisted files",
        )
    missing = [s.file for s in manifest.shards if not (directory / s.file).is_file()]
    if missing:
        raise DataError(
            f"{directory}: {len(missing)} shard file(s) listed in manifest.json are missing: "
            f"{_names(missing)}",
            hint="copy or upload the whole folder `bsm data prepare` wrote (an interrupted "
            "upload or sync?)",
        )
    if not manifest.shards:
        raise DataError(f"{directory}: manifest.json lists no shards")
    return [(directory / s.file, s) for s in manifest.shards]


def open_shard(
    path: Path,
    info: ShardInfo | None,
    *,
    vocab_size: int | None = None,
    verify_sha256: bool = False,
) -> Shard:
    """Open one shard and check it: size and token count against the manifest entry (when
    given), its header, every token id below `vocab_size` (when given), and with
    `verify_sha256` its hash."""
    if info is not None and info.bytes is not None:
        size = path.stat().st_size
        if size != info.bytes:
            what = "truncated" if size < info.bytes else "longer than prepared"
            raise DataError(
                f"{path}: {size} bytes, manifest.json lists {info.bytes} ({what}: an "
                "interrupted copy, or replaced after prepare?)",
                hint="copy the shard again from the folder `bsm data prepare` wrote",
            )
    tokens, flags = read_tokens_and_flags(path)
    if info is not None and len(tokens) != info.tokens:
        raise DataError(
            f"{path}: {len(tokens)} tokens, manifest.json lists {info.tokens} (replaced after "
            "prepare?)"
        )
    if verify_sha256 and info is not None and file_sha256(path) != info.sha256:
        raise DataError(f"{path}: sha256 differs from manifest.json's (changed after prepare?)")
    if vocab_size is not None:
        bad = first_out_of_range(tokens, vocab_size)
        if bad is not None:
            pos, tok = bad
            raise DataError(
                f"{path}: token id {tok} (token {pos}) is not below the model's vocab_size "
                f"{vocab_size}",
                hint="prepare the data with the model's tokenizer, or set model.vocab_size "
                "above the tokenizer's largest id",
            )
    return Shard(path, tokens, flags)


def check_manifest(
    directory: Path, manifest: Manifest | None, *, vocab_size: int | None, seq_len: int | None
) -> None:
    """What the manifest alone tells, before any shard is read: the tokenizer's vocabulary fits
    the model's, and fine-tuning rows were packed to the trained `seq_len`."""
    if manifest is None:
        return
    rows = getattr(manifest, "seq_len", None)
    if rows is not None and seq_len is not None and rows != seq_len:
        raise DataError(
            f"{directory}: fine-tuning rows were packed to seq_len {rows}, the plan trains "
            f"at seq_len {seq_len}",
            hint=f"set training.seq_len: {rows}, or prepare the data again with "
            f"--seq-len {seq_len}",
        )
    if vocab_size is not None and manifest.vocab_size > vocab_size:
        raise DataError(
            f"{directory}: shards use a vocabulary of {manifest.vocab_size} tokens but the "
            f"model's vocab_size is {vocab_size}",
            hint="set model.vocab_size >= the tokenizer's vocabulary",
        )


def check_tokenizer(directory: Path, manifest: Manifest | None) -> None:
    """The tokenizer folder the manifest names exists and is the one that made the shards."""
    if manifest is None or manifest.tokenizer_dir is None:
        return
    folder = directory / manifest.tokenizer_dir
    if not folder.is_dir():
        raise DataError(
            f"{directory}: manifest.json names the tokenizer folder {manifest.tokenizer_dir}/, "
            "which is missing",
            hint="copy or upload the whole folder `bsm data prepare` wrote",
        )
    if manifest.tokenizer_sha256 and tokenizer_sha256(folder) != manifest.tokenizer_sha256:
        raise DataError(
            f"{folder}: the tokenizer files differ from those that made the shards "
            "(manifest.json's tokenizer_sha256)",
            hint="prepare the data again with this tokenizer, or restore its files",
        )


def open_channel(
    directory: str | Path,
    *,
    vocab_size: int | None = None,
    seq_len: int | None = None,
    verify_sha256: bool = False,
) -> Channel:
    """Open and check every shard of a channel folder (see the module's docstring); with
    `seq_len`, fine-tuning rows must have been packed to it."""
    directory = Path(directory)
    if not directory.is_dir():
        what = "is not a folder" if directory.exists() else "does not exist"
        raise DataError(
            f"the channel folder {directory} {what}",
            hint="pass the channel (SageMaker: an input channel of the job; run-local: "
            "--channel NAME=DIR) that holds the output of `bsm data prepare`",
        )
    manifest = load_manifest(directory)
    check_manifest(directory, manifest, vocab_size=vocab_size, seq_len=seq_len)
    files = shard_files(directory, manifest)
    check_tokenizer(directory, manifest)
    shards = [
        open_shard(p, info, vocab_size=vocab_size, verify_sha256=verify_sha256) for p, info in files
    ]
    if isinstance(manifest, FinetuneManifest):
        check_rows(directory, manifest, shards, count_loss=verify_sha256)
    return Channel(directory, manifest, shards)


def check_rows(
    directory: Path, manifest: FinetuneManifest, shards: list[Shard], *, count_loss: bool
) -> None:
    """A fine-tuning manifest's fields against its shards: every shard has per-token flags
    (format v2) and whole rows of `seq_len` (plus its one trailing token), the rows add up to
    `sequences` (which sets a run's length in epochs), and with `count_loss` (the full check of
    `bsm data verify`) the LOSS flags add up to `loss_tokens`."""
    where = f"{directory}/manifest.json"
    rows = 0
    for s in shards:
        if s.flags is None:
            raise DataError(
                f"{s.path}: a plain (version 1) shard, but {where} lists "
                f"{manifest.format} rows with per-token flags"
            )
        if (len(s.tokens) - 1) % manifest.seq_len:
            raise DataError(
                f"{s.path}: {len(s.tokens)} tokens are not whole rows of seq_len "
                f"{manifest.seq_len} (+1), as {where} lists"
            )
        rows += (len(s.tokens) - 1) // manifest.seq_len
    if rows != manifest.sequences:
        raise DataError(
            f"{where}: sequences {manifest.sequences}, the shards hold {rows} rows",
            hint="prepare the data again; training.data.sequences takes the real count",
        )
    if count_loss:
        loss = sum(
            int(np.count_nonzero(s.flags[:-1] & FLAG_LOSS)) for s in shards if s.flags is not None
        )
        if loss != manifest.loss_tokens:
            raise DataError(
                f"{where}: loss_tokens {manifest.loss_tokens}, the shards' flags mark {loss}"
            )


def _sample_hash(shards: list[Shard]) -> str:
    """sha256 over each shard's name, size and first and last `SAMPLE_BYTES` (a few KiB per
    shard: cheap beside the token-id scan, and it sees a shard replaced behind its manifest)."""
    h = hashlib.sha256()
    for s in shards:
        size = s.path.stat().st_size
        h.update(f"{s.path.name}\0{size}\0".encode())
        with open(s.path, "rb") as f:
            h.update(f.read(SAMPLE_BYTES))
            if size > 2 * SAMPLE_BYTES:
                f.seek(size - SAMPLE_BYTES)
                h.update(f.read(SAMPLE_BYTES))
    return h.hexdigest()


def channel_identity(channel: Channel) -> dict[str, Any]:
    """What the channel's data is, for a checkpoint to record (train/run_identity.py): the
    manifest's identity (a hash over its shard entries: names, token counts, sizes, sha256), the
    tokenizer's identity and vocabulary, the shard and token counts, and the sampled hash."""
    m = channel.manifest
    out: dict[str, Any] = {
        "shards": len(channel.shards),
        "tokens": sum(len(s.tokens) for s in channel.shards),
        "sample_sha256": _sample_hash(channel.shards),
        "manifest_sha256": None,
        "tokenizer": None,
        "vocab_size": None,
    }
    if m is not None:
        listed = [s.model_dump(mode="json") for s in m.shards]
        out["manifest_sha256"] = hashlib.sha256(
            json.dumps(listed, sort_keys=True, separators=(",", ":")).encode()
        ).hexdigest()
        out["tokenizer"] = m.tokenizer_sha256 or m.tokenizer  # byte-level has no files to hash
        out["vocab_size"] = m.vocab_size
    return out
