"""The job request builder: deterministic names and bundles, limits refused before any call."""

from __future__ import annotations

import copy
import io
import json
import math
import tarfile
from pathlib import Path

import pytest
from aws_support import plan_for, run_spec

from blackwell_sm.errors import InfeasiblePlanError, SpecError
from blackwell_sm.job.bundle import ENTRYPOINT_SCRIPT
from blackwell_sm.job.limits import MAX_RUNTIME_S
from blackwell_sm.job.names import spec_hash
from blackwell_sm.job.package_files import package_files
from blackwell_sm.job.request import CONTAINER_ENTRYPOINT, STARTUP_HOURS, build_job_request
from blackwell_sm.job.validate import validate_request
from blackwell_sm.metrics import METRIC_REGEXES
from blackwell_sm.spec import load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[1]
ARN = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/bsm-test-plan"


@pytest.fixture(scope="module")
def built():
    spec = run_spec()
    plan = plan_for(spec, hours=20.0)
    return spec, plan, build_job_request(spec, plan)


def test_same_spec_same_name_hash_request_and_bundle_bytes(built):
    _spec, _plan, a = built
    b = build_job_request(run_spec(), plan_for(run_spec(), hours=20.0))
    assert a.job_name == b.job_name == a.base_job_name
    assert a.spec_hash == b.spec_hash and len(a.spec_hash) == 12
    assert a.bundle.data == b.bundle.data and a.bundle.sha256 == b.bundle.sha256
    assert a.request == b.request
    assert a.job_name == f"bsm-llama-3-1-8b-{a.spec_hash}"
    assert a.bundle_s3_uri == f"s3://bsm-test-bucket/runs/code/{a.bundle.sha256}/bundle.tar.gz"


def test_new_adds_a_unique_suffix_but_keeps_the_checkpoints(built):
    spec, plan, a = built
    n1 = build_job_request(spec, plan, new=True)
    n2 = build_job_request(spec, plan, new=True)
    assert n1.job_name != n2.job_name != a.job_name
    assert n1.job_name.startswith(a.job_name + "-") and len(n1.job_name) <= 63
    assert n1.checkpoint_s3_uri == a.checkpoint_s3_uri  # a fresh job resumes the spec's run
    assert n1.request["TrainingJobName"] == n1.job_name


def test_a_changed_spec_or_capacity_changes_the_hash(built):
    """Capacity is part of the identity: on-demand, a plan ARN, a plan name and 'auto' are four
    jobs (a plan request must never reattach to the on-demand job, issue 12)."""
    spec, plan, a = built
    lr = parse_spec({**spec.model_dump(), "training": {**spec.training.model_dump(), "seed": 7}})
    assert build_job_request(lr, plan_for(lr)).spec_hash != a.spec_hash
    hashes = {a.spec_hash}
    for ref in (ARN, "bsm-test-plan", "auto"):
        on_plan = run_spec()
        on_plan.compute.training_plan = ref
        hashes.add(spec_hash(on_plan, plan))
    assert len(hashes) == 4
    priced = run_spec()
    priced.compute.price_per_hour = 99.0  # steers the planner only: same job
    assert spec_hash(priced, plan) == a.spec_hash


def test_long_or_odd_model_names_fit_sagemakers_alphabet():
    spec = parse_spec(
        {
            **run_spec().model_dump(),
            "model": {"preset": "llama-3.1-8b", "name": "My_Model.v2 " + "x" * 80},
        }
    )
    req = build_job_request(spec, plan_for(spec), new=True)
    assert len(req.job_name) <= 63
    assert req.job_name.startswith("bsm-My-Model-v2-x")
    tags = {t["Key"]: t["Value"] for t in req.request["Tags"]}
    assert tags["bsm:model"].startswith("My_Model.v2 xxx")
    assert all(c.isalnum() or c == "-" for c in req.job_name) and "--" not in req.job_name


def test_request_fields(built):
    _spec, _plan, r = built
    q = r.request
    assert q["AlgorithmSpecification"]["ContainerEntrypoint"] == CONTAINER_ENTRYPOINT
    assert (
        "exec python blackwell_sm/entrypoints/launch.py --plan plan.json" in CONTAINER_ENTRYPOINT[2]
    )
    assert q["AlgorithmSpecification"]["MetricDefinitions"] == [
        {"Name": k, "Regex": v} for k, v in METRIC_REGEXES.items()
    ]
    assert q["AlgorithmSpecification"]["TrainingImage"] == (
        "763104351884.dkr.ecr.us-east-1.amazonaws.com/"
        "pytorch-training:2.8.0-gpu-py312-cu129-ubuntu22.04-sagemaker"
    )
    assert q["ResourceConfig"] == {
        "InstanceType": "ml.p6-b200.48xlarge",
        "InstanceCount": 2,
        "VolumeSizeInGB": 100,
    }
    assert q["CheckpointConfig"] == {
        "S3Uri": f"s3://bsm-test-bucket/runs/checkpoints/{r.base_job_name}",
        "LocalPath": "/opt/ml/checkpoints",
    }
    assert q["OutputDataConfig"]["S3OutputPath"] == "s3://bsm-test-bucket/runs/output"
    # 20 h predicted x 1.5 margin + 0.5 h start-up, never the SDK's 1 h default
    assert (
        q["StoppingCondition"]
        == {"MaxRuntimeInSeconds": 109800}
        == {"MaxRuntimeInSeconds": 30.5 * 3600}
    )
    assert q["Environment"] == {"BSM_MAX_RUNTIME_S": "109800"}
    code, train = q["InputDataConfig"]
    assert code["ChannelName"] == "code" and code["InputMode"] == "File"
    assert code["DataSource"]["S3DataSource"]["S3Uri"] == r.bundle_s3_uri
    assert train["ChannelName"] == "train"
    assert train["DataSource"]["S3DataSource"]["S3Uri"] == "s3://bsm-test-bucket/data/train/"
    assert all(isinstance(v, str) for v in q["HyperParameters"].values())
    assert len(q["HyperParameters"]) <= 5
    tags = {t["Key"]: t["Value"] for t in q["Tags"]}
    assert tags["bsm:model"] == "llama-3.1-8b" and tags["bsm:spec-hash"] == r.spec_hash
    assert "TrainingPlanArn" not in q["ResourceConfig"]
    assert [w for w in r.warnings if "carries no wheels" not in w] == []  # built without fetching
    json.dumps(r.model_dump(mode="json"))  # the dry run prints it: JSON-safe, bundle bytes left out


def test_bundle_holds_the_package_files_plan_and_wheel_manifest(built):
    _, plan, r = built
    with tarfile.open(fileobj=io.BytesIO(r.bundle.data), mode="r:gz") as tar:
        members = tar.getmembers()
        plan_text = tar.extractfile("plan.json").read().decode()
    names = [m.name for m in members]
    # Built without fetching: the manifest (what the bootstrap checks) but no wheels.
    assert names == r.bundle.files == [*sorted(names[:-2]), "plan.json", "wheels/manifest.json"]
    assert names[:-2] == [f.arcname for f in package_files().files]  # what a wheel holds
    assert ENTRYPOINT_SCRIPT in names and "blackwell_sm/launch/main.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc") or "/." in n]
    assert all(m.mtime == 0 and m.uid == 0 and m.uname == "" and m.mode == 0o644 for m in members)
    assert [m.size for m in members] == r.bundle.sizes
    assert plan_text == plan.to_json()


def _refused(request, *words):
    with pytest.raises(SpecError) as e:
        validate_request(request)
    for w in words:
        assert w in str(e.value), str(e.value)
    return e.value


def test_hyperparameters_over_sagemaker_limits_are_refused(built):
    q = copy.deepcopy(built[2].request)
    many = {**q, "HyperParameters": {f"k{i}": "v" for i in range(101)}}
    assert _refused(many, "HyperParameters", "101 entries, at most 100").field == "hyperparameters"
    _refused({**q, "HyperParameters": {"k": "v" * 2501}}, "2501 characters, at most 2500")
    _refused({**q, "HyperParameters": {"k" * 257: "v"}}, "257 characters, at most 256")


def test_botocore_model_catches_a_wrong_type(built):
    q = copy.deepcopy(built[2].request)
    q["ResourceConfig"]["InstanceCount"] = "2"
    assert _refused(q, "ResourceConfig.InstanceCount", "valid types").field == "compute"
    q = copy.deepcopy(built[2].request)
    q["HyperParameters"]["lr"] = 0.1
    _refused(q, "HyperParameters.lr")


def test_bad_job_names_are_refused(built):
    q = built[2].request
    _refused({**q, "TrainingJobName": "a" * 64}, "64 characters, at most 63")
    _refused({**q, "TrainingJobName": "my_job"}, "does not match")


def test_too_many_or_too_long_tags_are_refused():
    spec = run_spec(tags={f"team{i}": "x" for i in range(48)})  # + 3 automatic tags = 51
    with pytest.raises(SpecError) as e:
        build_job_request(spec, plan_for(spec))
    assert e.value.field == "job.tags" and "51 entries, at most 50" in str(e.value)
    spec = run_spec(tags={"team": "v" * 257})
    with pytest.raises(SpecError, match="257 characters, at most 256"):
        build_job_request(spec, plan_for(spec))
    with pytest.raises(SpecError, match="reserved"):
        run_spec(tags={"aws:cost": "x"})


@pytest.mark.parametrize(
    "name,words",
    [("my data", "invalid channel name"), ("x" * 65, "invalid channel name"), ("code", "reserved")],
)
def test_bad_channel_names_are_refused(name, words):
    with pytest.raises(SpecError) as e:
        run_spec(channels={name: {"s3_uri": "s3://bsm-test-bucket/d"}})
    assert e.value.field.startswith("job.channels") and words in str(e.value)


def test_missing_train_channel_is_named():
    spec = run_spec(channels={})
    with pytest.raises(SpecError) as e:
        build_job_request(spec, plan_for(spec))
    assert e.value.field == "job.channels" and "'train'" in str(e.value)


@pytest.mark.parametrize(
    "job,field,words",
    [
        ({"role_arn": "arn:aws:iam::123:role/x"}, "job.role_arn", "IAM role ARN"),
        ({"s3_prefix": "bucket/prefix"}, "job.s3_prefix", "S3 URI"),
        ({"s3_prefix": "s3://Bad_Bucket/x"}, "job.s3_prefix", "bucket name"),
        (
            {"environment": {"AWS_SECRET_ACCESS_KEY": "x"}},
            "job.environment.AWS_SECRET_ACCESS_KEY",
            "credentials",
        ),
        (
            {"environment": {"AWS_SESSION_TOKEN": "x"}},
            "job.environment.AWS_SESSION_TOKEN",
            "credentials",
        ),
        ({"environment": {"BSM_MAX_RUNTIME_S": "1"}}, "job.environment.BSM_MAX_RUNTIME_S", "BSM_"),
        ({"max_runtime_hours": 673}, "job.max_runtime_hours", "672"),
        ({"subnets": ["subnet-1"]}, "job", "security_group_ids"),
        ({"region": "useast1"}, "job.region", "region"),
    ],
)
def test_bad_job_fields_name_the_field(job, field, words):
    with pytest.raises(SpecError) as e:
        run_spec(**job)
    assert e.value.field == field and words in str(e.value), (e.value.field, str(e.value))


def test_volume_kms_key_refused_on_nvme_only_instances():
    spec = run_spec(volume_kms_key_id="arn:aws:kms:us-east-1:123456789012:key/abc")
    with pytest.raises(SpecError) as e:
        build_job_request(spec, plan_for(spec))
    assert e.value.field == "job.volume_kms_key_id" and "NVMe" in str(e.value)
    spec = run_spec(output_kms_key_id="arn:aws:kms:us-east-1:123456789012:key/abc")
    out = build_job_request(spec, plan_for(spec)).request["OutputDataConfig"]
    assert out["KmsKeyId"] == "arn:aws:kms:us-east-1:123456789012:key/abc"


def test_training_plan_arn_from_spec_or_resolver():
    spec = run_spec()
    spec.compute.training_plan = ARN
    r = build_job_request(spec, plan_for(spec))
    assert r.request["ResourceConfig"]["TrainingPlanArn"] == ARN == r.training_plan_arn
    assert {"Key": "bsm:training-plan", "Value": "bsm-test-plan"} in r.request["Tags"]
    spec.compute.training_plan = "my-plan"
    r = build_job_request(spec, plan_for(spec))
    assert {"Key": "bsm:training-plan", "Value": "my-plan"} in r.request["Tags"]
    assert "TrainingPlanArn" not in r.request["ResourceConfig"]
    assert r.unresolved_training_plan == "my-plan" and "not resolved" in r.warnings[0]
    resolved = build_job_request(spec, plan_for(spec), training_plan_arn=ARN)
    assert resolved.request["ResourceConfig"]["TrainingPlanArn"] == ARN
    other = ARN.replace("us-east-1", "us-west-2")
    with pytest.raises(SpecError, match="us-west-2 but the job runs in us-east-1"):
        build_job_request(spec, plan_for(spec), training_plan_arn=other)


def test_max_runtime_default_explicit_and_cap():
    spec = run_spec()
    long = build_job_request(spec, plan_for(spec, hours=1000.0))
    assert long.max_runtime_s == MAX_RUNTIME_S and "28-day" in long.warnings[0]
    spec = run_spec(max_runtime_hours=2)
    short = build_job_request(spec, plan_for(spec, hours=5.0))
    assert short.request["StoppingCondition"]["MaxRuntimeInSeconds"] == 7200
    assert short.request["Environment"]["BSM_MAX_RUNTIME_S"] == "7200"
    assert "shorter than the predicted" in short.warnings[0]


def test_all_optional_job_fields_reach_the_request():
    spec = run_spec(
        max_retry_attempts=3,
        subnets=["subnet-0abc"],
        security_group_ids=["sg-0abc"],
        enable_network_isolation=True,
        encrypt_inter_container_traffic=True,
        keep_alive_minutes=30,
        environment={"NCCL_DEBUG": "WARN"},
        tags={"team": "ml"},
        image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/mine:1",
    )
    q = build_job_request(spec, plan_for(spec)).request
    assert q["RetryStrategy"] == {"MaximumRetryAttempts": 3}
    assert q["VpcConfig"] == {"Subnets": ["subnet-0abc"], "SecurityGroupIds": ["sg-0abc"]}
    assert q["EnableNetworkIsolation"] and q["EnableInterContainerTrafficEncryption"]
    assert q["ResourceConfig"]["KeepAlivePeriodInSeconds"] == 1800
    assert q["Environment"]["NCCL_DEBUG"] == "WARN" and "BSM_MAX_RUNTIME_S" in q["Environment"]
    assert q["AlgorithmSpecification"]["TrainingImage"].endswith("/mine:1")
    assert {"Key": "team", "Value": "ml"} in q["Tags"]


def test_unknown_region_needs_an_image_uri():
    spec = run_spec(region="xx-nowhere-1")
    with pytest.raises(SpecError) as e:
        build_job_request(spec, plan_for(spec))
    assert e.value.field == "job.image_uri" and "us-east-1" in str(e.value)


def test_plan_must_fit_the_spec():
    spec = run_spec()
    with pytest.raises(InfeasiblePlanError):
        build_job_request(
            spec,
            plan_for(
                spec, activation_checkpointing="none", micro_batch_size=64, grad_accum_steps=1
            ),
        )
    one = parse_spec({**spec.model_dump(), "compute": {"instance_count": 1}})
    with pytest.raises(SpecError) as e:
        build_job_request(spec, plan_for(one))
    assert e.value.field == "compute.instance_count"
    no_job = parse_spec({**spec.model_dump(), "job": None})
    with pytest.raises(SpecError, match="no job"):
        build_job_request(no_job, plan_for(no_job))


TEMPLATES = sorted(p for p in (ROOT / "templates").glob("*.yaml") if "job:" in p.read_text())


@pytest.mark.parametrize("path", TEMPLATES, ids=[p.stem for p in TEMPLATES])
def test_templates_build_with_placeholder_warnings(path):
    from blackwell_sm.planner.api import make_plan

    spec = load_spec(path)
    plan = make_plan(spec)  # the real planner: what `bsm submit --dry-run` builds from
    r = build_job_request(spec, plan)
    assert r.request["ResourceConfig"]["InstanceCount"] == plan.instance.count
    assert r.max_runtime_s >= plan.run.hours * 3600
    # every field of the spec is searched (issue 37): init_from's placeholder too
    want = {"job.role_arn", "job.s3_prefix", "job.channels.train.s3_uri"}
    if spec.training.init_from:
        want.add("training.init_from")
    assert set(r.placeholders) == want
    assert sum("REPLACE-ME" in w for w in r.warnings) == len(want)


def test_builder_imports_neither_torch_nor_the_sdk():
    import subprocess
    import sys

    code = (
        "import sys, blackwell_sm.job.request, blackwell_sm.job.iam, blackwell_sm.job.sdk\n"
        "bad = [m for m in ('torch', 'sagemaker', 'boto3') if m in sys.modules]\n"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)


def test_a_channel_prefix_without_a_trailing_slash_is_pointed_out():
    spec = run_spec(channels={"train": {"s3_uri": "s3://bsm-test-bucket/data/train"}})
    r = build_job_request(spec, plan_for(spec))
    assert "no trailing '/'" in r.warnings[0]
    assert r.request["InputDataConfig"][1]["DataSource"]["S3DataSource"]["S3Uri"] == (
        "s3://bsm-test-bucket/data/train"
    )


def test_sdk_view_refuses_an_unresolved_training_plan_before_importing_the_sdk():
    from blackwell_sm.job.sdk import to_model_trainer

    spec = run_spec()
    spec.compute.training_plan = "my-plan"
    with pytest.raises(SpecError) as e:
        to_model_trainer(spec, plan_for(spec))
    assert e.value.field == "compute.training_plan" and "on-demand" in str(e.value)


def test_max_runtime_is_sized_from_the_pessimistic_end_of_the_range():
    spec = run_spec()
    plan = plan_for(spec, hours=20.0)
    plan = plan.model_copy(
        update={"run": plan.run.model_copy(update={"hours_range": (18.0, 30.0)})}
    )
    runtime = build_job_request(spec, plan).request["StoppingCondition"]["MaxRuntimeInSeconds"]
    margin = spec.job.runtime_margin
    assert runtime == math.ceil((30.0 * margin + STARTUP_HOURS) * 3600)


def _init_spec(init_from: str, **job):
    from aws_support import spec_dict

    d = spec_dict("qwen3-8b", **job)
    d["training"] = {"seq_len": 8192, "total_tokens": 10_000_000_000, "init_from": init_from}
    return parse_spec(d)


def test_init_from_s3_is_the_init_channel_with_fastfile():
    spec = _init_spec("s3://bsm-test-bucket/models/Qwen3-8B/")
    req = build_job_request(spec, plan_for(spec)).request
    init = [c for c in req["InputDataConfig"] if c["ChannelName"] == "init"]
    assert init == [
        {
            "ChannelName": "init",
            "DataSource": {
                "S3DataSource": {
                    "S3DataType": "S3Prefix",
                    "S3Uri": "s3://bsm-test-bucket/models/Qwen3-8B/",
                    "S3DataDistributionType": "FullyReplicated",
                }
            },
            "InputMode": "FastFile",
        }
    ]
    validate_request(req)  # botocore's model accepts it


def test_init_from_local_path_or_a_clashing_channel_is_refused():
    spec = _init_spec("/data/Qwen3-8B")
    with pytest.raises(SpecError) as e:
        build_job_request(spec, plan_for(spec))
    assert e.value.field == "training.init_from" and "S3" in str(e.value)
    from aws_support import BUCKET

    channels = {
        "train": {"s3_uri": f"s3://{BUCKET}/data/train/"},
        "init": {"s3_uri": "s3://b0b/x/"},
    }
    spec = _init_spec("s3://bsm-test-bucket/m/", channels=channels)
    with pytest.raises(SpecError) as e:
        build_job_request(spec, plan_for(spec))
    assert e.value.field == "job.channels.init"
