"""Token shards and the data order: which sequences each rank trains on at each step.

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

The order is a pure function of (seed, step): the global batch of step s is positions
[s*B, (s+1)*B) of an endless stream that visits all sequences in a fresh seeded permutation per
epoch. Position p of the batch goes to data-parallel rank (p // micro) % dp, so ranks read
disjoint sequences and resuming needs only the step.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
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
        self._check_manifest(directory, vocab_size)
        self.seq_len = seq_len
        self.shards = [read_shard(f) for f in files]
        counts = [max(0, (len(s) - 1) // seq_len) for s in self.shards]
        self.offsets = np.cumsum([0, *counts])
        if self.offsets[-1] == 0:
            raise BsmError(f"{directory}: fewer than seq_len+1 = {seq_len + 1} tokens in any shard")

    @staticmethod
    def _check_manifest(directory: Path, vocab_size: int | None) -> None:
        from blackwell_sm.safe_load import load_mapping

        manifest = directory / "manifest.json"
        if vocab_size is None or not manifest.exists():
            return
        shard_vocab = load_mapping(manifest, field="manifest.json", fmt="json").get("vocab_size")
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

    def batch(self, positions: np.ndarray, seed: int) -> np.ndarray:
        """(len(positions), seq_len + 1) tokens for stream positions under seed's order."""
        n = len(self)
        rows = []
        perms: dict[int, np.ndarray] = {}
        for p in positions.tolist():
            epoch, i = divmod(p, n)
            if epoch not in perms:
                perms[epoch] = np.random.Generator(np.random.PCG64([seed, epoch])).permutation(n)
            rows.append(self.sequence(int(perms[epoch][i])))
        return np.stack(rows)


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
