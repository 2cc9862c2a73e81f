"""The planner's entry points: `make_plan(spec)` (pure) and `plan(...)` for notebooks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from blackwell_sm.errors import SpecError
from blackwell_sm.hardware import InstanceType, get_instance
from blackwell_sm.planner import calibration as C
from blackwell_sm.planner.memory import GIB
from blackwell_sm.planner.plan import (
    Alternative,
    InstanceRef,
    MemoryBreakdown,
    ModelRef,
    Plan,
    PlanConfig,
    PlanSpec,
    RunEstimate,
    Throughput,
)
from blackwell_sm.planner.precision import choose_precision, lowp_ineligible
from blackwell_sm.planner.search import (
    MAX_INSTANCES,
    PRECISIONS,
    TRAINING_PLAN_COUNTS,
    Candidate,
    Context,
    Evaluation,
    Pins,
    SearchResult,
    check_pins,
    min_memory,
    search_count,
)
from blackwell_sm.spec import RunSpec

DEFAULT_TOKENS_PER_PARAM = 20


def _pins(spec: RunSpec) -> Pins:
    tr, p = spec.training, spec.training.pins
    return Pins(
        shard_degree=p.shard_degree,
        replicate_degree=p.replicate_degree,
        micro_batch=p.micro_batch_size,
        grad_accum=p.grad_accum_steps,
        precision=None if tr.precision == "auto" else tr.precision,
        mode=None if tr.activation_checkpointing == "auto" else tr.activation_checkpointing,
        compile=p.compile,
        reshard_after_forward=p.reshard_after_forward,
    )


def _search(ctx: Context, count: int, pins: Pins) -> tuple[SearchResult, list[str]]:
    """Search one instance count, choosing the precision when it is `auto`."""
    if pins.precision:
        return search_count(ctx, count, pins, (pins.precision,)), []
    gpu = ctx.instance.gpu
    results = {p: search_count(ctx, count, pins, (p,)) for p in PRECISIONS if gpu.supports(p)}
    precision, reasons = choose_precision(ctx.model, gpu, results)
    chosen = results[precision]
    if not chosen.feasible:  # nothing fits: report the least-memory candidate of any precision
        best = min((r.best for r in results.values()), key=lambda e: (e.mem.total, e.hours))
        chosen = SearchResult(best, False, chosen.evaluated)
    evaluated = [e for r in results.values() for e in r.evaluated]
    return SearchResult(chosen.best, chosen.feasible, evaluated), reasons


def _lean(pins: Pins) -> Pins:
    """Pins for the quickest memory check: the leanest value of every free knob."""
    return pins._replace(
        mode=pins.mode or "full",
        compile=False if pins.compile is None else pins.compile,
        reshard_after_forward=True
        if pins.reshard_after_forward is None
        else pins.reshard_after_forward,
    )


def _precisions(ctx: Context, pins: Pins) -> tuple[str, ...]:
    if pins.precision:
        return (pins.precision,)
    return tuple(p for p in PRECISIONS if ctx.instance.gpu.supports(p))


def _fits_somewhere(ctx: Context, count: int, pins: Pins) -> bool:
    e = min_memory(ctx, count, _lean(pins), _precisions(ctx, pins))
    return e is not None and e.fits


def _fits(e: Evaluation | None) -> bool:
    return e is not None and e.fits


def _choose_count(
    ctx: Context, pins: Pins, allowed: list[int], deadline: float | None
) -> tuple[int, SearchResult, list[str], list[str]]:
    """instance_count auto: the fewest instances that fit, or that meet the deadline."""
    reasons: list[str] = []
    warnings: list[str] = []
    fastest: tuple[int, SearchResult, list[str]] | None = None
    i = 0
    while i < len(allowed):
        n = allowed[i]
        if not _fits_somewhere(ctx, n, pins):
            i += 1
            continue
        res, prec_reasons = _search(ctx, n, pins)
        if not res.feasible:
            i += 1
            continue
        if deadline is None:
            reasons.append(f"instance_count auto: {n} is the fewest instances that fit")
            return n, res, prec_reasons, warnings + reasons
        if res.best.hours <= deadline:
            reasons.append(
                f"instance_count auto: {n} is the fewest instances that finish within the "
                f"deadline of {deadline:g} h ({res.best.hours:.1f} h)"
            )
            return n, res, prec_reasons, warnings + reasons
        if fastest is None or res.best.hours < fastest[1].best.hours:
            fastest = (n, res, prec_reasons)
        # Time falls roughly as 1/n: jump close to the count that would meet the deadline.
        target = n * res.best.hours / deadline * 0.9
        j = i + 1
        while j < len(allowed) - 1 and allowed[j] < target:
            j += 1
        i = j
    if fastest is not None:
        n, res, prec_reasons = fastest
        warnings.append(
            f"no instance count up to {allowed[-1]} meets the deadline of {deadline:g} h; "
            f"the fastest is {n} instances at {res.best.hours:.1f} h"
        )
        reasons.append(f"instance_count auto: {n} instances is the fastest found")
        return n, res, prec_reasons, warnings + reasons
    n = allowed[-1]
    res, prec_reasons = _search(ctx, n, pins)
    return n, res, prec_reasons, [f"no instance count up to {n} fits; showing {n}"]


def _advice(
    ctx: Context, count: int, pins: Pins, best: Evaluation, allowed: list[int]
) -> list[str]:
    """What single change would make it fit, each checked with the model."""
    out = []
    limit = ctx.instance.gpu.memory_gib
    precs = _precisions(ctx, pins)
    # More instances: a pinned shard degree stays, the replica count grows with the GPUs.
    scaled = pins._replace(replicate_degree=None) if pins.shard_degree else pins
    for n in allowed:
        if n > count and _fits_somewhere(ctx, n, scaled):
            out.append(f"use {n} instances (compute.instance_count: {n}) — it fits there")
            break
    else:
        if count < allowed[-1]:
            out.append(f"no instance count up to {allowed[-1]} fits with these pins")
    if best.cand.mode != "full":
        e = min_memory(ctx, count, pins._replace(mode="full"), precs)
        if _fits(e):
            out.append(
                f"activation_checkpointing: full fits ({e.memory_gib:.1f} GiB of {limit:.1f})"
            )
    s = ctx.seq_len // 2
    while s >= 256:
        e = min_memory(ctx._replace(seq_len=s), count, pins, precs)
        if _fits(e):
            out.append(f"seq_len: {s} fits ({e.memory_gib:.1f} GiB of {limit:.1f})")
            break
        s //= 2
    for p in ("fp8", "mxfp8"):
        if p in precs and pins.precision is None:
            continue  # already considered
        if ctx.instance.gpu.supports(p) and p != best.cand.precision:
            e = min_memory(ctx, count, pins._replace(precision=p), (p,))
            if _fits(e):
                out.append(f"precision: {p} fits ({e.memory_gib:.1f} GiB of {limit:.1f})")
                break
    if pins.micro_batch not in (None, 1):
        e = min_memory(ctx, count, pins._replace(micro_batch=1, grad_accum=None), precs)
        if _fits(e):
            out.append(f"micro_batch_size: 1 fits ({e.memory_gib:.1f} GiB of {limit:.1f})")
    if not out:
        out.append("no single change fits; combine more instances with full checkpointing")
    return out


def _config(c: Candidate, seq_len: int) -> PlanConfig:
    return PlanConfig(
        shard_degree=c.shard_degree,
        replicate_degree=c.replicate_degree,
        micro_batch_size=c.micro_batch,
        grad_accum_steps=c.grad_accum,
        seq_len=seq_len,
        precision=c.precision,
        activation_checkpointing=c.mode,
        compile=c.compile,
        reshard_after_forward=c.reshard_after_forward,
    )


def _why_not(e: Evaluation, best: Evaluation, limit_gib: float) -> str:
    if not e.fits:
        return f"does not fit: needs {e.memory_gib:.1f} GiB of {limit_gib:.1f} GiB"
    if not best.fits:
        return "fits, but only by changing a pinned knob"
    slower = e.hours / best.hours - 1.0
    if slower > C.TIE_FRACTION:
        return f"{slower:.0%} slower ({e.hours:.1f} h vs {best.hours:.1f} h)"
    if slower < -C.TIE_FRACTION:
        return f"{-slower:.0%} faster, but below the gain low precision must bring"
    return "as fast (within 1%) but less simple"


def _differs(e: Evaluation, best: Evaluation) -> str:
    a, b = e.cand, best.cand
    parts = []
    for name in Candidate._fields:
        if getattr(a, name) != getattr(b, name):
            parts.append(f"{name}={getattr(a, name)}")
    return ", ".join(parts)


def _rank(e: Evaluation) -> tuple[int, float]:
    """Higher is a better runner-up: fitting and fast, else needing the least memory."""
    return (1, -e.hours) if e.fits else (0, -e.mem.total)


def _alternatives(
    evals: list[Evaluation], best: Evaluation, limit_gib: float, seq_len: int
) -> list[Alternative]:
    """The best candidate that differs in each knob, i.e. the runner-up per decision."""
    picks: dict[Candidate, Evaluation] = {}
    for knob in (
        "mode",
        "precision",
        "shard_degree",
        "reshard_after_forward",
        "compile",
        "micro_batch",
    ):
        ref = getattr(best.cand, knob)
        others = [e for e in evals if getattr(e.cand, knob) != ref]
        by_value: dict[Any, Evaluation] = {}
        for e in others:
            v = getattr(e.cand, knob)
            cur = by_value.get(v)
            if cur is None or _rank(e) > _rank(cur):
                by_value[v] = e
        for e in by_value.values():
            picks.setdefault(e.cand, e)
    ranked = sorted(picks.values(), key=lambda e: (not e.fits, e.hours))[:6]
    return [
        Alternative(
            config=_config(e.cand, seq_len),
            instance_count=e.cand.instance_count,
            feasible=e.fits,
            memory_total_gib=round(e.memory_gib, 2),
            tokens_per_s_per_gpu=round(e.tokens_per_s_per_gpu, 1),
            hours=round(e.hours, 3),
            why_not=f"{_differs(e, best)}: {_why_not(e, best, limit_gib)}",
        )
        for e in ranked
    ]


def _reasons(e: Evaluation, ctx: Context, pins: Pins) -> list[str]:
    c, gpn = e.cand, ctx.instance.gpus_per_instance
    out = []
    layout = (
        "pinned" if pins.shard_degree or pins.replicate_degree else
        "fastest fitting layout"
    )  # fmt: skip
    if c.replicate_degree == 1:
        where = "inside the node" if c.shard_degree <= gpn else f"across {c.instance_count} nodes"
        out.append(f"shard_degree {c.shard_degree} (full shard {where}, {layout})")
    else:
        links = (
            "all-gathers stay on NVLink, only the gradient all-reduce crosses EFA"
            if c.shard_degree <= gpn
            else "shard groups span nodes; replicas all-reduce gradients over EFA"
        )
        out.append(
            f"HSDP: shard {c.shard_degree} x replicate {c.replicate_degree} ({layout}): {links}"
        )
    mb_src = "pinned" if pins.micro_batch else "fastest that fits"
    out.append(
        f"micro_batch_size {c.micro_batch} ({mb_src}) x grad_accum_steps {c.grad_accum} x "
        f"{c.world} GPUs = {c.global_batch_seqs} sequences per step"
    )
    ac = "pinned" if pins.mode else {
        "none": "no checkpointing needed: fastest",
        "selective": "selective: saves matmul and attention outputs, recomputes the cheap ops",
        "selective-op": "selective-op: saves every other matmul and the attention, recomputes "
        "the rest (torchtitan's per-op policy)",
        "full": "full: only block inputs kept; recompute costs ~1/3 more block FLOPs",
    }[c.mode]  # fmt: skip
    out.append(f"activation_checkpointing {c.mode} ({ac})")
    if c.shard_degree > 1:
        out.append(
            "reshard_after_forward "
            + ("true (frees gathered params after forward; re-gathers in backward)"
               if c.reshard_after_forward else
               "false (keeps gathered params to backward: saves one all-gather per micro-batch)")
        )  # fmt: skip
    out.append(
        f"compile {str(c.compile).lower()}" + (" (pinned)" if pins.compile is not None else "")
    )
    return out


def make_plan(spec: RunSpec, *, instance: InstanceType | None = None) -> Plan:
    """Choose the configuration for `spec` and predict its memory, speed, time and cost.

    Pure. Never raises for infeasibility: returns `feasible=False` with the candidate needing the
    least memory and `advice`. Raises SpecError for pins or capacity that cannot be honoured.
    `instance=None` uses `spec.compute.instance_type` and `instance_count`; a local instance
    (`hardware.local_instance`) is one machine.
    """
    tr, comp, model = spec.training, spec.compute, spec.model
    local = instance is not None and instance.name.startswith("local-")
    inst = instance or get_instance(comp.instance_type)
    warnings: list[str] = []
    reasons: list[str] = []

    if tr.total_steps is None and tr.total_tokens is None:
        total_tokens = DEFAULT_TOKENS_PER_PARAM * model.n_params
        warnings.append(
            f"neither training.total_tokens nor total_steps is set: assuming "
            f"{DEFAULT_TOKENS_PER_PARAM} tokens per parameter ({total_tokens / 1e9:.1f}B tokens)"
        )
    else:
        total_tokens = tr.total_tokens
    price = None if local else (comp.price_per_hour or inst.price_per_hour)
    if not local and comp.price_per_hour is None and inst.price_source:
        warnings.append(f"price ${inst.price_per_hour}/h per instance: {inst.price_source}")
    ctx = Context(
        model, inst, tr.seq_len, tr.global_batch_sequences, total_tokens, tr.total_steps, price
    )
    pins = _pins(spec)

    plan_counts = comp.training_plan is not None and not local
    allowed = list(TRAINING_PLAN_COUNTS) if plan_counts else list(range(1, MAX_INSTANCES + 1))
    if local:
        if comp.instance_count not in (1, "auto"):
            warnings.append("local run: compute.instance_count is ignored (one machine)")
        count: int | str = 1
    else:
        count = comp.instance_count
    if isinstance(count, int) and plan_counts and count not in TRAINING_PLAN_COUNTS:
        raise SpecError(
            f"compute.instance_count {count} cannot be used with a training plan; allowed: "
            + ", ".join(map(str, TRAINING_PLAN_COUNTS)),
            field="compute.instance_count",
        )
    if pins.precision:
        check_pins(
            ctx,
            1 if count == "auto" else count,
            pins._replace(shard_degree=None, replicate_degree=None),
        )
    if count == "auto":
        n, res, prec_reasons, notes = _choose_count(ctx, pins, allowed, comp.deadline_hours)
        check_pins(ctx, n, pins)
        for note in notes:
            (warnings if note.startswith("no instance") else reasons).append(note)
    else:
        n = count
        check_pins(ctx, n, pins)
        res, prec_reasons = _search(ctx, n, pins)
        if (
            comp.deadline_hours is not None
            and res.feasible
            and res.best.hours > comp.deadline_hours
        ):
            warnings.append(
                f"predicted {res.best.hours:.1f} h exceeds compute.deadline_hours "
                f"{comp.deadline_hours:g}; more instances (or instance_count: auto) would help"
            )

    best = res.best
    c = best.cand
    limit = inst.gpu.memory_gib
    reasons.extend(_reasons(best, ctx, pins))
    if pins.precision:
        reasons.append(f"precision {c.precision} (pinned)")
        why = lowp_ineligible(model, c.precision)
        if why:
            warnings.append(f"precision {c.precision}: {why}; those linears stay bf16")
    else:
        reasons.extend(f"precision: {r}" for r in prec_reasons)
        if not any(r.startswith(("chose", "kept")) for r in prec_reasons):
            reasons.append(f"precision {c.precision}")
    if c.global_batch_seqs != tr.global_batch_sequences:
        warnings.append(
            f"global batch is {c.global_batch_seqs} sequences, not the {tr.global_batch_sequences} "
            f"asked: {c.world} GPUs x micro-batch {c.micro_batch} x accumulation {c.grad_accum}"
        )
    if best.fits and best.mem.total > 0.9 * limit * GIB:
        warnings.append(
            f"predicted memory {best.memory_gib:.1f} GiB is above 90% of {limit:.1f} GiB"
        )

    advice: list[str] = []
    if not res.feasible:
        advice = _advice(ctx, c.instance_count, pins, best, allowed)
        warnings.append(
            f"no configuration fits: the best candidate needs {best.memory_gib:.1f} GiB per GPU, "
            f"the limit is {limit:.1f} GiB"
        )

    m = best.mem
    g = lambda x: round(x / GIB, 3)  # noqa: E731
    mem = MemoryBreakdown(
        params_fp32=g(m.params_fp32), grads_fp32=g(m.grads_fp32),
        optimizer_states=g(m.optimizer_states), params_unsharded=g(m.params_unsharded),
        grads_unsharded=g(m.grads_unsharded), activations=g(m.activations),
        logits_and_loss=g(m.logits_and_loss), overhead=g(m.overhead), fp8_extras=g(m.fp8_extras),
        total=g(m.total), limit=limit, allocator_reserved=g(m.reserved),
    )  # fmt: skip
    tokens = best.steps * c.global_batch_seqs * tr.seq_len
    return Plan(
        feasible=res.feasible,
        model=ModelRef(name=model.name, n_params=model.n_params),
        instance=InstanceRef(
            type=inst.name,
            count=c.instance_count,
            gpus_per_instance=inst.gpus_per_instance,
            gpu=inst.gpu.name,
            gpu_memory_gib=limit,
        ),
        config=_config(c, tr.seq_len),
        memory_gib=mem,
        throughput=Throughput(
            step_time_s=round(best.time.step_s, 4),
            tokens_per_s_per_gpu=round(best.tokens_per_s_per_gpu, 1),
            mfu=round(best.mfu, 4),
            flops_per_token=model.flops_per_token(tr.seq_len),
        ),
        run=RunEstimate(
            steps=best.steps,
            tokens=tokens,
            hours=round(best.hours, 3),
            cost_usd=None if best.cost_usd is None else round(best.cost_usd, 2),
            price_per_hour=price,
            price_source=None
            if local
            else ("compute.price_per_hour" if comp.price_per_hour else inst.price_source),
        ),
        alternatives=_alternatives(res.evaluated, best, limit, tr.seq_len),
        warnings=warnings,
        reasons=reasons,
        advice=advice,
        spec=PlanSpec(model=model, training=tr),
    )


def plan(spec: RunSpec | str | Path | dict[str, Any], **overrides: Any) -> Plan:
    """Notebook entry: a RunSpec, a YAML path, a mapping, or a preset name; `overrides` are
    `--set` style keys (plan config keys or dotted spec paths), e.g. `plan("llama-3.1-8b",
    seq_len=8192, precision="bf16")`. `instance=` takes an InstanceType (e.g. local_instance)."""
    from blackwell_sm.spec import load_spec, parse_spec, with_overrides
    from blackwell_sm.spec.presets import PRESETS

    instance = overrides.pop("instance", None)
    if isinstance(spec, RunSpec):
        rs = spec
    elif isinstance(spec, dict):
        rs = parse_spec(spec)
    elif isinstance(spec, str) and spec in PRESETS:
        rs = parse_spec({"model": spec})
    elif isinstance(spec, (str, Path)):
        rs = load_spec(spec)
    else:
        raise SpecError(
            f"plan() takes a RunSpec, a path, a mapping or a preset name, not {type(spec).__name__}",
            field="spec",
        )
    if overrides:
        rs = with_overrides(rs, overrides)
    return make_plan(rs, instance=instance)
