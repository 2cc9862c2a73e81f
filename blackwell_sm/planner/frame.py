"""The frame step of the pipeline: a spec (and the instance and calibration profile it is
planned with) as one `Problem`: the search context, the pins, the instance counts allowed, the
deadline and the objective, with the notes the spec alone calls for. Everything after reads the
problem, never the spec; the ModelSpec becomes a `memory.Shape` here, once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from blackwell_sm.errors import SpecError
from blackwell_sm.hardware import InstanceType, get_instance
from blackwell_sm.opt_ml import is_local_run
from blackwell_sm.planner import calibration as C
from blackwell_sm.planner.lora import with_peft
from blackwell_sm.planner.notes import Note, warning
from blackwell_sm.planner.plan import CalibrationRef
from blackwell_sm.planner.shape import Shape, shape
from blackwell_sm.spec import RunSpec
from blackwell_sm.spec.job import MAX_RUNTIME_HOURS

if TYPE_CHECKING:  # the profile module is imported only when a profile is applied
    from blackwell_sm.planner.profile import AppliedProfile

DEFAULT_TOKENS_PER_PARAM = 20
#: Instance counts a training plan can hold; instance_count auto considers 1..MAX_INSTANCES.
TRAINING_PLAN_COUNTS = (1, 2, 4, 8, 16, 32, 64)
MAX_INSTANCES = 64


class Pins(NamedTuple):
    """Fixed knobs (None = searched)."""

    shard_degree: int | None = None
    replicate_degree: int | None = None
    micro_batch_size: int | None = None
    grad_accum_steps: int | None = None
    precision: str | None = None
    activation_checkpointing: str | None = None
    compile: bool | None = None
    reshard_after_forward: bool | None = None
    cp_degree: int | None = None
    offload: bool | None = None


class Context(NamedTuple):
    """What does not change between candidates. `model` is the spec's `memory.Shape`, made once
    where the planner is entered (`frame.context`, `runs.calibrate_sources.csv_row`)."""

    model: Shape
    instance: InstanceType
    seq_len: int
    global_batch_seqs: int
    total_tokens: int | None
    total_steps: int | None
    price_per_hour: float | None
    compiled_loss: bool = False  # the loop does not compile its loss; rows of other stacks may
    packed: bool = False  # task: finetune: packed rows, a block-diagonal attention mask
    constants: C.Constants | None = None  # a calibration profile's; None: calibration.py's
    loss_impl: str = "full-logits"  # the loop's is the spec's (chunked); other stacks' rows full
    epochs: float | None = None  # training.epochs: the steps follow each candidate's batch


@dataclass(frozen=True)  # not a NamedTuple: its `count` would shadow tuple.count
class Problem:
    """What the pipeline plans: a context, pins, the counts and the objective."""

    ctx: Context
    pins: Pins
    local: bool
    count: int | None  # a fixed instance count; None: instance_count auto
    allowed: list[int]  # the counts auto may choose (a training plan's, else 1..64)
    objective: str  # "time" or "cost"
    deadline: float  # the time objective's: the user's, else one SageMaker job's 28 days
    user_deadline: float | None  # compute.deadline_hours as set
    notes: list[Note]  # what the spec alone calls for (tokens assumed, price source, ...)
    calibration: CalibrationRef | None

    @property
    def time_limit(self) -> float | None:
        """The limit the chosen plan's time is held to: the time objective's deadline; under
        cost only the user's (None: a run may take several SageMaker jobs)."""
        return self.user_deadline if self.objective == "cost" else self.deadline


def check_pins(ctx: Context, count: int, pins: Pins) -> None:
    """Pins that no configuration can honour are bad input (exit 2), not infeasibility."""
    problem = pin_problem(ctx, count, pins)
    if problem is not None:
        raise problem


def pin_problem(ctx: Context, count: int, pins: Pins) -> SpecError | None:
    """Why no configuration on `count` instances can honour `pins`, or None."""
    world = count * ctx.instance.gpus_per_instance
    s, r = pins.shard_degree, pins.replicate_degree
    if s is not None and world % s:
        return SpecError(
            f"training.pins.shard_degree {s} must divide the GPU count {world} "
            f"({count} x {ctx.instance.gpus_per_instance}); allowed: "
            + ", ".join(str(d) for d in range(1, world + 1) if world % d == 0),
            field="training.pins.shard_degree",
        )
    if r is not None and world % r:
        return SpecError(
            f"training.pins.replicate_degree {r} must divide the GPU count {world}",
            field="training.pins.replicate_degree",
        )
    if s is not None and r is not None and s * r != world:
        return SpecError(
            f"training.pins.shard_degree x replicate_degree = {s * r} must equal the GPU count "
            f"{world} ({count} instances x {ctx.instance.gpus_per_instance})",
            field="training.pins.shard_degree",
        )
    cp = pins.cp_degree
    if cp is not None and cp > 1 and (world % cp or (s is not None and s % cp)):
        of = f"shard_degree {s}" if s is not None and s % cp else f"the GPU count {world}"
        top = s if s is not None and s % cp else world
        return SpecError(
            f"training.pins.cp_degree {cp} must divide {of} (a context-parallel group lies "
            f"inside one shard group); allowed: "
            + ", ".join(str(d) for d in range(1, top + 1) if top % d == 0),
            field="training.pins.cp_degree",
        )
    if pins.offload and ctx.instance.gpu.kind != "cpu":
        from blackwell_sm.planner.offload import offloadable

        if not offloadable(ctx.instance):
            return SpecError(
                f"training.pins.offload true: {ctx.instance.name} has no PCIe and host-memory "
                "figures in the catalog (pcie_gb_s, host_memory_gb_s, host_memory_gib), so "
                "the planner cannot size or time an offload there; allowed: false, or an "
                "instance type that has them (ml.p6-b200.48xlarge)",
                field="training.pins.offload",
            )
    if pins.precision and not ctx.instance.gpu.supports(pins.precision):
        return SpecError(
            f"training.precision {pins.precision} is not supported on {ctx.instance.gpu.name}; "
            f"allowed: {', '.join(ctx.instance.gpu.peak_tflops)}",
            field="training.precision",
        )
    return None


def pins_of(spec: RunSpec) -> Pins:
    tr, p = spec.training, spec.training.pins
    return Pins(
        shard_degree=p.shard_degree,
        replicate_degree=p.replicate_degree,
        micro_batch_size=p.micro_batch_size,
        grad_accum_steps=p.grad_accum_steps,
        precision=None if tr.precision == "auto" else tr.precision,
        activation_checkpointing=None
        if tr.activation_checkpointing == "auto"
        else tr.activation_checkpointing,
        compile=p.compile,
        reshard_after_forward=p.reshard_after_forward,
        cp_degree=p.cp_degree,
        offload=p.offload,
    )


def context(
    spec: RunSpec, instance: InstanceType | None, applied: AppliedProfile | None = None
) -> tuple[Context, bool, list[Note], CalibrationRef | None]:
    """(search context, is this a local run, notes, the profile's record) for `spec` on
    `instance` or its own, with the calibration profile `applied` (if any)."""
    tr, comp, model = spec.training, spec.compute, spec.model
    local = instance is not None and is_local_run(instance.name)
    inst = instance or get_instance(comp.instance_type)
    notes: list[Note] = []
    ref = None
    constants = C.constants_for(inst.gpu.name)
    if applied is not None:
        from blackwell_sm.planner.profile import for_instance

        inst, constants, changed = for_instance(applied.profile, inst)
        key, held = C.gpu_key(inst.gpu.name), applied.profile.gpus
        ref = CalibrationRef(
            profile=applied.path,
            name=applied.profile.name,
            created=applied.profile.created,
            origin=applied.origin,
            gpu=key if key in held else "",
            changed={k: {"default": a, "profile": b} for k, (a, b) in changed.items()},
            fitted=held[key].fitted_names() if key in held else [],
        )
        if key not in held:
            notes.append(
                warning(
                    "profile_no_entry",
                    f"calibration profile {applied.path} has no entry for {inst.gpu.name} (it "
                    f"holds {', '.join(held) or 'none'}): the default constants are used",
                )
            )
    total_tokens: int | None
    if tr.total_steps is None and tr.total_tokens is None:
        total_tokens = DEFAULT_TOKENS_PER_PARAM * model.n_params
        notes.append(
            warning(
                "default_tokens",
                f"neither training.total_tokens nor total_steps is set: assuming "
                f"{DEFAULT_TOKENS_PER_PARAM} tokens per parameter ({total_tokens / 1e9:.1f}B "
                "tokens)",
            )
        )
    else:
        total_tokens = tr.total_tokens
    total_steps = tr.total_steps
    if tr.epochs is not None and tr.data.sequences is not None:
        # Epochs mean epochs: a batch the planner changes changes the steps, not the passes.
        # steps_for's ceil(ceil(E x S) x seq / (b x seq)) is spec.training.epoch_steps(E, S, b).
        total_steps = None
        total_tokens = math.ceil(tr.epochs * tr.data.sequences) * tr.seq_len
    price = None if local else (comp.price_per_hour or inst.price_per_hour)
    if not local and comp.price_per_hour is None and inst.price_source:
        notes.append(
            warning(
                "price_source", f"price ${inst.price_per_hour}/h per instance: {inst.price_source}"
            )
        )
    ctx = Context(
        with_peft(shape(model), tr.peft),
        inst,
        tr.seq_len,
        tr.global_batch_sequences,
        total_tokens,
        total_steps,
        price,
        packed=tr.task == "finetune",
        constants=constants,
        loss_impl=tr.loss_impl,
        epochs=tr.epochs,
    )
    return ctx, local, notes, ref


def frame(
    spec: RunSpec,
    instance: InstanceType | None,
    calibration: AppliedProfile | None,
) -> Problem:
    """The problem `make_plan` solves; SpecError for pins, counts or an objective that cannot
    be honoured."""
    comp = spec.compute
    if comp.instance_preferences and instance is None:  # never the default type in their place
        raise SpecError(
            "the spec has compute.instance_preferences: each type has its own plan "
            "(planner.preferences.plan_preferences, or bsm.plan(spec))",
            field="compute.instance_preferences",
        )
    ctx, local, notes, ref = context(spec, instance, calibration)
    pins = pins_of(spec)
    plan_counts = comp.training_plan is not None and not local
    allowed = list(TRAINING_PLAN_COUNTS) if plan_counts else list(range(1, MAX_INSTANCES + 1))
    count: int | None
    if local:
        if comp.instance_count not in (1, "auto"):
            notes.append(
                warning(
                    "local_count_ignored",
                    "local run: compute.instance_count is ignored (one machine)",
                )
            )
        count = 1
    else:
        count = None if comp.instance_count == "auto" else comp.instance_count
    if count is not None and plan_counts and count not in TRAINING_PLAN_COUNTS:
        raise SpecError(
            f"compute.instance_count {count} cannot be used with a training plan; allowed: "
            + ", ".join(map(str, TRAINING_PLAN_COUNTS)),
            field="compute.instance_count",
        )
    if pins.precision:
        check_pins(ctx, count or 1, pins._replace(shard_degree=None, replicate_degree=None))
    if count is not None:
        check_pins(ctx, count, pins)
    else:  # auto: the counts whose GPUs the pinned degrees divide
        allowed = [n for n in allowed if pin_problem(ctx, n, pins) is None] or allowed
        check_pins(ctx, allowed[-1], pins)
    # Time is a constraint: the user's deadline, else one SageMaker job's 28 days.
    user = comp.deadline_hours
    deadline = user if user is not None else float(MAX_RUNTIME_HOURS)
    return Problem(ctx, pins, local, count, allowed, comp.optimize, deadline, user, notes, ref)
