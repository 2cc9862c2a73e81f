"""A corpus of bad input: every case ends with exit 2 and a message naming the field and what is
allowed — never a traceback. Cases are mutations of a valid template, run through the real CLI.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blackwell_sm.cli import main
from blackwell_sm.errors import SpecError
from blackwell_sm.spec import RunSpec, parse_spec

ROOT = Path(__file__).resolve().parents[2]
BASE: dict[str, Any] = yaml.safe_load((ROOT / "templates" / "llama-3.1-8b.yaml").read_text())
DELETE = object()


def mutate(path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    *parents, last = path.split(".")
    node = data
    for p in parents:
        node = node.setdefault(p, {}) if isinstance(node, dict) else node
    if value is DELETE:
        node.pop(last, None)
    else:
        node[last] = value
    return data


# (case id, dotted path to change, new value, text the message must contain)
SPEC_CASES: list[tuple[str, str, Any, str]] = [
    ("unknown-top-key", "trainig", {}, "trainig"),
    ("unknown-training-key", "training.lr", 0.1, "training.lr"),
    ("unknown-optimizer-key", "training.optimizer.momentum", 0.9, "training.optimizer.momentum"),
    ("unknown-compute-key", "compute.gpus", 8, "compute.gpus"),
    ("unknown-model-preset", "model", "llama-9b", "allowed: llama-3.2-1b"),
    ("model-wrong-type", "model", 42, "model"),
    ("model-null", "model", None, "model"),
    ("model-missing", "model", DELETE, "model"),
    ("heads-not-dividing", "model", {"preset": "llama-3.1-8b", "n_heads": 31}, "n_heads"),
    ("kv-not-dividing", "model", {"preset": "llama-3.1-8b", "n_kv_heads": 5}, "n_kv_heads"),
    ("zero-layers", "model", {"preset": "llama-3.1-8b", "n_layers": 0}, "model.n_layers"),
    ("negative-d-model", "model", {"preset": "llama-3.1-8b", "d_model": -4096}, "model.d_model"),
    ("fractional-layers", "model", {"preset": "llama-3.1-8b", "n_layers": 1.5}, "model.n_layers"),
    ("string-vocab", "model", {"preset": "llama-3.1-8b", "vocab_size": "big"}, "model.vocab_size"),
    ("odd-head-dim", "model", {"preset": "tiny", "d_model": 60, "n_heads": 4}, "head_dim"),
    ("unknown-model-field", "model", {"preset": "tiny", "dropout": 0.1}, "model.dropout"),
    ("seq-too-long", "training.seq_len", 262144, "max_seq_len"),
    ("seq-zero", "training.seq_len", 0, "training.seq_len"),
    ("seq-negative", "training.seq_len", -8, "training.seq_len"),
    ("seq-string", "training.seq_len", "long", "training.seq_len"),
    ("batch-both", "training.global_batch_seqs", 64, "global_batch_seqs"),
    ("batch-zero", "training.global_batch_tokens", 0, "training.global_batch_tokens"),
    ("tokens-and-steps", "training.total_steps", 100, "total_steps"),
    ("tokens-negative", "training.total_tokens", -1, "training.total_tokens"),
    ("precision-unknown", "training.precision", "fp4", "'mxfp8'"),
    ("precision-wrong-type", "training.precision", 16, "training.precision"),
    ("ac-unknown", "training.activation_checkpointing", "half", "'selective'"),
    ("lr-negative", "training.optimizer.lr", -0.1, "training.optimizer.lr"),
    ("betas-short", "training.optimizer.betas", [0.9], "training.optimizer.betas"),
    ("optimizer-unknown", "training.optimizer.name", "sgd", "'adamw'"),
    ("decay-unknown", "training.schedule.decay", "step", "'cosine'"),
    ("min-lr-ratio-over-1", "training.schedule.min_lr_ratio", 2.0, "min_lr_ratio"),
    ("warmup-negative", "training.schedule.warmup_steps", -5, "warmup_steps"),
    ("keep-last-zero", "training.checkpoint.keep_last", 0, "keep_last"),
    ("interval-zero", "training.checkpoint.interval_steps", 0, "interval_steps"),
    ("data-source-unknown", "training.data.source", "s3", "'synthetic'"),
    ("pin-shard-string", "training.pins.shard_degree", "eight", "training.pins.shard_degree"),
    ("pin-mbs-zero", "training.pins.micro_batch_size", 0, "micro_batch_size"),
    ("pin-unknown", "training.pins.tensor_parallel", 2, "training.pins.tensor_parallel"),
    ("seed-negative", "training.seed", -1, "training.seed"),
    ("training-is-list", "training", [1, 2], "training"),
    ("instance-count-zero", "compute.instance_count", 0, "compute.instance_count"),
    ("instance-count-word", "compute.instance_count", "many", "compute.instance_count"),
    ("deadline-negative", "compute.deadline_hours", -3, "compute.deadline_hours"),
    ("price-zero", "compute.price_per_hour", 0, "compute.price_per_hour"),
    ("plan-arn-wrong-shape", "compute.training_plan", "arn:aws:sagemaker:us-east-1:1:plan/x", "ARN"),
    ("plan-arn-wrong-service", "compute.training_plan",
     "arn:aws:ec2:us-east-1:123456789012:training-plan/abc", "ARN"),
    ("plan-name-bad-chars", "compute.training_plan", "my plan!", "compute.training_plan"),
    ("instance-type-unknown", "compute.instance_type", "ml.p4d.24xlarge", "allowed: ml.p6-b200"),
    ("instance-type-typo", "compute.instance_type", "ml.p6-b200.48xl", "compute.instance_type"),
    ("job-unknown-key", "job.rolearn", "x", "job.rolearn"),
    ("job-is-string", "job", "default", "job"),
]  # fmt: skip


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(args)
    out, err = capsys.readouterr()
    return int(e.value.code or 0), out, err


@pytest.mark.parametrize("case,path,value,words", SPEC_CASES, ids=[c[0] for c in SPEC_CASES])
def test_bad_spec_exits_2_naming_the_field(case, path, value, words, tmp_path, capsys):
    spec = tmp_path / f"{case}.yaml"
    spec.write_text(yaml.safe_dump(mutate(path, value)))
    code, out, err = _run(["plan", str(spec), "--output", "json"], capsys)
    assert code == 2, (code, err)
    assert "Traceback" not in err
    assert json.loads(out)["error"]["exit_code"] == 2  # the JSON error object
    assert words in err, err


FLAG_CASES: list[tuple[str, list[str], str]] = [
    ("plan-unknown-preset", ["plan", "--model", "gpt-5"], "allowed"),
    ("plan-bad-instance-type", ["plan", "--model", "llama-3.2-1b", "--instance-type", "ml.g5.xlarge"], "instance"),
    ("plan-count-zero", ["plan", "--model", "llama-3.2-1b", "--instance-count", "0"], "instance-count"),
    ("plan-count-word", ["plan", "--model", "llama-3.2-1b", "--instance-count", "lots"], "instance-count"),
    ("plan-seq-negative", ["plan", "--model", "llama-3.2-1b", "--seq-len", "-1"], "seq"),
    ("plan-set-unknown", ["plan", "--model", "llama-3.2-1b", "--set", "tp=2"], "allowed"),
    ("plan-set-no-equals", ["plan", "--model", "llama-3.2-1b", "--set", "precision"], "--set"),
    ("plan-set-bad-value", ["plan", "--model", "llama-3.2-1b", "--set", "precision=fp2"], "precision"),
    ("plan-output-xml", ["plan", "--model", "llama-3.2-1b", "--output", "xml"], "--output"),
    ("plan-missing-spec", ["plan", "/nonexistent/spec.yaml"], "spec"),
    ("plan-spec-and-model", ["plan", "templates/llama-3.1-8b.yaml", "--model", "tiny"], "model"),
    ("unknown-command", ["plna"], "No such command"),
]  # fmt: skip


@pytest.mark.parametrize("case,args,words", FLAG_CASES, ids=[c[0] for c in FLAG_CASES])
def test_bad_flags_exit_2(case, args, words, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, _out, err = _run(args, capsys)
    assert code == 2, (code, err)
    assert "Traceback" not in err
    assert words.lower() in err.lower(), err


@pytest.mark.parametrize(
    "text",
    [
        "model: [unclosed",
        "model: tiny\n  training: {seq_len: 1}\n bad-indent",
        "\tmodel: tiny",
        "- a\n- b",
    ],
)
def test_yaml_that_is_not_yaml(text, tmp_path, capsys):
    spec = tmp_path / "broken.yaml"
    spec.write_text(text)
    code, _out, err = _run(["plan", str(spec)], capsys)
    assert code == 2 and "Traceback" not in err
    assert "YAML" in err or "mapping" in err


def test_corpus_is_large_enough():
    assert len(SPEC_CASES) + len(FLAG_CASES) + 4 >= 50


_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-10, 10**6), st.floats(allow_nan=True),
    st.text(max_size=12), st.sampled_from(["auto", "bf16", "fp8", "tiny", "llama-3.1-8b"]),
)  # fmt: skip
_keys = st.sampled_from(
    [*RunSpec.model_fields, "preset", "seq_len", "precision", "pins", "n_heads", "lr", "bogus"]
)
_values = st.recursive(
    _scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_keys, inner, max_size=4)),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_keys, _values, max_size=5))
def test_fuzz_validation_raises_only_spec_error(data):
    try:
        parse_spec(data)
    except SpecError as e:
        assert e.exit_code == 2 and str(e)


@settings(max_examples=150, deadline=None)
@given(
    st.fixed_dictionaries(
        {"model": st.sampled_from(["tiny", "llama-3.2-1b"])},
        optional={
            "training": st.dictionaries(
                st.sampled_from([*BASE["training"], "bogus"]), _values, max_size=4
            ),
            "compute": st.dictionaries(
                st.sampled_from([*BASE["compute"], "training_plan", "bogus"]),
                _values,
                max_size=3,
            ),
        },
    )
)
def test_fuzz_near_valid_specs(data):
    try:
        parse_spec(data)
    except SpecError as e:
        assert e.exit_code == 2 and str(e)


# -- job-side cases: `bsm submit --dry-run` (no AWS call) -------------------------------------
def _channels(name: str, uri: str = "s3://bucket/data/train/") -> dict[str, Any]:
    return {name: {"s3_uri": uri}}


SUBNET, SG = "subnet-0123456789abcdef0", "sg-0123456789abcdef0"


def _job(**changes: Any) -> dict[str, Any]:
    return {**BASE["job"], **changes}


JOB_CASES: list[tuple[str, str, Any, str]] = [
    ("role-not-arn", "job.role_arn", "SageMakerRole", "job.role_arn"),
    ("role-is-user", "job.role_arn", "arn:aws:iam::123456789012:user/bob", "job.role_arn"),
    ("role-other-service", "job.role_arn", "arn:aws:s3:::my-bucket", "job.role_arn"),
    ("role-short-account", "job.role_arn", "arn:aws:iam::1234:role/x", "job.role_arn"),
    ("prefix-no-scheme", "job.s3_prefix", "my-bucket/prefix", "job.s3_prefix"),
    ("prefix-https", "job.s3_prefix", "https://my-bucket.s3.amazonaws.com/x", "job.s3_prefix"),
    ("prefix-empty-bucket", "job.s3_prefix", "s3://", "job.s3_prefix"),
    ("prefix-bad-bucket", "job.s3_prefix", "s3://Bad_Bucket/x", "job.s3_prefix"),
    ("channel-local-path", "job.channels", _channels("train", "/data/train"), "s3_uri"),
    ("channel-s3-typo", "job.channels", _channels("train", "s3//bucket/train"), "s3_uri"),
    ("channel-name-space", "job.channels", _channels("train data"), "train data"),
    ("channel-name-long", "job.channels", _channels("c" * 65), "channel"),
    ("channel-name-slash", "job.channels", _channels("tr/ain"), "tr/ain"),
    ("channel-name-reserved", "job.channels", _channels("code"), "code"),
    ("channel-mode-pipe", "job.channels",
     {"train": {"s3_uri": "s3://bucket-a/t/", "input_mode": "Pipe"}}, "input_mode"),
    ("channel-distribution", "job.channels",
     {"train": {"s3_uri": "s3://bucket-a/t/", "distribution": "Random"}}, "distribution"),
    ("tags-too-many", "job.tags", {f"k{i}": "v" for i in range(60)}, "tags"),
    ("tag-key-too-long", "job.tags", {"k" * 200: "v"}, "tags"),
    ("tag-value-too-long", "job.tags", {"team": "v" * 300}, "tags"),
    ("tag-key-aws-prefix", "job.tags", {"aws:cost": "x"}, "aws:"),
    ("env-bad-name", "job.environment", {"1BAD": "x"}, "environment"),
    ("env-credential", "job.environment", {"AWS_SECRET_ACCESS_KEY": "x"}, "AWS_SECRET_ACCESS_KEY"),
    ("env-value-too-long", "job.environment", {"BIG": "x" * 1000}, "environment"),
    ("env-too-many", "job.environment", {f"V{i}": "x" for i in range(120)}, "environment"),
    ("volume-zero", "job.volume_size_gb", 0, "job.volume_size_gb"),
    ("runtime-over-28-days", "job.max_runtime_hours", 1000, "max_runtime"),
    ("subnet-without-sg", "job.subnets", ["subnet-0123456789abcdef0"], "security_group_ids"),
    ("subnet-bad-id", "job", _job(subnets=["subnet_01!"], security_group_ids=[SG]), "subnets"),
    ("sg-bad-id", "job", _job(subnets=[SUBNET], security_group_ids=["sg 1"]), "security_group"),
    ("plan-arn-account", "compute.training_plan",
     "arn:aws:sagemaker:us-east-1:1234:training-plan/x", "training_plan"),
    ("plan-arn-resource", "compute.training_plan",
     "arn:aws:sagemaker:us-east-1:123456789012:training-job/x", "training_plan"),
]  # fmt: skip


@pytest.mark.parametrize("case,path,value,words", JOB_CASES, ids=[c[0] for c in JOB_CASES])
def test_bad_job_spec_exits_2_before_any_call(case, path, value, words, tmp_path, capsys):
    spec = tmp_path / f"{case}.yaml"
    spec.write_text(yaml.safe_dump(mutate(path, value)))
    code, out, err = _run(["submit", str(spec), "--dry-run", "--output", "json"], capsys)
    assert code == 2, (code, err, out[:300])
    assert "Traceback" not in err
    assert json.loads(out)["error"]["exit_code"] == 2  # the JSON error object
    assert words.lower() in err.lower(), err  # spec field or request field (e.g. Tags[0].Key)


def test_the_job_corpus_counts():
    assert len(JOB_CASES) >= 25
