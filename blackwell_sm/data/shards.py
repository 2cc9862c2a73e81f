"""The token shard format: write, read and check one shard.

Shard format (version 1, or 2 with flags), one file per shard, little-endian:

    offset  size  field
    0       8     magic  b"BSMTOKS\\0"
    8       4     version (uint32): 1, or 2 when per-token flags follow the tokens
    12      4     bytes per token (uint32): 2 (uint16 tokens) or 4 (uint32 tokens)
    16      8     token count (uint64)
    24      8     reserved (zero)
    32      ...   tokens, flat
    ...     count version 2 only: one uint8 of flags per token — bit 0 LOSS (the token counts
                  as a target), bit 1 START (it begins a sample: attention does not cross it)

Version 2 shards hold fine-tuning rows (`bsm data prepare --format chat|prompt-completion`,
`data/finetune.py`): samples packed into rows of the manifest's `seq_len`. A version 1 shard
still reads, as plain tokens where every target counts.

A channel directory holds `*.bin` shards and `manifest.json` (written by `bsm data prepare`,
`data/manifest.py`): the shards are the ones it lists, in its order (`data/channel.py` checks
them); without a manifest, every `*.bin` in name order. A training sequence is `seq_len + 1` consecutive tokens from one
shard (inputs and shifted targets); sequence i of a shard starts at token i * seq_len.

Client (`bsm data prepare`) and container (`train/data.py`) both use this module: numpy only.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from blackwell_sm.errors import DataError

FORMAT_NAME = "bsm-tokens-v1"
MAGIC = b"BSMTOKS\0"
VERSION = 1
VERSION_FLAGS = 2
FLAG_LOSS = 1  # this token counts as a target
FLAG_START = 2  # this token begins a sample (or a padding run)
HEADER = struct.Struct("<8sIIQQ")
HEADER_BYTES = HEADER.size  # 32
_DTYPES = {2: np.dtype("<u2"), 4: np.dtype("<u4")}


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits, else uint32."""
    return _DTYPES[2] if vocab_size <= 65536 else _DTYPES[4]


def write_shard(
    path: str | Path,
    tokens: np.ndarray,
    *,
    dtype: np.dtype | None = None,
    flags: np.ndarray | None = None,
) -> None:
    """Write `tokens` as one shard (atomically: temp file, then rename); with `flags` (one uint8
    per token), a version 2 shard."""
    if flags is not None and len(flags) != len(tokens):
        raise ValueError(f"{len(flags)} flags for {len(tokens)} tokens")
    dtype = np.dtype(dtype) if dtype is not None else token_dtype(int(tokens.max(initial=0)) + 1)
    if dtype.itemsize not in _DTYPES:
        raise ValueError(f"token dtype must be uint16 or uint32, not {dtype}")
    arr = np.ascontiguousarray(tokens, dtype=_DTYPES[dtype.itemsize])
    if tokens.size and int(tokens.max()) >= 2 ** (8 * dtype.itemsize):
        raise ValueError(f"token id {int(tokens.max())} does not fit in {dtype}")
    from blackwell_sm.atomic_write import atomic_open

    with atomic_open(path, "wb", flag=None) as f:
        version = VERSION if flags is None else VERSION_FLAGS
        f.write(HEADER.pack(MAGIC, version, dtype.itemsize, arr.size, 0))
        f.write(arr.tobytes())
        if flags is not None:
            f.write(np.ascontiguousarray(flags, dtype=np.uint8).tobytes())


def read_shard(path: str | Path) -> np.ndarray:
    """The tokens of a shard (version 1 or 2) as a read-only memory map."""
    return read_tokens_and_flags(Path(path))[0]


def read_flags(path: str | Path) -> np.ndarray | None:
    """The per-token flags of a version 2 shard (memory map), or None for version 1."""
    return read_tokens_and_flags(Path(path))[1]


def read_tokens_and_flags(path: Path) -> tuple[np.ndarray, np.ndarray | None]:
    """(tokens, flags or None) of a shard, both memory-mapped."""
    with open(path, "rb") as f:
        raw = f.read(HEADER_BYTES)
    if len(raw) < HEADER_BYTES:
        raise DataError(f"{path}: too short to be a token shard ({len(raw)} bytes)")
    magic, version, width, count, _ = HEADER.unpack(raw)
    if magic != MAGIC:
        raise DataError(
            f"{path}: not a blackwell_sm token shard (magic {magic!r})",
            hint="make shards with `bsm data prepare INPUT... --out DIR`",
        )
    if version not in (VERSION, VERSION_FLAGS) or width not in _DTYPES:
        raise DataError(
            f"{path}: unsupported shard header: version {version}, token width {width}",
            hint="make shards with `bsm data prepare INPUT... --out DIR`",
        )
    has_flags = version == VERSION_FLAGS
    expected = HEADER_BYTES + count * (width + (1 if has_flags else 0))
    size = path.stat().st_size
    if size != expected:
        what = "truncated" if size < expected else "longer than its header says"
        raise DataError(
            f"{path}: {what}: size {size} bytes, the header's {count} tokens need {expected}",
            hint="copy the shard again from the folder `bsm data prepare` wrote",
        )
    if count == 0:
        return np.zeros(0, dtype=_DTYPES[width]), (np.zeros(0, np.uint8) if has_flags else None)
    tokens = np.memmap(path, dtype=_DTYPES[width], mode="r", offset=HEADER_BYTES, shape=(count,))
    flags = None
    if has_flags:
        at = HEADER_BYTES + count * width
        flags = np.memmap(path, dtype=np.uint8, mode="r", offset=at, shape=(count,))
    return tokens, flags
