"""Least-privilege IAM policies: for whoever runs `bsm` (the caller) and for the job's role.

Derived from a spec when one is given (its region, account, role, S3 prefixes, channels, image,
KMS keys, VPC); without one, REPLACE-ME placeholders and wildcards mark what to fill in.
Pure: builds policy documents, calls nothing. What each command calls is the table in
`job/iam_calls.py` (re-exported here).
"""

from __future__ import annotations

from typing import Any

from blackwell_sm.job.capacity import spec_instance_types
from blackwell_sm.job.iam_calls import BUY_ACTIONS, CALLER_RESOURCES, COMMAND_CALLS, Call
from blackwell_sm.job.iam_trackers import tracker_statements
from blackwell_sm.job.images import default_image_uri
from blackwell_sm.job.names import JOB_NAME_PREFIX, PURCHASE_INTENTS_FOLDER, name_stem
from blackwell_sm.spec.aws_rules import ECR_IMAGE_RE, is_placeholder
from blackwell_sm.spec.job import S3_URI_RE
from blackwell_sm.spec.placeholders import spec_placeholders
from blackwell_sm.spec.run import RunSpec

__all__ = [
    "BUY_ACTIONS",
    "CALLER_RESOURCES",
    "COMMAND_CALLS",
    "Call",
    "caller_policy",
    "caller_resources",
    "iam_policies",
]


LOG_WRITE_ACTIONS = [
    "logs:CreateLogGroup",
    "logs:CreateLogStream",
    "logs:PutLogEvents",
    "logs:DescribeLogStreams",
]
ECR_PULL_ACTIONS = [
    "ecr:BatchCheckLayerAvailability",
    "ecr:BatchGetImage",
    "ecr:GetDownloadUrlForLayer",
]
VPC_ACTIONS = [
    "ec2:CreateNetworkInterface",
    "ec2:CreateNetworkInterfacePermission",
    "ec2:DeleteNetworkInterface",
    "ec2:DeleteNetworkInterfacePermission",
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSecurityGroups",
    "ec2:DescribeSubnets",
    "ec2:DescribeVpcs",
]
LOG_GROUP = "/aws/sagemaker/TrainingJobs"


def _doc(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": [s for s in statements if s]}


def _stmt(sid: str, actions: list[str], resources: list[str] | str, **extra: Any) -> dict:
    res = resources if isinstance(resources, str) else sorted(set(resources))
    return {"Sid": sid, "Effect": "Allow", "Action": sorted(set(actions)), "Resource": res, **extra}


def _s3_parts(uri: str) -> tuple[str, str]:
    m = S3_URI_RE.match(uri)
    assert m, uri  # validated by JobSpec
    return m["bucket"], (m["key"] or "").strip("/")


class _Ctx:
    """Where things are: from the spec, or placeholders when there is none."""

    def __init__(self, spec: RunSpec | None) -> None:
        job = spec.job if spec else None
        self.spec = spec
        if job:
            parts = job.role_arn.split(":")
            self.partition, self.account = parts[1], parts[4]
            self.role_arn = job.role_arn
            self.region = job.region or "*"
        else:
            self.partition, self.account, self.region = "aws", "*", "*"
            self.role_arn = "arn:aws:iam::*:role/REPLACE-ME-SageMakerExecutionRole"
        self.s3_prefix = job.s3_prefix if job else "s3://REPLACE-ME-bucket/blackwell-sm"
        self.code = job.code_prefix if job else f"{self.s3_prefix}/code"
        self.output = job.output_prefix if job else f"{self.s3_prefix}/output"
        self.checkpoints = job.checkpoint_prefix if job else f"{self.s3_prefix}/checkpoints"
        self.channels = [c.s3_uri for _, c in sorted(job.channels.items())] if job else []
        init = spec.training.init_from if spec else None
        self.init = init if job and init and init.startswith("s3://") else None
        if self.init:
            self.channels.append(self.init)  # the `init` channel: starting weights
        self.job = job

    def arn(self, service: str, resource: str) -> str:
        return f"arn:{self.partition}:{service}:{self.region}:{self.account}:{resource}"

    def s3_objects(self, uri: str) -> str:
        bucket, key = _s3_parts(uri)
        return f"arn:{self.partition}:s3:::{bucket}/{key + '/' if key else ''}*"

    def s3_list(self, uris: list[str], sid: str) -> list[dict[str, Any]]:
        """ListBucket per bucket, limited to the prefixes."""
        by_bucket: dict[str, set[str]] = {}
        for uri in uris:
            bucket, key = _s3_parts(uri)
            by_bucket.setdefault(bucket, set()).update({key, f"{key}/*"} if key else {"*"})
        return [
            _stmt(
                f"{sid}{i}",
                ["s3:ListBucket"],
                f"arn:{self.partition}:s3:::{bucket}",
                Condition={"StringLike": {"s3:prefix": sorted(prefixes)}},
            )
            for i, (bucket, prefixes) in enumerate(sorted(by_bucket.items()))
        ]

    def training_jobs(self) -> str:
        # SageMaker lowercases names in ARNs; the toolkit names jobs <model>-<spec hash>[-suffix].
        if self.spec is None:
            return self.arn("sagemaker", f"training-job/{JOB_NAME_PREFIX}*")
        stem = name_stem(self.spec.model.name).lower()
        return self.arn("sagemaker", f"training-job/{JOB_NAME_PREFIX}{stem}-*")


def caller_actions(commands: list[str] | None = None) -> dict[str, set[str]]:
    """Resource kind → the IAM actions `commands` (default: all) need on it, from the table."""
    by_kind: dict[str, set[str]] = {}
    for command in commands or list(COMMAND_CALLS):
        for call in COMMAND_CALLS[command]:
            by_kind.setdefault(call.resource, set()).add(call.action)
            for action, kind in call.also:
                by_kind.setdefault(kind, set()).add(action)
    return by_kind


def caller_resources(spec: RunSpec | None = None) -> dict[str, list[str] | str]:
    """Resource kind -> the ARNs (IAM wildcards) the caller policy grants it on."""
    c = _Ctx(spec)
    return {
        "spec_jobs": [c.training_jobs()],
        "toolkit_jobs": [c.arn("sagemaker", f"training-job/{JOB_NAME_PREFIX}*")],
        "any": "*",
        "plans": [c.arn("sagemaker", "training-plan/*")],
        "reserved": [c.arn("sagemaker", "reserved-capacity/*")],
        "role": [c.role_arn],
        "bucket": [f"arn:{c.partition}:s3:::{_s3_parts(c.code)[0]}"],
        "code_objects": [c.s3_objects(c.code)],
        "checkpoint_list": [f"arn:{c.partition}:s3:::{_s3_parts(c.checkpoints)[0]}"],
        "checkpoint_objects": [c.s3_objects(c.checkpoints)],
        "job_output": [c.s3_objects(c.output)],
        "intent_objects": [c.s3_objects(f"{c.s3_prefix}/{PURCHASE_INTENTS_FOLDER}")],
        "job_logs": [
            c.arn("logs", f"log-group:{LOG_GROUP}"),
            c.arn("logs", f"log-group:{LOG_GROUP}:*"),
        ],
        # submit's data check: the channels' manifests, an S3 init_from's tokenizer files
        "data_objects": [c.s3_objects(u) for u in c.channels] if c.job else [],
        "init_list": [f"arn:{c.partition}:s3:::{_s3_parts(c.init)[0]}"] if c.init else [],
    }


def caller_policy(spec: RunSpec | None = None) -> dict[str, Any]:
    """What `bsm` commands (and the SDK view) call, generated from COMMAND_CALLS."""
    c = _Ctx(spec)
    by_kind = caller_actions()
    resources = caller_resources(spec)
    ck_key = _s3_parts(c.checkpoints)[1]
    extra: dict[str, dict[str, Any]] = {
        "role": {"Condition": {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}},
        "checkpoint_list": {"Condition": {"StringLike": {"s3:prefix": [f"{ck_key}/*"]}}},
    }
    if c.init:
        init_key = _s3_parts(c.init)[1]
        extra["init_list"] = {
            "Condition": {"StringLike": {"s3:prefix": [f"{init_key}/*" if init_key else "*"]}}
        }
    if spec is not None:
        extra["spec_jobs"] = {
            "Condition": {
                "ForAllValues:StringEquals": {
                    # every type the job may start on (each instance preference's)
                    "sagemaker:InstanceTypes": spec_instance_types(spec)
                }
            }
        }
    statements = []
    for kind, (sid, _why) in CALLER_RESOURCES.items():
        actions = by_kind.get(kind, set())
        if kind == "spec_jobs" and "sagemaker:AddTags" in actions and kind in extra:
            # the instance-type condition applies to CreateTrainingJob only
            statements.append(
                _stmt(sid, ["sagemaker:CreateTrainingJob"], resources[kind], **extra[kind])
            )
            statements.append(
                _stmt("TagTheSpecsTrainingJobs", ["sagemaker:AddTags"], resources[kind])
            )
            continue
        if kind == "plans":
            buy = actions & BUY_ACTIONS
            statements.append(_stmt(sid, sorted(actions - buy), resources[kind]))
            # Reserving spends money (the CLI asks first); drop this statement to forbid it.
            statements.append(_stmt("ReserveTrainingPlans", sorted(buy), resources[kind]))
            continue
        if kind == "reserved":
            statements.append(_stmt(sid, sorted(actions), resources[kind]))
            continue
        if actions and resources[kind]:  # none: nothing of that kind in this spec
            statements.append(_stmt(sid, sorted(actions), resources[kind], **extra.get(kind, {})))
    return _doc(*statements)


def _ecr_repository(c: _Ctx) -> tuple[str | None, str]:
    """(repository ARN or None for a non-ECR image, the image URI)."""
    job = c.job
    if job is None:
        image = "763104351884.dkr.ecr.REGION.amazonaws.com/pytorch-training:TAG"
        return "arn:aws:ecr:*:763104351884:repository/pytorch-training", image
    image = job.image_uri or (default_image_uri(job.region) if job.region else "")
    m = ECR_IMAGE_RE.match(image)
    if not m:
        return None, image
    account, region, repo = m.group("account"), m.group("region"), m.group("repo")
    return f"arn:{c.partition}:ecr:{region}:{account}:repository/{repo}", image


def job_role_policy(spec: RunSpec | None = None) -> dict[str, Any]:
    """What the job's role needs: read code and data, write output/checkpoints, pull, log."""
    c = _Ctx(spec)
    repo, _ = _ecr_repository(c)
    job = c.job
    read = [c.code, *c.channels, c.checkpoints]
    kms_keys = [k for k in (job.output_kms_key_id, job.volume_kms_key_id) if k] if job else []
    statements = [
        _stmt("ReadCodeDataAndCheckpoints", ["s3:GetObject"], [c.s3_objects(u) for u in read]),
        _stmt(
            "WriteOutputAndCheckpoints",
            ["s3:PutObject"],
            [c.s3_objects(c.output), c.s3_objects(c.checkpoints)],
        ),
        *c.s3_list([c.code, *c.channels, c.checkpoints, c.output], "ListInputsAndCheckpoints"),
        _stmt("PullTheTrainingImage", ECR_PULL_ACTIONS, [repo]) if repo else {},
        _stmt("EcrLogin", ["ecr:GetAuthorizationToken"], "*") if repo else {},
        _stmt(
            "WriteJobLogs",
            LOG_WRITE_ACTIONS,
            [c.arn("logs", f"log-group:{LOG_GROUP}"), c.arn("logs", f"log-group:{LOG_GROUP}:*")],
        ),
        # No namespace condition: the SageMaker SDK's role check simulates this action without
        # context keys, and a condition would read as a denial there.
        _stmt("PublishJobMetrics", ["cloudwatch:PutMetricData"], "*"),
        # VPC jobs need these; the SDK's role check (SimulatePrincipalPolicy) requires them of
        # every training role, so they are always granted (SageMaker makes the interfaces).
        _stmt("VpcNetworkInterfacesAndTheSdkRoleCheck", VPC_ACTIONS, "*"),
    ]
    statements += tracker_statements(spec, region=c.region)  # job/iam_trackers.py
    if kms_keys:
        statements.append(
            _stmt("UseTheSpecsKmsKeys", ["kms:Decrypt", "kms:GenerateDataKey"], kms_keys)
        )
    if job and job.volume_kms_key_id:
        statements.append(
            _stmt(
                "GrantVolumeEncryption",
                ["kms:CreateGrant"],
                [job.volume_kms_key_id],
                Condition={"Bool": {"kms:GrantIsForAWSResource": "true"}},
            )
        )
    return _doc(*statements)


def without_placeholders(doc: dict[str, Any]) -> dict[str, Any]:
    """`doc` less every resource that is still a REPLACE-ME placeholder (and any statement
    left without one): a spec's policy grants nothing on a bucket or role not yet named."""
    kept = []
    for st in doc["Statement"]:
        res = st["Resource"]
        if isinstance(res, str):
            if not is_placeholder(res):
                kept.append(st)
            continue
        left = [r for r in res if not is_placeholder(r)]
        if left:
            kept.append({**st, "Resource": left})
    return {**doc, "Statement": kept}


def trust_policy() -> dict[str, Any]:
    """The job role's trust policy: SageMaker may assume it."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "sagemaker.amazonaws.com"},
                "Action": "sts:AssumeRole",
            }
        ],
    }


def iam_policies(spec: RunSpec | None = None) -> dict[str, Any]:
    """Caller policy, job-role policy and trust policy, with notes on what to fill in."""
    notes = []
    if spec is None or spec.job is None:
        notes.append(
            "no spec with a job: section given: replace REPLACE-ME and narrow the '*' account "
            "and region (bsm iam-policy SPEC.yaml derives them)"
        )
    else:
        notes += [
            f"{p} is still a placeholder: nothing is granted on it until it is set"
            for p in spec_placeholders(spec)
        ]
        if spec.job.region is None:
            notes.append("job.region is unset: ARNs use region '*'")
        repo, image = _ecr_repository(_Ctx(spec))
        if repo is None:
            notes.append(f"image {image!r} is not in ECR: add its registry's pull permissions")
    notes.append(
        "ReserveTrainingPlans allows sagemaker:CreateTrainingPlan and sagemaker:ExtendTrainingPlan,"
        " which spend money; remove it for users who must not reserve or extend capacity"
    )
    notes.append(
        "the job role's VpcNetworkInterfacesAndTheSdkRoleCheck statement is needed by VPC jobs "
        "and by the SageMaker SDK's role validation (to_model_trainer); drop it if you use "
        "neither"
    )
    with_job = spec if spec and spec.job else None
    caller, role = caller_policy(with_job), job_role_policy(with_job)
    if with_job is not None:  # a spec's placeholders are never granted (a template's are shown)
        caller, role = without_placeholders(caller), without_placeholders(role)
    return {
        "caller": caller,
        "job_role": role,
        "job_role_trust": trust_policy(),
        "notes": notes,
    }
