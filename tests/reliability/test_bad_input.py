"""A corpus of bad input: every case ends with exit 2 and a message naming the field and what is
allowed — never a traceback. Cases are mutations of a valid template, run through the real CLI.

The issue-11 classes (files that crashed the loader, YAML 1.1 traps, non-finite numbers, values
that crash inside the paid job, lost field names, credentials, what AWS would refuse, conflicting
flags) each have several cases, in table and JSON mode, plus a hypothesis property over
mutations of a valid spec. `BSM_FUZZ=N` fuzzes N generated specs through the Python API.
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
from blackwell_sm.safe_load import load_mapping
from blackwell_sm.spec import RunSpec, parse_spec

ROOT = Path(__file__).resolve().parents[2]
BASE: dict[str, Any] = load_mapping(ROOT / "templates" / "llama-3.1-8b.yaml")
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
    (
        "plan-arn-wrong-shape",
        "compute.training_plan",
        "arn:aws:sagemaker:us-east-1:1:plan/x",
        "ARN",
    ),
    (
        "plan-arn-wrong-service",
        "compute.training_plan",
        "arn:aws:ec2:us-east-1:123456789012:training-plan/abc",
        "ARN",
    ),
    ("plan-name-bad-chars", "compute.training_plan", "my plan!", "compute.training_plan"),
    ("instance-type-unknown", "compute.instance_type", "ml.p4d.24xlarge", "allowed: ml.p6-b200"),
    ("instance-type-typo", "compute.instance_type", "ml.p6-b200.48xl", "compute.instance_type"),
    ("job-unknown-key", "job.rolearn", "x", "job.rolearn"),
    ("job-is-string", "job", "default", "job"),
]


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
    (
        "plan-bad-instance-type",
        ["plan", "--model", "llama-3.2-1b", "--instance-type", "ml.g5.xlarge"],
        "instance",
    ),
    (
        "plan-count-zero",
        ["plan", "--model", "llama-3.2-1b", "--instance-count", "0"],
        "instance-count",
    ),
    (
        "plan-count-word",
        ["plan", "--model", "llama-3.2-1b", "--instance-count", "lots"],
        "instance-count",
    ),
    ("plan-seq-negative", ["plan", "--model", "llama-3.2-1b", "--seq-len", "-1"], "seq"),
    ("plan-set-unknown", ["plan", "--model", "llama-3.2-1b", "--set", "tp=2"], "allowed"),
    ("plan-set-no-equals", ["plan", "--model", "llama-3.2-1b", "--set", "precision"], "--set"),
    (
        "plan-set-bad-value",
        ["plan", "--model", "llama-3.2-1b", "--set", "precision=fp2"],
        "precision",
    ),
    ("plan-output-xml", ["plan", "--model", "llama-3.2-1b", "--output", "xml"], "--output"),
    ("plan-missing-spec", ["plan", "/nonexistent/spec.yaml"], "spec"),
    (
        "plan-spec-and-model",
        ["plan", "templates/llama-3.1-8b.yaml", "--model", "tiny"],
        "model",
    ),
    ("unknown-command", ["plna"], "No such command"),
]


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
    st.none(),
    st.booleans(),
    st.integers(-10, 10**6),
    st.floats(allow_nan=True),
    st.text(max_size=12),
    st.sampled_from(["auto", "bf16", "fp8", "tiny", "llama-3.1-8b"]),
)
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
    (
        "channel-mode-pipe",
        "job.channels",
        {"train": {"s3_uri": "s3://bucket-a/t/", "input_mode": "Pipe"}},
        "input_mode",
    ),
    (
        "channel-distribution",
        "job.channels",
        {"train": {"s3_uri": "s3://bucket-a/t/", "distribution": "Random"}},
        "distribution",
    ),
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
    (
        "plan-arn-account",
        "compute.training_plan",
        "arn:aws:sagemaker:us-east-1:1234:training-plan/x",
        "training_plan",
    ),
    (
        "plan-arn-resource",
        "compute.training_plan",
        "arn:aws:sagemaker:us-east-1:123456789012:training-job/x",
        "training_plan",
    ),
]


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


# -- issue 11: the nine classes, each in table and JSON mode ----------------------------------
def _strict_json(text: str) -> Any:
    """json.loads that refuses NaN/Infinity (Python's json accepts them by default)."""

    def bad(const: str) -> Any:
        raise AssertionError(f"non-JSON constant {const} in output")

    return json.loads(text, parse_constant=bad)


def _check_refused(args: list[str], mode: str, words: str, field: str | None, capsys) -> None:
    code, out, err = _run([*args, "--output", mode], capsys)
    assert code == 2, (code, err[-800:], out[:300])
    assert "Traceback" not in err and "Traceback" not in out
    assert words.lower() in err.lower(), err
    if mode == "json":
        obj = _strict_json(out)
        assert set(obj) == {"error"} and obj["error"]["exit_code"] == 2, out
        if field is not None:
            assert obj["error"]["field"] == field, obj
        assert words.lower() in (obj["error"]["message"] + (obj["error"]["hint"] or "")).lower()
    else:
        assert out.strip() == "", out  # nothing but the error, on stderr


def _raw_file(tmp_path: Path, name: str, data: bytes | str) -> str:
    path = tmp_path / name
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(path)


def _yaml_text(path: str, value_text: str) -> str:
    """The base template as YAML with `path` set to the literal YAML `value_text`."""
    data = mutate(path, "__PLACEHOLDER__")
    return yaml.safe_dump(data, sort_keys=False).replace("__PLACEHOLDER__", value_text)


DEEP = (
    "model: tiny\ntraining:\n  data:\n"
    + "".join("  " * (i + 2) + f"k{i}:\n" for i in range(60))
    + "  " * 62
    + "x: 1\n"
)
BOMB = "model: tiny\nx0: &x0 [a, a, a, a, a, a, a, a, a, a]\n" + "".join(
    f"x{i}: &x{i} [{', '.join([f'*x{i - 1}'] * 10)}]\n" for i in range(1, 9)
)

# (case id, file contents, words in the message, JSON field)
FILE_CASES: list[tuple[str, bytes | str, str, str]] = [
    ("binary", bytes(range(256)) * 4, "not UTF-8", "SPEC"),
    ("utf16", "model: tiny\n".encode("utf-16"), "offset 0", "SPEC"),
    ("latin1", "model: tiny\nname: caf\xe9\n".encode("latin-1"), "not UTF-8", "SPEC"),
    ("nul-bytes", b"model: tiny\n\x00\x00", "YAML", "SPEC"),
    ("deep-nesting", DEEP, "nesting deeper than", "SPEC"),
    ("deep-flow", "model: " + "[" * 5000 + "]" * 5000, "nesting deeper than", "SPEC"),
    ("int-5000-digits", "model:\n  preset: tiny\n  n_layers: " + "9" * 5000, "5000 digits", "SPEC"),
    ("int-400-digits", "model:\n  preset: tiny\n  n_layers: 1" + "0" * 400, "401 digits", "SPEC"),
    ("alias-bomb", BOMB, "aliases", "SPEC"),
    ("python-tag", "model: !!python/object/apply:os.system [true]", "constructor", "SPEC"),
    ("empty", "", "mapping", "SPEC"),
    ("scalar-top", "llama-3.1-8b", "mapping", "SPEC"),
    ("too-big", "model: tiny\n" + "#" * (1 << 21), "bytes", "SPEC"),
]


@pytest.mark.parametrize("mode", ["table", "json"])
@pytest.mark.parametrize("case,data,words,field", FILE_CASES, ids=[c[0] for c in FILE_CASES])
def test_files_that_crashed_the_loader(case, data, words, field, mode, tmp_path, capsys):
    path = _raw_file(tmp_path, f"{case}.yaml", data)
    _check_refused(["plan", path], mode, words, field, capsys)


@pytest.mark.parametrize("mode", ["table", "json"])
@pytest.mark.parametrize("kind", ["dev-zero", "directory", "fifo"])
def test_files_that_are_not_regular(kind, mode, tmp_path, capsys):
    import os

    if kind == "dev-zero":
        path = "/dev/zero"
    elif kind == "directory":
        path = str(tmp_path)
    else:
        path = str(tmp_path / "fifo.yaml")
        os.mkfifo(path)
    _check_refused(["plan", path], mode, "regular file", "SPEC", capsys)
    if kind != "directory":
        _check_refused(["submit", path, "--dry-run"], mode, "regular file", "SPEC", capsys)


# (case id, dotted path, literal YAML value, words, JSON field)
TEXT_CASES: list[tuple[str, str, str, str, str]] = [
    # YAML 1.1 traps: yes/no/on/off stay text, so number and boolean fields refuse them
    ("layers-yes", "model", "{preset: tiny, n_layers: yes}", "'yes'", "model.n_layers"),
    ("seq-yes", "training.seq_len", "yes", "'yes'", "training.seq_len"),
    (
        "count-on",
        "compute.instance_count",
        "on",
        "compute.instance_count",
        "compute.instance_count",
    ),
    ("tie-yes", "model", "{preset: tiny, tie_embeddings: yes}", "'yes'", "model.tie_embeddings"),
    (
        "async-off",
        "training.checkpoint.async_save",
        "off",
        "'off'",
        "training.checkpoint.async_save",
    ),
    ("isolation-no", "job.enable_network_isolation", "no", "'no'", "job.enable_network_isolation"),
    ("layers-true", "model", "{preset: tiny, n_layers: true}", "integer", "model.n_layers"),
    ("seq-float", "training.seq_len", "4096.0", "integer", "training.seq_len"),
    ("seq-string-number", "training.seq_len", "'4096'", "integer", "training.seq_len"),
    ("lr-string", "training.optimizer.lr", "'3e-4'", "number", "training.optimizer.lr"),
    ("tokens-1e30", "training.total_tokens", "1.0e+30", "integer", "training.total_tokens"),
    # non-finite numbers
    ("lr-inf", "training.optimizer.lr", ".inf", "finite", "training.optimizer.lr"),
    ("lr-nan", "training.optimizer.lr", ".nan", "finite", "training.optimizer.lr"),
    ("rope-inf", "model", "{preset: tiny, rope_theta: .inf}", "finite", "model.rope_theta"),
    ("price-inf", "compute.price_per_hour", ".inf", "finite", "compute.price_per_hour"),
    ("deadline-nan", "compute.deadline_hours", ".NaN", "finite", "compute.deadline_hours"),
    ("clip-inf", "training.optimizer.grad_clip", ".inf", "finite", "training.optimizer.grad_clip"),
    (
        "wd-neg-inf",
        "training.optimizer.weight_decay",
        "-.inf",
        "finite",
        "training.optimizer.weight_decay",
    ),
    (
        "minutes-inf",
        "training.checkpoint.interval_minutes",
        ".inf",
        "finite",
        "training.checkpoint.interval_minutes",
    ),
    # accepted, then crashed inside the paid job
    ("seed-2-32", "training.seed", "4294967296", "4294967295", "training.seed"),
    ("seed-2-64", "training.seed", "18446744073709551616", "4294967295", "training.seed"),
    (
        "beta1-one",
        "training.optimizer.betas",
        "[1.0, 0.95]",
        "less than 1",
        "training.optimizer.betas.0",
    ),
    (
        "beta2-over",
        "training.optimizer.betas",
        "[0.9, 1.5]",
        "less than 1",
        "training.optimizer.betas.1",
    ),
    (
        "beta-negative",
        "training.optimizer.betas",
        "[-0.1, 0.95]",
        "greater than or equal to 0",
        "training.optimizer.betas.0",
    ),
    ("eps-zero", "training.optimizer.eps", "0", "greater than 0", "training.optimizer.eps"),
    (
        "lr-huge",
        "training.optimizer.lr",
        "1000.0",
        "less than or equal to 1",
        "training.optimizer.lr",
    ),
    ("layers-huge", "model", "{preset: tiny, n_layers: 100000000000000}", "1024", "model.n_layers"),
    (
        "vocab-huge",
        "model",
        "{preset: tiny, vocab_size: 10000000000000}",
        "4294967296",
        "model.vocab_size",
    ),
    (
        "tokens-huge",
        "training.total_tokens",
        "100000000000000000000",
        "9007199254740992",
        "training.total_tokens",
    ),
    (
        "warmup-longer",
        "training.schedule",
        "{warmup_steps: 999999999}",
        "warmup_steps",
        "training.schedule.warmup_steps",
    ),
]


@pytest.mark.parametrize("mode", ["table", "json"])
@pytest.mark.parametrize("case,path,value,words,field", TEXT_CASES, ids=[c[0] for c in TEXT_CASES])
def test_values_refused_with_their_path(case, path, value, words, field, mode, tmp_path, capsys):
    spec = _raw_file(tmp_path, f"{case}.yaml", _yaml_text(path, value))
    _check_refused(["plan", spec], mode, words, field, capsys)


@pytest.mark.parametrize("mode", ["table", "json"])
@pytest.mark.parametrize(
    "text,words,field",
    [
        ("model: tiny\nmodel: llama-3.1-8b\n", "duplicate key 'model'", "SPEC"),
        (
            "model: tiny\ntraining:\n  seq_len: 64\n  seq_len: 128\n",
            "duplicate key 'seq_len'",
            "SPEC",
        ),
        ("model: {preset: tiny, n_layers: 2, n_layers: 3}\n", "duplicate key 'n_layers'", "SPEC"),
        (
            "model: tiny\ncompute: {instance_count: 1}\ncompute: {instance_count: 2}\n",
            "line 2",
            "SPEC",
        ),
    ],
)
def test_duplicate_keys_are_refused(text, words, field, mode, tmp_path, capsys):
    _check_refused(["plan", _raw_file(tmp_path, "dup.yaml", text)], mode, words, field, capsys)


def _job_yaml(tmp_path: Path, name: str, **job: Any) -> str:
    data = copy.deepcopy(BASE)
    data["job"].update(job)
    return _raw_file(tmp_path, f"{name}.yaml", yaml.safe_dump(data))


_KEY_ID = "AKIA" + "IOSFODNN7EXAMPLE"  # split so secret scanners do not flag the test itself
_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLEKEY"

# (case id, job changes, words, JSON field)
JOB_TEXT_CASES: list[tuple[str, dict[str, Any], str, str]] = [
    # credentials never travel in job.environment
    (
        "env-lowercase-secret",
        {"environment": {"aws_secret_access_key": "x"}},
        "role",
        "job.environment.aws_secret_access_key",
    ),
    (
        "env-security-token",
        {"environment": {"AWS_SECURITY_TOKEN": "x"}},
        "credentials",
        "job.environment.AWS_SECURITY_TOKEN",
    ),
    (
        "env-mixed-case",
        {"environment": {"Aws_Session_Token": "x"}},
        "credentials",
        "job.environment.Aws_Session_Token",
    ),
    (
        "env-container-uri",
        {"environment": {"AWS_CONTAINER_CREDENTIALS_FULL_URI": "http://x"}},
        "credentials",
        "job.environment.AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ),
    (
        "env-key-id-value",
        {"environment": {"INNOCENT": _KEY_ID}},
        "access key id",
        "job.environment.INNOCENT",
    ),
    (
        "env-key-id-inside",
        {"environment": {"OPTS": f"--id={_KEY_ID} -v"}},
        "access key id",
        "job.environment.OPTS",
    ),
    (
        "env-temp-key-id",
        {"environment": {"X": "ASIA" + "Y" * 16}},
        "access key id",
        "job.environment.X",
    ),
    (
        "env-secret-value",
        {"environment": {"MY_SECRET": _SECRET}},
        "secret access key",
        "job.environment.MY_SECRET",
    ),
    # requests SageMaker or S3 would refuse
    (
        "image-docker-hub",
        {"image_uri": "pytorch/pytorch:2.8.0-cuda12.8"},
        "Docker Hub",
        "job.image_uri",
    ),
    ("image-docker-hub-bare", {"image_uri": "ubuntu"}, "Docker Hub", "job.image_uri"),
    ("image-ghcr", {"image_uri": "ghcr.io/org/trainer:1"}, "another registry", "job.image_uri"),
    (
        "image-ecr-short-account",
        {"image_uri": "1234.dkr.ecr.us-east-1.amazonaws.com/r:1"},
        "ECR",
        "job.image_uri",
    ),
    (
        "image-ecr-uppercase-repo",
        {"image_uri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/Repo:1"},
        "ECR",
        "job.image_uri",
    ),
    ("image-public-ecr", {"image_uri": "public.ecr.aws/org/img:1"}, "ECR", "job.image_uri"),
    ("bucket-ip", {"s3_prefix": "s3://192.168.5.4/x"}, "IP address", "job.s3_prefix"),
    (
        "bucket-ip-channel",
        {"channels": {"train": {"s3_uri": "s3://10.0.0.1/t/"}}},
        "IP address",
        "job.channels.train.s3_uri",
    ),
    ("bucket-xn", {"s3_prefix": "s3://xn--bucket/x"}, "reserved", "job.s3_prefix"),
    (
        "bucket-s3alias",
        {"output_s3_prefix": "s3://my-data-s3alias/x"},
        "reserved",
        "job.output_s3_prefix",
    ),
    ("bucket-double-dot", {"s3_prefix": "s3://my..bucket/x"}, "adjacent", "job.s3_prefix"),
    ("bucket-too-short", {"s3_prefix": "s3://ab/x"}, "3-63", "job.s3_prefix"),
    # the field name survives: the spec field the value came from, brackets printed literally
    ("tag-value-long", {"tags": {"team": "v" * 300}}, "job.tags.team", "job.tags.team"),
    ("tag-value-bad-chars", {"tags": {"team": "a|b"}}, "job.tags.team", "job.tags.team"),
    ("tag-key-bad-chars", {"tags": {"te[am]": "x"}}, "job.tags.te[am]", "job.tags.te[am]"),
    ("tags-many", {"tags": {f"k{i}": "v" for i in range(60)}}, "job.tags: Tags: ", "job.tags"),
    (
        "env-value-long",
        {"environment": {"BIG": "x" * 600}},
        "job.environment.BIG",
        "job.environment.BIG",
    ),
    (
        "env-name-bad",
        {"environment": {"1BAD": "x"}},
        "job.environment.1BAD",
        "job.environment.1BAD",
    ),
    ("env-bsm-prefix", {"environment": {"BSM_X": "1"}}, "BSM_", "job.environment.BSM_X"),
    (
        "channel-name-bad",
        {"channels": {"tr ain": {"s3_uri": "s3://bucket-a/t/"}}},
        "tr ain",
        "job.channels.tr ain",
    ),
    (
        "channels-many",
        {"channels": {f"c{i}": {"s3_uri": "s3://bucket-a/t/"} for i in range(25)}},
        "20",
        "job.channels",
    ),
    ("tag-reserved", {"tags": {"aws:x": "y"}}, "reserved", "job.tags.aws:x"),
]


@pytest.mark.parametrize("mode", ["table", "json"])
@pytest.mark.parametrize("case,job,words,field", JOB_TEXT_CASES, ids=[c[0] for c in JOB_TEXT_CASES])
def test_job_values_refused_naming_the_spec_field(case, job, words, field, mode, tmp_path, capsys):
    spec = _job_yaml(tmp_path, case, **job)
    _check_refused(["submit", spec, "--dry-run"], mode, words, field, capsys)


def test_credential_values_are_never_echoed(tmp_path, capsys):
    spec = _job_yaml(tmp_path, "leak", environment={"A": _KEY_ID, "MY_SECRET": _SECRET})
    code, out, err = _run(["submit", spec, "--dry-run", "-o", "json"], capsys)
    assert code == 2 and _KEY_ID not in out + err and _SECRET not in out + err


def test_bad_model_name_is_blamed_on_model_name(tmp_path, capsys):
    data = copy.deepcopy(BASE)
    data["model"] = {"preset": "llama-3.1-8b", "name": "x" * 300}
    spec = _raw_file(tmp_path, "name.yaml", yaml.safe_dump(data))
    _check_refused(["submit", spec, "--dry-run"], "json", "model.name", "model.name", capsys)


def test_innocent_environment_passes(tmp_path, capsys):
    env = {"NCCL_DEBUG": "WARN", "HF_HOME": "/tmp/hf", "SHA": "a" * 40, "AKIA": "no"}
    spec = _job_yaml(tmp_path, "ok", environment=env)
    code, out, err = _run(["submit", spec, "--dry-run", "-o", "json"], capsys)
    assert code == 0, err
    assert _strict_json(out)["request"]["Environment"]["SHA"] == "a" * 40


def test_ecr_image_reference_is_accepted(tmp_path, capsys):
    uri = "123456789012.dkr.ecr.us-west-2.amazonaws.com/team/trainer:2.8-cu129"
    code, out, err = _run(
        ["submit", _job_yaml(tmp_path, "ecr", image_uri=uri), "--dry-run", "-o", "json"], capsys
    )
    assert code == 0, err
    assert _strict_json(out)["request"]["AlgorithmSpecification"]["TrainingImage"] == uri


# Every flag with every --set that sets the same field, and --set twice.
FLAG_SET_CASES: list[tuple[list[str], str]] = [
    (["--seq-len", "4096", "--set", "seq_len=8192"], "training.seq_len"),
    (["--seq-len", "4096", "--set", "training.seq_len=8192"], "training.seq_len"),
    (
        ["--instance-type", "ml.p6-b200.48xlarge", "--set", "compute.instance_type=ml.p5.48xlarge"],
        "compute.instance_type",
    ),
    (["--instance-count", "2", "--set", "compute.instance_count=4"], "compute.instance_count"),
    (
        ["--global-batch-tokens", "1048576", "--set", "training.global_batch_tokens=2097152"],
        "training.global_batch_tokens",
    ),
    (
        ["--global-batch-tokens", "1048576", "--set", "training.global_batch_seqs=64"],
        "training.global_batch_seqs",
    ),
    (["--total-tokens", "1000000000", "--set", "training.total_tokens=5"], "training.total_tokens"),
    (["--total-tokens", "1000000000", "--set", "training.total_steps=5"], "training.total_steps"),
    (["--calibration", "a.yaml", "--set", "compute.calibration=b.yaml"], "compute.calibration"),
    (["--set", "seq_len=1024", "--set", "training.seq_len=2048"], "training.seq_len"),
    (
        ["--set", "shard_degree=8", "--set", "training.pins.shard_degree=4"],
        "training.pins.shard_degree",
    ),
]


@pytest.mark.parametrize("mode", ["table", "json"])
@pytest.mark.parametrize(
    "flags,field", FLAG_SET_CASES, ids=[c[1] + str(i) for i, c in enumerate(FLAG_SET_CASES)]
)
def test_conflicting_flags_name_both(flags, field, mode, capsys):
    code, out, err = _run(["plan", "--model", "llama-3.2-1b", *flags, "-o", mode], capsys)
    assert code == 2 and "Traceback" not in err, err
    setting = [f for f in flags if "=" in f]
    named = [f for f in flags if f.startswith("--") and f != "--set"]
    for piece in named + setting:
        assert piece in err, (piece, err)
    if mode == "json":
        assert _strict_json(out)["error"]["field"] == field


def test_all_plan_flags_are_checked_for_conflicts():
    from blackwell_sm.cli.plan import FLAG_PATHS, plan

    value_flags = {
        opt
        for p in plan.params
        if p.opts[0].startswith("--") and not p.is_flag
        for opt in p.opts[:1]
    } - {"--set", "--output"}
    assert value_flags == set(FLAG_PATHS), value_flags ^ set(FLAG_PATHS)


def test_same_set_twice_with_one_value_is_fine(capsys):
    code, _out, err = _run(
        ["plan", "--model", "llama-3.2-1b", "--set", "seq_len=2048", "--set", "seq_len=2048"],
        capsys,
    )
    assert code == 0, err


@pytest.mark.parametrize("mode", ["table", "json"])
@pytest.mark.parametrize("flag", ["--wait", "--logs"])
def test_dry_run_conflicts_with_wait_and_logs(flag, mode, capsys):
    spec = str(ROOT / "templates" / "llama-3.1-8b.yaml")
    _check_refused(["submit", spec, "--dry-run", flag], mode, "--dry-run", flag, capsys)


@pytest.mark.parametrize("mode", ["table", "json"])
@pytest.mark.parametrize(
    "value,words",
    [
        ("9" * 5000, "5000 digits"),
        ("1" + "0" * 40, "41 digits"),
        (".inf", "(got inf)"),
        ("yes", "'yes'"),
        ("[1, 2]", "scalar"),
        ("{a: 1}", "scalar"),
        ("!!python/name:os.system", "constructor"),
        ("'unclosed", "YAML"),
    ],
)
def test_set_values_follow_the_file_rules(value, words, mode, capsys):
    args = ["plan", "--model", "llama-3.2-1b", "--set", f"seq_len={value}"]
    _check_refused(args, mode, words, None, capsys)


# -- the property: any mutation of a valid spec ends in 0, 2 or 3, with strict JSON ------------
def _leaf_paths(node: Any, prefix: str = "") -> list[str]:
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _leaf_paths(v, f"{prefix}{k}.")] or [
            prefix[:-1]
        ]
    return [prefix[:-1]]


_PATHS = sorted(
    {
        *_leaf_paths(BASE),
        "model.n_layers",
        "model.rope_theta",
        "training.seed",
        "training.optimizer.betas",
        "training.optimizer.eps",
        "compute.price_per_hour",
        "compute.deadline_hours",
        "job.environment.X",
        "job.tags.k",
        "job.image_uri",
        "training.total_steps",
        "training.pins.micro_batch_size",
        "bogus.key",
    }
)
_NASTY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**31, max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(
        ["yes", "no", "on", "off", "", "auto", "1e30", "null", "[x]", "AKIA" + "A" * 16]
    ),
    st.text(max_size=30),
    st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.sampled_from(["preset", "n_layers", "x"]), st.integers(-2, 99), max_size=2),
)


def _mutated(draw_paths: list[tuple[str, Any]]) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    for path, value in draw_paths:
        data = _with(data, path, value)
    return data


_MUTATIONS = st.lists(
    st.tuples(st.sampled_from(_PATHS), st.one_of(_NASTY, st.just(DELETE))), min_size=1, max_size=3
)


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(mutations=_MUTATIONS, mode=st.sampled_from(["table", "json"]))
def test_property_any_mutation_ends_in_0_2_or_3(mutations, mode, tmp_path, capsys):
    spec = tmp_path / "m.yaml"
    spec.write_text(yaml.safe_dump(_mutated(mutations)))
    code, out, err = _run(["plan", str(spec), "-o", mode], capsys)
    assert code in (0, 2, 3), (code, err[-1500:])
    assert "Traceback" not in err + out
    if mode == "json":
        obj = _strict_json(out)
        if code:
            assert obj["error"]["exit_code"] == code


# -- long mode: BSM_FUZZ=N generated specs through the Python API ------------------------------
def test_long_mode_fuzz_python_api():
    """Generate N specs (mutations of every template), load each from a file and plan it.

    Only SpecError / InfeasiblePlanError may come out. Run by hand:
    `BSM_FUZZ=10000 .venv/bin/python -m pytest tests/reliability/test_bad_input.py -k long_mode -s
    -o timeout=0`. A spec that takes over 5 s (a hang in the making) is a finding too.
    """
    import os
    import random
    import tempfile
    import time

    n = int(os.environ.get("BSM_FUZZ", "0"))
    if not n:
        pytest.skip("set BSM_FUZZ=N to fuzz N specs")
    from blackwell_sm.errors import InfeasiblePlanError
    from blackwell_sm.planner.api import make_plan
    from blackwell_sm.spec import load_spec

    rng = random.Random(11)
    templates = [load_mapping(p) for p in sorted((ROOT / "templates").glob("*.yaml"))]
    nasty: list[Any] = [
        None,
        True,
        False,
        0,
        -1,
        1,
        2,
        3,
        7,
        64,
        2**31,
        2**32,
        2**53 + 1,
        10**30,
        0.0,
        -0.5,
        0.5,
        1.0,
        1e-12,
        1e30,
        float("inf"),
        float("-inf"),
        float("nan"),
        "yes",
        "on",
        "",
        "auto",
        "bf16",
        "fp8",
        "tiny",
        "x" * 300,
        [0.9, 0.95],
        [1, 2, 3],
        {"preset": "tiny"},
        {},
    ]
    counts = {"ok": 0, "spec_error": 0, "infeasible": 0}
    findings: list[str] = []
    slowest = 0.0
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spec.yaml"
        for i in range(n):
            data = copy.deepcopy(rng.choice(templates))
            paths = sorted({*_leaf_paths(data), *_PATHS})
            for _ in range(rng.randint(1, 3)):
                path_ = rng.choice(paths)
                roll = rng.random()
                if roll < 0.45:  # near the old value: most of these should plan
                    value = _nudge(rng, _get(data, path_))
                elif roll < 0.9:
                    value = rng.choice(nasty)
                else:
                    value = DELETE
                data = _with(data, path_, value)
            text = yaml.safe_dump(data)
            if rng.random() < 0.1:  # YAML 1.1 words, duplicates and odd scalars as text
                text += rng.choice(["model: tiny\n", "x: yes\n", "a: !!binary aGk=\n"])
            path.write_text(text)
            t0 = time.perf_counter()
            try:
                make_plan(load_spec(path))
                counts["ok"] += 1
            except SpecError:
                counts["spec_error"] += 1
            except InfeasiblePlanError:
                counts["infeasible"] += 1
            except Exception as e:  # a finding: anything else is a bug
                findings.append(f"{i}: {type(e).__name__}: {e}\n{text[:400]}")
            took_one = time.perf_counter() - t0
            slowest = max(slowest, took_one)
            if took_one > 5:
                findings.append(f"{i}: took {took_one:.1f} s\n{text[:400]}")
    took = time.perf_counter() - start
    print(
        f"\nBSM_FUZZ={n}: {counts}, {len(findings)} findings, {took:.1f} s "
        f"(slowest spec {slowest:.2f} s)"
    )
    assert not findings, "\n\n".join(findings[:5])


def _get(data: dict[str, Any], path: str) -> Any:
    node: Any = data
    for p in path.split("."):
        node = node.get(p) if isinstance(node, dict) else None
    return node


def _nudge(rng: Any, value: Any) -> Any:
    """A value near `value`: numbers scaled or shifted, other values kept."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return value if rng.random() < 0.5 else rng.choice([1, 2, 8, 0.5, "auto"])
    factor = rng.choice([0.5, 2, 4, 10, 1000])
    if isinstance(value, int):
        return max(0, int(value * factor) + rng.choice([-1, 0, 1]))
    return value * factor


def _with(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    *parents, last = path.split(".")
    node = data
    for p in parents:
        if not isinstance(node.get(p), dict):
            node[p] = {}
        node = node[p]
    if value is DELETE:
        node.pop(last, None)
    else:
        node[last] = value
    return data


@pytest.mark.parametrize("mode", ["table", "json"])
@pytest.mark.parametrize("value", ["inf", "nan", "-5", "0", "lots"])
def test_price_override_must_be_finite_and_positive(value, mode, monkeypatch, capsys):
    monkeypatch.setenv("BSM_PRICE_ML_P6_B200_48XLARGE", value)
    args = ["plan", "--model", "llama-3.2-1b"]
    _check_refused(args, mode, "finite number > 0", "BSM_PRICE_ML_P6_B200_48XLARGE", capsys)


@pytest.mark.parametrize(
    "path,value,field",
    [
        ("model.n_layers", 10**400, "model.n_layers"),
        ("model.vocab_size", 10**4000, "model.vocab_size"),
        ("training.seed", 2**64, "training.seed"),
        ("training.optimizer.lr", float("nan"), "training.optimizer.lr"),
        ("compute.instance_count", 2**31, "compute.instance_count"),
        ("model.n_layers", True, "model.n_layers"),
    ],
)
def test_python_api_refuses_the_same_values(path, value, field):
    """`parse_spec` / `with_overrides` (the Python API) apply the same bounds as files."""
    from blackwell_sm.spec import spec_from_preset, with_overrides

    data = (
        mutate(path, value)
        if not path.startswith("model.")
        else {**BASE, "model": {"preset": "llama-3.1-8b", path.split(".")[1]: value}}
    )
    with pytest.raises(SpecError) as e:
        parse_spec(data)
    assert e.value.field == field
    if not path.startswith("model."):
        with pytest.raises(SpecError) as e:
            with_overrides(spec_from_preset("tiny"), {path: value})
        assert e.value.field == field
