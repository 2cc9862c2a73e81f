"""TrainingSpec: what to train on and how, plus optional pins for any planner knob."""

from __future__ import annotations

import math
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from blackwell_sm.spec.defaults import adjust_default, model_max_seq_len, was_set
from blackwell_sm.spec.peft import PeftSpec, check_peft_offload, check_peft_precision
from blackwell_sm.spec.trackers import MlflowSpec, Tracker, WandbSpec, check_trackers
from blackwell_sm.spec.types import (
    FLOAT64_EXACT,
    INT32_MAX,
    LR_MAX,
    MAX_GPUS,
    MAX_PIN,
    MAX_SEQ,
    SEED_MAX,
    Beta,
    Bool,
    KeyedValueError,
    NonNegFloat,
    NonNegStepCount,
    PosFloat,
    PosInt,
    SeedInt,
    StepCount,
    TokenCount,
)

Precision = Literal["bf16", "fp8", "mxfp8"]
PrecisionChoice = Literal["auto", "bf16", "fp8", "mxfp8"]
LossImpl = Literal["chunked", "full-logits"]
Checkpointing = Literal["none", "selective", "selective-op", "full"]
CheckpointingChoice = Literal["auto", "none", "selective", "selective-op", "full"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class OptimizerSpec(_Strict):
    """AdamW hyperparameters (fused AdamW on GPU)."""

    name: Literal["adamw"] = Field("adamw", description="Optimizer; AdamW is the one supported.")
    lr: PosFloat = Field(
        3e-4, le=LR_MAX, description=f"Peak learning rate, in (0, {LR_MAX:g}] (torch: lr >= 0)."
    )
    betas: tuple[Beta, Beta] = Field(
        (0.9, 0.95),
        description="AdamW beta1, beta2, each in [0, 1) (torch.optim.AdamW refuses others).",
    )
    eps: PosFloat = Field(
        1e-8, le=1, description="AdamW epsilon, in (0, 1] (torch: eps >= 0; 0 can divide by 0)."
    )
    weight_decay: NonNegFloat = Field(
        0.1, le=1e3, description="Decoupled weight decay, in [0, 1000] (torch: >= 0)."
    )
    grad_clip: PosFloat | None = Field(
        1.0, description="Max global grad norm, finite and > 0; null: none."
    )


class ScheduleSpec(_Strict):
    """Learning-rate schedule: linear warmup, then decay to min_lr_ratio x lr."""

    warmup_steps: NonNegStepCount = Field(
        100, description=f"Linear warmup steps, 0..{INT32_MAX}; at most the run's steps."
    )
    decay: Literal["cosine", "linear", "constant"] = Field("cosine", description="Decay shape.")
    min_lr_ratio: NonNegFloat = Field(
        0.1, le=1, description="Final lr as a fraction of lr, in [0, 1]."
    )


class CheckpointSpec(_Strict):
    """When and how checkpoints are written under /opt/ml/checkpoints."""

    interval_steps: StepCount | None = Field(
        500, description=f"Save every N steps, 1..{INT32_MAX}; null: off."
    )
    interval_minutes: PosFloat | None = Field(30.0, description="Save every M minutes (> 0).")
    keep_last: PosInt = Field(2, le=1000, description="Complete checkpoints to keep, 1..1000.")
    async_save: Bool = Field(True, description="Save asynchronously on GPU when the plan allows.")
    expiry_margin_s: PosFloat = Field(
        600.0, description="Save this long (seconds, > 0) before capacity expiry or max runtime."
    )


class DataSpec(_Strict):
    """Where training tokens come from."""

    sequences: StepCount | None = Field(
        None,
        description="Training sequences in the prepared data (its manifest's `sequences`), "
        f"1..{INT32_MAX}; needed to train for `epochs`.",
    )

    source: Literal["synthetic", "channel"] = Field(
        "channel", description="'channel': token shards in a SageMaker channel; 'synthetic'."
    )
    train_channel: str = Field("train", description="Channel holding the training shards.")
    validation_channel: str | None = Field(None, description="Channel for validation shards.")
    validation_interval_steps: StepCount | None = Field(
        None, description=f"Validate every N steps, 1..{INT32_MAX}."
    )
    validation_steps: StepCount = Field(
        10, description=f"Batches per validation pass, 1..{INT32_MAX}."
    )
    accept_changed_data: Bool = Field(
        False,
        description="Resume a checkpoint although the train channel's data differs from the "
        "data it was trained on (its manifest, tokenizer or shards); without it such a resume is "
        "refused before step 0. The acceptance is kept in the checkpoint's history.",
    )


class PlannerPins(_Strict):
    """Fix any planner knob; unset knobs are searched. Keys are the plan's `config` keys."""

    shard_degree: PosInt | None = Field(
        None, le=MAX_GPUS, description=f"GPUs each parameter is sharded on, 1..{MAX_GPUS}."
    )
    replicate_degree: PosInt | None = Field(
        None, le=MAX_GPUS, description=f"HSDP replica groups, 1..{MAX_GPUS}."
    )
    micro_batch_size: PosInt | None = Field(
        None, le=MAX_PIN, description=f"Sequences per GPU per pass, 1..{MAX_PIN}."
    )
    grad_accum_steps: PosInt | None = Field(
        None, le=MAX_PIN, description=f"Micro-batches per step, 1..{MAX_PIN}."
    )
    compile: Bool | None = Field(None, description="torch.compile each block.")
    reshard_after_forward: Bool | None = Field(None, description="Free gathered params after fwd.")
    cp_degree: PosInt | None = Field(
        None,
        le=MAX_GPUS,
        description=f"Context parallelism, 1..{MAX_GPUS}: GPUs that share each sequence (each "
        "holds 1/cp of its tokens; K and V are all-gathered); must divide the GPU count, and "
        "2 x cp_degree must divide seq_len.",
    )
    offload: Bool | None = Field(
        None,
        description="Sharded parameters, gradients and AdamW state in host memory (FSDP2's "
        "CPUOffloadPolicy; the optimizer steps on the CPU).",
    )


def epoch_steps(epochs: float, sequences: int, batch_sequences: int) -> int:
    """Optimizer steps of `epochs` passes over `sequences` at `batch_sequences` per step:
    ceil(ceil(epochs x sequences) / batch), the same as ceil(epochs x sequences / batch). The
    planner recomputes it for the batch it chooses (planner/frame.py), the launcher checks it."""
    return max(1, -(-math.ceil(epochs * sequences) // batch_sequences))


FINETUNE_LR = 2e-5  # the default peak lr of `task: finetune` (pretraining: OptimizerSpec's 3e-4)


class TrainingSpec(_Strict):
    """The run: sequence length, batch, length of training, optimizer, precision, checkpoints."""

    task: Literal["pretrain", "finetune"] = Field(
        "pretrain",
        description="finetune: default lr 2e-5 instead of 3e-4 (norms and biases never decay "
        "in either), and `epochs` may set the length.",
    )

    seq_len: PosInt = Field(
        4096,
        le=MAX_SEQ,
        description="Tokens per sequence (default 4096, or the model's max_seq_len if shorter); "
        f"1..{MAX_SEQ} and at most the model's max_seq_len.",
    )
    global_batch_tokens: TokenCount | None = Field(
        None,
        description="Tokens per optimizer step (default 4,194,304 = 4Mi when neither is set); "
        f"1..{FLOAT64_EXACT} (2**53, exact in the planner's float64 arithmetic).",
    )
    global_batch_seqs: StepCount | None = Field(
        None, description=f"Sequences per optimizer step, 1..{INT32_MAX}."
    )
    total_tokens: TokenCount | None = Field(
        None, description=f"Tokens to train on, 1..{FLOAT64_EXACT} (2**53)."
    )
    total_steps: StepCount | None = Field(
        None, description=f"Optimizer steps to train for, 1..{INT32_MAX}."
    )
    epochs: PosFloat | None = Field(
        None,
        le=1e6,
        description="Passes over the data, in (0, 1000000] (with data.sequences): total_steps = "
        "ceil(epochs x sequences / sequences per step).",
    )
    optimizer: OptimizerSpec = Field(default_factory=OptimizerSpec, description="AdamW.")
    schedule: ScheduleSpec = Field(default_factory=ScheduleSpec, description="LR schedule.")
    precision: PrecisionChoice = Field("auto", description="Matmul precision; auto: planner picks.")
    activation_checkpointing: CheckpointingChoice = Field(
        "auto", description="auto: planner picks."
    )
    loss_impl: LossImpl = Field(
        "chunked",
        description="How the output head and cross-entropy run: chunked (default: PyTorch's "
        "linear_cross_entropy over row chunks, never the full logits) or full-logits (the "
        "plain cross_entropy(linear(h).float()): the reference, 12 bytes per logit).",
    )
    checkpoint: CheckpointSpec = Field(
        default_factory=CheckpointSpec, description="When and how checkpoints are saved."
    )
    data: DataSpec = Field(default_factory=DataSpec, description="Where the tokens come from.")
    seed: SeedInt = Field(
        0,
        description=f"Seed for init, data order and dropout-free RNG, 0..{SEED_MAX} "
        "(numpy.random.seed's range).",
    )
    log_interval_steps: StepCount = Field(
        1, description=f"Log metrics every N steps, 1..{INT32_MAX}."
    )
    max_bad_steps: PosInt = Field(
        5,
        le=1000,
        description="Steps in a row with a non-finite loss or gradient norm (each skipped, "
        "weights unchanged) before the run stops with a failure, 1..1000.",
    )
    export_model: Bool = Field(True, description="Write safetensors + config.json at the end.")
    export_dtype: Literal["auto", "bfloat16", "float32"] = Field(
        "auto",
        description="dtype of the exported weights (config.json torch_dtype); auto: bfloat16 "
        "from 1B parameters, float32 (the exact master weights) below.",
    )
    init_from: str | None = Field(
        None,
        min_length=1,
        max_length=1024,
        description="Start from these weights instead of random ones (1-1024 characters): a "
        "Hugging Face folder (safetensors, one file or shards with an index) or an s3:// prefix, "
        "which the job mounts as the `init` channel (FastFile). On resume a newer checkpoint "
        "wins.",
    )

    @field_validator("init_from")
    @classmethod
    def _init_from(cls, v: str | None) -> str | None:
        from blackwell_sm.spec.hub import init_from_problem

        problem = init_from_problem(v) if v is not None else None
        if problem:
            raise ValueError(problem)
        if v is not None and v.startswith("s3://"):
            from blackwell_sm.spec.job import check_s3_uri

            return check_s3_uri(v, strip=False)
        if v is not None and not v.strip():
            raise ValueError("expected a folder or an s3:// URI")
        return v

    peft: PeftSpec | None = Field(
        None,
        description="Parameter-efficient fine-tuning (LoRA adapters on the frozen base; "
        "docs/lora.md); null: every parameter is trained.",
    )
    pins: PlannerPins = Field(
        default_factory=PlannerPins, description="Planner knobs fixed by the user (none: searched)."
    )
    report_to: list[Tracker] = Field(
        default_factory=list,
        description="Trackers rank 0 also reports to from inside the job: tensorboard (event "
        "files synced by SageMaker's TensorBoardOutputConfig), mlflow (training.mlflow), wandb "
        "(training.wandb); none by default. A tracker that fails warns once and never stops "
        "or slows training.",
    )
    mlflow: MlflowSpec | None = Field(None, description="MLflow settings (report_to: mlflow).")
    wandb: WandbSpec | None = Field(None, description="W&B settings (report_to: wandb).")
    _notes: list[str] = PrivateAttr(default_factory=list)  # defaults adjusted (spec/defaults.py)

    @model_validator(mode="after")
    def _one_of_each(self) -> Self:
        check_trackers(self.report_to, self.mlflow, self.wandb)
        check_peft_precision(self.peft, self.precision)
        check_peft_offload(self.peft, self.pins.offload)
        limit = model_max_seq_len()  # the model's context, while a RunSpec validates this
        if limit is not None and self.seq_len > limit and not was_set(self, "seq_len"):
            adjust_default(
                self,
                "seq_len",
                limit,
                notes=self._notes,
                path="training.seq_len",
                why="the model's max_seq_len",
            )
        if self.global_batch_tokens is not None and self.global_batch_seqs is not None:
            raise KeyedValueError(
                "set global_batch_tokens or global_batch_seqs, not both", key="global_batch_seqs"
            )
        if self.total_tokens is not None and self.total_steps is not None:
            raise KeyedValueError("set total_tokens or total_steps, not both", key="total_steps")
        if self.task == "finetune" and not was_set(self.optimizer, "lr"):
            object.__setattr__(self.optimizer, "lr", FINETUNE_LR)  # a default; stays unset
        if self.epochs is not None:
            if self.data.sequences is None:
                raise KeyedValueError(
                    "epochs needs data.sequences (the `sequences` of the data's manifest.json)",
                    key="data.sequences",
                )
            if self.total_tokens is not None:
                raise KeyedValueError("set epochs or total_tokens, not both", key="epochs")
            n = epoch_steps(self.epochs, self.data.sequences, self.global_batch_sequences)
            if self.total_steps is not None and self.total_steps != n:
                raise KeyedValueError(
                    f"set epochs or total_steps, not both (epochs gives {n} steps)", key="epochs"
                )
            # Derived, like seq_len's default: the planner and the loop read total_steps.
            object.__setattr__(self, "total_steps", n)
        steps = self.run_steps
        if steps is not None and self.schedule.warmup_steps > steps:
            if not was_set(self.schedule, "warmup_steps"):
                why = f"the run has {steps} step" + ("s" if steps != 1 else "")
                adjust_default(
                    self.schedule,
                    "warmup_steps",
                    steps,
                    notes=self._notes,
                    path="training.schedule.warmup_steps",
                    why=why,
                )
                return self
            raise KeyedValueError(
                f"warmup_steps {self.schedule.warmup_steps} is longer than the run's {steps} "
                f"steps: the learning rate would never reach its peak; allowed: 0..{steps}",
                key="schedule.warmup_steps",
            )
        return self

    @model_validator(mode="after")
    def _cp_divides_seq(self) -> Self:
        cp = self.pins.cp_degree
        if cp is not None and cp > 1 and self.seq_len % (2 * cp):
            ok = [
                c
                for c in range(2, min(MAX_GPUS, self.seq_len // 2) + 1)
                if self.seq_len % (2 * c) == 0
            ][:12]
            raise KeyedValueError(
                f"pins.cp_degree {cp} does not split seq_len {self.seq_len}: each GPU holds two "
                f"of 2 x cp_degree equal chunks, so 2 x cp_degree must divide seq_len; allowed "
                f"with this seq_len: 1, {', '.join(map(str, ok))}",
                key="pins.cp_degree",
            )
        return self

    def steps_at_batch(self, batch_sequences: int) -> int | None:
        """Steps of `epochs` passes over `data.sequences` at `batch_sequences` per step (the
        planner's batch may differ from the spec's); None without epochs."""
        if self.epochs is None or self.data.sequences is None:
            return None
        return epoch_steps(self.epochs, self.data.sequences, batch_sequences)

    @property
    def run_steps(self) -> int | None:
        """Optimizer steps of the run when the spec fixes them (total_steps or total_tokens)."""
        if self.total_steps is not None:
            return self.total_steps
        if self.total_tokens is not None:
            return -(-self.total_tokens // (self.global_batch_sequences * self.seq_len))
        return None

    @property
    def global_batch_sequences(self) -> int:
        """Sequences per optimizer step (rounded up from tokens)."""
        if self.global_batch_seqs is not None:
            return self.global_batch_seqs
        tokens = self.global_batch_tokens or 4 * 1024 * 1024
        return max(1, -(-tokens // self.seq_len))
