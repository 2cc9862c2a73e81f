"""`bsm presets`: each model preset with its size, native context and whether it fits one
instance, as the planner decides it (one `make_plan` per preset at one instance: ~1 s for all)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

#: The sequence length the fit is judged at (the model's context when shorter).
FIT_SEQ_LEN = 4096


class PresetFit(BaseModel):
    """One preset, and the planner's answer for it on one instance."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="The preset name (`model:` in a spec, `bsm init NAME`).")
    family: str = Field(description="Architecture family (spec/arch.py FAMILIES).")
    n_params: int = Field(description="Parameters, counted by the planner's formula.")
    max_seq_len: int = Field(description="Native context: the longest sequence its RoPE covers.")
    instance_type: str = Field(description="The instance the fit is judged on.")
    seq_len: int = Field(description="The sequence length the fit is judged at.")
    fits_one_instance: bool = Field(description="Some configuration fits one instance's memory.")
    memory_gib: float = Field(description="Predicted peak GiB per GPU of the chosen configuration.")
    usable_gib: float = Field(description="Usable GiB per GPU (device memory less headroom).")
    precision: str = Field(description="The chosen configuration's precision.")
    activation_checkpointing: str = Field(description="The chosen checkpointing mode.")


def preset_fits(instance_type: str = "ml.p6-b200.48xlarge") -> list[PresetFit]:
    """Every preset planned on one `instance_type`, at FIT_SEQ_LEN (or the model's context)
    with one sequence per GPU per step, for memory only (no token budget, no price)."""
    from blackwell_sm.planner.api import make_plan
    from blackwell_sm.spec import parse_spec
    from blackwell_sm.spec.presets import PRESETS

    out = []
    for name, model in PRESETS.items():
        seq = min(FIT_SEQ_LEN, model.max_seq_len)
        spec = parse_spec(
            {
                "model": name,
                "training": {"seq_len": seq, "total_steps": 1000},
                "compute": {"instance_type": instance_type, "instance_count": 1},
            },
            source=f"preset {name}",
        )
        p = make_plan(spec)
        m = p.memory_gib
        usable = m.usable if m.usable is not None else m.limit
        out.append(
            PresetFit(
                name=name,
                family=model.family,
                n_params=model.n_params,
                max_seq_len=model.max_seq_len,
                instance_type=instance_type,
                seq_len=seq,
                fits_one_instance=m.total <= usable,
                memory_gib=round(m.total, 1),
                usable_gib=round(usable, 1),
                precision=p.config.precision,
                activation_checkpointing=p.config.activation_checkpointing,
            )
        )
    return out
