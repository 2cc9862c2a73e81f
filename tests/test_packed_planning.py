"""Fine-tuning's packed rows (documents that must not see each other) decide plans: the dense
mask computes every score block (no causal half skipped) and, without checkpointing, every
block keeps its own copy of the mask. Each decides a case here that pretraining decides
otherwise, everything else equal."""

from __future__ import annotations

from typing import Any

from blackwell_sm.planner.api import make_plan
from blackwell_sm.planner.plan import Plan
from blackwell_sm.spec import parse_spec


def _plan(task: str, model: str, compute: dict[str, Any], **training: Any) -> Plan:
    return make_plan(
        parse_spec({"model": model, "compute": compute, "training": {"task": task, **training}})
    )


def test_the_full_attention_of_packed_rows_takes_a_second_instance_to_meet_a_deadline():
    """llama-3.1-8b at 4,096 (2 x 4096 x 4096 mask: dense): pretraining fits 60 h on one
    instance (56.0 h), fine-tuning's full attention needs 62.7 h there: two instances."""
    kw: dict[str, Any] = {
        "seq_len": 4096,
        "total_tokens": 20_000_000_000,
        "precision": "bf16",
        "activation_checkpointing": "selective",
        "pins": {"micro_batch_size": 2},
    }
    compute = {"instance_count": "auto", "deadline_hours": 60}
    pre = _plan("pretrain", "llama-3.1-8b", compute, **kw)
    fine = _plan("finetune", "llama-3.1-8b", compute, **kw)
    one = _plan("finetune", "llama-3.1-8b", {"instance_count": 1}, **kw)
    assert pre.instance.count == 1 and pre.run.hours <= 60
    assert one.run.hours > 60 and fine.instance.count == 2
    assert one.throughput.tokens_per_s_per_gpu < pre.throughput.tokens_per_s_per_gpu


def test_the_mask_each_block_keeps_without_checkpointing_halves_the_micro_batch():
    """qwen3-14b at 2,048 on a p5 (H100 80GB), no checkpointing, bf16: pretraining fits
    micro-batch 2 (74.5 GiB); fine-tuning's dense mask, kept by every block with its K/V
    expanded to all heads, would not fit beside it: micro-batch 1."""
    kw = {"seq_len": 2048, "total_steps": 100, "activation_checkpointing": "none"}
    p5 = {"instance_type": "ml.p5.48xlarge"}
    pre = _plan("pretrain", "qwen3-14b", p5, precision="bf16", **kw)
    fine = _plan("finetune", "qwen3-14b", p5, precision="bf16", **kw)
    assert pre.config.micro_batch_size == 2 and fine.config.micro_batch_size == 1
    assert pre.memory_gib.usable is not None and pre.memory_gib.total < pre.memory_gib.usable
