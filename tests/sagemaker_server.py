"""One SageMaker endpoint on 127.0.0.1 shared by several `bsm` processes: moto's server, plus
a small stateful emulation of what moto lacks, for the tests of spending once and of one job
per checkpoint prefix (tests/test_spend_once.py).

moto 5.2 has no training-plan API, accepts a second job of the same name, marks every job
Completed the moment it is created and has no StopTrainingJob. In-process tests cover those
with botocore's Stubber, but a Stubber lives in one process. So this server wraps moto's own
WSGI application (S3, SageMaker jobs, tags: moto, unchanged) and answers, itself:

* the training-plan calls (SearchTrainingPlanOfferings, CreateTrainingPlan, DescribeTrainingPlan,
  ListTrainingPlans, ExtendTrainingPlan, DescribeTrainingPlanExtensionHistory) from state of its
  own: offerings with ids, plans unique per name (ResourceInUse, as the API model lists for
  CreateTrainingPlan), extensions that move the plan's end and appear in the history;
* CreateTrainingJob: a name is unique (ResourceInUse, as on SageMaker); a job is InProgress
  once created (SageMaker's first state) until StopTrainingJob or `finish()`.

Like Stubber, every request of an emulated call is validated against botocore's service model
(the JSON body turned back into parameters), and every response too before it is sent: a
mismatch is answered as an error and recorded in `invalid`, which the tests assert is empty.
`bought` lists every purchase (plans and extensions) in order, for the tests' counts.
"""

from __future__ import annotations

import hashlib
import io
import json
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from aws_support import ACCOUNT, REGION

PLAN_OPS = frozenset(
    {
        "SearchTrainingPlanOfferings",
        "CreateTrainingPlan",
        "DescribeTrainingPlan",
        "ListTrainingPlans",
        "ExtendTrainingPlan",
        "DescribeTrainingPlanExtensionHistory",
    }
)
EXTENSION_DAYS = (1, 2, 3, 7, 14)
PRICE_PER_INSTANCE_HOUR = 100.0


class ApiError(Exception):
    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


def _hash(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()


def _hour(t: datetime) -> datetime:
    return t.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)


class SageMakerServer:
    """moto's server with the emulation above; `url` once started."""

    def __init__(self, *, pending_describes: int = 0, extension_lag: int = 0) -> None:
        import botocore.session
        from botocore.validate import ParamValidator

        self.model = botocore.session.get_session().get_service_model("sagemaker")
        self.validator = ParamValidator()
        self.pending_describes = pending_describes  # a new plan is Pending for this many reads
        self.extension_lag = extension_lag  # a plan's EndTime moves this many reads later
        self.lock = threading.Lock()
        self.offers: dict[str, dict[str, Any]] = {}
        self.ext_offers: dict[str, dict[str, Any]] = {}
        self.plans: dict[str, dict[str, Any]] = {}
        self.bought: list[tuple[str, str, str]] = []  # (kind, plan name, offering id)
        self.invalid: list[str] = []
        self.created_jobs: list[str] = []
        self.url = ""

    # -- the server ---------------------------------------------------------------------------
    def start(self) -> SageMakerServer:
        from moto.moto_server.werkzeug_app import (
            DomainDispatcherApplication,
            MotoRequestHandler,
            create_backend_app,
        )
        from werkzeug.serving import make_server

        self.moto = DomainDispatcherApplication(create_backend_app)
        self.server = make_server(
            "127.0.0.1", 0, self, threaded=True, request_handler=MotoRequestHandler
        )
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        host, port = self.server.server_address[:2]
        self.url = f"http://{host}:{port}"
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.thread.join()

    def __call__(self, environ: dict, start_response: Any) -> Any:
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if not target.startswith("SageMaker."):
            return self.moto(environ, start_response)
        op = target.split(".", 1)[1]
        size = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(size) if size else b""
        environ["wsgi.input"] = io.BytesIO(body)
        if op in PLAN_OPS or op in ("CreateTrainingJob", "StopTrainingJob"):
            return self._emulated(op, body, environ, start_response)
        return self.moto(environ, start_response)

    def _emulated(self, op: str, body: bytes, environ: dict, start_response: Any) -> Any:
        operation = self.model.operation_model(op)
        try:
            params = self._params(json.loads(body or b"{}"), operation.input_shape)
            problems = self.validator.validate(params, operation.input_shape)
            if problems.has_errors():
                self.invalid.append(f"{op} request: {problems.generate_report()}")
                raise ApiError("ValidationException", problems.generate_report())
            if op == "CreateTrainingJob":
                return self._create_job(params, environ, start_response)
            with self.lock:
                response = getattr(self, "_" + op)(params)
            problems = self.validator.validate(response, operation.output_shape)
            if problems.has_errors():
                self.invalid.append(f"{op} response: {problems.generate_report()}")
                raise ApiError("InternalFailure", problems.generate_report(), 500)
            return self._answer(start_response, 200, self._wire(response))
        except ApiError as e:
            return self._answer(start_response, e.status, {"__type": e.code, "message": e.message})

    @staticmethod
    def _answer(start_response: Any, status: int, doc: dict) -> list[bytes]:
        data = json.dumps(doc).encode()
        reason = {200: "OK", 400: "Bad Request", 500: "Internal Server Error"}[status]
        start_response(
            f"{status} {reason}",
            [
                ("Content-Type", "application/x-amz-json-1.1"),
                ("Content-Length", str(len(data))),
                ("x-amzn-RequestId", str(uuid.uuid4())),
            ],
        )
        return [data]

    def _params(self, value: Any, shape: Any) -> Any:
        """JSON on the wire back to botocore parameters (timestamps as datetimes)."""
        if shape is None:
            return value
        kind = shape.type_name
        if kind == "structure" and isinstance(value, dict):
            return {
                k: self._params(v, shape.members.get(k)) if k in shape.members else v
                for k, v in value.items()
            }
        if kind == "list" and isinstance(value, list):
            return [self._params(v, shape.member) for v in value]
        if kind == "timestamp" and isinstance(value, (int, float)):
            return datetime.fromtimestamp(value, UTC)
        return value

    def _wire(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {k: self._wire(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._wire(v) for v in value]
        if isinstance(value, datetime):
            return value.timestamp()
        return value

    # -- jobs ---------------------------------------------------------------------------------
    def _backend(self) -> Any:
        from moto.sagemaker.models import sagemaker_backends

        return sagemaker_backends[ACCOUNT][REGION]

    def _create_job(self, params: dict, environ: dict, start_response: Any) -> Any:
        name = params["TrainingJobName"]
        with self.lock:
            if name in self._backend().training_jobs:
                raise ApiError("ResourceInUse", f"Training job {name} already exists")
            got: dict[str, Any] = {}

            def capture(status: str, headers: list, exc_info: Any = None) -> None:
                got.update(status=status, headers=headers)

            data = b"".join(self.moto(environ, capture))
            if got["status"].startswith("200"):
                job = self._backend().training_jobs[name]
                job.training_job_status, job.secondary_status = "InProgress", "Starting"
                self.created_jobs.append(name)
        start_response(got["status"], got["headers"])
        return [data]

    def _StopTrainingJob(self, params: dict) -> dict:
        job = self._backend().training_jobs.get(params["TrainingJobName"])
        if job is None:
            raise ApiError("ValidationException", "Requested resource not found")
        job.training_job_status, job.secondary_status = "Stopped", "Stopped"
        return {}

    def finish(self, name: str, status: str = "Completed") -> None:
        with self.lock:
            job = self._backend().training_jobs[name]
            job.training_job_status = job.secondary_status = status

    # -- training plans -----------------------------------------------------------------------
    def _arn(self, name: str) -> str:
        return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-plan/{name}"

    def _SearchTrainingPlanOfferings(self, p: dict) -> dict:
        if "TrainingPlanArn" in p:
            plan = self._plan_by_arn(p["TrainingPlanArn"])
            end = self._end(plan, counted_only=False)
            found = []
            for days in EXTENSION_DAYS:
                oid = "tpeo-" + _hash(plan["arn"], end, days)[:24]
                self.ext_offers[oid] = {"plan": plan["name"], "hours": days * 24}
                fee = f"{days * 24 * plan['count'] * PRICE_PER_INSTANCE_HOUR:.2f}"
                found.append(
                    {
                        "TrainingPlanExtensionOfferingId": oid,
                        "AvailabilityZone": "us-east-1a",
                        "StartDate": end,
                        "EndDate": end + timedelta(days=days),
                        "DurationHours": days * 24,
                        "UpfrontFee": fee,
                        "CurrencyCode": "USD",
                    }
                )
            return {"TrainingPlanOfferings": [], "TrainingPlanExtensionOfferings": found}
        hours = int(p.get("DurationHours") or 24)
        start = _hour(max(p.get("StartTimeAfter") or datetime.now(UTC), datetime.now(UTC)))
        oid = "tpo-" + _hash(p["InstanceType"], p["InstanceCount"], hours, start)[:24]
        self.offers[oid] = {
            "type": p["InstanceType"],
            "count": p["InstanceCount"],
            "hours": hours,
            "start": start,
        }
        fee = f"{hours * p['InstanceCount'] * PRICE_PER_INSTANCE_HOUR:.2f}"
        capacity = {
            "InstanceType": p["InstanceType"],
            "InstanceCount": p["InstanceCount"],
            "AvailabilityZone": "us-east-1a",
            "DurationHours": hours,
            "StartTime": start,
            "EndTime": start + timedelta(hours=hours),
        }
        return {
            "TrainingPlanOfferings": [
                {
                    "TrainingPlanOfferingId": oid,
                    "TargetResources": ["training-job"],
                    "DurationHours": hours,
                    "UpfrontFee": fee,
                    "CurrencyCode": "USD",
                    "ReservedCapacityOfferings": [capacity],
                }
            ]
        }

    def _CreateTrainingPlan(self, p: dict) -> dict:
        name = p["TrainingPlanName"]
        if name in self.plans:
            raise ApiError("ResourceInUse", f"Training plan {name} already exists")
        offer = self.offers.get(p["TrainingPlanOfferingId"])
        if offer is None:
            raise ApiError("ResourceNotFound", f"offering {p['TrainingPlanOfferingId']} not found")
        self.plans[name] = {
            **offer,
            "name": name,
            "arn": self._arn(name),
            "reads": 0,
            "extensions": [],
            "tags": p.get("Tags", []),
        }
        self.bought.append(("plan", name, p["TrainingPlanOfferingId"]))
        return {"TrainingPlanArn": self._arn(name)}

    def _plan_by_arn(self, arn: str) -> dict:
        plan = next((x for x in self.plans.values() if x["arn"] == arn), None)
        if plan is None:
            raise ApiError("ResourceNotFound", f"Training plan {arn} not found")
        return plan

    def _end(self, plan: dict, *, counted_only: bool = True) -> datetime:
        """The plan's end: with every extension, or (EndTime) those `extension_lag` reads old."""
        hours = plan["hours"] + sum(
            e["DurationHours"]
            for e in plan["extensions"]
            if not counted_only or plan["reads"] - e["read"] >= self.extension_lag
        )
        return plan["start"] + timedelta(hours=hours)

    def _describe(self, plan: dict) -> dict:
        status = "Pending" if plan["reads"] <= self.pending_describes else "Scheduled"
        end = self._end(plan)
        hours = int((end - plan["start"]).total_seconds() // 3600)
        return {
            "TrainingPlanArn": plan["arn"],
            "TrainingPlanName": plan["name"],
            "Status": status,
            "DurationHours": hours,
            "DurationMinutes": 0,
            "StartTime": plan["start"],
            "EndTime": end,
            "UpfrontFee": "0.00",
            "CurrencyCode": "USD",
            "TotalInstanceCount": plan["count"],
            "AvailableInstanceCount": plan["count"],
            "InUseInstanceCount": 0,
            "TargetResources": ["training-job"],
            "ReservedCapacitySummaries": [
                {
                    "ReservedCapacityArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:reserved-capacity/rc-{plan['name']}",
                    "InstanceType": plan["type"],
                    "TotalInstanceCount": plan["count"],
                    "Status": status,
                    "StartTime": plan["start"],
                    "EndTime": end,
                    "DurationHours": hours,
                }
            ],
        }

    def _DescribeTrainingPlan(self, p: dict) -> dict:
        plan = self.plans.get(p["TrainingPlanName"])
        if plan is None:
            raise ApiError("ResourceNotFound", f"Training plan {p['TrainingPlanName']} not found")
        plan["reads"] += 1
        return self._describe(plan)

    def _ListTrainingPlans(self, p: dict) -> dict:
        keep = set(self.model.shape_for("TrainingPlanSummary").members)
        rows = [self._describe(x) for x in self.plans.values()]
        return {"TrainingPlanSummaries": [{k: v for k, v in r.items() if k in keep} for r in rows]}

    def _ExtendTrainingPlan(self, p: dict) -> dict:
        oid = p["TrainingPlanExtensionOfferingId"]
        offer = self.ext_offers.get(oid)
        if offer is None:
            raise ApiError("ResourceNotFound", f"extension offering {oid} not found")
        plan = self.plans[offer["plan"]]
        start = self._end(plan, counted_only=False)
        entry = {
            "TrainingPlanExtensionOfferingId": oid,
            "ExtendedAt": datetime.now(UTC),
            "StartDate": start,
            "EndDate": start + timedelta(hours=offer["hours"]),
            "Status": "Active",
            "PaymentStatus": "Paid",
            "DurationHours": offer["hours"],
            "UpfrontFee": "0.00",
            "CurrencyCode": "USD",
        }
        plan["extensions"].append({**entry, "read": plan["reads"]})
        self.bought.append(("extension", plan["name"], oid))
        return {"TrainingPlanExtensions": [entry]}

    def _DescribeTrainingPlanExtensionHistory(self, p: dict) -> dict:
        plan = self._plan_by_arn(p["TrainingPlanArn"])
        rows = [{k: v for k, v in e.items() if k != "read"} for e in plan["extensions"]]
        return {"TrainingPlanExtensions": rows}
