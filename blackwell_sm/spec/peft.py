"""`training.peft`: parameter-efficient fine-tuning (LoRA adapters on a frozen base).

Module names are Hugging Face's (and so PEFT's `target_modules` / `modules_to_save`): the export
is a PEFT adapter folder (docs/lora.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

if TYPE_CHECKING:
    from blackwell_sm.spec.model import ModelSpec

from blackwell_sm.spec.types import Bool, KeyedValueError, NonNegFloat, PosFloat, PosInt

LoraTarget = Literal["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
FullModule = Literal["embed_tokens", "lm_head"]
ALL_TARGETS: tuple[LoraTarget, ...] = (
    "q_proj",
    "k_proj",
    "v_proj",
    "o_proj",
    "gate_proj",
    "up_proj",
    "down_proj",
)
MAX_RANK = 4096  # toolkit bound: past this an adapter is no longer low-rank for any preset


class PeftSpec(BaseModel):
    """LoRA: the base weights frozen (bf16, sharded, no gradients, no optimizer state); each
    target linear gains lora_B(lora_A(dropout(x))) x alpha / rank, trained in fp32."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    method: Literal["lora"] = Field("lora", description="The adapter kind; lora is the one.")
    rank: PosInt = Field(16, le=MAX_RANK, description=f"LoRA rank r, 1..{MAX_RANK}.")
    alpha: PosFloat = Field(
        32.0, le=1e6, description="LoRA alpha, in (0, 1000000]: the update is scaled by alpha/r."
    )
    dropout: NonNegFloat = Field(
        0.0, lt=1, description="Dropout on the adapter's input, in [0, 1) (PEFT's lora_dropout)."
    )
    target_modules: list[LoraTarget] = Field(
        default_factory=lambda: list(ALL_TARGETS),
        min_length=1,
        description="The block linears that get adapters, by Hugging Face's names: "
        + ", ".join(ALL_TARGETS)
        + " (default: all of them).",
    )
    modules_to_save: list[FullModule] = Field(
        default_factory=list,
        description="Modules trained in full beside the adapters (fp32, with optimizer state): "
        "none (default), embed_tokens, lm_head (PEFT's modules_to_save).",
    )
    export_merged: Bool = Field(
        False,
        description="Besides the PEFT adapter (DIR/model/), write the merged weights in the "
        "Hugging Face layout of a full fine-tune to DIR/model/merged/ (training.export_model).",
    )
    init_adapter: str | None = Field(
        None,
        min_length=1,
        max_length=1024,
        description="A PEFT adapter folder, 1-1024 characters (adapter_config.json + "
        "adapter_model.safetensors), to "
        "continue training from (its rank, alpha, targets must equal these); on resume a "
        "newer checkpoint wins.",
    )

    @field_validator("target_modules", "modules_to_save")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        seen = [m for i, m in enumerate(v) if m in v[:i]]
        if seen:
            raise ValueError(f"{seen[0]} is listed twice")
        return v

    @field_validator("init_adapter")
    @classmethod
    def _folder(cls, v: str | None) -> str | None:
        if v is not None and v.startswith("s3://"):
            raise ValueError(
                "expected a local folder (an s3:// adapter is not supported yet: copy it into "
                "training.init_from's folder or download it first)"
            )
        if v is not None and not v.strip():
            raise ValueError("expected a folder")
        return v

    @model_validator(mode="after")
    def _targets_sorted(self) -> Self:
        # One order for the planner, the model and the export: the block's.
        order = [t for t in ALL_TARGETS if t in self.target_modules]
        if order != self.target_modules:
            object.__setattr__(self, "target_modules", order)
        return self


def check_peft_precision(peft: PeftSpec | None, precision: str) -> None:
    """LoRA trains in bf16: fp8 / mxfp8 linears do not carry adapters here."""
    if peft is not None and precision not in ("auto", "bf16"):
        raise KeyedValueError(
            f"precision {precision} is not supported with training.peft (LoRA adapters run on "
            "bf16 linears); allowed: auto, bf16",
            key="precision",
        )


def check_peft_offload(peft: PeftSpec | None, offload: bool | None) -> None:
    """LoRA keeps its small adapter state on the GPU: the planner's offload lever (and its memory
    and time model) covers a full fine-tune's state only."""
    if peft is not None and offload:
        raise KeyedValueError(
            "pins.offload is not supported with training.peft (the adapters' state is small and "
            "stays on the GPU); allowed: false or unset",
            key="pins.offload",
        )


def check_peft_model(peft: PeftSpec | None, model: ModelSpec) -> None:
    """What `peft` needs of the model: an lm_head of its own to train it in full (a tied model's
    head is its embedding), and a rank below every adapted linear's widths (a low-rank update;
    the checkpointing policy tells adapter matmuls from the base's by that width)."""
    if peft is None:
        return
    if model.tie_embeddings and "lm_head" in peft.modules_to_save:
        raise KeyedValueError(
            "lm_head is tied to embed_tokens in this model: list embed_tokens instead; "
            "allowed: embed_tokens",
            key="training.peft.modules_to_save",
        )
    from blackwell_sm.spec import arch

    widths = [
        w
        for lin in arch.block_linears(model)
        if lin.name.split(".")[1] in peft.target_modules
        for w in (lin.in_features, lin.out_features)
    ]
    if peft.rank >= min(widths):
        raise KeyedValueError(
            f"rank {peft.rank} is not below the adapted linears' smallest width {min(widths)}; "
            f"allowed: 1..{min(widths) - 1}",
            key="training.peft.rank",
        )
