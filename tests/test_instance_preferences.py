"""Issue 15, part 1: `compute.instance_preferences`, a plan per instance type, the request's
`ResourceConfig.InstancePreferences`, the bundle's `plans/<type>.json`, the launcher's choice of
plan on the hardware it woke up on, and `bsm status` showing SageMaker's choice."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from aws_support import ACCOUNT, PLAN_NAME, REGION, plan_response, spec_dict
from botocore.stub import Stubber
from cli_support import run

from blackwell_sm.errors import CapabilityError, InfeasiblePlanError, SpecError
from blackwell_sm.job.names import spec_hash
from blackwell_sm.job.request import build_job_request
from blackwell_sm.job.validate import operation_model, validate_request
from blackwell_sm.launch.select import gpu_matches, select_plan
from blackwell_sm.launch.topology import read_plan
from blackwell_sm.opt_ml import OptMl
from blackwell_sm.planner.preferences import plan_preferences
from blackwell_sm.spec import parse_spec

REPO = Path(__file__).resolve().parents[1]
B200, B300, P5EN, P5 = (
    "ml.p6-b200.48xlarge",
    "ml.p6-b300.48xlarge",
    "ml.p5en.48xlarge",
    "ml.p5.48xlarge",
)
B200_PLAN = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-plan/b200-week"


def three(**extra) -> dict:
    """The issue's spec: p6-b200 on a plan, then p6-b300, then p5en on demand."""
    d = spec_dict("llama-3.1-8b")
    d["training"] = {"total_tokens": 2_000_000_000}
    d["compute"] = {
        "instance_preferences": [
            {"instance_type": B200, "instance_count": 1, "training_plan": B200_PLAN},
            {"instance_type": B300, "instance_count": 1},
            {"instance_type": P5EN, "instance_count": 1},
        ],
        **extra,
    }
    return d


def test_spec_refuses_mixing_preferences_with_single_capacity_and_repeats():
    d = three(instance_type=P5)
    with pytest.raises(SpecError) as e:
        parse_spec(d)
    assert e.value.field == "compute.instance_type" and "replaces" in e.value.message
    d = three()
    d["compute"]["instance_preferences"].append({"instance_type": B300})
    with pytest.raises(SpecError, match="listed twice") as e:
        parse_spec(d)
    assert e.value.field == "compute.instance_preferences.3.instance_type"
    d = three()
    d["compute"]["instance_preferences"][1]["training_plan"] = "auto"
    with pytest.raises(SpecError) as e:
        parse_spec(d)
    assert e.value.field == "compute.instance_preferences.1.training_plan"


def test_each_preference_is_planned_for_its_own_hardware():
    plans = plan_preferences(parse_spec(three()))
    assert [p.instance_type for p in plans.preferences] == [B200, B300, P5EN]
    limits = [p.plan.memory_gib.limit for p in plans.preferences]
    assert limits[0] == pytest.approx(179.06) and limits[2] == pytest.approx(139.81)
    assert all(
        p.plan.feasible and p.plan.instance.type == p.instance_type for p in plans.preferences
    )
    # speed and time differ by type: H200 is slower than B200
    assert plans.preferences[2].plan.run.hours > plans.preferences[0].plan.run.hours
    assert plans.preferences[0].plan_file == f"plans/{B200}.json"


def test_a_preference_that_cannot_fit_is_exit_3_naming_it(tmp_path):
    d = three()
    d["model"] = "llama-3.1-70b"
    d["compute"]["instance_preferences"][2]["instance_count"] = 1  # 70B on 1 x p5en: no
    code, out, _ = run("plan", _write(d, tmp_path), "--output", "json")
    assert code == 3
    error = json.loads(out)["error"]
    assert "instance_preferences[2] 1 x ml.p5en.48xlarge" in error["message"]
    assert "drop compute.instance_preferences[2]" in error["hint"]
    with pytest.raises(InfeasiblePlanError, match=r"instance_preferences\[2\]"):
        plan_preferences(parse_spec(d)).require_feasible()


def test_bsm_plan_shows_a_row_per_preference_and_json_carries_three_plans(monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", "250")  # one table row per preference, unwrapped
    code, out, _ = run("plan", _write(three(), tmp_path), "--output", "json")
    assert code == 0
    data = json.loads(out)
    assert [p["plan"]["instance"]["type"] for p in data["preferences"]] == [B200, B300, P5EN]
    code, out, _ = run("plan", _write(three(), tmp_path))
    assert code == 0
    for t in (B200, B300, P5EN):
        assert f"1 x {t}" in out and f"plans/{t}.json" in out
    assert "│ b200-week " in out and out.count("│ on-demand ") == 2


def test_dry_run_request_has_instance_preferences_and_no_instance_type(monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_REGION", REGION)
    code, out, err = run("submit", _write(three(), tmp_path), "--dry-run", "--output", "json")
    assert code == 0, err
    data = json.loads(out)
    rc = data["request"]["ResourceConfig"]
    assert "InstanceType" not in rc and "InstanceCount" not in rc and "TrainingPlanArn" not in rc
    assert rc["InstancePreferences"] == [
        {"InstanceType": B200, "InstanceCount": 1, "TrainingPlanArns": [B200_PLAN]},
        {"InstanceType": B300, "InstanceCount": 1},
        {"InstanceType": P5EN, "InstanceCount": 1},
    ]
    assert len(data["preferences"]) == 3
    # botocore's own validator (the model the Stubber and the client use) accepts it
    from botocore.validate import ParamValidator

    report = ParamValidator().validate(data["request"], operation_model().input_shape)
    assert not report.has_errors(), report.generate_report()


def test_the_caller_policy_lets_the_job_start_on_every_preference():
    from blackwell_sm.job.iam import iam_policies

    caller = {st["Sid"]: st for st in iam_policies(parse_spec(three()))["caller"]["Statement"]}
    condition = caller["CreateTheSpecsTrainingJobs"]["Condition"]["ForAllValues:StringEquals"]
    assert condition["sagemaker:InstanceTypes"] == [B200, B300, P5EN]


def test_tools_that_take_one_plan_say_which_preference_or_refuse():
    from blackwell_sm.job.sdk import model_trainer_and_request
    from blackwell_sm.planner.preferences import plan_for_type

    spec = parse_spec(three())
    assert plan_for_type(spec, P5EN).instance.type == P5EN  # `plans search SPEC --instance-type`
    with pytest.raises(SpecError, match="each has its own plan: name one") as e:
        plan_for_type(spec, None)  # never silently the default instance type
    assert e.value.field == "--instance-type"
    with pytest.raises(SpecError, match="to_model_trainer does not map"):
        model_trainer_and_request(spec)
    from blackwell_sm.api.plan import plan
    from blackwell_sm.planner.api import make_plan

    with pytest.raises(SpecError, match="each type has its own plan"):
        make_plan(spec)
    assert [p.instance.type for p in plan(spec).plans] == [B200, B300, P5EN]


def test_exclusions_are_refused_before_any_call():
    spec = parse_spec(three())
    jr = build_job_request(spec, plan_preferences(spec))
    for extra, name in (
        ({"ResourceConfig": {**jr.request["ResourceConfig"], "InstanceType": P5}}, "InstanceType"),
        ({"EnableManagedSpotTraining": True}, "EnableManagedSpotTraining"),
        (
            {"ResourceConfig": {**jr.request["ResourceConfig"], "TrainingPlanArn": B200_PLAN}},
            "TrainingPlanArn",
        ),
    ):
        with pytest.raises(SpecError, match=f"{name}.*InstancePreferences"):
            validate_request({**jr.request, **extra})


def test_the_bundle_carries_a_plan_per_type_and_the_identity_the_list():
    spec = parse_spec(three())
    plans = plan_preferences(spec)
    jr = build_job_request(spec, plans)
    members = _members(jr.bundle.data)
    for pp in plans.preferences:
        assert json.loads(members[f"plans/{pp.instance_type}.json"]) == json.loads(
            pp.plan.to_json()
        )
    # the identity includes the preference list: order, count, plan
    swapped = three()
    prefs = swapped["compute"]["instance_preferences"]
    prefs[1], prefs[2] = prefs[2], prefs[1]
    other = parse_spec(swapped)
    other_plans = plan_preferences(other)
    assert spec_hash(other, other_plans.primary, other_plans.plans[1:]) != jr.spec_hash
    single = parse_spec(
        {
            **spec_dict("llama-3.1-8b"),
            "training": {"total_tokens": 2_000_000_000},
            "compute": {"instance_type": B200, "training_plan": B200_PLAN},
        }
    )
    single_plans = plan_preferences(spec)
    assert spec_hash(single, single_plans.primary) != jr.spec_hash
    # a fallback's training plan is the identity too: on demand, one plan, another plan
    b300_plans = [B200_PLAN.replace("b200", "b300-a"), B200_PLAN.replace("b200", "b300-b")]
    seen = {jr.spec_hash}
    for arn in b300_plans:
        varied = three()
        varied["compute"]["instance_preferences"][1]["training_plan"] = arn
        vs = parse_spec(varied)
        vp = plan_preferences(vs)
        seen.add(spec_hash(vs, vp.primary, vp.plans[1:]))
    assert len(seen) == 3
    # and so is a fallback's planned configuration (what runs if SageMaker picks it)
    fallback = plans.plans[1]
    bigger = fallback.model_copy(
        update={
            "config": fallback.config.model_copy(
                update={"grad_accum_steps": fallback.config.grad_accum_steps * 2}
            )
        }
    )
    others = [bigger, *plans.plans[2:]]
    assert spec_hash(spec, plans.primary, others) != jr.spec_hash


# the launcher: the plan for the hardware it woke up on -----------------------------------------
@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory) -> Path:
    spec = parse_spec(three())
    jr = build_job_request(spec, plan_preferences(spec))
    root = tmp_path_factory.mktemp("code")
    with tarfile.open(fileobj=io.BytesIO(jr.bundle.data), mode="r:gz") as tar:
        tar.extractall(root, filter="data")
    return root


def _opt_ml(tmp: Path, instance_type: str | None) -> Path:
    cfg = OptMl(tmp).config_dir
    cfg.mkdir(parents=True)
    rc = {"current_host": "algo-1", "hosts": ["algo-1"], "network_interface_name": "eth0"}
    if instance_type:
        rc["current_instance_type"] = instance_type
    (cfg / "resourceconfig.json").write_text(json.dumps(rc))
    return tmp


def _launch(bundle: Path, opt_ml: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "blackwell_sm.launch",
            "--plan",
            str(bundle / "plan.json"),
            "--opt-ml",
            str(opt_ml),
            *extra,
        ],
        cwd=bundle,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(bundle)},
    )


@pytest.mark.parametrize("instance_type", [B200, B300, P5EN])
def test_the_real_launcher_runs_the_plan_of_its_instance_type(bundle_dir, tmp_path, instance_type):
    r = _launch(bundle_dir, _opt_ml(tmp_path, instance_type), "--dry-run")
    assert r.returncode == 0, r.stderr
    launch = json.loads(r.stdout)
    chosen = bundle_dir / "plans" / f"{instance_type}.json"
    assert launch["plan_path"] == str(chosen)
    assert launch["topology"]["instance_type"] == instance_type
    assert launch["torchrun"][launch["torchrun"].index("--plan") + 1] == str(chosen.resolve())


def test_the_real_launcher_refuses_a_type_it_has_no_plan_for(bundle_dir, tmp_path):
    opt_ml = _opt_ml(tmp_path, P5)
    r = _launch(bundle_dir, opt_ml)
    assert r.returncode == CapabilityError.exit_code, r.stderr
    failure = OptMl(opt_ml).failure.read_text()
    assert f"this host is a {P5}" in failure and "refusing" in failure


def test_without_current_instance_type_the_gpus_decide(bundle_dir):
    plan = bundle_dir / "plan.json"
    chosen, why = select_plan(plan, None, read_plan, lambda: ("NVIDIA H200", 8))
    assert chosen.name == f"{P5EN}.json" and "8 x NVIDIA H200" in why
    chosen, _ = select_plan(plan, None, read_plan, lambda: ("NVIDIA B300 SXM6 AC", 8))
    assert chosen.name == f"{B300}.json"
    with pytest.raises(CapabilityError, match="none of the plans"):
        select_plan(plan, None, read_plan, lambda: ("NVIDIA H100 80GB HBM3", 8))
    with pytest.raises(CapabilityError, match="none of the plans"):
        select_plan(plan, None, read_plan, lambda: ("NVIDIA B200", 4))  # a count it has no plan for
    with pytest.raises(CapabilityError, match="no CUDA device"):
        select_plan(plan, None, read_plan, lambda: None)
    assert not gpu_matches(read_plan(bundle_dir / "plans" / f"{B200}.json"), "NVIDIA GB200", 8)


# submit and status ------------------------------------------------------------------------------
def test_submit_resolves_plan_names_and_status_shows_the_selected_type(aws, monkeypatch):
    d = three()
    d["model"] = "tiny"
    d["compute"]["instance_preferences"][0]["training_plan"] = PLAN_NAME
    from blackwell_sm.aws.submit import submit

    with Stubber(aws.plans) as plans:
        plans.add_response(
            "describe_training_plan",
            plan_response(instance_type=B200),
            {"TrainingPlanName": PLAN_NAME},
        )
        plans.add_response(
            "describe_training_plan",
            plan_response(instance_type=B200),
            {"TrainingPlanName": PLAN_NAME},
        )
        job = submit(d, aws=aws)
    sent = job.request["ResourceConfig"]["InstancePreferences"]
    assert sent[0]["TrainingPlanArns"] == [plan_response()["TrainingPlanArn"]]
    live = aws.sagemaker.describe_training_job(TrainingJobName=job.name)
    assert live["ResourceConfig"]["InstancePreferences"] == sent  # moto kept what was sent
    # SageMaker picked the second preference: status says so and names the plan that runs
    picked = {
        **live,
        "ResourceConfig": {
            **live["ResourceConfig"],
            "SelectedInstanceType": B300,
            "SelectedInstanceCount": 1,
        },
    }
    from blackwell_sm.cli import submit as submit_cli

    monkeypatch.setattr(submit_cli, "aws_context", lambda region: aws)

    def status_stubs(sm) -> None:
        sm.add_response("describe_training_job", picked)
        # is it one job of a longer run? (`<name>-r2` would be the next)
        sm.add_response("describe_training_job", picked, {"TrainingJobName": job.name})
        sm.add_client_error(
            "describe_training_job",
            service_error_code="ValidationException",
            service_message="Requested resource not found.",
            expected_params={"TrainingJobName": f"{job.name}-r2"},
        )

    with Stubber(aws.sagemaker) as sm:
        status_stubs(sm)
        code, out, err = run("status", job.name)
        status_stubs(sm)
        _, out_j, _ = run("status", job.name, "--output", "json")
    assert code == 0, err
    assert f"1 x {B300}" in out and f"plans/{B300}.json" in out and "on-demand" in out
    data = json.loads(out_j)
    assert data["selected_instance_type"] == B300 and data["running_plan"] == f"plans/{B300}.json"


def _write(d: dict, tmp: Path) -> str:
    path = tmp / "spec.yaml"
    path.write_text(json.dumps(d))  # JSON is YAML 1.2
    return str(path)


def _members(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
