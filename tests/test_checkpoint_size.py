"""planner/checkpoint_size.py: one save's bytes (the container's disk preflight) and write time.
The bytes are held against a real DCP save in tests/test_train_loop.py."""

from __future__ import annotations

from blackwell_sm.api.plan import plan
from blackwell_sm.planner import calibration as C
from blackwell_sm.planner.checkpoint_size import checkpoint_size


def test_a_save_is_fp32_params_and_two_adam_states_once():
    n = 8_000_000_000
    full = checkpoint_size(n, shard_degree=8, gpus_per_host=8)
    assert full.bytes_per_save == 12 * n
    assert full.max_bytes_per_host == 12 * n  # one host holds every shard
    # HSDP across 4 hosts (shard 8 inside each): still one copy in all, one copy per host.
    assert checkpoint_size(n, shard_degree=8, gpus_per_host=8).bytes_per_save == 12 * n
    # Full shard across 4 hosts: each host holds a quarter.
    quarter = checkpoint_size(n, shard_degree=32, gpus_per_host=8)
    assert quarter.bytes_per_save == 12 * n and quarter.max_bytes_per_host == 3 * n
    assert quarter.save_s == 3 * n / (C.CHECKPOINT_WRITE_GB_S * 1e9)


def test_the_plan_carries_it():
    p = plan("llama-3.1-8b")
    assert p.checkpoint is not None
    assert p.checkpoint.bytes_per_save == 12 * p.model.n_params
    assert abs(p.checkpoint.gib_per_save - 12 * p.model.n_params / 2**30) < 1e-2
    assert p.checkpoint.save_s > 0
