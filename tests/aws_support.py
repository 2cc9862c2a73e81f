"""Shared set-up for the AWS tests: fake credentials, moto, specs, plan responses, HTTP faults.

Faults are injected at botocore's `before-send` event (ahead of moto), so they travel the real
retry path of botocore's standard mode; Stubber responses would skip retries entirely.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

REGION = "us-east-1"
ACCOUNT = "123456789012"
BUCKET = "bsm-test-bucket"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/bsm-test-role"
PLAN_NAME = "bsm-test-plan-0001"
PLAN_ARN = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-plan/{PLAN_NAME}"
P6 = "ml.p6-b200.48xlarge"
FAKE_KEY_ID = "AKIAFAKEBSMTEST12345"
FAKE_SECRET = "fakeSecretBsmTest/0123456789abcdefghijklmn"

AWS_VARS = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ENDPOINT_URL",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_MAX_ATTEMPTS",
)


def fake_credentials(monkeypatch: Any, tmp_path: Any) -> None:
    for var in AWS_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", FAKE_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", FAKE_SECRET)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def spec_dict(model: str = "tiny", *, training_plan: str | None = None, **job: Any) -> dict:
    compute: dict[str, Any] = {"instance_type": P6, "instance_count": 1}
    if training_plan:
        compute["training_plan"] = training_plan
    return {
        "model": model,
        "compute": compute,
        "job": {
            "role_arn": ROLE,
            "region": REGION,
            "s3_prefix": f"s3://{BUCKET}/runs",
            "channels": {"train": {"s3_uri": f"s3://{BUCKET}/data/train"}},
            **job,
        },
    }


def run_spec(**job: Any) -> Any:
    """The request builder's spec: llama-3.1-8b on 2 x p6-b200 with `spec_dict`'s job settings
    (the train channel with a trailing slash, as users often write it)."""
    from blackwell_sm.spec import parse_spec

    job = {"channels": {"train": {"s3_uri": f"s3://{BUCKET}/data/train/"}}, **job}
    d = spec_dict("llama-3.1-8b", **job)
    d["compute"]["instance_count"] = 2
    d["training"] = {"seq_len": 8192, "total_tokens": 10_000_000_000}
    return parse_spec(d)


def plan_for(spec: Any, *, hours: float | None = None, **config: Any) -> Any:
    """A fixed plan for `spec` (the builder reads its instance, config and run estimate), not the
    search's choice: full shard, micro-batch 1, selective checkpointing, bf16, compiled. `config`
    overrides knobs; `hours` replaces the predicted run time (to test the runtime limits)."""
    from blackwell_sm.planner.api import pinned_plan

    n = spec.compute.instance_count if isinstance(spec.compute.instance_count, int) else 1
    gpus = 8 * n
    cfg = (
        dict(
            shard_degree=gpus,
            replicate_degree=1,
            micro_batch_size=1,
            grad_accum_steps=max(1, spec.training.global_batch_sequences // gpus),
            precision="bf16",
            activation_checkpointing="selective",
            compile=True,
            reshard_after_forward=True,
        )
        | config
    )
    plan = pinned_plan(spec, cfg)
    if hours is not None:
        # A point estimate with no range: the builder's pessimistic hours are these hours.
        run = plan.run.model_copy(update={"hours": hours, "hours_range": (hours, hours)})
        plan = plan.model_copy(update={"run": run})
    return plan


def plan_response(
    *,
    status: str = "Active",
    instance_type: str = P6,
    total: int = 4,
    available: int = 4,
    start: datetime | None = None,
    hours: float = 48,
    name: str = PLAN_NAME,
    arn: str | None = None,
) -> dict[str, Any]:
    """A DescribeTrainingPlan response (Stubber checks it against the API model)."""
    start = start or datetime.now(UTC) - timedelta(hours=1)
    end = start + timedelta(hours=hours)
    whole = int(hours)
    return {
        "TrainingPlanArn": arn or f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-plan/{name}",
        "TrainingPlanName": name,
        "Status": status,
        "DurationHours": whole,
        "DurationMinutes": round((hours - whole) * 60),
        "StartTime": start,
        "EndTime": end,
        "UpfrontFee": "10936.80",
        "CurrencyCode": "USD",
        "TotalInstanceCount": total,
        "AvailableInstanceCount": available,
        "InUseInstanceCount": total - available,
        "TargetResources": ["training-job"],
        "ReservedCapacitySummaries": [
            {
                "ReservedCapacityArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:reserved-capacity/rc-{name}",
                "InstanceType": instance_type,
                "TotalInstanceCount": total,
                "Status": status,
                "StartTime": start,
                "EndTime": end,
                "DurationHours": whole,
            }
        ],
    }


def offering(offering_id: str, *, start: datetime, hours: int, fee: str, count: int = 1) -> dict:
    return {
        "TrainingPlanOfferingId": offering_id,
        "TargetResources": ["training-job"],
        "DurationHours": hours,
        "UpfrontFee": fee,
        "CurrencyCode": "USD",
        "ReservedCapacityOfferings": [
            {
                "InstanceType": P6,
                "InstanceCount": count,
                "AvailabilityZone": "us-east-1a",
                "DurationHours": hours,
                "StartTime": start,
                "EndTime": start + timedelta(hours=hours),
            }
        ],
    }


def stub_plan_commands(
    st: Any, offering_id: str, *, start: datetime, listed: list[dict] | None = None
) -> None:
    """Stubber answers for `bsm plans search`, `reserve --yes`, `list` and `describe`, in that
    order (moto has no training plans): one 24-hour offering, the reserved plan, `listed`."""
    offer = offering(offering_id, start=start, hours=24, fee="100.00")
    st.add_response("search_training_plan_offerings", {"TrainingPlanOfferings": [offer]})
    # reserve: is there a plan of that name already? (no) then search, create, describe
    st.add_client_error(
        "describe_training_plan", service_error_code="ResourceNotFound", http_status_code=400
    )
    st.add_response("search_training_plan_offerings", {"TrainingPlanOfferings": [offer]})
    st.add_response("create_training_plan", {"TrainingPlanArn": PLAN_ARN})
    st.add_response("describe_training_plan", plan_response(status="Scheduled", start=start))
    st.add_response("list_training_plans", {"TrainingPlanSummaries": listed or []})
    st.add_response("describe_training_plan", plan_response())
    st.add_response("describe_training_plan_extension_history", {"TrainingPlanExtensions": []})


FAULT_HEADER = "X-Bsm-Test-Fault"
_FAULTS: dict[str, tuple[int, dict[str, str], bytes]] = {}


def _wrap_moto_once() -> None:
    from moto.core.models import botocore_stubber

    if getattr(botocore_stubber.process_request, "_bsm_faults", False):
        return
    original = botocore_stubber.process_request

    def process(request: Any) -> Any:
        key = request.headers.get(FAULT_HEADER)
        if key is not None:
            return _FAULTS.pop(key.decode() if isinstance(key, bytes) else key)
        return original(request)

    process._bsm_faults = True  # type: ignore[attr-defined]
    botocore_stubber.process_request = process


class HttpFaults:
    """Answer the first N requests of one operation with an HTTP error, then let them through.

    botocore calls every before-send handler, so a response returned there would not stop moto
    from executing the request as well. Instead this marks the request, and moto's request
    processor (wrapped once) answers a marked request with the fault without touching its
    backend: the fault travels botocore's real parsing and retry path, and nothing happens.
    """

    def __init__(
        self,
        client: Any,
        operation: str,
        faults: list[tuple],  # (status, code, message[, raw body[, content type]])
        monkeypatch: Any = None,  # accepted for symmetry; the wrapper passes unmarked requests
    ) -> None:
        _wrap_moto_once()
        self.operation = operation
        self.faults = list(faults)
        self.calls = 0
        self.protocol = client.meta.service_model.protocol
        service = client.meta.service_model.service_id.hyphenize()
        client.meta.events.register_first(f"before-send.{service}.{operation}", self)

    def __call__(self, request: Any, **_kw: Any) -> None:
        self.calls += 1
        if not self.faults:
            return
        status, code, message, *raw = self.faults.pop(0)
        if raw:  # a body that is not the protocol's error document (an HTML page, XML on JSON)
            body, headers = raw[0], {"Content-Type": raw[1] if len(raw) > 1 else "text/html"}
        elif self.protocol in ("rest-xml", "query"):
            body = f"<Error><Code>{code}</Code><Message>{message}</Message></Error>".encode()
            headers = {"Content-Type": "application/xml"}
        else:
            body = json.dumps({"__type": code, "message": message}).encode()
            headers = {"Content-Type": "application/x-amz-json-1.1", "x-amzn-ErrorType": code}
        key = f"{self.operation}-{self.calls}-{id(self)}"
        _FAULTS[key] = (status, headers, body)
        request.headers[FAULT_HEADER] = key


def no_sleep(monkeypatch: Any) -> list[float]:
    """Record botocore's retry back-off sleeps instead of sleeping."""
    import botocore.endpoint

    slept: list[float] = []
    monkeypatch.setattr(botocore.endpoint.time, "sleep", slept.append)
    return slept


def describe_response(request: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """A DescribeTrainingJob response for a created `request` (what real SageMaker keeps)."""
    now = datetime.now(UTC)
    name = request["TrainingJobName"]
    resp: dict[str, Any] = {
        "TrainingJobName": name,
        "TrainingJobArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/{name}",
        "ModelArtifacts": {
            "S3ModelArtifacts": f"{request['OutputDataConfig']['S3OutputPath']}/{name}"
        },
        "TrainingJobStatus": "InProgress",
        "SecondaryStatus": "Starting",
        "AlgorithmSpecification": {
            k: v
            for k, v in request["AlgorithmSpecification"].items()
            if k in ("TrainingImage", "TrainingInputMode")
        },
        "RoleArn": request["RoleArn"],
        "ResourceConfig": dict(request["ResourceConfig"]),
        "StoppingCondition": dict(request["StoppingCondition"]),
        "CreationTime": now,
    }
    resp.update(overrides)
    return resp


def not_found_error(name: str) -> dict[str, Any]:
    return {
        "service_error_code": "ValidationException",
        "service_message": f"Requested resource not found: training job {name}",
        "http_status_code": 400,
    }


def put_log_lines(aws: Any, stream: str, messages: list[str], at: datetime | None = None) -> None:
    """Write `messages` to the training-job log group's `stream` through boto3 (moto), one
    millisecond apart from `at` (default: now), creating the stream on first use."""
    import contextlib

    from blackwell_sm.aws.logs import LOG_GROUP

    with contextlib.suppress(aws.logs.exceptions.ResourceAlreadyExistsException):
        aws.logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
    t0 = int((at or datetime.now(UTC)).timestamp() * 1000)
    aws.logs.put_log_events(
        logGroupName=LOG_GROUP,
        logStreamName=stream,
        logEvents=[{"timestamp": t0 + i, "message": m} for i, m in enumerate(messages)],
    )


# -- a job's output (output.tar.gz): what the loop writes, for report and calibrate --------------
def train_records(steps: range) -> list[dict[str, Any]]:
    """metrics.jsonl `train` records of a CUDA run, one per step."""
    return [
        {
            "kind": "train",
            "step": s,
            "loss": 3.0 - 0.1 * s,
            "lr": 1e-4,
            "grad_norm": 1.0,
            "tok_s_gpu": 1000.0 + s,
            "mfu": 0.4,
            "step_time_s": 1.0,
            "mem_alloc_gib": 10.0,
            "mem_reserved_gib": 12.0,
            "memory_kind": "cuda_max_allocated_reserved",
            "time": 1_700_000_000.0 + s,
        }
        for s in steps
    ]


def summary_json(tok_s: float, mem_gib: float) -> str:
    """A version 1 summary.json (no schema_version) of a CUDA run, as the loop wrote it."""
    return json.dumps(
        {
            "status": "completed",
            "final_step": 5,
            "planned_steps": 5,
            "resumed_from_step": None,
            "final_loss": 2.5,
            "final_val_loss": 2.9,
            "measured": {
                "steps_timed": 3,
                "step_time_s": 1.0,
                "tokens_per_s_per_gpu": tok_s,
                "mfu": 0.4,
                "peak_memory_allocated_gib": 3.0,
                "peak_memory_reserved_gib": mem_gib,
                "memory_kind": "cuda_max_allocated_reserved",
            },
            "predicted": {
                "step_time_s": 1.0,
                "tokens_per_s_per_gpu": 1000.0,
                "mfu": 0.4,
                "memory_gib": 3.0,
            },
            "ratio_measured_over_predicted": {"tokens_per_s_per_gpu": 1.2, "peak_memory": 1.1},
            "check": None,
            "eta": None,
            "alerts": [],
        }
    )


def tar_gz(files: dict[str, bytes]) -> bytes:
    """A gzipped tar of `files` (name -> bytes), as SageMaker uploads output.tar.gz."""
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


from records_support import CHECK_FIELDS  # noqa: E402,F401  (its home moved; kept importable here)
