"""Issue 15, part 4: runs longer than one job, on moto. Job states are driven through moto's
backend (it would report every job Completed at once), and the checkpoint markers are the S3
objects the container's sync leaves under the run's checkpoint prefix."""

from __future__ import annotations

import json
import time

import pytest
from aws_support import ACCOUNT, REGION, plan_response, spec_dict
from botocore.stub import Stubber
from cli_support import run

from blackwell_sm.aws.run import latest_checkpoint, split_run_name, submit_run
from blackwell_sm.aws.s3 import split_s3_uri
from blackwell_sm.aws.submit import prepare, submit
from blackwell_sm.cli import submit as submit_cli
from blackwell_sm.errors import AwsError, ConsentRequiredError


class Script:
    """What each created job does: (status, secondary status, failure reason, checkpoint step
    its container leaves or None), in creation order; moto's backend is set accordingly."""

    def __init__(self, aws, outcomes: list[tuple]) -> None:
        self.aws, self.outcomes, self.created = aws, list(outcomes), []
        events = aws.sagemaker.meta.events
        events.register("before-parameter-build.sagemaker.CreateTrainingJob", self.sent)
        events.register("after-call.sagemaker.CreateTrainingJob", self)

    def sent(self, params, **_kw) -> None:
        self.created.append(dict(params))

    def __call__(self, **_kw) -> None:
        from moto.sagemaker.models import sagemaker_backends

        params = self.created[-1]
        name = params["TrainingJobName"]
        status, secondary, reason, step = self.outcomes.pop(0)
        job = sagemaker_backends[ACCOUNT][REGION].training_jobs[name]
        job.training_job_status, job.secondary_status = status, secondary
        if reason:
            job.failure_reason = reason
        if step is not None:  # the container's checkpoint, synced to the run's prefix
            bucket, prefix = split_s3_uri(params["CheckpointConfig"]["S3Uri"] + "/")
            marker = {"step": step, "world_size": 8, "time": time.time() + 1}
            self.aws.s3.put_object(
                Bucket=bucket,
                Key=f"{prefix}step-{step:08d}/COMPLETE",
                Body=json.dumps(marker).encode(),
            )


MAX_RUNTIME = ("Stopped", "MaxRuntimeExceeded", None)
DONE = ("Completed", "Completed", None, None)


def _spec() -> dict:
    return {**spec_dict("llama-3.1-8b"), "training": {"total_steps": 100}}  # ~0.4 h


def _follow(aws, spec=None, **kw):
    return submit_run(spec or _spec(), until_done=True, aws=aws, sleep=lambda _s: None, **kw)


def test_max_runtime_then_the_next_job_resumes_with_the_same_prefix(aws):
    script = Script(aws, [(*MAX_RUNTIME, 40), DONE])
    said: list[str] = []
    jobs = _follow(aws, notify=said.append)
    first, second = script.created
    base = first["TrainingJobName"]
    assert [j.name for j in jobs] == [base, f"{base}-r2"] and split_run_name(jobs[1].name) == (
        base,
        2,
    )
    assert second["CheckpointConfig"] == first["CheckpointConfig"]  # the same prefix
    # the remaining 60 of 100 steps: a shorter MaxRuntime, the same plan and spec hash
    assert (
        second["StoppingCondition"]["MaxRuntimeInSeconds"]
        < first["StoppingCondition"]["MaxRuntimeInSeconds"]
    )
    assert second["HyperParameters"] == first["HyperParameters"]
    assert any("resumes at step 40 of 100" in s for s in said)
    assert any(f"{base}-r2 completed: the run is done" in s for s in said)


def test_any_other_failure_stops_the_chain(aws):
    Script(aws, [(*MAX_RUNTIME, 40), ("Failed", "Failed", "AlgorithmError: boom", 44)])
    with pytest.raises(AwsError) as e:
        _follow(aws)
    assert e.value.code == "run_stopped" and "AlgorithmError: boom" in e.value.message
    names = [
        j["TrainingJobName"] for j in aws.sagemaker.list_training_jobs()["TrainingJobSummaries"]
    ]
    assert len(names) == 2  # no third job


def test_no_newer_checkpoint_no_next_job(aws):
    Script(aws, [(*MAX_RUNTIME, None)])
    with pytest.raises(AwsError, match="no checkpoint newer than its start"):
        _follow(aws)
    assert len(aws.sagemaker.list_training_jobs()["TrainingJobSummaries"]) == 1


def test_a_stop_by_hand_is_not_continued(aws):
    Script(aws, [("Stopped", "Stopped", None, 40)])
    with pytest.raises(AwsError, match="not continuing"):
        _follow(aws)
    assert len(aws.sagemaker.list_training_jobs()["TrainingJobSummaries"]) == 1


def test_resume_makes_one_step_and_status_shows_the_whole_run(aws, monkeypatch, tmp_path):
    monkeypatch.setattr(submit_cli, "aws_context", lambda region: aws)
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(json.dumps(_spec()))
    Script(aws, [(*MAX_RUNTIME, 40), (*MAX_RUNTIME, 70), DONE])
    base = prepare(_spec())[2].base_job_name
    for expected in ([base], [f"{base}-r2"], [f"{base}-r3"], []):
        code, out, err = run("submit", str(spec_file), "--resume", "--output", "json")
        assert code == 0, err
        assert json.loads(out)["submitted"] == expected
    code, out, err = run("status", f"{base}-r2")
    assert code == 0, err
    assert f"run {base}: 3 jobs" in out and "so far: 70 steps" in out
    per_step = int(
        aws.sagemaker.describe_training_job(TrainingJobName=base)["HyperParameters"][
            "bsm_tokens_per_step"
        ]
    )
    assert f"{70 * per_step:,} tokens" in out
    code, out, _ = run("status", base, "--output", "json")
    assert [j["name"] for j in json.loads(out)["run"]["jobs"]] == [base, f"{base}-r2", f"{base}-r3"]
    ckpt = latest_checkpoint(aws.s3, prepare(_spec())[2].checkpoint_s3_uri)
    assert ckpt is not None and ckpt.step == 70


def test_flags_that_conflict_with_a_run_are_exit_2(tmp_path):
    spec_file = tmp_path / "spec.yaml"
    spec_file.write_text(json.dumps(_spec()))
    for extra in (
        ["--until-done", "--resume"],
        ["--until-done", "--new"],
        ["--resume", "--wait"],
        ["--until-done", "--dry-run"],
    ):
        code, out, _ = run("submit", str(spec_file), *extra, "--output", "json")
        assert code == 2 and json.loads(out)["error"]["field"] == extra[1], extra


def test_never_a_next_job_on_capacity_nobody_agreed_to(aws):
    """training_plan auto: job 1's plan was bought with --yes; when it has ended, the next job
    would need a new plan, and without --yes (and no terminal) nothing is bought or started."""
    spec = {**spec_dict("tiny", training_plan="auto"), "training": {"total_steps": 100}}
    jr = prepare(spec)[2]
    name = jr.base_job_name[:64].rstrip("-")
    Script(aws, [(*MAX_RUNTIME, 40)])
    with Stubber(aws.plans) as st:
        st.add_client_error(
            "describe_training_plan", service_error_code="ResourceNotFound", http_status_code=400
        )
        st.add_response("search_training_plan_offerings", {"TrainingPlanOfferings": [_offer()]})
        st.add_response("create_training_plan", {"TrainingPlanArn": _arn(name)})
        st.add_response("describe_training_plan", plan_response(name=name, status="Scheduled"))
        submit(spec, aws=aws, yes=True)
        # job 2: the plan has expired; a new one would have to be bought
        st.add_response("describe_training_plan", plan_response(name=name, status="Expired"))
        # job 2's own plan (<base>-r2: a new intent) does not exist yet
        st.add_client_error(
            "describe_training_plan",
            service_error_code="ResourceNotFound",
            http_status_code=400,
            expected_params={"TrainingPlanName": name + "-r2"},
        )
        st.add_response("search_training_plan_offerings", {"TrainingPlanOfferings": [_offer()]})
        with pytest.raises(ConsentRequiredError):
            _follow(aws, spec)
        st.assert_no_pending_responses()  # searched, never bought
    assert len(aws.sagemaker.list_training_jobs()["TrainingJobSummaries"]) == 1


def _arn(name: str) -> str:
    return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-plan/{name}"


def _offer() -> dict:
    from datetime import UTC, datetime, timedelta

    from aws_support import offering

    return offering(
        "tpo-" + "c" * 20, start=datetime.now(UTC) + timedelta(hours=1), hours=48, fee="100.00"
    )
