"""Token shards and the data order: which sequences each rank trains on at each step.

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

Version 2 shards hold fine-tuning rows (`bsm data prepare --format chat|prompt-completion`):
samples packed into rows of the manifest's `seq_len`; a version 1 shard still reads, as plain
tokens where every target counts.

A channel directory holds `*.bin` shards (read in name order) and optionally `manifest.json`
(written by `bsm data prepare`). A training sequence is `seq_len + 1` consecutive tokens from one
shard (inputs and shifted targets); sequence i of a shard starts at token i * seq_len.

The order is a pure function of (seed, step): the global batch of step s is positions
[s*B, (s+1)*B) of an endless stream that visits all sequences in a fresh seeded permutation per
epoch. Position p of the batch goes to data-parallel rank (p // micro) % dp, so ranks read
disjoint sequences and resuming needs only the step.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from blackwell_sm.errors import BsmError

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
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        version = VERSION if flags is None else VERSION_FLAGS
        f.write(HEADER.pack(MAGIC, version, dtype.itemsize, arr.size, 0))
        f.write(arr.tobytes())
        if flags is not None:
            f.write(np.ascontiguousarray(flags, dtype=np.uint8).tobytes())
    tmp.replace(path)


def read_shard(path: str | Path) -> np.ndarray:
    """The tokens of a shard (version 1 or 2) as a read-only memory map."""
    return _read(Path(path))[0]


def read_flags(path: str | Path) -> np.ndarray | None:
    """The per-token flags of a version 2 shard (memory map), or None for version 1."""
    return _read(Path(path))[1]


def _read(path: Path) -> tuple[np.ndarray, np.ndarray | None]:
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
    if version not in (VERSION, VERSION_FLAGS) or width not in _DTYPES:
        raise BsmError(f"{path}: unsupported shard version {version} / token width {width}")
    has_flags = version == VERSION_FLAGS
    expected = HEADER_BYTES + count * (width + (1 if has_flags else 0))
    if path.stat().st_size != expected:
        raise BsmError(f"{path}: size {path.stat().st_size} != header's {expected} bytes")
    if count == 0:
        return np.zeros(0, dtype=_DTYPES[width]), (np.zeros(0, np.uint8) if has_flags else None)
    tokens = np.memmap(path, dtype=_DTYPES[width], mode="r", offset=HEADER_BYTES, shape=(count,))
    flags = None
    if has_flags:
        at = HEADER_BYTES + count * width
        flags = np.memmap(path, dtype=np.uint8, mode="r", offset=at, shape=(count,))
    return tokens, flags


@dataclass(frozen=True)
class BatchLayout:
    """How a step's global batch is cut: sequences per micro-batch, micro-batches, dp ranks."""

    micro_batch_size: int
    grad_accum_steps: int
    dp_size: int
    seq_len: int

    @property
    def global_batch(self) -> int:
        return self.micro_batch_size * self.grad_accum_steps * self.dp_size

    def positions(self, step: int, micro: int, dp_rank: int) -> np.ndarray:
        """Stream positions of one micro-batch of one rank (disjoint across ranks and micros)."""
        start = step * self.global_batch + (micro * self.dp_size + dp_rank) * self.micro_batch_size
        return np.arange(start, start + self.micro_batch_size, dtype=np.int64)


class ShardDataset:
    """All sequences of the `.bin` shards in a directory, memory-mapped."""

    def __init__(self, directory: str | Path, seq_len: int, vocab_size: int | None = None) -> None:
        directory = Path(directory)
        files = sorted(directory.glob("*.bin"))
        if not files:
            raise BsmError(
                f"no token shards (*.bin) in {directory}",
                hint="point the channel at the output of `bsm data prepare`, or use "
                "training.data.source: synthetic",
            )
        self._check_manifest(directory, vocab_size, seq_len)
        self.seq_len = seq_len
        read = [_read(f) for f in files]
        self.shards = [tokens for tokens, _ in read]
        self.flags = [flags for _, flags in read]
        if len({f is None for f in self.flags}) > 1:
            raise BsmError(
                f"{directory}: mixes plain (version 1) and fine-tuning (version 2) shards",
                hint="prepare pretraining and fine-tuning data into separate channels",
            )
        self.has_flags = self.flags[0] is not None
        counts = [max(0, (len(s) - 1) // seq_len) for s in self.shards]
        self.offsets = np.cumsum([0, *counts])
        if self.offsets[-1] == 0:
            raise BsmError(f"{directory}: fewer than seq_len+1 = {seq_len + 1} tokens in any shard")

    @staticmethod
    def _check_manifest(directory: Path, vocab_size: int | None, seq_len: int) -> None:
        manifest = directory / "manifest.json"
        if not manifest.exists():
            return
        data = json.loads(manifest.read_text())
        rows = data.get("seq_len")
        if rows is not None and rows != seq_len:
            raise BsmError(
                f"{directory}: fine-tuning rows were packed to seq_len {rows}, the plan trains "
                f"at seq_len {seq_len}",
                hint=f"set training.seq_len: {rows}, or prepare the data again with "
                f"--seq-len {seq_len}",
            )
        if vocab_size is None:
            return
        shard_vocab = data.get("vocab_size")
        if shard_vocab is not None and shard_vocab > vocab_size:
            raise BsmError(
                f"{directory}: shards use a vocabulary of {shard_vocab} tokens but the model's "
                f"vocab_size is {vocab_size}",
                hint="set model.vocab_size >= the tokenizer's vocabulary",
            )

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def sequence(self, index: int) -> np.ndarray:
        shard = int(np.searchsorted(self.offsets, index, side="right") - 1)
        start = (index - int(self.offsets[shard])) * self.seq_len
        return np.asarray(self.shards[shard][start : start + self.seq_len + 1], dtype=np.int64)

    def row_flags(self, index: int) -> np.ndarray:
        """The flags of `sequence(index)` (version 2 shards)."""
        shard = int(np.searchsorted(self.offsets, index, side="right") - 1)
        start = (index - int(self.offsets[shard])) * self.seq_len
        return np.asarray(self.flags[shard][start : start + self.seq_len + 1])

    def batch(self, positions: np.ndarray, seed: int):
        """(len(positions), seq_len + 1) tokens for stream positions under seed's order; for
        version 2 shards, (tokens, loss_mask, doc_ids): 0/1 per token, and the sample each token
        belongs to (counted from the row's start)."""
        n = len(self)
        perms: dict[int, np.ndarray] = {}
        index = []
        for p in positions.tolist():
            epoch, i = divmod(p, n)
            if epoch not in perms:
                perms[epoch] = np.random.Generator(np.random.PCG64([seed, epoch])).permutation(n)
            index.append(int(perms[epoch][i]))
        tokens = np.stack([self.sequence(i) for i in index])
        if not self.has_flags:
            return tokens
        flags = np.stack([self.row_flags(i) for i in index])
        loss_mask = (flags & FLAG_LOSS).astype(np.int64)
        doc_ids = np.cumsum((flags & FLAG_START) > 0, axis=1, dtype=np.int64)
        return tokens, loss_mask, doc_ids


class SyntheticDataset:
    """A learnable endless stream: sequences walk a fixed random successor table.

    Each token is followed by its successor `table[token]` with probability `1 - noise`, else by a
    uniformly random token, so a model can drive the loss well below log(vocab). Sequence i is a
    pure function of (seed, i).
    """

    def __init__(self, seq_len: int, vocab_size: int, seed: int, noise: float = 0.1) -> None:
        self.seq_len, self.vocab_size, self.seed, self.noise = seq_len, vocab_size, seed, noise
        rng = np.random.Generator(np.random.PCG64([seed, 0x5EED]))
        self.table = rng.permutation(vocab_size)

    def sequence(self, index: int) -> np.ndarray:
        rng = np.random.Generator(np.random.PCG64([self.seed, 1, index]))
        n = self.seq_len + 1
        jumps = rng.random(n) < self.noise
        random_tokens = rng.integers(0, self.vocab_size, n)
        jumps[0] = True
        # Between jumps the stream follows the table: out[t] = table^k(random_tokens[last jump]),
        # k = t - last jump. Apply the table k times, vectorised over positions (the longest run
        # between jumps is short), instead of a Python loop over every token.
        last_jump = np.maximum.accumulate(np.where(jumps, np.arange(n), 0))
        k = np.arange(n) - last_jump
        out = random_tokens[last_jump].astype(np.int64)
        for step in range(int(k.max())):
            walk = k > step
            out[walk] = self.table[out[walk]]
        return out

    def batch(self, positions: np.ndarray, seed: int) -> np.ndarray:
        return np.stack([self.sequence(int(p)) for p in positions.tolist()])


# Validation sequences live far from training ones in the synthetic stream.
SYNTHETIC_VALIDATION_OFFSET = 1 << 40
