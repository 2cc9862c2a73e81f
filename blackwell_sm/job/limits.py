"""SageMaker CreateTrainingJob limits, each with its source.

Most limits live in botocore's service model (`max`, `pattern` on each shape) but botocore's
ParamValidator checks only types, required members and minimums; `validate.py` enforces the
model's maxima and patterns by reading them from the model, so they are never retyped here.
`MODEL_LIMITS` only names the ones users meet most (for docs and for a drift test);
`EXTRA_LIMITS` holds what the model does not say.
"""

from __future__ import annotations

from dataclasses import dataclass

from blackwell_sm.spec.job import MAX_RUNTIME_HOURS

MODEL_SOURCE = "botocore service model (sagemaker, CreateTrainingJob input shapes)"


@dataclass(frozen=True)
class Limit:
    path: str  # where in the CreateTrainingJob request
    rule: str
    value: int | str | None
    source: str


# Read from the model at validation time; `value` is what the model said when written (tested).
MODEL_LIMITS: tuple[Limit, ...] = (
    Limit("TrainingJobName", "length at most", 63, MODEL_SOURCE + ": TrainingJobName.max"),
    Limit(
        "TrainingJobName",
        "pattern",
        "[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}",
        MODEL_SOURCE + ": TrainingJobName.pattern",
    ),
    Limit("HyperParameters", "entries at most", 100, MODEL_SOURCE + ": HyperParameters.max"),
    Limit("HyperParameters.<key>", "length at most", 256, MODEL_SOURCE + ": HyperParameterKey"),
    Limit(
        "HyperParameters.<value>", "length at most", 2500, MODEL_SOURCE + ": HyperParameterValue"
    ),
    Limit("Tags", "entries at most", 50, MODEL_SOURCE + ": TagList.max"),
    Limit("Tags[].Key", "length at most", 128, MODEL_SOURCE + ": TagKey.max"),
    Limit("Tags[].Value", "length at most", 256, MODEL_SOURCE + ": TagValue.max"),
    Limit("InputDataConfig", "channels at most", 20, MODEL_SOURCE + ": InputDataConfig.max"),
    Limit(
        "InputDataConfig[].ChannelName",
        "pattern",
        "[A-Za-z0-9\\.\\-_]+",
        MODEL_SOURCE + ": ChannelName.pattern (max 64)",
    ),
    Limit("Environment", "entries at most", 100, MODEL_SOURCE + ": TrainingEnvironmentMap.max"),
    Limit(
        "Environment.<value>", "length at most", 512, MODEL_SOURCE + ": TrainingEnvironmentValue"
    ),
    Limit(
        "AlgorithmSpecification.MetricDefinitions",
        "entries at most",
        40,
        MODEL_SOURCE + ": MetricDefinitionList.max",
    ),
)

MAX_RUNTIME_S = MAX_RUNTIME_HOURS * 3600  # 28 days

# Limits the model does not hold.
EXTRA_LIMITS: tuple[Limit, ...] = (
    Limit(
        "StoppingCondition.MaxRuntimeInSeconds",
        "at most",
        MAX_RUNTIME_S,
        "AWS SageMaker API reference, StoppingCondition: the maximum is 28 days",
    ),
    Limit(
        "InputDataConfig[].ChannelName",
        "unique",
        None,
        "AWS SageMaker API reference, CreateTrainingJob InputDataConfig",
    ),
    Limit(
        "ResourceConfig.VolumeKmsKeyId",
        "not on instances with only local NVMe storage",
        None,
        "AWS SageMaker API reference, ResourceConfig.VolumeKmsKeyId: instances with local "
        "storage only (e.g. ml.p4d, ml.p5, ml.p6) cannot take a volume KMS key",
    ),
    Limit(
        "Tags[].Key",
        "no aws: prefix",
        None,
        "AWS tagging rules: the aws: prefix is reserved",
    ),
)
