"""The real loop traced on fake tensors (blackwell_sm/train/trace.py) and the planner held to it
(planner/trace_check.py): the instrument against the CPU allocator at small size, what the fake
run proves about the wrapped model, one preset at full size against the planner, and the
`bsm plan --trace` / `plan(trace=True)` front doors. The whole table (every preset, mode and
length) is benchmarks/trace_table.py, run by hand: its figures are in benchmarks/results/."""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")

from cli_support import run  # noqa: E402
from train_support import local_plan  # noqa: E402

from blackwell_sm.api.plan import plan, trace_plan  # noqa: E402
from blackwell_sm.errors import SpecError  # noqa: E402
from blackwell_sm.planner import memory  # noqa: E402
from blackwell_sm.planner.api import pinned_plan  # noqa: E402
from blackwell_sm.planner.shape import shape  # noqa: E402
from blackwell_sm.planner.trace_check import TracedPlan, compare  # noqa: E402
from blackwell_sm.spec import arch, long_context, parse_spec  # noqa: E402
from blackwell_sm.spec.presets import PRESETS  # noqa: E402
from blackwell_sm.train import trace  # noqa: E402


def _small(vocab: int = 4096, d: int = 256):
    """llama-3.2-1b's shape cut to one block of width `d` (a CPU can run it for real)."""
    return PRESETS["llama-3.2-1b"].model_copy(
        update={
            "name": "cut",
            "n_layers": 1,
            "d_model": d,
            "n_heads": d // 64,
            "n_kv_heads": 1,
            "head_dim": 64,
            "ffn_dim": 3 * d,
            "vocab_size": vocab,
            "rope_scaling": None,
        }
    )


@pytest.mark.slow  # ~8 s of CPU: real tensors under the profiler (figures in docs/planner.md)
def test_the_tracker_sees_what_the_allocator_does_but_inside_one_operator():
    """Real tensors, one measured forward-backward: the tracker's rise equals the CPU
    allocator's but for the chunked loss's temporaries inside one operator (8 B per head weight
    element on CPU in bf16), and the fake-tensor trace equals the real one to the byte."""
    spec = _small()
    p = local_plan(
        nproc=2,
        seq_len=256,
        micro_batch_size=1,
        grad_accum_steps=1,
        activation_checkpointing="full",
        model=spec,
    )
    real = trace.trace_plan(p, fake=False, warmup=False, form="cpu")
    fake = trace.trace_plan(p, warmup=False, form="cpu")
    assert real.tracker_rise_bytes == fake.tracker_rise_bytes and real.terms == fake.terms
    unseen = long_context.loss_kernel_temp_bytes(spec.vocab_size, spec.d_model, kind="cpu")
    gap = real.allocator_rise_bytes - real.tracker_rise_bytes
    assert unseen > 0 and abs(gap - unseen) <= 0.05 * unseen, (gap, unseen)


def test_what_the_fake_run_proves_about_the_wrapped_model():
    """tiny on 2 fake ranks, 2 micro-batches: FSDP2 wraps every block and the root, keeps this
    rank's row shard of every parameter, checkpoints every block, AdamW keeps two fp32 tensors
    and a step per shard, and the second micro-batch's peak holds the first one's sharded
    gradients."""
    p = _tiny_accumulating()
    spec = p.spec.model
    r = trace.trace_plan(p, warmup=False)
    table = arch.param_table(spec)
    assert r.total_params == spec.n_params == sum(math.prod(s) for s in table.values())
    mine = sum(math.ceil(s[0] / 2) * math.prod(s[1:]) for s in table.values())
    assert r.sharded_params == mine
    assert r.fsdp_units == spec.n_layers + 1 and r.checkpointed_blocks == spec.n_layers
    assert r.optimizer_state_bytes == 8 * mine + 4 * len(table)
    assert r.micro_batches == 2 and r.terms["grads_fp32"] == 4 * mine
    assert r.peak_bytes == sum(r.terms.values()) == max(r.fwd_bwd_peak_bytes, r.step_peak_bytes)


def _tiny_accumulating():
    return local_plan(
        nproc=2,
        seq_len=64,
        micro_batch_size=2,
        grad_accum_steps=2,
        activation_checkpointing="selective-op",
    )


@pytest.mark.slow  # a second tiny trace with its warm-up step
def test_the_warm_up_step_changes_no_figure():
    """Why the tests trace without it (half the time): FSDP2's lazy init and the optimizer's
    first step leave nothing the measured step sees differently."""
    p = _tiny_accumulating()
    cold = trace.trace_plan(p, warmup=False)
    warm = trace.trace_plan(p)
    assert (warm.terms, warm.peak_bytes, warm.peak_at) == (
        cold.terms,
        cold.peak_bytes,
        cold.peak_at,
    )
    assert trace.traced_peak_bytes(p, warmup=False) == warm.peak_bytes


def test_llama_1b_at_full_size_agrees_with_the_planner():
    """The representative row of benchmarks/trace_table.py: llama-3.2-1b on one p6-b200 node
    (8 fake ranks), seq 1024, no checkpointing, in the CPU form (what run-local runs and the
    committed table holds); the planner in the traced form within 5 %, and term by term where
    the tracker books terms as the planner does."""
    spec = parse_spec(
        {"model": "llama-3.2-1b", "training": {"seq_len": 1024, "global_batch_seqs": 8}}
    )
    cfg = dict(
        shard_degree=8,
        replicate_degree=1,
        micro_batch_size=1,
        grad_accum_steps=1,
        precision="bf16",
        activation_checkpointing="none",
        compile=False,
        reshard_after_forward=True,
        cp_degree=1,
    )
    p = pinned_plan(spec, cfg)
    r = trace.trace_plan(p, warmup=False, form="cpu")
    check = compare(p, r.model_dump())
    assert abs(check.error) <= 0.05, check
    rows = {row.term: row for row in check.rows}
    for term in ("params_fp32", "optimizer_states", "params_unsharded", "grads_fp32"):
        assert rows[term].traced_gib == pytest.approx(rows[term].predicted_gib, abs=0.01), term
    assert "loss's backward" in r.peak_at  # the phase the planner picked too
    phases = memory.phase_terms(shape(spec.model), **_knobs(p))
    assert max(phases.values(), key=lambda t: t.total).phase == "loss"


@pytest.mark.slow  # ~35 s on 2 loaded cores: a full-size trace at 128k
def test_a_context_parallel_block_mask_plan_traced_in_the_gpu_form():
    """llama-3.2-1b at 131,072 tokens as the planner chooses it (context parallelism over 2
    ranks, FlexAttention's block mask, fused norms, the CUDA loss): traced in the GPU form, the
    planner's own (cuda) form within 5 %; the CPU form of the same plan builds a dense mask
    the GPU never does (docs/planner.md "The GPU form")."""
    p = plan("llama-3.2-1b", seq_len=131072)
    assert p.config.cp_degree > 1
    r = trace.trace_plan(p, warmup=False)
    check = compare(p, r.model_dump())
    assert r.form == check.form == "gpu" and "GPU form" in check.notes[0]
    assert abs(check.error) <= 0.05, check
    assert check.plan_tracked_gib == pytest.approx(
        p.memory_gib.total - p.memory_gib.overhead, abs=0.01
    )


def _knobs(p) -> dict:
    c = p.config
    return dict(
        shard_degree=c.shard_degree,
        replicate_degree=1,
        micro_batch=1,
        seq_len=c.seq_len,
        precision="bf16",
        mode=c.activation_checkpointing,
        reshard_after_forward=True,
        kind="cpu",
        loss_impl="chunked",
    )


def test_plan_trace_true_and_bsm_plan_trace(capsys):
    from blackwell_sm.cli.plan_render import render_trace

    p = plan("tiny", trace=True, seq_len=128)
    assert isinstance(p, TracedPlan) and p.trace.traced_gib > 0
    assert {r.term for r in p.trace.rows} >= {"params_fp32", "activations_and_loss"}
    render_trace(p)
    head = " ".join(capsys.readouterr().out.split())
    t = p.trace
    assert head.startswith(f"traced peak per GPU: {t.traced_gib:,.2f} GiB at the ")
    # the figure the trace is held to is the printed one, less what it says it leaves out
    printed = f"{t.plan_tracked_gib:,.2f} without its runtime and fragmentation allowance"
    assert f"({t.form} form, traced in" in head and printed in head
    assert f"({100 * t.plan_error:+.1f} % from the trace)" in head
    code, out, err = run("plan", "--model", "tiny", "--seq-len", "128", "--trace", "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert set(doc) == {"plan", "trace"} and doc["trace"]["traced_gib"] > 0
    assert (
        doc["trace"]["trace"]["world_size"]
        == doc["plan"]["config"]["shard_degree"] * doc["plan"]["config"]["replicate_degree"]
    )


def test_trace_without_torch_is_refused_with_install_advice(monkeypatch):
    import blackwell_sm.api.plan as api

    real = api.importlib.util.find_spec
    monkeypatch.setattr(
        api.importlib.util, "find_spec", lambda n, *a: None if n == "torch" else real(n, *a)
    )
    p = plan("tiny", seq_len=128)
    with pytest.raises(SpecError) as e:
        trace_plan(p)
    assert e.value.exit_code == 2 and e.value.field == "--trace"
    assert "blackwell-sm[train]" in (e.value.hint or "")
    code, out, err = run("plan", "--model", "tiny", "--seq-len", "128", "--trace", "-o", "json")
    assert code == 2 and json.loads(out or err)["error"]["field"] == "--trace"


def test_the_planner_agrees_with_every_committed_traced_row():
    """benchmarks/results/trace_rows.jsonl (traced by hand with benchmarks/trace_table.py)
    re-predicted by today's planner: within 5 % on every row (pure arithmetic, no trace)."""
    import sys

    from cli_support import REPO

    sys.path.insert(0, str(REPO / "benchmarks"))
    import trace_table

    rows = trace_table.render(trace_table.table_rows())
    assert len(rows) >= 20
    worst = max(rows, key=lambda r: abs(r["error_pct"]))
    assert abs(worst["error_pct"]) <= 5.0, worst
