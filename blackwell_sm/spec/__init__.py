"""The user's words as validated data: model shapes and presets, training, compute, job."""

from blackwell_sm.spec.compute import ComputeSpec, InstancePreference
from blackwell_sm.spec.job import JobSpec
from blackwell_sm.spec.model import ModelSpec
from blackwell_sm.spec.presets import PRESETS, get_preset
from blackwell_sm.spec.run import (
    RunSpec,
    load_spec,
    parse_spec,
    spec_error,
    spec_from_preset,
    with_overrides,
)
from blackwell_sm.spec.training import (
    Checkpointing,
    CheckpointSpec,
    DataSpec,
    OptimizerSpec,
    PlannerPins,
    Precision,
    ScheduleSpec,
    TrainingSpec,
)

__all__ = [
    "PRESETS",
    "CheckpointSpec",
    "Checkpointing",
    "ComputeSpec",
    "DataSpec",
    "InstancePreference",
    "JobSpec",
    "ModelSpec",
    "OptimizerSpec",
    "PlannerPins",
    "Precision",
    "RunSpec",
    "ScheduleSpec",
    "TrainingSpec",
    "get_preset",
    "load_spec",
    "parse_spec",
    "spec_error",
    "spec_from_preset",
    "with_overrides",
]
