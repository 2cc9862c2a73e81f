"""training.peft: the spec section (field paths), and LoRA in the planner's memory and time models
(planner/lora.py): no state for the frozen base, the adapters' own memory and FLOPs."""

from __future__ import annotations

import json

import pytest

from blackwell_sm.errors import SpecError
from blackwell_sm.planner import memory
from blackwell_sm.planner.lora import lora_shape, with_peft
from blackwell_sm.planner.pipeline import make_plan
from blackwell_sm.planner.shape import shape
from blackwell_sm.spec import arch, get_preset, parse_spec
from blackwell_sm.spec.peft import PeftSpec

SEQ_128K = 131072


def _spec(model: str = "llama-3.1-8b", peft: dict | None = None, **training):
    t = {"task": "finetune", "seq_len": 8192, "global_batch_seqs": 64, "total_steps": 100}
    t.update(training)
    if peft is not None:
        t["peft"] = peft
    return parse_spec(
        {
            "model": model,
            "training": t,
            "compute": {"instance_type": "ml.p6-b200.48xlarge", "instance_count": 1},
        }
    )


@pytest.mark.parametrize(
    ("peft", "training", "path", "words"),
    [
        ({"rank": 0}, {}, "training.peft.rank", "greater than 0"),
        ({"target_modules": ["qkv"]}, {}, "training.peft.target_modules.0", "'q_proj'"),
        ({"target_modules": []}, {}, "training.peft.target_modules", "at least 1"),
        ({"target_modules": ["q_proj", "q_proj"]}, {}, "training.peft.target_modules", "twice"),
        ({"modules_to_save": ["norm"]}, {}, "training.peft.modules_to_save.0", "embed_tokens"),
        ({"dropout": 1.0}, {}, "training.peft.dropout", "less than 1"),
        ({"method": "dora"}, {}, "training.peft.method", "lora"),
        ({"init_adapter": "s3://b/a"}, {}, "training.peft.init_adapter", "local folder"),
        ({}, {"precision": "fp8"}, "training.precision", "allowed: auto, bf16"),
    ],
)
def test_bad_peft_input_names_its_field(peft, training, path, words):
    with pytest.raises(SpecError) as e:
        _spec(peft=peft, **training)
    assert f"{path}: " in str(e.value) and words in str(e.value)


def test_the_rank_stays_below_the_adapted_widths():
    with pytest.raises(SpecError, match=r"training\.peft\.rank: rank 1024 is not below .* 1024"):
        _spec(peft={"rank": 1024, "target_modules": ["k_proj"]})  # k_proj: 4096 -> 1024


def test_a_tied_model_has_no_lm_head_to_train():
    with pytest.raises(SpecError, match=r"training\.peft\.modules_to_save: lm_head is tied"):
        _spec("llama-3.2-1b", peft={"modules_to_save": ["lm_head"]})


def test_targets_take_the_blocks_order_and_the_schema_shows_the_section():
    from blackwell_sm.spec.schema import spec_json_schema

    assert PeftSpec(target_modules=["down_proj", "q_proj"]).target_modules == [
        "q_proj",
        "down_proj",
    ]
    text = json.dumps(spec_json_schema())
    assert "PeftSpec" in text and "modules_to_save" in text


def test_adapter_count_is_the_textbook_one():
    spec = get_preset("llama-3.1-8b")
    lo = lora_shape(spec, PeftSpec(rank=16))
    h, kv, f = spec.d_model, spec.kv_dim, spec.ffn_dim
    per_block = 16 * ((h + h) + 2 * (h + kv) + (h + h) + 2 * (h + f) + (f + h))
    assert lo.block_params == per_block
    assert lo.trainable(spec.n_layers) == spec.n_layers * per_block  # ~42M for 8B at r 16
    full = lora_shape(spec, PeftSpec(rank=16, modules_to_save=["embed_tokens"]))
    assert full.root_trainable == spec.vocab_size * spec.d_model


def test_frozen_base_holds_bf16_and_no_state():
    spec = get_preset("llama-3.1-70b")
    m = with_peft(shape(spec), PeftSpec(rank=16))
    params, grads, optim = memory.state_bytes(m, 8)
    n, trained = spec.n_params, m.lora.trainable(spec.n_layers)
    assert params == pytest.approx((n * 2 + trained * 4) / 8)
    assert grads == pytest.approx(trained * 4 / 8) and optim == pytest.approx(trained * 8 / 8)
    full = memory.state_bytes(shape(spec), 8)
    assert sum(full) / sum((params, grads, optim)) > 7  # 16 bytes per parameter against ~2


def test_lora_saves_memory_and_time_and_the_plan_says_so():
    full, lora = make_plan(_spec()), make_plan(_spec(peft={"rank": 16}))
    assert lora.config.precision == "bf16"  # adapters run on bf16 linears: fp8 not searched
    assert (
        lora.memory_gib.params_fp32 + lora.memory_gib.grads_fp32 + lora.memory_gib.optimizer_states
        < (
            full.memory_gib.params_fp32
            + full.memory_gib.grads_fp32
            + full.memory_gib.optimizer_states
        )
        / 5
    )
    assert lora.run.hours < full.run.hours


def test_frozen_linears_cost_no_weight_gradient():
    from blackwell_sm.hardware import get_instance
    from blackwell_sm.planner.step_time import compute_terms_per_token

    spec = get_preset("llama-3.1-8b")
    inst = get_instance("ml.p6-b200.48xlarge")
    args = (inst, 4096, "bf16", "none", False)
    full = compute_terms_per_token(shape(spec), *args)[0]
    lo = compute_terms_per_token(with_peft(shape(spec), PeftSpec(rank=16)), *args)[0]
    # The linears are most of the step: 4 FLOPs per parameter instead of 6, plus the adapters.
    assert 0.6 < lo / full < 0.8


def test_70b_lora_at_128k_fits_one_node():
    spec = _spec("llama-3.1-70b", peft={"rank": 16}, seq_len=SEQ_128K, global_batch_seqs=8)
    p = make_plan(spec)
    assert p.feasible and p.instance.count == 1
    assert p.config.seq_len == SEQ_128K
    trained = lora_shape(spec.model, spec.training.peft).trainable(spec.model.n_layers)
    assert p.checkpoint.bytes_per_save == trained * 12  # fp32 adapters + AdamW, no base
    assert arch.FAMILIES[spec.model.family].hf_class == "LlamaForCausalLM"


@pytest.mark.slow
def test_the_trace_builds_the_lora_model_and_agrees():
    """`bsm plan --trace`'s check on a 3-block llama-3.1-8b with LoRA under full checkpointing:
    the traced peak is in an adapter's backward and the planner is within 5 % of it (as for a
    full fine-tune of the same shape: tests/test_trace.py)."""
    pytest.importorskip("torch")
    from blackwell_sm.api.plan import trace_plan

    t = {
        "task": "finetune",
        "seq_len": 16384,
        "global_batch_seqs": 16,
        "total_steps": 10,
        "schedule": {"warmup_steps": 1},
        "activation_checkpointing": "full",
        "pins": {"micro_batch_size": 1, "cp_degree": 1, "compile": False},
        "peft": {"rank": 16},
    }
    spec = parse_spec(
        {
            "model": {"preset": "llama-3.1-8b", "n_layers": 3},
            "training": t,
            "compute": {"instance_type": "ml.p6-b200.48xlarge", "instance_count": 1},
        }
    )
    check = trace_plan(make_plan(spec))
    assert ".lora_" in check.peak_at
    traced = {r.term: r.traced_gib for r in check.rows}
    assert traced["grads_fp32"] < 0.01 and traced["optimizer_states"] < 0.01  # adapters only
    assert abs(check.error) < 0.05, check.error


def test_a_lora_job_request_and_a_local_adapter_refused_at_submit():
    from aws_support import plan_for, spec_dict

    from blackwell_sm.job.request import build_job_request
    from blackwell_sm.job.validate import validate_request

    d = spec_dict("llama-3.1-8b")
    d["training"] = {
        "task": "finetune",
        "seq_len": 8192,
        "total_steps": 100,
        "init_from": "s3://bsm-test-bucket/models/Llama-3.1-8B/",
        "peft": {"rank": 16},
    }
    spec = parse_spec(d)
    validate_request(build_job_request(spec, plan_for(spec)).request)
    d["training"]["peft"]["init_adapter"] = "/data/adapter"
    spec = parse_spec(d)
    with pytest.raises(SpecError) as e:
        build_job_request(spec, plan_for(spec))
    assert e.value.field == "training.peft.init_adapter" and "run-local" in (e.value.hint or "")
