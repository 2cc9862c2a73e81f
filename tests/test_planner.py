"""The planner: memory-model properties, the 64B-on-one-node claim, pins, instance counts,
templates, local plans and precision reasoning. No torch here (the planner never imports it)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blackwell_sm.api.plan import plan
from blackwell_sm.errors import SpecError
from blackwell_sm.hardware import CATALOG, local_instance
from blackwell_sm.planner import memory
from blackwell_sm.planner.api import make_plan
from blackwell_sm.planner.shape import Shape, shape
from blackwell_sm.spec import PRESETS, ModelSpec, load_spec, parse_spec, with_overrides

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = sorted((ROOT / "templates").glob("*.yaml"))
B200 = "ml.p6-b200.48xlarge"


@st.composite
def model_shapes(draw) -> Shape:
    head_dim = draw(st.sampled_from([16, 32, 64, 128]))
    kv = draw(st.integers(1, 8))
    group = draw(st.integers(1, 8))
    spec = ModelSpec(
        n_layers=draw(st.integers(1, 96)),
        d_model=head_dim * kv * group,
        n_heads=kv * group,
        n_kv_heads=kv,
        ffn_dim=draw(st.integers(1, 64)) * 128,
        vocab_size=draw(st.integers(256, 256_000)),
        tie_embeddings=draw(st.booleans()),
    )
    return shape(spec)


@settings(max_examples=150, deadline=None)
@given(model_shapes(), st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 512]), st.integers(1, 8))
def test_more_sharding_never_raises_per_gpu_states(m, shard, factor):
    fewer = memory.state_bytes(m, shard)
    more = memory.state_bytes(m, shard * factor)
    assert all(b <= a for a, b in zip(fewer, more, strict=True))
    kw = dict(replicate_degree=1, micro_batch=1, seq_len=1024, precision="bf16", mode="full")
    kw |= dict(reshard_after_forward=True)
    t1 = memory.memory_terms(m, shard_degree=shard, **kw)
    t2 = memory.memory_terms(m, shard_degree=shard * factor, **kw)
    sharded = lambda t: t.params_fp32 + t.grads_fp32 + t.optimizer_states  # noqa: E731
    assert sharded(t2) <= sharded(t1)


@settings(max_examples=150, deadline=None)
@given(
    model_shapes(),
    st.integers(1, 16),
    st.sampled_from([128, 512, 2048, 8192, 32768]),
    st.booleans(),
)
def test_full_le_selective_le_none(m, mb, seq, fused):
    per_block = {
        mode: memory.activation_bytes_per_block(m, mb, seq, mode, fused_norm=fused)
        for mode in ("none", "selective", "full")
    }
    assert per_block["full"] <= per_block["selective"] <= per_block["none"]
    total = {
        mode: memory.activation_bytes(m, mb, seq, mode, fused_norm=fused)
        for mode in ("none", "selective", "full")
    }
    assert total["full"] <= total["selective"] <= total["none"]


def test_no_quadratic_attention_term():
    m = shape(PRESETS["llama-3.1-8b"])
    one = memory.activation_bytes_per_block(m, 1, 8192, "none")
    assert memory.activation_bytes_per_block(m, 1, 16384, "none") == pytest.approx(2 * one)


def test_logits_term_is_the_fp32_loss():
    m = shape(PRESETS["llama-3.1-8b"])
    assert memory.logits_and_loss_bytes(m, 2, 8192) == 2 * 8192 * m.vocab_size * 12


def test_llama_64b_fits_on_one_p6_b200_and_says_how():
    p = make_plan(parse_spec({"model": "llama-64b", "compute": {"instance_type": B200}}))
    assert p.feasible and p.instance.count == 1 and p.instance.type == B200
    assert p.memory_gib.total <= p.memory_gib.limit
    c = p.config
    assert c.shard_degree == 8 and c.replicate_degree == 1
    assert c.micro_batch_size * c.grad_accum_steps * 8 == p.spec.training.global_batch_sequences
    text = " ".join(p.reasons)
    assert f"activation_checkpointing {c.activation_checkpointing}" in text
    assert "precision" in text and "shard_degree 8" in text
    assert p.alternatives and all(a.why_not for a in p.alternatives)
    assert p.run.cost_usd and p.run.cost_usd > 0


def test_seventy_b_bf16_long_sequences_is_infeasible_with_advice():
    """With the state kept on the GPUs (offload pinned off: with it, it fits,
    tests/test_offload_lever.py)."""
    spec = parse_spec(
        {
            "model": "llama-3.1-70b",
            "training": {"seq_len": 131072, "precision": "bf16", "pins": {"offload": False}},
        }
    )
    p = make_plan(spec)
    assert not p.feasible
    assert p.memory_gib.total > p.memory_gib.usable
    assert p.throughput.step_time_s > 0 and p.run.steps > 0  # the whole prediction is there
    advice = " ".join(p.advice)
    assert "instances" in advice and "seq_len" in advice and "offload: true fits" in advice


def test_pins_are_respected():
    spec = parse_spec(
        {
            "model": "llama-3.1-8b",
            "training": {
                "seq_len": 4096,
                "precision": "bf16",
                "activation_checkpointing": "selective",
                "pins": {"micro_batch_size": 1, "compile": False, "reshard_after_forward": False},
            },
        }
    )
    c = make_plan(spec).config
    assert (c.micro_batch_size, c.precision, c.activation_checkpointing) == (1, "bf16", "selective")
    assert c.compile is False and c.reshard_after_forward is False
    assert c.grad_accum_steps == spec.training.global_batch_sequences // 8


def test_fully_pinned_infeasible_plan_is_evaluated_not_searched():
    spec = parse_spec(
        {
            "model": "llama-3.1-70b",
            "training": {
                "seq_len": 8192,
                "precision": "bf16",
                "activation_checkpointing": "none",
                "pins": {
                    "shard_degree": 8,
                    "replicate_degree": 1,
                    "micro_batch_size": 4,
                    "grad_accum_steps": 32,
                    "compile": True,
                    "reshard_after_forward": True,
                },
            },
        }
    )
    p = make_plan(spec)
    assert not p.feasible and p.advice
    c = p.config
    assert (c.micro_batch_size, c.grad_accum_steps, c.activation_checkpointing) == (4, 32, "none")
    assert p.alternatives == []  # nothing else was a candidate


def test_bad_pins_are_spec_errors():
    with pytest.raises(SpecError) as e:
        make_plan(parse_spec({"model": "tiny", "training": {"pins": {"shard_degree": 3}}}))
    assert e.value.field == "training.pins.shard_degree" and "allowed" in str(e.value)
    with pytest.raises(SpecError) as e:
        make_plan(
            parse_spec(
                {
                    "model": "tiny",
                    "compute": {"instance_type": "ml.p5.48xlarge"},
                    "training": {"precision": "mxfp8"},
                }
            )
        )
    assert e.value.field == "training.precision"


def test_training_plan_restricts_instance_counts():
    # The plain loss, no context parallelism, no offload: 3 nodes is the fewest that fit.
    base = {
        "model": "llama-3.1-70b",
        "training": {
            "seq_len": 36864,
            "precision": "bf16",
            "total_tokens": 10**9,
            "loss_impl": "full-logits",
            "pins": {"cp_degree": 1, "offload": False},
        },
    }
    free = make_plan(parse_spec({**base, "compute": {"instance_count": "auto"}}))
    booked = make_plan(
        parse_spec({**base, "compute": {"instance_count": "auto", "training_plan": "my-plan"}})
    )
    assert free.feasible and booked.feasible
    assert free.instance.count == 3  # the fewest that fit
    assert booked.instance.count == 4  # ... but a training plan only comes in powers of two
    with pytest.raises(SpecError) as e:
        make_plan(parse_spec({**base, "compute": {"instance_count": 3, "training_plan": "p"}}))
    assert e.value.field == "compute.instance_count" and "1, 2, 4, 8, 16, 32, 64" in str(e.value)


def test_deadline_buys_instances():
    base = {"model": "llama-3.1-8b", "training": {"total_tokens": 200_000_000_000}}
    one = make_plan(parse_spec({**base, "compute": {"instance_count": "auto"}}))
    fast = make_plan(
        parse_spec(
            {**base, "compute": {"instance_count": "auto", "deadline_hours": one.run.hours / 3}}
        )
    )
    assert one.instance.count == 1
    assert fast.instance.count > 1 and fast.run.hours <= one.run.hours / 3
    assert any("deadline" in r for r in fast.reasons)


def test_default_length_is_twenty_tokens_per_param():
    p = make_plan(parse_spec({"model": "llama-3.2-1b"}))
    assert any("20 tokens per parameter" in w for w in p.warnings)
    assert p.run.tokens >= 20 * PRESETS["llama-3.2-1b"].n_params


def test_auto_precision_says_why():
    big = make_plan(parse_spec({"model": "llama-64b"}))
    small = make_plan(parse_spec({"model": "llama-3.2-1b"}))
    assert any(r.startswith("precision:") for r in big.reasons)
    assert small.config.precision == "bf16"
    assert any("below 3B" in r for r in small.reasons)
    h100 = make_plan(
        parse_spec(
            {
                "model": "llama-64b",
                "compute": {"instance_type": "ml.p5.48xlarge", "instance_count": 4},
            }
        )
    )
    assert h100.config.precision != "mxfp8"
    assert any("mxfp8: not supported" in r for r in h100.reasons)


@pytest.mark.parametrize("path", TEMPLATES, ids=[p.stem for p in TEMPLATES])
def test_every_template_plans(path):
    spec = load_spec(path)
    instance = local_instance(nproc=2) if spec.model.name == "tiny" else None
    p = make_plan(spec, instance=instance)
    assert p.feasible, p.warnings
    assert p.memory_gib.total <= p.memory_gib.limit


def test_local_demo_plan():
    spec = load_spec(ROOT / "templates" / "demo-tiny.yaml")
    p = make_plan(spec, instance=local_instance(nproc=2))
    c = p.config
    assert p.feasible and p.instance.count == 1 and p.instance.gpus_per_instance == 2
    assert (c.shard_degree, c.replicate_degree) == (2, 1)
    assert c.precision == "bf16" and c.activation_checkpointing == "none" and c.compile is False
    assert c.global_batch_sequences == spec.training.global_batch_sequences
    assert p.run.cost_usd is None and p.run.steps == spec.training.total_steps


def test_notebook_plan_takes_presets_and_overrides():
    p = plan("llama-3.2-1b", seq_len=2048, precision="bf16", micro_batch_size=2)
    assert p.config.seq_len == 2048 and p.config.micro_batch_size == 2
    assert plan({"model": "tiny"}, instance=local_instance(nproc=1)).feasible


def test_every_preset_on_every_instance_type_plans_without_error():
    for name in PRESETS:
        for itype in CATALOG:
            spec = parse_spec(
                {
                    "model": name,
                    "training": {"total_tokens": 10**10},
                    "compute": {"instance_type": itype, "instance_count": "auto"},
                }
            )
            p = make_plan(spec)
            assert p.feasible, (name, itype)


def test_auto_finishes_within_one_job_or_says_what_would():
    """Issue 13: auto picks the fewest instances that fit AND finish within 28 days; a fixed
    count that does not names the limit and the count that would; no count: exit 3's advice."""
    auto = plan("llama-3.1-70b", **{"compute.instance_count": "auto"})
    assert auto.feasible and auto.run.hours <= 672
    assert auto.instance.count > 1
    one = plan("llama-3.1-70b", **{"compute.instance_count": 1})
    assert one.feasible and one.run.hours > 672 and one.run.jobs > 1
    text = " ".join(one.warnings)
    assert "28-day" in text and f"compute.instance_count: {auto.instance.count}" in text
    assert "days)" in text  # hours over 48 also in days
    late = plan(
        "llama-3.1-70b",
        allow_infeasible=True,
        **{"compute.instance_count": "auto", "compute.instance_type": "ml.p5.48xlarge"},
    )
    assert not late.feasible and late.memory_gib.total <= late.memory_gib.usable
    assert any("instances" in a for a in late.advice)
    assert any("training.total_tokens" in a for a in late.advice)


def test_ranges_breakdown_usable_and_the_published_ceiling():
    p = plan("llama-3.1-8b", seq_len=8192, precision="fp8", **{"compute.instance_count": 1})
    t, r = p.throughput, p.run
    # NeMo 25.11 Megatron-Core FP8, DGX-B200: 30,624 tokens/s/GPU; FSDP2 is not faster.
    assert t.tokens_per_s_per_gpu <= 30624
    lo, hi = t.tokens_per_s_per_gpu_range
    assert lo < t.tokens_per_s_per_gpu <= hi <= 30624 and t.evidence == "anchored"
    assert r.hours_range[0] <= r.hours <= r.hours_range[1] == r.pessimistic_hours
    assert r.cost_usd_range[0] <= r.cost_usd <= r.cost_usd_range[1]
    b = t.breakdown_s
    total = b.compute + b.recompute + b.exposed_communication + b.optimizer
    assert abs(total - t.step_time_s) < 1e-3
    assert p.memory_gib.usable < p.memory_gib.limit
    fitted = plan("llama-3.1-8b", **{"compute.instance_type": "ml.p5en.48xlarge"})
    assert fitted.throughput.evidence == "fitted"
    wide = (hi - lo) / t.tokens_per_s_per_gpu
    flo, fhi = fitted.throughput.tokens_per_s_per_gpu_range
    assert (fhi - flo) / fitted.throughput.tokens_per_s_per_gpu < wide


def test_the_published_ceiling_holds_at_every_seq_len_and_precision():
    """The record is a FLOP rate: converted to the plan's FLOPs per token it bounds other sequence
    lengths, and the fp8 record bounds bf16 (which has none of its own)."""
    from blackwell_sm.hardware import get_instance
    from blackwell_sm.planner.uncertainty import published_ceiling
    from blackwell_sm.spec.presets import get_preset

    gpu, m = get_instance("ml.p6-b200.48xlarge").gpu, get_preset("llama-3.1-8b")
    at_8k, src = published_ceiling(gpu, m, "fp8", 8192)
    assert at_8k == 30624.0 and "converted" not in src
    at_4k, src = published_ceiling(gpu, m, "fp8", 4096)
    assert at_4k == pytest.approx(30624.0 * m.flops_per_token(8192) / m.flops_per_token(4096))
    assert "seq 8192" in src
    bf16, _ = published_ceiling(gpu, m, "bf16", 8192)
    assert bf16 == 30624.0
    assert published_ceiling(gpu, get_preset("llama-3.1-70b"), "fp8", 8192) is None
    for seq in (2048, 4096, 16384):
        for prec in ("bf16", "fp8", "mxfp8"):
            p = plan("llama-3.1-8b", seq_len=seq, precision=prec, **{"compute.instance_count": 1})
            ceiling = published_ceiling(gpu, m, prec, seq)[0]
            hi = p.throughput.tokens_per_s_per_gpu_range[1]
            assert hi <= max(ceiling, p.throughput.tokens_per_s_per_gpu) * (1 + 1e-6)
            over = p.throughput.tokens_per_s_per_gpu > ceiling
            assert over == any("best published" in w for w in p.warnings)


def test_ties_prefer_free_memory_and_say_so():
    p = plan("llama-2-13b", seq_len=4096)  # ties within 1 % of the fastest
    assert p.memory_gib.total < 0.7 * p.memory_gib.limit  # not the 160.6 GiB tie
    assert any("more free memory" in r for r in p.reasons)


def test_absurd_scale_is_flagged():
    big = plan("llama-3.1-8b", **{"compute.instance_count": 100, "training.total_tokens": 10**9})
    assert any("beyond the 64" in w for w in big.warnings)
    costly = plan("llama-3.1-70b", **{"compute.instance_count": 8})
    assert any("compute.confirm_cost_usd" in w for w in costly.warnings)
    cheap = plan("llama-3.2-1b", **{"training.total_tokens": 10**9})
    assert not any("confirm_cost_usd" in w for w in cheap.warnings)


def test_communication_bound_and_near_miss_advice():
    """The 70B template on 4 x p5 (H100) at micro-batch 1: full shard across nodes is EFA-bound
    (a warning says what would help). llama-3.1-70b at seq 2560 on one p6-b200: a faster layout
    misses the usable limit by a little (advice says what would make it fit)."""
    spec = load_spec(ROOT / "templates" / "llama-3.1-70b.yaml")
    p = make_plan(
        with_overrides(
            spec,
            {
                "compute.instance_type": "ml.p5.48xlarge",
                "compute.instance_count": 4,
                "micro_batch_size": 1,
            },
        )
    )
    b = p.throughput.breakdown_s
    assert b.exposed_communication > 0.2 * p.throughput.step_time_s
    bound = [n for n in p.notes if n.code == "comm_bound"]
    assert bound and "would help" in bound[0].text
    p = make_plan(
        parse_spec(
            {
                "model": "llama-3.1-70b",
                "compute": {"instance_count": 1},
                "training": {"total_tokens": 20_000_000_000, "seq_len": 2560},
            }
        )
    )
    near = [n.text for n in p.notes if n.code == "near_miss"]
    assert near and f"usable {p.memory_gib.usable:.1f} GiB" in near[0]


def test_packed_rows_pay_the_full_score_matrix():
    """A block-diagonal mask goes to a dense-mask kernel: no causal half skipped."""
    from blackwell_sm.hardware import get_instance
    from blackwell_sm.planner import calibration as C
    from blackwell_sm.planner.step_time import compute_time_per_token

    m, inst = shape(PRESETS["qwen3-8b"]), get_instance("ml.p6-b200.48xlarge")
    a, b = (
        compute_time_per_token(m, inst, 4096, "bf16", "selective-op", True, packed=p)
        for p in (False, True)
    )
    extra = 12.0 * m.n_layers * m.spec.q_dim * 4096 * (1 - C.ATTENTION_CAUSAL_FRACTION)
    eff = C.ATTENTION_EFFICIENCY * C.gpu_calibration(inst.gpu.name).compute_scale
    assert b - a == pytest.approx(extra / (inst.gpu.peak_flops("bf16") * eff))
