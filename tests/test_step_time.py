"""planner/step_time.py on its own: one hand-computed step, its limits, and its monotonicity."""

from __future__ import annotations

import math

import pytest

from blackwell_sm.hardware import get_instance
from blackwell_sm.planner import calibration as C
from blackwell_sm.planner.shape import shape
from blackwell_sm.planner.step_time import compute_time_per_token, step_time
from blackwell_sm.spec import get_preset

P6 = get_instance("ml.p6-b200.48xlarge")
P5 = get_instance("ml.p5.48xlarge")
M8B = shape(get_preset("llama-3.1-8b"))  # the planner's functions take a Shape


def st(**kw):
    args = dict(shard_degree=8, replicate_degree=1, micro_batch=1, grad_accum=1, seq_len=4096)
    args |= dict(precision="bf16", mode="none", compile=False, reshard_after_forward=True)
    return step_time(M8B, kw.pop("instance", P6), **(args | kw))


def test_one_gpu_step_by_hand():
    """llama-3.1-8b, one B200, one 4096-token sequence, bf16, eager, no checkpointing: no
    collectives, so the step is compute plus the optimizer's memory traffic. Shapes by hand:
    32 blocks of 4096·4096·2 + 2·4096·1024 + 3·4096·14336 = 218,103,808 linear weights, an
    output head (and final norm) of 525,340,672, 8,030,261,248 parameters in all."""
    peak, hbm = 2250e12, 8e12  # B200 dense BF16 FLOP/s, HBM bytes/s
    scale = C.BLACKWELL_SCALE  # B200's efficiencies: Hopper's x what FSDP2 reaches on Blackwell
    lin_eff = C.MATMUL_EFFICIENCY[("bf16", False)] * scale
    linears = 6 * (32 * 218_103_808 + 525_340_672) / (peak * lin_eff)
    attention = (
        12
        * 32
        * 4096
        * 4096
        * C.ATTENTION_CAUSAL_FRACTION
        / (peak * C.ATTENTION_EFFICIENCY * scale)
    )
    a, b = C.ELEMENTWISE_BYTES[False]
    elementwise = 32 * (a * 4096 + b * 14336) / (hbm * C.HBM_EFFICIENCY)
    compute = 4096 * (linears + attention + elementwise)
    optimizer = 8_030_261_248 * C.OPTIMIZER_BYTES_PER_PARAM / (hbm * C.HBM_EFFICIENCY)

    t = st(shard_degree=1)
    assert t.comm_s == t.exposed_comm_s == 0.0
    assert math.isclose(t.compute_s, compute, rel_tol=1e-12)
    assert math.isclose(t.optimizer_s, optimizer, rel_tol=1e-12)
    assert math.isclose(t.step_s, compute + optimizer, rel_tol=1e-12)
    assert 0.37 < t.step_s < 0.43  # with today's constants: 0.356 s + 0.046 s


def test_limits():
    one = st(shard_degree=1)
    assert one.comm_s == 0.0  # nothing to gather or reduce on one GPU
    assert st(replicate_degree=1).comm_s < st(shard_degree=8, replicate_degree=2).comm_s
    for kw in ({}, {"shard_degree": 16}, {"shard_degree": 64, "micro_batch": 8}):
        t = st(**kw)
        assert t.exposed_comm_s >= 0.0
        assert t.step_s >= t.compute_s + t.optimizer_s
    # Low precision speeds up the block linears only: less than 2x on a 2x-peak GPU.
    bf16, fp8 = st(shard_degree=1), st(shard_degree=1, precision="fp8")
    assert bf16.compute_s / 2 < fp8.compute_s < bf16.compute_s


@pytest.mark.parametrize("shard_degree", [8, 16, 64])
@pytest.mark.parametrize("micro_batch", [1, 8])
def test_exposed_communication_never_exceeds_the_communication(shard_degree, micro_batch):
    # 64: 8 nodes, EFA-bound, almost nothing hidden (the first gather and the last
    # reduce-scatter were once counted twice there).
    t = st(shard_degree=shard_degree, micro_batch=micro_batch)
    assert 0.0 < t.exposed_comm_s <= t.comm_s


def test_recompute_is_the_part_of_compute_checkpointing_redoes():
    none, sel, full = (st(mode=m) for m in ("none", "selective", "full"))
    assert none.recompute_s == 0.0
    assert 0.0 < sel.recompute_s < full.recompute_s < full.compute_s
    for t in (sel, full):
        assert math.isclose(t.compute_s - t.recompute_s, none.compute_s, rel_tol=1e-12)


@pytest.mark.parametrize(
    ("knob", "values"),
    [
        ("micro_batch", [1, 2, 4, 8]),
        ("seq_len", [1024, 2048, 4096, 8192]),
        ("mode", ["none", "selective", "full"]),
        ("shard_degree", [8, 16, 32, 64]),  # more of the traffic crosses EFA
    ],
)
def test_step_time_grows_with_work(knob, values):
    times = [st(**{knob: v}).step_s for v in values]
    assert times == sorted(times) and len(set(times)) == len(times), times


def test_accumulation_is_linear_and_the_optimizer_runs_once():
    one, four = st(grad_accum=1), st(grad_accum=4)
    assert math.isclose(four.step_s - four.optimizer_s, 4 * (one.step_s - one.optimizer_s))
    assert four.optimizer_s == one.optimizer_s


def test_tokens_cost_less_per_token_on_a_faster_gpu():
    args = dict(seq_len=4096, precision="bf16", mode="none", compile=False)
    assert compute_time_per_token(M8B, P6, **args) < compute_time_per_token(M8B, P5, **args)
    assert st(instance=P6).step_s < st(instance=P5).step_s
