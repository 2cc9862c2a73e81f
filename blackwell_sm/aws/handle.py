"""`TrainingJob`: the handle `submit` returns, for notebooks and the CLI alike."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from blackwell_sm.errors import AwsError, BsmError

if TYPE_CHECKING:
    from blackwell_sm.aws.jobs import JobInfo
    from blackwell_sm.aws.logs import LogEvent
    from blackwell_sm.aws.plan_fit import PlanFit
    from blackwell_sm.aws.progress import Progress
    from blackwell_sm.aws.s3 import UploadResult
    from blackwell_sm.aws.session import AwsContext
    from blackwell_sm.aws.training_plans import TrainingPlanInfo
    from blackwell_sm.job.request import JobRequest
    from blackwell_sm.planner.plan import Plan
    from blackwell_sm.planner.preferences import PreferencePlans


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr)


class TrainingJob:
    """A SageMaker training job made (or found) by this toolkit.

    `created` is True when this call created it, `reattached` when a job of the same spec
    already existed; a dry run has neither and makes no AWS calls (`request` shows what would be
    sent).
    """

    def __init__(
        self,
        name: str,
        *,
        region: str | None = None,
        aws: AwsContext | None = None,
        plan: Plan | None = None,
        job_request: JobRequest | None = None,
        dry_run: bool = False,
        created: bool = False,
        reattached: bool = False,
        upload: UploadResult | None = None,
        training_plan: TrainingPlanInfo | None = None,
        plan_fit: PlanFit | None = None,
        warnings: list[str] | None = None,
        preference_plans: PreferencePlans | None = None,
        region_source: str | None = None,
    ) -> None:
        self.name = name
        self.region = region or (aws.region if aws else None)
        self._aws = aws
        self.plan = plan
        self.job_request = job_request
        self.dry_run = dry_run
        self.created = created
        self.reattached = reattached
        self.upload = upload
        self.training_plan = training_plan
        self.plan_fit = plan_fit
        # With compute.instance_preferences: the PreferencePlans (`plan` is the first one's).
        self.preference_plans = preference_plans
        self.warnings = list(warnings or [])
        self.region_source = region_source or (
            aws.region_choice.source if aws is not None and hasattr(aws, "region_choice") else None
        )

    @classmethod
    def attach(
        cls, name: str, *, region: str | None = None, aws: AwsContext | None = None
    ) -> TrainingJob:
        """A handle to an existing job by name (checked to exist)."""
        job = cls(name, region=region, aws=aws)
        job.status()
        return job

    @property
    def request(self) -> dict[str, Any] | None:
        return self.job_request.request if self.job_request else None

    @property
    def aws(self) -> AwsContext:
        if self.dry_run:
            raise BsmError(
                f"dry run: no job {self.name} was created",
                hint="submit without dry_run to create it",
            )
        if self._aws is None:
            from blackwell_sm.aws.session import AwsContext

            self._aws = AwsContext(self.region)
        return self._aws

    def status(self) -> JobInfo:
        """DescribeTrainingJob, summarised (status, secondary status, failure explained)."""
        from blackwell_sm.aws.jobs import describe_job

        return describe_job(self.aws.sagemaker, self.name)

    def describe(self) -> dict[str, Any]:
        """DescribeTrainingJob's answer as it is (`status()` summarises it)."""
        from blackwell_sm.aws.jobs import describe_raw

        return describe_raw(self.aws.sagemaker, self.name)

    def wait(
        self,
        *,
        poll_s: float = 30.0,
        timeout_s: float | None = None,
        on_status: Callable[[JobInfo], None] | None = None,
        sleep: Callable[[float], None] | None = None,
        raise_on_failure: bool = True,
        on_poll: Callable[[JobInfo], None] | None = None,
    ) -> JobInfo:
        """Poll until the job ends. Ctrl-C stops waiting, not the job. `on_status` hears each
        change of status, `on_poll` every poll (a progress display).

        Raises AwsError for a Failed job (with its reason explained) unless
        `raise_on_failure=False`; raises BsmError when `timeout_s` passes first.
        """
        clock = time.monotonic
        start = clock()
        last = None
        while True:
            info = self.status()
            key = (info.status, info.secondary_status)
            if on_status and key != last:
                on_status(info)
            if on_poll:
                on_poll(info)
            last = key
            if info.terminal:
                if info.status == "Failed" and raise_on_failure:
                    raise AwsError(
                        f"training job {self.name} failed: {info.failure_reason}",
                        code="job_failed",
                        hint=info.failure_explanation or f"`bsm logs {self.name}` shows why",
                    )
                return info
            delay = poll_s
            if timeout_s is not None:
                remaining = timeout_s - (clock() - start)
                if remaining <= 0:
                    raise BsmError(
                        f"stopped waiting after {clock() - start:.1f} s (timeout {timeout_s:g} s): "
                        f"{self.name} is still {info.status}",
                        code="wait_timeout",
                        hint=f"`bsm status {self.name}`; the job keeps running",
                    )
                delay = min(poll_s, remaining)  # poll at most the time that remains
            (sleep or time.sleep)(delay)

    def logs(
        self,
        *,
        follow: bool = False,
        timeout_s: float | None = None,
        notify: Callable[[str], None] | None = None,
        **kw: Any,
    ) -> Iterator[LogEvent]:
        """The job's CloudWatch log events, all instances interleaved by time.

        `notify` receives notices such as "no log stream yet" (default: printed on stderr).
        """
        from blackwell_sm.aws.logs import iter_logs

        return iter_logs(
            self.aws.sagemaker,
            self.aws.logs,
            self.name,
            follow=follow,
            timeout_s=timeout_s,
            notify=notify or _stderr,
            **kw,
        )

    def stop(self) -> JobInfo:
        """StopTrainingJob: SageMaker sends SIGTERM; the loop saves a checkpoint and exits."""
        from blackwell_sm.aws.jobs import stop_job

        return stop_job(self.aws.sagemaker, self.name)

    def metrics(self) -> dict[str, float]:
        """Final metrics (DescribeTrainingJob FinalMetricDataList), else the latest per metric
        parsed from the logs' `[bsm-step]` lines with the same regexes SageMaker uses."""
        info = self.status()
        if info.final_metrics:
            return dict(info.final_metrics)
        from blackwell_sm.metrics import parse_line

        latest: dict[str, float] = {}
        for event in self.logs():
            latest.update(parse_line(event.message))
        return latest

    def progress(self, described: dict[str, Any] | None = None) -> Progress:
        """Step, tokens, measured against predicted speed and memory, the ETA, and whether the
        run ends before MaxRuntime and its training plan's EndTime (from the latest step,
        check and alert lines in the logs: aws/progress.py). `described`: a DescribeTrainingJob
        answer the caller already has, so the job is not described twice."""
        from blackwell_sm.aws.progress import read_progress

        return read_progress(self.aws.sagemaker, self.aws.logs, self.name, described)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "job_name": self.name,
            "region": self.region,
            "region_source": self.region_source,
            "dry_run": self.dry_run,
            "created": self.created,
            "reattached": self.reattached,
            "warnings": self.warnings,
        }
        if self.job_request is not None:
            jr = self.job_request
            out.update(
                spec_hash=jr.spec_hash,
                bundle_s3_uri=jr.bundle_s3_uri,
                bundle_sha256=jr.bundle.sha256,
                placeholders=jr.placeholders,
                training_plan_arn=jr.training_plan_arn,
                unresolved_training_plan=jr.unresolved_training_plan,
                request=jr.request,
            )
        if self.upload is not None:
            out["upload"] = self.upload.model_dump(mode="json")
        if self.training_plan is not None:
            out["training_plan"] = self.training_plan.model_dump(mode="json")
        if self.plan_fit is not None:
            out["plan_fit"] = self.plan_fit.model_dump(mode="json")
        return out

    def __repr__(self) -> str:
        state = (
            "dry-run"
            if self.dry_run
            else "reattached"
            if self.reattached
            else "created"
            if self.created
            else "attached"
        )
        return f"TrainingJob({self.name!r}, region={self.region!r}, {state})"
