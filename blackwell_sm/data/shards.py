"""The token shard format: write, read and check one shard.

Shard format (version 1), one file per shard, little-endian:

    offset  size  field
    0       8     magic  b"BSMTOKS\\0"
    8       4     version (uint32) = 1
    12      4     bytes per token (uint32): 2 (uint16 tokens) or 4 (uint32 tokens)
    16      8     token count (uint64)
    24      8     reserved (zero)
    32      ...   tokens, flat

A channel directory holds `*.bin` shards (read in name order) and optionally `manifest.json`
(written by `bsm data prepare`). A training sequence is `seq_len + 1` consecutive tokens from one
shard (inputs and shifted targets); sequence i of a shard starts at token i * seq_len.

Client (`bsm data prepare`) and container (`train/data.py`) both use this module: numpy only.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

from blackwell_sm.errors import BsmError

FORMAT_NAME = "bsm-tokens-v1"
MAGIC = b"BSMTOKS\0"
VERSION = 1
HEADER = struct.Struct("<8sIIQQ")
HEADER_BYTES = HEADER.size  # 32
_DTYPES = {2: np.dtype("<u2"), 4: np.dtype("<u4")}


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits, else uint32."""
    return _DTYPES[2] if vocab_size <= 65536 else _DTYPES[4]


def write_shard(path: str | Path, tokens: np.ndarray, *, dtype: np.dtype | None = None) -> None:
    """Write `tokens` as one shard (atomically: temp file, then rename)."""
    dtype = np.dtype(dtype) if dtype is not None else token_dtype(int(tokens.max(initial=0)) + 1)
    if dtype.itemsize not in _DTYPES:
        raise ValueError(f"token dtype must be uint16 or uint32, not {dtype}")
    arr = np.ascontiguousarray(tokens, dtype=_DTYPES[dtype.itemsize])
    if tokens.size and int(tokens.max()) >= 2 ** (8 * dtype.itemsize):
        raise ValueError(f"token id {int(tokens.max())} does not fit in {dtype}")
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(HEADER.pack(MAGIC, VERSION, dtype.itemsize, arr.size, 0))
        f.write(arr.tobytes())
    tmp.replace(path)


def read_shard(path: str | Path) -> np.ndarray:
    """The tokens of a shard as a read-only memory map."""
    path = Path(path)
    with open(path, "rb") as f:
        raw = f.read(HEADER_BYTES)
    if len(raw) < HEADER_BYTES:
        raise BsmError(f"{path}: too short to be a token shard ({len(raw)} bytes)")
    magic, version, width, count, _ = HEADER.unpack(raw)
    if magic != MAGIC:
        raise BsmError(
            f"{path}: not a blackwell_sm token shard (magic {magic!r})",
            hint="make shards with `bsm data prepare INPUT... --out DIR`",
        )
    if version != VERSION or width not in _DTYPES:
        raise BsmError(f"{path}: unsupported shard version {version} / token width {width}")
    expected = HEADER_BYTES + count * width
    if path.stat().st_size != expected:
        raise BsmError(f"{path}: size {path.stat().st_size} != header's {expected} bytes")
    if count == 0:
        return np.zeros(0, dtype=_DTYPES[width])
    return np.memmap(path, dtype=_DTYPES[width], mode="r", offset=HEADER_BYTES, shape=(count,))
