"""The capacity taken, attached to a request built before it (pure).

Submit builds and validates the request and its bundle once, before any AWS call, so that a
request SageMaker would refuse costs nothing (no plan is reserved for it). The training plan
ARNs are known only after the capacity step; `attach_capacity` then fills in what depends on
them (ResourceConfig, the `bsm:training-plan` tag, the unresolved-plan warnings) and validates
again. The result equals `build_job_request` given those ARNs (tests/test_submit_pipeline.py).
"""

from __future__ import annotations

from blackwell_sm.job.capacity import capacity_for, instance_types
from blackwell_sm.job.identity import job_and_region
from blackwell_sm.job.names import sha256_hex
from blackwell_sm.job.request import JobRequest
from blackwell_sm.job.request_members import nvme_only, resource_config, tags
from blackwell_sm.job.validate import request_origins, validate_request
from blackwell_sm.planner.preferences import PlanSet
from blackwell_sm.spec.run import RunSpec


def attach_capacity(
    jr: JobRequest,
    spec: RunSpec,
    plans: PlanSet,
    *,
    training_plan_arn: str | None = None,
    preference_arns: dict[int, str] | None = None,
) -> JobRequest:
    """`jr` (built with the capacity as written) with the plan ARNs the AWS layer resolved."""
    if training_plan_arn is None and not preference_arns:
        return jr
    job, region = job_and_region(spec, jr.region)
    before: list[str] = []
    capacity_for(spec, plans, region, training_plan_arn=None, preference_arns=None, warnings=before)
    after: list[str] = []
    capacity = capacity_for(
        spec,
        plans,
        region,
        training_plan_arn=training_plan_arn,
        preference_arns=preference_arns,
        warnings=after,
    )
    request = dict(jr.request)
    request["ResourceConfig"] = resource_config(job, capacity)
    plan_sha = sha256_hex(plans.primary.to_json().encode())
    request["Tags"] = tags(job, spec.model.name, jr.spec_hash, plan_sha, capacity.plan_tag)
    local_nvme = nvme_only(job, instance_types(plans))
    validate_request(request, nvme_only=local_nvme, origins=request_origins(request, job))
    return jr.model_copy(
        update={
            "request": request,
            "training_plan_arn": capacity.training_plan_arn,
            "unresolved_training_plan": capacity.unresolved_training_plan,
            "unresolved_preference_plans": capacity.unresolved_preference_plans,
            "warnings": [w for w in jr.warnings if w not in before] + after,
        }
    )
