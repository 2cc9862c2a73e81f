"""The data order: which sequences each rank trains on at each step (shards: `blackwell_sm.data`).

The order is a pure function of (seed, step): the global batch of step s is positions
[s*B, (s+1)*B) of an endless stream that visits all sequences in a fresh seeded permutation per
epoch. Position p of the batch goes to data-parallel rank (p // micro) % dp, so ranks read
disjoint sequences and resuming needs only the step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from blackwell_sm.data.channel import channel_identity, open_channel
from blackwell_sm.data.shards import FLAG_LOSS, FLAG_START
from blackwell_sm.errors import BsmError
from blackwell_sm.planner.batch import global_batch


@dataclass(frozen=True)
class BatchLayout:
    """How a step's global batch is cut: sequences per micro-batch, micro-batches, dp ranks."""

    micro_batch_size: int
    grad_accum_steps: int
    dp_size: int
    seq_len: int

    @property
    def global_batch(self) -> int:
        return global_batch(self.micro_batch_size, self.grad_accum_steps, self.dp_size)

    def positions(self, step: int, micro: int, dp_rank: int) -> np.ndarray:
        """Stream positions of one micro-batch of one rank (disjoint across ranks and micros)."""
        start = step * self.global_batch + (micro * self.dp_size + dp_rank) * self.micro_batch_size
        return np.arange(start, start + self.micro_batch_size, dtype=np.int64)


class ShardDataset:
    """All sequences of a channel's shards, memory-mapped and checked when opened
    (`data/channel.py`: the manifest's list, sizes, headers, token ids below `vocab_size`)."""

    def __init__(self, directory: str | Path, seq_len: int, vocab_size: int | None = None) -> None:
        directory = Path(directory)
        channel = open_channel(directory, vocab_size=vocab_size, seq_len=seq_len)
        self.seq_len = seq_len
        #: the tokenizer that made the shards, when it travels with them (exported with the model)
        self.tokenizer_dir = channel.tokenizer_dir
        #: what the data is, recorded in every checkpoint (train/run_identity.py)
        self.identity = channel_identity(channel)
        self.shards = [s.tokens for s in channel.shards]
        self.flags = [s.flags for s in channel.shards]
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
        flags = self.flags[shard]
        assert flags is not None, "row_flags reads version 2 shards only"
        return np.asarray(flags[start : start + self.seq_len + 1])

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
