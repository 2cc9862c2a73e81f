"""The table the caller's IAM policy is generated from: every command -> the AWS calls it makes.

Each `Call` names one API operation, the IAM action it is authorised as and the kind of resource
it acts on (`CALLER_RESOURCES`); `job/iam.py` turns the table into the policy, and
tests/test_iam_coverage.py runs every command on moto and checks each call it made is an entry
of its row (operation and resource), allowed by the policy, and that every entry of every row
is exercised by a call that really happens. Pure data.
"""

from __future__ import annotations

from typing import NamedTuple


class Call(NamedTuple):
    """One AWS API operation a command makes: its IAM action and the resource it acts on.

    `resource` names a kind of resource (`CALLER_RESOURCES`); `also` lists the actions the call
    needs besides its own (tag-on-create needs AddTags, a job passes its role, a training plan
    reservation creates reserved capacity), each with its resource kind.
    """

    operation: str  # service:ApiOperation, as botocore names it
    action: str  # the IAM action it is authorised as
    resource: str
    also: tuple[tuple[str, str], ...] = ()


_DESCRIBE_JOB = Call(
    "sagemaker:DescribeTrainingJob", "sagemaker:DescribeTrainingJob", "toolkit_jobs"
)
_LIST_TAGS = Call("sagemaker:ListTags", "sagemaker:ListTags", "toolkit_jobs")
_CREATE_JOB = Call(
    "sagemaker:CreateTrainingJob",
    "sagemaker:CreateTrainingJob",
    "spec_jobs",
    also=(
        ("sagemaker:AddTags", "spec_jobs"),
        ("iam:PassRole", "role"),
        # on a plan, CreateTrainingJob is authorised on the plan's ARN too
        ("sagemaker:CreateTrainingJob", "plans"),
    ),
)
_STOP_JOB = Call("sagemaker:StopTrainingJob", "sagemaker:StopTrainingJob", "toolkit_jobs")
# `bsm list`; submit's check for a live job on the spec's checkpoint prefix (aws/one_job.py)
_LIST_JOBS = Call("sagemaker:ListTrainingJobs", "sagemaker:ListTrainingJobs", "any")
_DESCRIBE_PLAN = Call("sagemaker:DescribeTrainingPlan", "sagemaker:DescribeTrainingPlan", "plans")
_SEARCH_OFFERINGS = Call(
    "sagemaker:SearchTrainingPlanOfferings", "sagemaker:SearchTrainingPlanOfferings", "any"
)
_CREATE_PLAN = Call(
    "sagemaker:CreateTrainingPlan",
    "sagemaker:CreateTrainingPlan",
    "plans",
    also=(
        ("sagemaker:AddTags", "plans"),
        ("sagemaker:CreateReservedCapacity", "reserved"),
        ("sagemaker:AddTags", "reserved"),
    ),
)
_EXTEND_PLAN = Call("sagemaker:ExtendTrainingPlan", "sagemaker:ExtendTrainingPlan", "plans")
_EXTENSION_HISTORY = Call(
    "sagemaker:DescribeTrainingPlanExtensionHistory",
    "sagemaker:DescribeTrainingPlanExtensionHistory",
    "plans",
)
_BUCKET_REGION = Call("s3:GetBucketLocation", "s3:GetBucketLocation", "bucket")
_HEAD_CODE = Call("s3:HeadObject", "s3:GetObject", "code_objects")
_PUT_CODE = Call("s3:PutObject", "s3:PutObject", "code_objects")
_DELETE_CODE = Call("s3:DeleteObject", "s3:DeleteObject", "code_objects")
# --until-done / --resume / status of a run read the checkpoints' COMPLETE markers
_LIST_CHECKPOINTS = Call("s3:ListObjectsV2", "s3:ListBucket", "checkpoint_list")
_READ_MARKER = Call("s3:GetObject", "s3:GetObject", "checkpoint_objects")
# report / calibrate JOB: the plan from the job's code bundle, its figures from output.tar.gz
_READ_CODE = Call("s3:GetObject", "s3:GetObject", "code_objects")
_READ_OUTPUT = Call("s3:GetObject", "s3:GetObject", "job_output")
# plans extend: the purchase claim every machine shares (aws/purchase_intents.py): written only
# if absent, read by a machine that lost the race, deleted by its writer when nothing was bought
_CLAIM_INTENT = Call("s3:PutObject", "s3:PutObject", "intent_objects")
_READ_INTENT = Call("s3:GetObject", "s3:GetObject", "intent_objects")
_RELEASE_INTENT = Call("s3:DeleteObject", "s3:DeleteObject", "intent_objects")
# submit's data check (aws/data_check.py): each data channel's manifest.json, and an S3
# init_from's tokenizer files (listed, then read), before CreateTrainingJob
_READ_DATA = Call("s3:GetObject", "s3:GetObject", "data_objects")
_LIST_INIT = Call("s3:ListObjectsV2", "s3:ListBucket", "init_list")
_LOG_STREAMS = Call("logs:DescribeLogStreams", "logs:DescribeLogStreams", "job_logs")
_LOG_EVENTS = Call("logs:GetLogEvents", "logs:GetLogEvents", "job_logs")
_FILTER_EVENTS = Call("logs:FilterLogEvents", "logs:FilterLogEvents", "job_logs")
_LOGS = (_DESCRIBE_JOB, _LOG_STREAMS, _LOG_EVENTS)

# Every command → the calls it can make. The caller policy is generated from this table, and
# tests/test_iam_coverage.py runs each command on moto and checks every call it made is here
# and is allowed by the generated policy.
COMMAND_CALLS: dict[str, tuple[Call, ...]] = {
    "submit": (
        _DESCRIBE_JOB,
        _LIST_TAGS,
        _DESCRIBE_PLAN,
        _SEARCH_OFFERINGS,
        _CREATE_PLAN,
        _BUCKET_REGION,
        _HEAD_CODE,
        _PUT_CODE,
        _DELETE_CODE,
        _CREATE_JOB,
        _LIST_JOBS,  # one live job per checkpoint prefix: checked before and after creating
        _STOP_JOB,  # a job created without the capacity asked for (or second on its prefix)
        *_LOGS,  # --logs / --wait
        _LIST_CHECKPOINTS,
        _READ_MARKER,  # --until-done / --resume
        _READ_DATA,
        _LIST_INIT,  # the data against the model, before the job (aws/data_check.py)
    ),
    "status": (
        _DESCRIBE_JOB,
        _LIST_CHECKPOINTS,
        _READ_MARKER,
        *_LOGS,
        _FILTER_EVENTS,
        _DESCRIBE_PLAN,  # progress: step/check/alert lines, plan's end
    ),
    "logs": _LOGS,
    "stop": (_DESCRIBE_JOB, _STOP_JOB),
    "list": (_LIST_JOBS,),  # a job is known by its name's shape: no ListTags per job
    "plans search": (_SEARCH_OFFERINGS,),
    "plans reserve": (_SEARCH_OFFERINGS, _CREATE_PLAN, _DESCRIBE_PLAN),
    "plans list": (Call("sagemaker:ListTrainingPlans", "sagemaker:ListTrainingPlans", "any"),),
    # the history is read before buying (a retry buys nothing) and after (another machine?)
    "plans extend": (
        _DESCRIBE_PLAN,
        _EXTENSION_HISTORY,
        _SEARCH_OFFERINGS,
        _EXTEND_PLAN,
        _CLAIM_INTENT,
        _READ_INTENT,
        _RELEASE_INTENT,
    ),
    "plans describe": (_DESCRIBE_PLAN, _EXTENSION_HISTORY),
    # a job's plan, summary and records; its step lines when output.tar.gz is missing
    "report": (_DESCRIBE_JOB, _READ_CODE, _READ_OUTPUT, _LOG_STREAMS, _LOG_EVENTS),
    "calibrate": (_DESCRIBE_JOB, _READ_CODE, _READ_OUTPUT, _LOG_STREAMS, _LOG_EVENTS),
    "to_model_trainer": (_BUCKET_REGION, _HEAD_CODE, _PUT_CODE, _DELETE_CODE, _CREATE_JOB),
}

# How each resource kind reads in a statement: (Sid, why). Order = statement order.
CALLER_RESOURCES: dict[str, tuple[str, str]] = {
    "spec_jobs": ("CreateTheSpecsTrainingJobs", "create and tag jobs named after the spec"),
    "toolkit_jobs": ("ManageTheToolkitsTrainingJobs", "read, tag-read and stop bsm-* jobs"),
    "any": ("ListJobsAndPlansSearchOfferings", "calls without resource-level permissions"),
    "plans": ("UseAndReserveTrainingPlans", "describe, reserve, tag and run jobs on plans"),
    "reserved": ("ReservedCapacityOfPlans", "a plan reservation creates reserved capacity"),
    "role": ("PassTheJobRoleToSageMaker", "CreateTrainingJob passes job.role_arn"),
    "bucket": ("FindTheBucketsRegion", "refuse a bucket outside the job's region first"),
    "code_objects": ("UploadAndCheckTheCodeBundle", "upload once, verify, remove a bad upload"),
    "checkpoint_list": ("ListTheRunsCheckpoints", "--until-done/--resume find the newest"),
    "checkpoint_objects": ("ReadCheckpointMarkers", "a run's COMPLETE markers (step, time)"),
    "job_output": ("ReadJobOutputs", "bsm report/calibrate JOB read its output.tar.gz"),
    "intent_objects": ("ClaimPurchasesOnce", "plans extend: one purchase across machines"),
    "job_logs": ("ReadJobLogs", "bsm logs / submit --logs / status's progress"),
    "data_objects": ("ReadDataManifestsAndInitTokenizer", "submit checks data against model"),
    "init_list": ("ListInitFromTokenizerFiles", "submit finds init_from's tokenizer files"),
}
# Reserving and extending spend money: without these a caller can use plans but never buy.
BUY_ACTIONS = frozenset(
    {
        "sagemaker:CreateTrainingPlan",
        "sagemaker:CreateReservedCapacity",
        "sagemaker:ExtendTrainingPlan",
    }
)
