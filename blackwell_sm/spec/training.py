"""TrainingSpec: what to train on and how, plus optional pins for any planner knob."""

from __future__ import annotations

import math
from typing import Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_validator,
)

Precision = Literal["bf16", "fp8", "mxfp8"]
PrecisionChoice = Literal["auto", "bf16", "fp8", "mxfp8"]
Checkpointing = Literal["none", "selective", "selective-op", "full"]
CheckpointingChoice = Literal["auto", "none", "selective", "selective-op", "full"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class OptimizerSpec(_Strict):
    """AdamW hyperparameters (fused AdamW on GPU)."""

    name: Literal["adamw"] = Field("adamw", description="Optimizer; AdamW is the one supported.")
    lr: PositiveFloat = Field(3e-4, description="Peak learning rate.")
    betas: tuple[float, float] = Field((0.9, 0.95), description="AdamW beta1, beta2.")
    eps: PositiveFloat = Field(1e-8, description="AdamW epsilon.")
    weight_decay: float = Field(0.1, ge=0, description="Decoupled weight decay.")
    grad_clip: PositiveFloat | None = Field(1.0, description="Max global grad norm; null: none.")


class ScheduleSpec(_Strict):
    """Learning-rate schedule: linear warmup, then decay to min_lr_ratio x lr."""

    warmup_steps: NonNegativeInt = Field(100, description="Linear warmup steps.")
    decay: Literal["cosine", "linear", "constant"] = Field("cosine", description="Decay shape.")
    min_lr_ratio: float = Field(0.1, ge=0, le=1, description="Final lr as a fraction of lr.")


class CheckpointSpec(_Strict):
    """When and how checkpoints are written under /opt/ml/checkpoints."""

    interval_steps: PositiveInt | None = Field(500, description="Save every N steps; null: off.")
    interval_minutes: PositiveFloat | None = Field(30.0, description="Save every M minutes.")
    keep_last: PositiveInt = Field(2, description="Complete checkpoints to keep.")
    async_save: bool = Field(True, description="Save asynchronously on GPU when the plan allows.")
    expiry_margin_s: PositiveFloat = Field(
        600.0, description="Save this long before capacity expiry or max runtime."
    )


class DataSpec(_Strict):
    """Where training tokens come from."""

    sequences: PositiveInt | None = Field(
        None,
        description="Training sequences in the prepared data (its manifest's `sequences`); "
        "needed to train for `epochs`.",
    )

    source: Literal["synthetic", "channel"] = Field(
        "channel", description="'channel': token shards in a SageMaker channel; 'synthetic'."
    )
    train_channel: str = Field("train", description="Channel holding the training shards.")
    validation_channel: str | None = Field(None, description="Channel for validation shards.")
    validation_interval_steps: PositiveInt | None = Field(None, description="Validate every N.")
    validation_steps: PositiveInt = Field(10, description="Batches per validation pass.")


class PlannerPins(_Strict):
    """Fix any planner knob; unset knobs are searched. Keys are the plan's `config` keys."""

    shard_degree: PositiveInt | None = Field(None, description="GPUs each parameter is sharded on.")
    replicate_degree: PositiveInt | None = Field(None, description="HSDP replica groups.")
    micro_batch_size: PositiveInt | None = Field(None, description="Sequences per GPU per pass.")
    grad_accum_steps: PositiveInt | None = Field(None, description="Micro-batches per step.")
    compile: bool | None = Field(None, description="torch.compile each block.")
    reshard_after_forward: bool | None = Field(None, description="Free gathered params after fwd.")


FINETUNE_LR = 2e-5  # the default peak lr of `task: finetune` (pretraining: OptimizerSpec's 3e-4)


class TrainingSpec(_Strict):
    """The run: sequence length, batch, length of training, optimizer, precision, checkpoints."""

    task: Literal["pretrain", "finetune"] = Field(
        "pretrain",
        description="finetune: default lr 2e-5 instead of 3e-4 (norms and biases never decay "
        "in either), and `epochs` may set the length.",
    )

    seq_len: PositiveInt = Field(
        4096,
        description="Tokens per sequence (default 4096, or the model's max_seq_len if shorter).",
    )
    global_batch_tokens: PositiveInt | None = Field(
        None, description="Tokens per optimizer step (default 4,194,304 = 4Mi when neither is set)."
    )
    global_batch_seqs: PositiveInt | None = Field(None, description="Sequences per optimizer step.")
    total_tokens: PositiveInt | None = Field(None, description="Tokens to train on.")
    total_steps: PositiveInt | None = Field(None, description="Optimizer steps to train for.")
    epochs: PositiveFloat | None = Field(
        None,
        description="Passes over the data (with data.sequences): total_steps = ceil(epochs x "
        "sequences / sequences per step).",
    )
    optimizer: OptimizerSpec = Field(default_factory=OptimizerSpec)
    schedule: ScheduleSpec = Field(default_factory=ScheduleSpec)
    precision: PrecisionChoice = Field("auto", description="Matmul precision; auto: planner picks.")
    activation_checkpointing: CheckpointingChoice = Field(
        "auto", description="auto: planner picks."
    )
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    data: DataSpec = Field(default_factory=DataSpec)
    seed: NonNegativeInt = Field(0, description="Seed for init, data order and dropout-free RNG.")
    log_interval_steps: PositiveInt = Field(1, description="Log metrics every N steps.")
    export_model: bool = Field(True, description="Write safetensors + config.json at the end.")
    export_dtype: Literal["auto", "bfloat16", "float32"] = Field(
        "auto",
        description="dtype of the exported weights (config.json torch_dtype); auto: bfloat16 "
        "from 1B parameters, float32 (the exact master weights) below.",
    )
    init_from: str | None = Field(
        None,
        description="Start from these weights instead of random ones: a Hugging Face folder "
        "(safetensors, one file or shards with an index) or an s3:// prefix, which the job "
        "mounts as the `init` channel (FastFile). On resume a newer checkpoint wins.",
    )
    pins: PlannerPins = Field(default_factory=PlannerPins)

    @field_validator("init_from")
    @classmethod
    def _init_from(cls, v: str | None) -> str | None:
        if v is not None and v.startswith("s3://"):
            from blackwell_sm.spec.job import check_s3_uri

            return check_s3_uri(v, strip=False)
        if v is not None and not v.strip():
            raise ValueError("expected a folder or an s3:// URI")
        return v

    @model_validator(mode="after")
    def _one_of_each(self) -> Self:
        if self.global_batch_tokens is not None and self.global_batch_seqs is not None:
            raise ValueError("set global_batch_tokens or global_batch_seqs, not both")
        if self.total_tokens is not None and self.total_steps is not None:
            raise ValueError("set total_tokens or total_steps, not both")
        if self.task == "finetune" and "lr" not in self.optimizer.model_fields_set:
            self.optimizer.lr = FINETUNE_LR
        if self.epochs is not None:
            if self.data.sequences is None:
                raise ValueError(
                    "epochs needs data.sequences (the `sequences` of the data's manifest.json)"
                )
            if self.total_tokens is not None:
                raise ValueError("set epochs or total_tokens, not both")
            steps = math.ceil(self.epochs * self.data.sequences / self.global_batch_sequences)
            if self.total_steps is not None and self.total_steps != steps:
                raise ValueError(
                    f"set epochs or total_steps, not both (epochs gives {steps} steps)"
                )
            # Derived, like seq_len's default: the planner and the loop read total_steps.
            object.__setattr__(self, "total_steps", steps)
        return self

    @property
    def global_batch_sequences(self) -> int:
        """Sequences per optimizer step (rounded up from tokens)."""
        if self.global_batch_seqs is not None:
            return self.global_batch_seqs
        tokens = self.global_batch_tokens or 4 * 1024 * 1024
        return max(1, -(-tokens // self.seq_len))
