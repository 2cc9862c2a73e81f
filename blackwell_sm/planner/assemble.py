"""The assemble step of the pipeline: the Plan from the chosen evaluation and its explanation:
memory terms in GiB, speed with its range, hours and cost with theirs, the checkpoint size, and
the warnings that need the ranges (pure)."""

from __future__ import annotations

from blackwell_sm.hardware import InstanceType
from blackwell_sm.planner import calibration as C
from blackwell_sm.planner.alternatives import to_config
from blackwell_sm.planner.checkpoint_size import checkpoint_size
from blackwell_sm.planner.jobs import job_count, job_notes
from blackwell_sm.planner.lora import MFU_BASIS as LORA_MFU_BASIS
from blackwell_sm.planner.lora import lora_shape, model_flops_per_token, with_peft
from blackwell_sm.planner.memory import GIB, MemoryTerms
from blackwell_sm.planner.notes import Note, warning
from blackwell_sm.planner.plan import (
    Alternative,
    CalibrationRef,
    CheckpointEstimate,
    InstanceRef,
    MemoryBreakdown,
    ModelRef,
    ObjectivePick,
    Plan,
    PlanSpec,
    RunEstimate,
    StepBreakdown,
    Throughput,
)
from blackwell_sm.planner.search import Candidate, Evaluation
from blackwell_sm.planner.shape import shape
from blackwell_sm.planner.uncertainty import over_published, speed_range
from blackwell_sm.spec import RunSpec


def memory_breakdown(m: MemoryTerms, limit: float) -> MemoryBreakdown:
    """The memory model's terms (bytes) as the Plan's GiB breakdown."""
    g = lambda x: round(x / GIB, 3)  # noqa: E731
    return MemoryBreakdown(
        params_fp32=g(m.params_fp32),
        grads_fp32=g(m.grads_fp32),
        optimizer_states=g(m.optimizer_states),
        params_unsharded=g(m.params_unsharded),
        grads_unsharded=g(m.grads_unsharded),
        activations=g(m.activations),
        logits_and_loss=g(m.logits_and_loss),
        overhead=g(m.overhead),
        fp8_extras=g(m.fp8_extras),
        total=g(m.total),
        limit=limit,
        allocator_reserved=g(m.reserved),
        usable=round(limit * (1.0 - C.MEMORY_HEADROOM), 3),
    )


def instance_ref(inst: InstanceType, c: Candidate, limit: float) -> InstanceRef:
    """The Plan's instance: the type, the candidate's count and the GPU's peaks."""
    return InstanceRef(
        type=inst.name,
        count=c.instance_count,
        gpus_per_instance=inst.gpus_per_instance,
        gpu=inst.gpu.name,
        gpu_memory_gib=limit,
        device=inst.gpu.kind,
        efa=inst.efa_provider_env,
        peak_flops=inst.gpu.peak_flops(c.precision),
        peak_flops_bf16=inst.gpu.peak_flops("bf16"),
    )


def assemble_plan(
    spec: RunSpec,
    inst: InstanceType,
    best: Evaluation,
    feasible: bool,
    alts: list[Alternative],
    price: float | None,
    local: bool,
    *,
    notes: list[Note],
    constants: C.Constants | None = None,
    calibration: CalibrationRef | None = None,
    objective: str = "time",
    other: ObjectivePick | None = None,
) -> Plan:
    """The Plan for the evaluated candidate `best`."""
    tr, comp, model = spec.training, spec.compute, spec.model
    c, limit = best.cand, inst.gpu.memory_gib
    g = lambda x: round(x / GIB, 3)  # noqa: E731
    mem = memory_breakdown(best.mem, limit)
    tokens = best.steps * c.global_batch_seqs * tr.seq_len
    t, tps = best.time, best.tokens_per_s_per_gpu
    notes = list(notes)
    if calibration is not None and constants is not None:
        # the profile vouches for this mode's speed only if it fitted it
        from blackwell_sm.planner.profile import for_mode

        constants, calibration, note = for_mode(
            constants, calibration, inst.gpu.name, c.precision, c.compile
        )
        if note:
            notes.append(warning("profile_mode_uncalibrated", note))
    sr = speed_range(tps, inst.gpu, model, c.precision, tr.seq_len, constants)
    warn = over_published(tps, sr)
    if warn:
        notes.append(warning("over_published", warn))
    hours_range = (best.hours * tps / sr.high, best.hours * tps / sr.low)
    jobs = job_count(hours_range[1])
    notes += job_notes(best.hours, hours_range, local)
    cost_range = None
    if best.price_per_hour is not None:
        cost_range = (
            round(hours_range[0] * best.price_per_hour, 2),
            round(hours_range[1] * best.price_per_hour, 2),
        )
        if not local and cost_range[1] > comp.confirm_cost_usd:
            text = (
                f"the run may cost up to ${cost_range[1]:,.0f} (pessimistic end), over "
                f"compute.confirm_cost_usd ${comp.confirm_cost_usd:,.0f}: bsm submit asks first"
            )
            notes.append(warning("cost_confirm", text))
    saved = model.n_params  # LoRA: a checkpoint holds the trained parameters only
    if tr.peft is not None:
        saved = lora_shape(model, tr.peft).trainable(model.n_layers)
    ck = checkpoint_size(saved, c.shard_degree, inst.gpus_per_instance)
    return Plan(
        feasible=feasible,
        model=ModelRef(name=model.name, n_params=model.n_params),
        instance=instance_ref(inst, c, limit),
        config=to_config(c, tr.seq_len),
        memory_gib=mem,
        throughput=Throughput(
            step_time_s=round(best.time.step_s, 4),
            tokens_per_s_per_gpu=round(best.tokens_per_s_per_gpu, 1),
            mfu=round(best.mfu, 4),
            flops_per_token=model_flops_per_token(with_peft(shape(model), tr.peft), tr.seq_len),
            **({"mfu_basis": LORA_MFU_BASIS} if tr.peft is not None else {}),
            breakdown_s=StepBreakdown(
                compute=round(t.compute_s - t.recompute_s, 4),
                recompute=round(t.recompute_s, 4),
                exposed_communication=round(t.exposed_comm_s, 4),
                optimizer=round(t.optimizer_s, 4),
            ),
            tokens_per_s_per_gpu_range=(round(sr.low, 1), round(sr.high, 1)),
            evidence=sr.evidence,
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
            hours_range=(round(hours_range[0], 3), round(hours_range[1], 3)),
            cost_usd_range=cost_range,
            jobs=jobs,
        ),
        checkpoint=CheckpointEstimate(
            bytes_per_save=ck.bytes_per_save,
            gib_per_save=g(ck.bytes_per_save),
            max_gib_per_host=g(ck.max_bytes_per_host),
            save_s=round(ck.save_s, 1),
        ),
        alternatives=alts,
        notes=notes,
        objective=objective,
        other_objective=other,
        spec=PlanSpec(model=model, training=tr),
        calibration=calibration,
    )
