"""What one checkpoint weighs and how long it takes to write: the container's disk preflight and
`bsm plan`'s checkpoint line read these (one source of truth).

A save (train/checkpoint.py: DCP `get_state_dict(model, optimizer)`) holds the fp32 master
parameters and AdamW's exp_avg and exp_avg_sq, each sharded once over the shard group. HSDP
replicas hold identical shards; DCP de-duplicates them, so the sum over ranks is one copy.
Gradients are not saved; RNG states and the marker are a few KiB.
"""

from __future__ import annotations

from typing import NamedTuple

from blackwell_sm.planner import calibration as C


class CheckpointSize(NamedTuple):
    bytes_per_save: int  # summed over ranks, after HSDP de-duplication
    max_bytes_per_host: int  # what one host's ranks hold: the most it writes
    save_s: float  # predicted wall time of one save (the slowest host)


def checkpoint_size(
    n_params: int, shard_degree: int, gpus_per_host: int, write_gb_s: float | None = None
) -> CheckpointSize:
    """Bytes of one save and its predicted write time for `n_params` sharded `shard_degree` ways
    with `gpus_per_host` ranks per host (`write_gb_s`: the host's write rate, GB/s)."""
    per_param = C.MASTER_PARAM_BYTES + C.ADAM_STATE_BYTES
    total = n_params * per_param
    # A host's ranks hold min(gpus_per_host, shard_degree) distinct shards of 1/shard_degree each.
    held = total * min(gpus_per_host, shard_degree) // shard_degree
    rate = (write_gb_s or C.CHECKPOINT_WRITE_GB_S) * 1e9
    return CheckpointSize(int(total), int(held), held / rate)
