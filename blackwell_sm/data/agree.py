"""Do the data and the model agree? One pure checker, called before any worker or instance starts
by `run-local` (`local.py`, the channel folders' manifests) and by `submit` (`aws/data_check.py`,
each channel's manifest read from S3 with one GET).

Checked against the manifest `bsm data prepare` wrote (`data/manifest.py`):
- tokenizer identity: the manifest's `tokenizer_sha256` against the starting weights' tokenizer
  (a local `training.init_from` folder's, which the export ships beside the model when the data
  carries none): weights trained on other ids than their tokenizer's are useless, silently;
- vocabulary: every id below the manifest's `vocab_size` has a row in the model's embedding;
- sequence length: fine-tuning rows are exactly `training.seq_len` tokens; text holds at least one
  sequence of `seq_len` + 1 tokens;
- sequences: `training.data.sequences` (what `epochs` counts) is the data's own count.

Pydantic-free, torch-free, numpy-free: plain values in, a `DataError` (exit 2, naming the spec
field) or a list of things said loudly out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from blackwell_sm.data.manifest import FinetuneManifest, Manifest, load_manifest
from blackwell_sm.data.tokenizer_files import (
    read_tokenizer_files,
    tokenizer_identity,
    vocab_identity,
)
from blackwell_sm.errors import DataError

BYTE_LEVEL = "byte-level"  # data/prepare.py's ByteTokenizer.name


class ModelSide(NamedTuple):
    """What the run asks of its data, from the spec (and the starting weights' folder)."""

    vocab_size: int
    seq_len: int
    sequences: int | None  # training.data.sequences
    task: str  # training.task
    init_tokenizer: Tokenizer | None = None  # the starting weights' tokenizer, when they have one
    init_from: str | None = None  # where it came from, for messages


class Tokenizer(NamedTuple):
    """A tokenizer's identities: of its files (`tokenizer_sha256`, what a manifest records)
    and of its token -> id table (`vocab_identity`: survives a re-save)."""

    sha256: str
    vocab: str | None

    @classmethod
    def of(cls, files: dict[str, bytes]) -> Tokenizer | None:
        """From its files as {name: content}; None when there are none."""
        return cls(tokenizer_identity(files), vocab_identity(files)) if files else None


def model_side(spec: Any) -> ModelSide:
    """What `spec` (a RunSpec: data/ does not import spec/) asks of its data; a local
    `training.init_from` folder's tokenizer is hashed here (an s3:// one by the caller)."""
    tr = spec.training
    init, tok = tr.init_from, None
    if init and not init.startswith("s3://"):
        tok = Tokenizer.of(read_tokenizer_files(Path(init).expanduser()))
    return ModelSide(
        vocab_size=spec.model.vocab_size,
        seq_len=tr.seq_len,
        sequences=tr.data.sequences,
        task=tr.task,
        init_tokenizer=tok,
        init_from=init,
    )


def data_channels(spec: Any) -> list[str]:
    """The channels the loop reads token shards from (none for synthetic data)."""
    data = spec.training.data
    if data.source != "channel":
        return []
    return [data.train_channel, *([data.validation_channel] if data.validation_channel else [])]


def check_local_channels(spec: Any, channels: dict[str, Path]) -> list[str]:
    """`run-local`'s check, before any worker starts: each data channel folder's manifest
    against the spec and the model (`check_data_agrees`); returns what to say loudly."""
    want, said = model_side(spec), []
    train = spec.training.data.train_channel
    for name in data_channels(spec):
        if name not in channels:
            continue  # the launcher refuses a missing channel with its own message
        manifest = load_manifest(Path(channels[name]))
        where = f"channel {name} ({Path(channels[name]) / 'manifest.json'})"
        if manifest is None:
            said.append(f"{where}: no manifest: the data is not checked against the model")
            continue
        # the validation channel's size is not what epochs count
        side = want if name == train else want._replace(sequences=None)
        folder = Path(channels[name]) / (manifest.tokenizer_dir or "")
        data_tok = Tokenizer.of(read_tokenizer_files(folder)) if manifest.tokenizer_dir else None
        said += check_data_agrees(manifest, side, where=where, data_tokenizer=data_tok)
    return said


def sequences_in(manifest: Manifest, seq_len: int) -> int:
    """Training sequences in the data at `seq_len`, counted as the loop counts them
    (`train/data.py`): fine-tuning rows, or each text shard's (tokens - 1) // seq_len."""
    if isinstance(manifest, FinetuneManifest):
        return manifest.sequences
    return sum(max(0, (s.tokens - 1) // seq_len) for s in manifest.shards)


def check_data_agrees(
    manifest: Manifest, want: ModelSide, *, where: str, data_tokenizer: Tokenizer | None = None
) -> list[str]:
    """Refuse data that does not fit the model or the spec (DataError naming the spec field);
    returns what could not be compared, to be said loudly. `where` names the manifest;
    `data_tokenizer` is the one that travels with the data (its `tokenizer_dir`), if read."""
    said: list[str] = []
    if manifest.vocab_size > want.vocab_size:
        raise DataError(
            f"{where}: the data's token ids go up to {manifest.vocab_size - 1} (vocab_size "
            f"{manifest.vocab_size}, tokenizer {manifest.tokenizer}), but the model has "
            f"{want.vocab_size} embedding rows (model.vocab_size)",
            field="model.vocab_size",
            hint="prepare the data with the model's tokenizer, or use a model whose vocab_size "
            f"is at least {manifest.vocab_size}",
        )
    _check_tokenizer(manifest, want, data_tokenizer, where, said)
    if isinstance(manifest, FinetuneManifest) and manifest.seq_len != want.seq_len:
        raise DataError(
            f"{where}: the fine-tuning rows are {manifest.seq_len} tokens long, but "
            f"training.seq_len is {want.seq_len}",
            field="training.seq_len",
            hint=f"set training.seq_len: {manifest.seq_len}, or prepare the data again with "
            f"--seq-len {want.seq_len}",
        )
    have = sequences_in(manifest, want.seq_len)
    if have < 1:
        raise DataError(
            f"{where}: {manifest.tokens:,} tokens hold no sequence of training.seq_len "
            f"{want.seq_len} + 1 tokens in any shard",
            field="training.seq_len",
            hint="use a shorter training.seq_len or more data",
        )
    if want.sequences is not None and want.sequences != have:
        raise DataError(
            f"{where}: training.data.sequences is {want.sequences:,}, but the data holds "
            f"{have:,} sequences of {want.seq_len} tokens: `epochs` would count passes over "
            "data that is not there",
            field="training.data.sequences",
            hint=f"set training.data.sequences: {have}",
        )
    return said


def _check_tokenizer(
    manifest: Manifest, want: ModelSide, data: Tokenizer | None, where: str, said: list[str]
) -> None:
    init = want.init_tokenizer
    if init is None:
        return
    if manifest.tokenizer == BYTE_LEVEL:
        raise DataError(
            f"{where}: the data was tokenized byte-level (ids 0-255), but the starting weights "
            f"({want.init_from}) come with their own tokenizer: they would be trained on ids "
            "they were not made for, and exported beside a tokenizer that does not match",
            field="training.init_from",
            hint="prepare the data with the model's tokenizer (bsm data prepare ... "
            f"--tokenizer {want.init_from})",
        )
    if manifest.tokenizer_sha256 == init.sha256:
        return  # the very same files
    if data is not None and data.vocab is not None and init.vocab is not None:
        if data.vocab == init.vocab:
            return  # the same token -> id table, saved again
        raise DataError(
            f"{where}: the data was made by tokenizer {manifest.tokenizer}, the starting "
            f"weights ({want.init_from}) have another (their token -> id tables differ): the "
            "ids mean different tokens",
            field="training.init_from",
            hint=f"prepare the data with --tokenizer {want.init_from}",
        )
    said.append(
        f"{where}: the data's tokenizer ({manifest.tokenizer}) could not be compared with the "
        f"tokenizer of {want.init_from} (the data carries no readable copy of it, or an older "
        "manifest): prepare the data again to have it checked"
    )
