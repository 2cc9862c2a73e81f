"""Training jobs: describe, find, create (checked), list and stop.

CreateTrainingJob has no idempotency token. A retried create whose first attempt went through
answers ResourceInUse on real SageMaker (moto accepts the duplicate), so callers describe first
and treat ResourceInUse as "already created by us" only when the job's spec-hash tag matches.
After creating, the job is described again: a TrainingPlanArn or instance type that SageMaker
did not keep (as SDK bugs have caused) stops the job and fails loudly.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from blackwell_sm.aws.errors import explain_failure, translate
from blackwell_sm.aws.views import RowsRepr
from blackwell_sm.errors import AwsError
from blackwell_sm.job.names import JOB_NAME_PREFIX, toolkit_name_parts

SPEC_HASH_TAG = "bsm:spec-hash"
TERMINAL = frozenset({"Completed", "Failed", "Stopped"})


class JobInfo(RowsRepr, BaseModel):
    """What DescribeTrainingJob says about a job, in the shape this toolkit shows (a notebook
    displays it as `bsm status` prints it)."""

    model_config = ConfigDict(extra="forbid")

    def _title(self) -> str:
        return f"{self.name}: {self.status} / {self.secondary_status or '-'}"

    def _rows(self) -> list[tuple[str, str]]:
        from blackwell_sm.aws.views import status_rows

        return status_rows(self)

    name: str
    arn: str | None = None
    status: str
    secondary_status: str | None = None
    status_message: str | None = None
    failure_reason: str | None = None
    failure_explanation: str | None = None
    instance_type: str | None = None
    instance_count: int | None = None
    training_plan_arn: str | None = None
    selected_instance_type: str | None = Field(
        None, description="With InstancePreferences: the type SageMaker started the job on."
    )
    selected_instance_count: int | None = None
    instance_preferences: list[dict[str, Any]] = Field(default_factory=list)
    creation_time: datetime | None = None
    training_start_time: datetime | None = None
    training_end_time: datetime | None = None
    billable_seconds: int | None = None
    max_runtime_s: int | None = None
    model_artifacts: str | None = None
    final_metrics: dict[str, float] = Field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def running_plan(self) -> str | None:
        """The bundle plan the container runs: `plans/<selected type>.json` for a job with
        instance preferences once SageMaker has chosen, else None (plan.json)."""
        from blackwell_sm.job.bundle import plan_file_for

        if self.instance_preferences and self.selected_instance_type:
            return plan_file_for(self.selected_instance_type)
        return None

    @property
    def selected_training_plan(self) -> str | None:
        """The training plan ARN of the selected preference (None: on-demand or not chosen)."""
        for pref in self.instance_preferences:
            if pref.get("InstanceType") == self.selected_instance_type:
                return (pref.get("TrainingPlanArns") or [None])[0]
        return None

    @classmethod
    def from_describe(cls, d: dict[str, Any]) -> JobInfo:
        rc = d.get("ResourceConfig", {})
        transitions = d.get("SecondaryStatusTransitions") or []
        return cls(
            name=d["TrainingJobName"],
            arn=d.get("TrainingJobArn"),
            status=d["TrainingJobStatus"],
            secondary_status=d.get("SecondaryStatus"),
            status_message=transitions[-1].get("StatusMessage") if transitions else None,
            failure_reason=d.get("FailureReason"),
            failure_explanation=explain_failure(d.get("FailureReason")),
            instance_type=rc.get("InstanceType"),
            instance_count=rc.get("InstanceCount"),
            training_plan_arn=rc.get("TrainingPlanArn"),
            selected_instance_type=rc.get("SelectedInstanceType"),
            selected_instance_count=rc.get("SelectedInstanceCount"),
            instance_preferences=list(rc.get("InstancePreferences", [])),
            creation_time=d.get("CreationTime"),
            training_start_time=d.get("TrainingStartTime"),
            training_end_time=d.get("TrainingEndTime"),
            billable_seconds=d.get("BillableTimeInSeconds"),
            max_runtime_s=d.get("StoppingCondition", {}).get("MaxRuntimeInSeconds"),
            model_artifacts=d.get("ModelArtifacts", {}).get("S3ModelArtifacts"),
            final_metrics={m["MetricName"]: m["Value"] for m in d.get("FinalMetricDataList", [])},
        )


def _is_not_found(error: Any) -> bool:
    err = getattr(error, "response", {}).get("Error", {})
    msg = str(err.get("Message", "")).lower()
    return err.get("Code") in {"ValidationException", "ResourceNotFound"} and (
        "not found" in msg or "could not find" in msg or "does not exist" in msg
    )


def find_job(sm: Any, name: str) -> dict[str, Any] | None:
    """DescribeTrainingJob, or None if there is no job of that name."""
    from botocore.exceptions import ClientError

    with translate(f"describing training job {name}"):
        try:
            return sm.describe_training_job(TrainingJobName=name)
        except ClientError as e:
            if _is_not_found(e):
                return None
            raise


def describe_raw(sm: Any, name: str) -> dict[str, Any]:
    """DescribeTrainingJob's answer; AwsError(code='not_found') if there is no such job."""
    d = find_job(sm, name)
    if d is None:
        region = sm.meta.region_name
        raise AwsError(
            f"no training job named {name!r} in {region}",
            code="not_found",
            hint="`bsm list` shows this toolkit's jobs; check AWS_REGION / job.region",
        )
    return d


def describe_job(sm: Any, name: str) -> JobInfo:
    """The job's JobInfo; AwsError(code='not_found') if there is none."""
    return JobInfo.from_describe(describe_raw(sm, name))


def job_tags(sm: Any, arn: str) -> dict[str, str]:
    tags: dict[str, str] = {}
    token = None
    with translate("reading the job's tags"):
        while True:
            kw = {"ResourceArn": arn, "MaxResults": 100}
            if token:
                kw["NextToken"] = token
            resp = sm.list_tags(**kw)
            tags.update({t["Key"]: t["Value"] for t in resp.get("Tags", [])})
            token = resp.get("NextToken")
            if not token:
                return tags


def owned_by_spec(sm: Any, described: dict[str, Any], spec_hash: str) -> bool:
    """Whether this job carries the spec-hash tag `spec_hash` (i.e. we made it from this spec)."""
    return job_tags(sm, described["TrainingJobArn"]).get(SPEC_HASH_TAG) == spec_hash


CAPACITY_KEYS = ("TrainingPlanArn", "InstanceType", "InstanceCount", "InstancePreferences")


def capacity_differences(
    live: dict[str, Any], asked: dict[str, Any], *, plan_ref: str | None = None
) -> list[str]:
    """How a job's ResourceConfig differs from the capacity asked for (empty: the same).

    `asked` is the request's ResourceConfig. When it names no plan ARN yet, `plan_ref` (a plan
    name, or a predicate-free 'auto') says which plan the job must be on: a name must match the
    live ARN's name, 'auto' any plan; None means on-demand.
    """
    problems = []
    if "InstancePreferences" in asked:
        # The plans are in the list; SageMaker reports its choice in Selected* (not compared).
        if asked["InstancePreferences"] != live.get("InstancePreferences"):
            problems.append(
                f"InstancePreferences: asked {asked['InstancePreferences']!r}, the job has "
                f"{live.get('InstancePreferences')!r}"
            )
        return problems
    want_arn, have_arn = asked.get("TrainingPlanArn"), live.get("TrainingPlanArn")
    if want_arn is None and plan_ref is not None:
        have_name = have_arn.rsplit("/", 1)[-1] if have_arn else None
        if have_arn is None or (plan_ref != "auto" and have_name != plan_ref):
            problems.append(
                f"training plan: asked {plan_ref!r}, the job runs "
                + (f"on {have_arn}" if have_arn else "on on-demand capacity")
            )
    elif want_arn != have_arn:
        problems.append(
            f"training plan: asked {want_arn or 'none (on-demand)'}, the job runs "
            + (f"on {have_arn}" if have_arn else "on on-demand capacity")
        )
    for key in CAPACITY_KEYS[1:]:
        if asked.get(key) != live.get(key):
            problems.append(f"{key}: asked {asked.get(key)!r}, the job has {live.get(key)!r}")
    return problems


def check_created(described: dict[str, Any], request: dict[str, Any]) -> list[str]:
    """Differences between what was asked and what SageMaker kept (empty: all good)."""
    return capacity_differences(described.get("ResourceConfig", {}), request["ResourceConfig"])


def create_job(sm: Any, request: dict[str, Any], *, spec_hash: str) -> tuple[dict[str, Any], bool]:
    """Create the job and check SageMaker kept its capacity settings.

    Returns (DescribeTrainingJob response, created). created=False: a job of this name and spec
    was made by another process (ResourceInUse on the first attempt); a ResourceInUse after
    botocore retried means an earlier attempt of this call made it (created=True).
    """
    from botocore.exceptions import ClientError

    name = request["TrainingJobName"]
    rc = request["ResourceConfig"]
    instance_type = rc.get("InstanceType") or (rc.get("InstancePreferences") or [{}])[0].get(
        "InstanceType"
    )
    created = True
    with translate(f"creating training job {name}", instance_type=instance_type):
        try:
            sm.create_training_job(**request)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") != "ResourceInUse":
                raise
            existing = find_job(sm, name)
            if existing is None or not owned_by_spec(sm, existing, spec_hash):
                raise AwsError(
                    f"a training job named {name} already exists and was not made from this spec",
                    code="resource_in_use",
                    hint="submit with --new for a fresh job name",
                ) from None
            # Refused on the first attempt: another process made it. After a retry, an
            # earlier attempt of this call made it (its answer was lost): ours.
            created = e.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) > 0
    described = find_job(sm, name)
    if described is None:
        raise AwsError(
            f"SageMaker accepted training job {name} but cannot describe it",
            code="not_found",
            hint=f"run `bsm status {name}` in a minute",
        )
    problems = check_created(described, request)
    if problems and not created:  # another process's job: never stopped from here
        raise AwsError(
            f"training job {name} was made by another submit of this spec with other capacity "
            "settings: " + "; ".join(problems) + ". It was not reattached.",
            code="capacity_mismatch",
            hint=f"see `bsm status {name}`; submit with --new for a job of this request's own",
        )
    if problems:
        stopped = _stop_quietly(sm, name)
        raise AwsError(
            f"training job {name} was created without the capacity settings that were asked: "
            + "; ".join(problems)
            + (
                ". It was stopped so it does not run on the wrong capacity."
                if stopped
                else f". Stopping it failed: stop it now with `bsm stop {name}`."
            ),
            code="capacity_mismatch",
            hint="this is the silently dropped TrainingPlanArn fault; submit again with --new, "
            "and report it if it repeats",
        )
    return described, created


def _stop_quietly(sm: Any, name: str) -> bool:
    try:
        with translate(f"stopping training job {name}"):
            sm.stop_training_job(TrainingJobName=name)
        return True
    except (AwsError, NotImplementedError):
        return False


def stop_job(sm: Any, name: str) -> JobInfo:
    """StopTrainingJob (SIGTERM, then kill after ~120 s); a job already ended is left as is."""
    info = describe_job(sm, name)
    if info.terminal or info.status == "Stopping":
        return info
    with translate(f"stopping training job {name}"):
        sm.stop_training_job(TrainingJobName=name)
    return describe_job(sm, name)


def list_jobs(
    sm: Any,
    *,
    name_contains: str | None = None,
    status: str | None = None,
    limit: int = 20,
    only_ours: bool = True,
) -> list[dict[str, Any]]:
    """Newest first: summaries of training jobs (only this toolkit's, by name).

    The toolkit's jobs are found on the server (`NameContains` = the `bsm-` name prefix, one
    ListTrainingJobs call per 100 jobs) and known by their name's shape, which carries the spec
    hash (`bsm-<model>-<spec hash>[-rN|-<time><hex>]`, `job/names.py`): no call per job. The
    tag is read where it decides something: a reattach (`owned_by_spec`).
    """
    kw: dict[str, Any] = {"SortBy": "CreationTime", "SortOrder": "Descending"}
    needle = name_contains or (JOB_NAME_PREFIX if only_ours else None)
    if needle:
        kw["NameContains"] = needle
    if status:
        kw["StatusEquals"] = status
    out: list[dict[str, Any]] = []
    with translate("listing training jobs"):
        for page in sm.get_paginator("list_training_jobs").paginate(**kw):
            for s in page.get("TrainingJobSummaries", []):
                if only_ours:
                    parts = toolkit_name_parts(s["TrainingJobName"])
                    if parts is None:
                        continue  # NameContains matches anywhere in the name
                    s = {**s, "SpecHash": parts[1], "ModelStem": parts[0]}
                out.append(s)
                if len(out) >= limit:
                    return out
    return out
