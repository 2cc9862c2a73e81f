"""Check a CreateTrainingJob request before any call: botocore's own model, then our limits."""

from __future__ import annotations

import re
from functools import cache
from typing import TYPE_CHECKING, Any

from blackwell_sm.errors import SpecError
from blackwell_sm.job.limits import MAX_RUNTIME_S, MODEL_SOURCE

if TYPE_CHECKING:
    from blackwell_sm.spec.job import JobSpec

# Request member -> the spec field a user changes to fix it.
SPEC_FIELD: dict[str, str] = {
    "TrainingJobName": "model.name",
    "HyperParameters": "hyperparameters",
    "AlgorithmSpecification": "job.image_uri",
    "RoleArn": "job.role_arn",
    "InputDataConfig": "job.channels",
    "OutputDataConfig": "job.output_s3_prefix",
    "ResourceConfig": "compute",
    "VpcConfig": "job.subnets",
    "StoppingCondition": "job.max_runtime_hours",
    "Tags": "job.tags",
    "CheckpointConfig": "job.checkpoint_s3_prefix",
    "Environment": "job.environment",
    "RetryStrategy": "job.max_retry_attempts",
    "TensorBoardOutputConfig": "job.tensorboard_s3_prefix",
    "MlflowConfig": "training.mlflow",
    "ModelPackageConfig": "job.model_package_group",
    "InfraCheckConfig": "job.infra_check",
}

# Request member -> the spec field it is built from (fixed members; keyed ones are added below).
_ORIGINS: dict[str, str] = {
    "TrainingJobName": "model.name",
    "RoleArn": "job.role_arn",
    "AlgorithmSpecification.TrainingImage": "job.image_uri",
    "OutputDataConfig.S3OutputPath": "job.output_s3_prefix",
    "OutputDataConfig.KmsKeyId": "job.output_kms_key_id",
    "OutputDataConfig.CompressionType": "job.output_compression",
    "ResourceConfig.InstanceType": "compute.instance_type",
    "ResourceConfig.InstanceCount": "compute.instance_count",
    "ResourceConfig.VolumeSizeInGB": "job.volume_size_gb",
    "ResourceConfig.VolumeKmsKeyId": "job.volume_kms_key_id",
    "ResourceConfig.KeepAlivePeriodInSeconds": "job.keep_alive_minutes",
    "ResourceConfig.TrainingPlanArn": "compute.training_plan",
    "StoppingCondition": "job.max_runtime_hours",
    "CheckpointConfig": "job.checkpoint_s3_prefix",
    "VpcConfig.Subnets": "job.subnets",
    "VpcConfig.SecurityGroupIds": "job.security_group_ids",
    "RetryStrategy": "job.max_retry_attempts",
    "Tags": "job.tags",
    "Environment": "job.environment",
    "InputDataConfig": "job.channels",
    "TensorBoardOutputConfig": "job.tensorboard_s3_prefix",
    "MlflowConfig": "training.mlflow",
    "ModelPackageConfig": "job.model_package_group",
    "InfraCheckConfig": "job.infra_check",
}


def request_origins(request: dict[str, Any], job: JobSpec) -> dict[str, str]:
    """Request path -> spec field, for every value of `request` that came from the spec.

    Keyed values get their key: `Tags[3]` -> `job.tags.team`, `Environment.NAME` ->
    `job.environment.NAME`, `InputDataConfig[1]` -> `job.channels.train`; the automatic
    `bsm:model` tag -> `model.name`.
    """
    out = dict(_ORIGINS)
    for i, tag in enumerate(request.get("Tags", [])):
        key = tag.get("Key")
        if key in job.tags:
            out[f"Tags[{i}]"] = f"job.tags.{key}"
        elif key == "bsm:model":
            out[f"Tags[{i}]"] = "model.name"
        elif key == "bsm:training-plan":
            out[f"Tags[{i}]"] = "compute.training_plan"
    for key in request.get("Environment", {}):
        if key in job.environment:
            out[f"Environment.{key}"] = f"job.environment.{key}"
    for i, ch in enumerate(request.get("InputDataConfig", [])):
        name = ch.get("ChannelName")
        if name in job.channels:
            out[f"InputDataConfig[{i}]"] = f"job.channels.{name}"
    entries = request.get("ResourceConfig", {}).get("InstancePreferences", [])
    for i in range(len(entries)):
        out["ResourceConfig.InstancePreferences"] = "compute.instance_preferences"
        base = f"ResourceConfig.InstancePreferences[{i}]"
        out[base] = f"compute.instance_preferences.{i}"
        out[f"{base}.TrainingPlanArns"] = f"compute.instance_preferences.{i}.training_plan"
    return out


# ResourceConfig members (and a top-level flag) that InstancePreferences excludes (botocore
# model documentation of ResourceConfig.InstancePreferences, botocore 1.44).
PREFERENCE_EXCLUSIONS = (
    "InstanceType",
    "InstanceCount",
    "TrainingPlanArn",
    "InstanceGroups",
    "InstancePlacementConfig",
)


def preference_exclusions(request: dict[str, Any]) -> list[tuple[str, str]]:
    """(path, problem) for each member sent together with ResourceConfig.InstancePreferences."""
    rc = request.get("ResourceConfig", {})
    if "InstancePreferences" not in rc:
        return []
    out = [
        (f"ResourceConfig.{k}", f"ResourceConfig.{k} cannot be sent with InstancePreferences")
        for k in PREFERENCE_EXCLUSIONS
        if k in rc
    ]
    if request.get("EnableManagedSpotTraining"):
        out.append(
            (
                "EnableManagedSpotTraining",
                "managed spot training cannot be used with InstancePreferences (only Flexible "
                "Training Plans and on-demand capacity)",
            )
        )
    return out


# Java regex classes in the model's patterns, in Python `re` terms.
_JAVA_CLASSES = {
    r"\p{L}": r"\w",
    r"\p{N}": r"\w",
    r"\p{Z}": r" \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000",
    r"\p{Alnum}": "a-zA-Z0-9",
}


@cache
def operation_model() -> Any:
    """botocore's model of SageMaker CreateTrainingJob (loaded once; ~0.5 s)."""
    import botocore.session

    model = botocore.session.get_session().get_service_model("sagemaker")
    return model.operation_model("CreateTrainingJob")


@cache
def _pattern(java: str) -> re.Pattern[str] | None:
    text = java
    for k, v in _JAVA_CLASSES.items():
        text = text.replace(k, v)
    try:
        return re.compile(text, re.DOTALL)
    except re.error:  # a construct Python lacks: botocore's own checks still apply
        return None


def shape_at(path: str) -> Any:
    """The botocore shape at a dotted member path, e.g. 'HyperParameters' or 'Tags'."""
    shape = operation_model().input_shape
    for part in path.split("."):
        shape = shape.members[part]
    return shape


def _constraints(value: Any, shape: Any, path: str, out: list[tuple[str, str]]) -> None:
    """Append (request path, problem) for every model maximum or pattern `value` breaks."""
    md = shape.metadata
    kind = shape.type_name
    if kind == "structure" and isinstance(value, dict):
        for key, item in value.items():
            if key in shape.members:
                _constraints(item, shape.members[key], f"{path}.{key}" if path else key, out)
    elif kind == "list" and isinstance(value, list):
        if "max" in md and len(value) > md["max"]:
            out.append((path, f"{len(value)} entries, at most {md['max']} allowed ({shape.name})"))
        for i, item in enumerate(value):
            _constraints(item, shape.member, f"{path}[{i}]", out)
    elif kind == "map" and isinstance(value, dict):
        if "max" in md and len(value) > md["max"]:
            out.append((path, f"{len(value)} entries, at most {md['max']} allowed ({shape.name})"))
        for key, item in value.items():
            _constraints(key, shape.key, f"{path}.{key}", out)
            _constraints(item, shape.value, f"{path}.{key}", out)
    elif kind == "string" and isinstance(value, str):
        if "max" in md and len(value) > md["max"]:
            out.append(
                (path, f"{len(value)} characters, at most {md['max']} allowed ({shape.name})")
            )
        rx = _pattern(md["pattern"]) if "pattern" in md else None
        if rx is not None and not rx.fullmatch(value):
            out.append((path, f"{_short(value)} does not match {md['pattern']} ({shape.name})"))
    elif kind in ("integer", "long") and isinstance(value, int) and value > md.get("max", value):
        out.append((path, f"{value} is over the maximum {md['max']} ({shape.name})"))


def _short(text: str, n: int = 40) -> str:
    return repr(text if len(text) <= n else text[:n] + "...")


def _extra(request: dict[str, Any], *, nvme_only: bool) -> list[tuple[str, str]]:
    out = preference_exclusions(request)
    runtime = request.get("StoppingCondition", {}).get("MaxRuntimeInSeconds")
    if isinstance(runtime, int) and runtime > MAX_RUNTIME_S:
        out.append(
            (
                "StoppingCondition.MaxRuntimeInSeconds",
                f"{runtime} is over SageMaker's 28-day maximum ({MAX_RUNTIME_S} s)",
            )
        )
    names = [c.get("ChannelName") for c in request.get("InputDataConfig", [])]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        out.append(
            ("InputDataConfig", f"channel names must be unique; repeated: {', '.join(dupes)}")
        )
    if nvme_only and request.get("ResourceConfig", {}).get("VolumeKmsKeyId"):
        out.append(
            (
                "ResourceConfig.VolumeKmsKeyId",
                f"{request['ResourceConfig'].get('InstanceType')} has only local NVMe storage, "
                "which SageMaker encrypts itself and which takes no volume KMS key",
            )
        )
    for i, tag in enumerate(request.get("Tags", [])):
        if str(tag.get("Key", "")).lower().startswith("aws:"):
            out.append((f"Tags[{i}].Key", f"{tag['Key']!r} uses the reserved aws: prefix"))
    return out


_PARAM_RE = re.compile(r"parameter ([^\s,]+)")


def validate_request(
    request: dict[str, Any],
    *,
    nvme_only: bool = False,
    origins: dict[str, str] | None = None,
) -> None:
    """Raise SpecError listing every problem SageMaker would reject the request for.

    `origins` maps request paths (`Tags[3]`, `Environment.NAME`, `InputDataConfig[1]`,
    `ResourceConfig.InstanceCount`) to the spec field the value came from, so each problem
    names the field a user edits (`job.tags.team`), not only the request member.
    """
    from botocore.validate import ParamValidator

    shape = operation_model().input_shape
    problems: list[tuple[str, str]] = []
    report = ParamValidator().validate(request, shape)
    if report.has_errors():
        for line in report.generate_report().splitlines():
            line = line.strip()
            if line and not line.startswith("Parameter validation failed"):
                m = _PARAM_RE.search(line)
                problems.append((m.group(1) if m else "", line))
    _constraints(request, shape, "", problems)
    problems += _extra(request, nvme_only=nvme_only)
    if problems:
        fields = [spec_field(path, text, origins or {}) for path, text in problems]
        lines = "\n".join(
            f"  {f}: {path + ': ' if path and path not in text else ''}{text}"
            for (path, text), f in zip(problems, fields, strict=True)
        )
        raise SpecError(
            f"the CreateTrainingJob request would be rejected ({len(problems)} problem"
            f"{'s' if len(problems) > 1 else ''}; limits from the {MODEL_SOURCE} and "
            f"blackwell_sm.job.limits):\n{lines}",
            field=fields[0],
        )


_MEMBER_RE = re.compile(r"\b(" + "|".join(SPEC_FIELD) + r")\b")


def spec_field(path: str, text: str = "", origins: dict[str, str] | None = None) -> str:
    """The spec field behind a request path: the longest `origins` prefix, else its member."""
    origins = origins or {}
    probe = path
    while probe:
        if probe in origins:
            return origins[probe]
        cut = max(probe.rfind("."), probe.rfind("["))
        probe = probe[:cut] if cut > 0 else ""
    m = _MEMBER_RE.search(path) or _MEMBER_RE.search(text)
    return SPEC_FIELD[m.group(1)] if m else "job"
