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
from typing import Any

import numpy as np

from blackwell_sm.errors import DataError

MAGIC = b"BSMTOKS\0"
VERSION = 1
VERSION_FLAGS = 2
FLAG_LOSS = 1  # this token counts as a target
FLAG_START = 2  # this token begins a sample (or a padding run)
HEADER = struct.Struct("<8sIIQQ")
HEADER_BYTES = HEADER.size  # 32
_DTYPES: dict[int, np.dtype[Any]] = {2: np.dtype("<u2"), 4: np.dtype("<u4")}


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
    with ShardWriter(path, dtype, flags=flags is not None) as w:
        w.append(tokens, flags)


class ShardWriter:
    """One shard written piece by piece (`append`), so no more than a piece is ever in memory:
    tokens go to a temporary file after a placeholder header (`atomic_write.atomic_open`), flags
    (version 2) to a side file; on a clean exit the header gets the count, the flags follow the
    tokens, and the file is renamed into place. On an error nothing is left at `path`."""

    def __init__(self, path: str | Path, dtype: np.dtype, *, flags: bool = False) -> None:
        dtype = np.dtype(dtype)
        if dtype.itemsize not in _DTYPES:
            raise ValueError(f"token dtype must be uint16 or uint32, not {dtype}")
        self.path, self.dtype, self.count = Path(path), _DTYPES[dtype.itemsize], 0
        self.flags_tmp = self.path.with_name(f".{self.path.name}.flags.tmp") if flags else None
        self._f: Any = None  # the open temporary file (atomic_open), while writing
        self._flags: Any = None
        self._open: Any = None

    def __enter__(self) -> ShardWriter:
        from blackwell_sm.atomic_write import atomic_open

        self._open = atomic_open(self.path, "wb", flag=None)
        self._f = self._open.__enter__()
        self._f.write(HEADER.pack(MAGIC, 0, 0, 0, 0))
        if self.flags_tmp is not None:
            self._flags = open(self.flags_tmp, "w+b")
        return self

    def append(self, tokens: np.ndarray | list[int], flags: np.ndarray | None = None) -> None:
        tokens = np.asarray(tokens)
        if (flags is None) != (self._flags is None) or (
            flags is not None and len(flags) != len(tokens)
        ):
            raise ValueError("a version 2 shard takes one flag per token, a version 1 none")
        if tokens.size and int(tokens.max()) >= 2 ** (8 * self.dtype.itemsize):
            raise ValueError(f"token id {int(tokens.max())} does not fit in {self.dtype}")
        self._f.write(np.ascontiguousarray(tokens, dtype=self.dtype).tobytes())
        if flags is not None and self._flags is not None:
            self._flags.write(np.ascontiguousarray(flags, dtype=np.uint8).tobytes())
        self.count += int(tokens.size)

    def __exit__(self, exc_type, exc, tb) -> None:
        f, fl = self._f, self._flags
        try:
            if exc_type is None:
                if fl is not None:
                    fl.seek(0)
                    while block := fl.read(1 << 24):
                        f.write(block)
                f.seek(0)
                version = VERSION if fl is None else VERSION_FLAGS
                f.write(HEADER.pack(MAGIC, version, self.dtype.itemsize, self.count, 0))
        except BaseException as e:
            exc_type, exc, tb = type(e), e, e.__traceback__
            raise
        finally:
            if fl is not None and self.flags_tmp is not None:
                fl.close()
                self.flags_tmp.unlink(missing_ok=True)
            self._open.__exit__(exc_type, exc, tb)  # renamed into place, or removed


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
