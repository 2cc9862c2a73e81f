"""The Plan: the planner's versioned JSON output, and the container's only source of settings.

Within a `schema_version` keys may be added, none removed or renamed. Version 2 (2026-12):
every warning, reason and advice is a typed note (`notes`: kind, code, text; code reacts to the
code, never the words; `warnings`/`reasons`/`advice` stay in the JSON as the notes' texts,
ignored when read back), and `seq_len` is stored once, in `config.seq_len` (`spec.training` is
written without it and gets it back on read). `Plan.read` reads version 2 and version 1 (its
sentences become notes with code `v1`; its two seq_lens must agree), keeping `schema_version`;
the launcher runs only the version its own code writes (`launch/checks.py`). docs/planner.md,
"Plan schema versions".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_serializer, model_validator

from blackwell_sm.planner.batch import data_parallel_ranks, global_batch
from blackwell_sm.planner.notes import Note
from blackwell_sm.planner.plan_versions import from_v1, seq_len_into_spec
from blackwell_sm.spec import Checkpointing, ModelSpec, Precision, TrainingSpec

#: What to do about a plan file that does not validate or check out.
PLAN_HINT = "make the plan again with bsm plan; plan.json is not meant to be edited"

SCHEMA_VERSION = 2
#: Versions `Plan` reads (older ones are upgraded on read, see the module docstring).
READABLE_VERSIONS = (1, 2)

Objective = Literal["time", "cost"]


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelRef(_Out):
    """The model the plan is for."""

    name: str = Field(description="Preset name, or the name the spec gives the shape.")
    n_params: int = Field(description="Parameters, counted by spec/arch.py's formula.")


class InstanceRef(_Out):
    """The instances the plan runs on, with what the container needs from the catalog."""

    type: str = Field(description="SageMaker instance type, e.g. ml.p6-b200.48xlarge.")
    count: int = Field(description="Instances (instance_count auto resolved).")
    gpus_per_instance: int = Field(description="GPUs (worker processes) per instance.")
    gpu: str = Field(description="GPU name from the catalog.")
    gpu_memory_gib: float = Field(description="Device memory per GPU, GiB.")
    # What the container needs from the catalog travels here, so it never imports `hardware`.
    device: Literal["cuda", "cpu"] = Field(description="Torch device kind of the workers.")
    efa: bool = Field(description="Inter-node traffic over EFA: the launcher sets FI_PROVIDER=efa.")
    peak_flops: float = Field(
        description="Dense peak FLOP/s per GPU at the plan's precision (catalog figure)."
    )
    peak_flops_bf16: float = Field(
        description="Dense BF16 peak FLOP/s per GPU: the denominator of every MFU figure."
    )


class PlanConfig(_Out):
    """The knobs the training loop executes exactly."""

    shard_degree: int = Field(description="GPUs each parameter is sharded across (FSDP).")
    replicate_degree: int = Field(description="Replica groups (HSDP); 1 = plain FSDP.")
    micro_batch_size: int = Field(description="Sequences per GPU per forward/backward.")
    grad_accum_steps: int = Field(description="Micro-batches per optimizer step.")
    seq_len: int = Field(description="Tokens per sequence.")
    precision: Precision = Field(description="Matmul precision of the block linears.")
    activation_checkpointing: Checkpointing = Field(description="What backward recomputes.")
    compile: bool = Field(description="torch.compile each block.")
    reshard_after_forward: bool = Field(description="Free gathered params after forward.")
    cp_degree: int = Field(
        1,
        ge=1,
        description="Context parallelism: consecutive ranks of a shard group that share each "
        "sequence (1 = none). It divides shard_degree; parameters stay sharded over all "
        "shard_degree ranks (the CP ranks join the FSDP dimension).",
    )
    offload: bool = Field(False, description="Sharded state in host memory (planner/offload.py).")

    @property
    def world_size(self) -> int:
        """Processes (GPUs) the plan runs on."""
        return self.shard_degree * self.replicate_degree

    @property
    def data_parallel_size(self) -> int:
        """Ranks that read different sequences: the world over the context-parallel groups."""
        return data_parallel_ranks(self.world_size, self.cp_degree)

    @property
    def global_batch_sequences(self) -> int:
        return global_batch(self.micro_batch_size, self.grad_accum_steps, self.data_parallel_size)


class MemoryBreakdown(_Out):
    """Predicted peak memory per GPU, GiB, by named term."""

    params_fp32: float = Field(description="Sharded fp32 master parameters.")
    grads_fp32: float = Field(description="Sharded fp32 gradients.")
    optimizer_states: float = Field(description="Sharded AdamW exp_avg + exp_avg_sq (fp32).")
    params_unsharded: float = Field(
        description="Gathered bf16 params of the live block(s) incl. prefetch."
    )
    grads_unsharded: float = Field(
        description="Transient unsharded grads and reduce-scatter buffers."
    )
    activations: float = Field(description="Saved activations for backward, all blocks.")
    logits_and_loss: float = Field(description="Output logits and loss intermediates.")
    overhead: float = Field(description="CUDA context, NCCL buffers, allocator fragmentation.")
    fp8_extras: float = Field(0.0, description="fp8/mxfp8 weight copies of the live blocks.")
    total: float = Field(description="The sum of the terms above: predicted peak per GPU.")
    allocator_reserved: float | None = Field(
        None,
        description="total minus the runtime outside torch's caching allocator (CUDA context, "
        "NCCL): what torch.cuda.max_memory_reserved() should read. Not a term of the sum.",
    )
    limit: float = Field(description="Device memory per GPU (what nvidia-smi reports).")
    usable: float | None = Field(
        None,
        description="The limit a plan must fit: device memory minus the planner's headroom "
        "(calibration.MEMORY_HEADROOM). Every 'does not fit' is against this figure.",
    )


class StepBreakdown(_Out):
    """Where one optimizer step's time goes, seconds (the four terms sum to step_time_s)."""

    compute: float = Field(description="Forward + backward of every micro-batch.")
    recompute: float = Field(description="Forward work activation checkpointing redoes.")
    exposed_communication: float = Field(description="Collectives not hidden under compute.")
    optimizer: float = Field(description="AdamW step and grad-norm (memory-bound).")


class Throughput(_Out):
    """Predicted speed of one optimizer step."""

    step_time_s: float = Field(description="Seconds per optimizer step.")
    tokens_per_s_per_gpu: float = Field(description="Training tokens per second per GPU.")
    mfu: float = Field(description="Model FLOPs utilisation against the dense BF16 peak.")
    flops_per_token: float = Field(description="Model FLOPs per token (mfu_basis).")
    mfu_basis: str = Field(
        "6 x (all params except input embedding) + 12 x layers x d_model x seq_len "
        "FLOPs per token, over the GPU's dense BF16 peak",
        description="How flops_per_token and mfu are counted.",
    )
    breakdown_s: StepBreakdown | None = Field(None, description="Where the step time goes.")
    tokens_per_s_per_gpu_range: tuple[float, float] | None = Field(
        None, description="[low, high]: the width comes from `evidence` (docs/planner.md)."
    )
    evidence: str | None = Field(
        None,
        description="What the step-time constants rest on for this GPU: 'fitted' (measured FSDP "
        "rows on it), 'anchored' (public FSDP rows on it under other conditions), 'carried' "
        "(from another GPU), 'measured' (timed on this machine), 'calibrated' (a profile).",
    )


class RunEstimate(_Out):
    """The whole run: steps, tokens, time and cost."""

    steps: int = Field(description="Optimizer steps.")
    tokens: int = Field(description="Training tokens (steps x tokens per step).")
    hours: float = Field(description="Predicted wall hours at the predicted speed.")
    cost_usd: float | None = Field(description="hours x instances x price; None: no price.")
    price_per_hour: float | None = Field(None, description="USD per instance-hour.")
    price_source: str | None = Field(None, description="Where the price comes from.")
    hours_range: tuple[float, float] | None = Field(
        None, description="[low, high] hours from the speed range (high = pessimistic)."
    )
    cost_usd_range: tuple[float, float] | None = Field(
        None, description="[low, high] USD from hours_range."
    )
    jobs: int = Field(
        1,
        description="SageMaker jobs the run needs at the pessimistic hours (28-day MaxRuntime "
        "each); every job after the first resumes from the same checkpoints.",
    )

    @property
    def pessimistic_hours(self) -> float:
        """The high end of the hours range: what capacity and MaxRuntime are sized from."""
        return self.hours_range[1] if self.hours_range else self.hours

    def scaled(self, fraction: float) -> RunEstimate:
        """This estimate for `fraction` of the run (the steps a resumed job has left)."""
        rng = self.hours_range and (self.hours_range[0] * fraction, self.hours_range[1] * fraction)
        return self.model_copy(update={"hours": self.hours * fraction, "hours_range": rng})


class CheckpointEstimate(_Out):
    """One checkpoint save (planner/checkpoint_size.py): model and optimizer state."""

    bytes_per_save: int = Field(
        description="fp32 params + AdamW states, summed over ranks (HSDP replicas de-duplicated)."
    )
    gib_per_save: float = Field(description="bytes_per_save in GiB.")
    max_gib_per_host: float = Field(
        description="What one host's ranks hold: the most it writes to /opt/ml/checkpoints."
    )
    save_s: float = Field(description="Predicted wall time of one save on the slowest host.")


class Alternative(_Out):
    """A runner-up configuration and why it lost."""

    config: PlanConfig = Field(description="The runner-up's configuration.")
    instance_count: int = Field(description="Its instance count.")
    feasible: bool = Field(description="It fits in memory (and time).")
    memory_total_gib: float = Field(description="Its predicted peak GiB per GPU.")
    tokens_per_s_per_gpu: float = Field(description="Its predicted speed.")
    hours: float = Field(description="Its predicted wall hours.")
    why_not: str = Field(description="How it differs from the plan, and why it lost.")
    set: list[str] = Field(
        default_factory=list,
        description="The `bsm plan --set` flags that select this row (KEY=VALUE, config keys).",
    )


class PlanSpec(_Out):
    """The spec the plan was made from, shipped to the container with it. Written without
    `training.seq_len`: the plan holds it once, in `config.seq_len` (restored on read)."""

    model: ModelSpec = Field(description="The model's shape.")
    training: TrainingSpec = Field(description="The training settings.")

    @model_serializer(mode="wrap")
    def _once(self, handler: Any) -> Any:
        data = handler(self)
        data["training"].pop("seq_len", None)
        return data


class ObjectivePick(_Out):
    """What one planning objective picks (the other objective's pick, beside the plan's own)."""

    objective: Objective = Field(description="The objective: time or cost.")
    instance_count: int = Field(description="The instance count it picks.")
    hours: float = Field(description="Its predicted wall hours.")
    cost_usd: float | None = Field(description="Its predicted cost; None: no price.")
    same_as_plan: bool = Field(description="The plan's own configuration is this pick.")


class CalibrationRef(_Out):
    """The calibration profile a plan was made with (planner/profile.py, docs/calibration.md)."""

    profile: str = Field(description="Path of the profile file.")
    name: str = Field(description="The profile's name.")
    created: str = Field(description="When the profile was written (UTC, ISO 8601).")
    origin: str = Field(description="flag (--calibration), spec (compute.calibration) or env.")
    gpu: str = Field(description="The profile entry applied (a GPU key), or '' when none.")
    changed: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Each constant or GPU figure the profile changed: {default, profile}.",
    )
    fitted: list[str] = Field(
        default_factory=list,
        description="The constants the profile's entry fitted (or, hand-written, sets).",
    )
    defaults: list[str] = Field(
        default_factory=list,
        description="The constants this plan's configuration uses that the profile did not fit "
        "(calibration.py's values); its speed is `calibrated` only when its own matmul "
        "efficiency was fitted.",
    )


class Plan(_Out):
    """The planner's answer: a configuration, its predictions and the reasons."""

    schema_version: int = Field(SCHEMA_VERSION, description="The plan format's version.")
    feasible: bool = Field(description="It fits in memory and finishes within the deadline.")
    model: ModelRef = Field(description="The model.")
    instance: InstanceRef = Field(description="The instances.")
    config: PlanConfig = Field(description="The configuration the loop executes.")
    memory_gib: MemoryBreakdown = Field(description="Predicted peak memory per GPU.")
    throughput: Throughput = Field(description="Predicted speed.")
    run: RunEstimate = Field(description="Predicted time and cost of the whole run.")
    checkpoint: CheckpointEstimate | None = Field(None, description="One checkpoint save.")
    alternatives: list[Alternative] = Field(default_factory=list, description="Runner-ups.")
    notes: list[Note] = Field(
        default_factory=list, description="Warnings, reasons and advice, each with its code."
    )
    objective: Objective = Field(
        "time",
        description="What chose the configuration: 'time' (the fewest instances that finish "
        "within the deadline, fastest on them) or 'cost' (the cheapest; compute.optimize).",
    )
    other_objective: ObjectivePick | None = Field(
        None, description="What the other objective would pick (count, hours, cost)."
    )
    spec: PlanSpec = Field(description="The spec the plan was made from.")
    calibration: CalibrationRef | None = Field(
        None, description="The calibration profile applied; None: calibration.py's constants."
    )

    @model_validator(mode="before")
    @classmethod
    def _read(cls, data: Any) -> Any:
        """Version 1 upgraded; the rendered lists dropped (they come from `notes`); seq_len
        restored into the spec from `config.seq_len`, where it is stored."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        version = data.get("schema_version", SCHEMA_VERSION)
        if version not in READABLE_VERSIONS:
            raise ValueError(
                f"schema_version {version!r} is not one this bsm reads "
                f"({', '.join(map(str, READABLE_VERSIONS))})"
            )
        if version == 1:
            from_v1(data)
        for key in ("warnings", "reasons", "advice"):
            data.pop(key, None)
        seq_len_into_spec(data)
        return data

    def _texts(self, kind: str) -> list[str]:
        return [n.text for n in self.notes if n.kind == kind]

    @computed_field(description="The warnings' texts (rendered from notes).")  # type: ignore[prop-decorator]
    @property
    def warnings(self) -> list[str]:
        return self._texts("warning")

    @computed_field(description="Why each choice was made (rendered from notes).")  # type: ignore[prop-decorator]
    @property
    def reasons(self) -> list[str]:
        return self._texts("reason")

    @computed_field(description="What would make it fit (rendered from notes).")  # type: ignore[prop-decorator]
    @property
    def advice(self) -> list[str]:
        return self._texts("advice")

    def has_note(self, code: str) -> bool:
        return any(n.code == code for n in self.notes)

    def predicted_memory_gib(self, runtime_gib: float | None = None) -> float:
        """What a run's peak-memory reading is compared with: the caching allocator's reserved
        bytes on CUDA (the total minus the runtime outside it), the total elsewhere (CPU RSS).
        On CPU a run passes `runtime_gib`, its process's RSS measured before the model is built
        (interpreter, torch, gloo: it varies by machine); it replaces the planner's assumed
        runtime, so the comparison is about what the plan decides."""
        m = self.memory_gib
        if self.instance.device == "cuda" and m.allocator_reserved is not None:
            return m.allocator_reserved
        if runtime_gib is not None and m.allocator_reserved is not None:
            return m.allocator_reserved + runtime_gib
        return m.total

    def summary(self, verbose: bool = False) -> str:
        """What `bsm plan` prints: the headline, configuration, memory and top runner-ups in
        30 lines of 80 columns; `verbose` adds warnings, reasons and every runner-up."""
        from blackwell_sm.planner.summary import summary_text

        return summary_text(self, hint="plan.summary(verbose=True)", verbose=verbose)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """IPython's plain display: the summary."""
        printer.text("Plan(...)" if cycle else self.summary())

    def _repr_html_(self) -> str:
        """Jupyter's display: the summary as HTML tables, the details folded below."""
        from blackwell_sm.planner.summary import summary_html

        return summary_html(self)

    def to_json(self) -> str:
        """The plan as indented JSON (what plan.json holds)."""
        return self.model_dump_json(indent=2)

    @classmethod
    def from_json(cls, text: str) -> Plan:
        return cls.model_validate_json(text)

    @classmethod
    def read(cls, path: Path) -> Plan:
        """plan.json as the container reads it (launcher and worker alike): through the safe
        loader (size cap, UTF-8, no duplicate keys, no NaN), each invalid field named by its
        path in the plan."""
        from pydantic import ValidationError

        from blackwell_sm.safe_load import load_mapping
        from blackwell_sm.spec.run import spec_error

        try:
            return cls.model_validate(
                load_mapping(path, field="plan.json", fmt="json", label="plan file")
            )
        except ValidationError as e:
            err = spec_error(e, root=cls, source=f"plan {path}")
            err.hint = PLAN_HINT
            raise err from None
