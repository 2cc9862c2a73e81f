"""`bsm calibrate` and calibration profiles: constants recovered from rows made with known
constants, what the data cannot identify kept and said, the profile applied by flag > spec >
environment, hardware a profile describes, bad profiles refused with the field, and job sources
read from S3 and CloudWatch Logs on moto."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from aws_support import summary_json, tar_gz, train_records
from records_support import step_figures

from blackwell_sm.cli import main
from blackwell_sm.planner import calibration as C
from blackwell_sm.planner.api import make_plan
from blackwell_sm.planner.fit import fit_gpu, get_param, predict, set_params
from blackwell_sm.planner.profile import (
    ENV_CALIBRATION,
    CalibrationProfile,
    GpuProfile,
    ProfileConstants,
    resolve_profile,
)
from blackwell_sm.runs.calibrate_sources import csv_row, job_rows
from blackwell_sm.spec import parse_spec

FIELDS = [
    "id",
    "model",
    "gpu",
    "num_gpus",
    "precision",
    "seq_len",
    "micro_batch",
    "global_batch",
    "activation_checkpointing",
    "shard_degree",
    "replicate_degree",
    "compile",
    "tokens_per_s_per_gpu",
    "peak_memory_gib",
    "memory_kind",
    "stack",
    "notes",
    "source",
]

#: The constants the synthetic rows are made with (B200 defaults: 0.58, 0.66, 0.48, 0.32, 0.12,
#: 0.95, 0.7): every one moved well away from its default.
TRUE = {
    "matmul_efficiency.bf16": 0.50,
    "matmul_efficiency.bf16+compile": 0.61,
    "matmul_efficiency.fp8+compile": 0.41,
    "attention_efficiency": 0.27,
    "fragmentation": 0.05,
    "comm_overlap": 0.70,
    "efa_efficiency": 0.55,
}


def run(args: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(args)
    out, err = capsys.readouterr()
    return int(e.value.code or 0), out, err


def synthetic_csv(path: Path) -> Path:
    """Rows of three models, three sequence lengths, bf16/fp8, eager/compile, 1-8 instances,
    whose measured speed and memory are the planner's predictions with TRUE constants."""
    base = C.constants_for("B200")
    true = set_params(base, list(TRUE), list(TRUE.values()))
    rows = []
    i = 0
    for model in ("llama-3.2-1b", "llama-3.1-8b"):
        for seq in (2048, 8192, 32768):
            for prec, comp in (("bf16", "false"), ("bf16", "true"), ("fp8-tensorwise", "true")):
                for n_gpus, mb in ((8, 1), (64, 1), (32, 2)):
                    row = {
                        "id": f"syn-{i}",
                        "model": model,
                        "gpu": "B200",
                        "num_gpus": str(n_gpus),
                        "precision": prec,
                        "seq_len": str(seq),
                        "micro_batch": str(mb),
                        "global_batch": str(mb * n_gpus),
                        "activation_checkpointing": "full",
                        "shard_degree": str(n_gpus),
                        "replicate_degree": "1",
                        "compile": comp,
                        "memory_kind": "max_reserved",
                        "stack": "synthetic",
                        "notes": "",
                        "source": "test",
                        "tokens_per_s_per_gpu": "1",
                        "peak_memory_gib": "1",
                    }
                    p = predict(csv_row(row), true)
                    row["tokens_per_s_per_gpu"] = repr(p.tokens_per_s_per_gpu)
                    row["peak_memory_gib"] = repr(p.memory_gib)
                    rows.append(row)
                    i += 1
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=FIELDS)
    w.writeheader()
    w.writerows(rows)
    path.write_text(buf.getvalue())
    return path


def test_calibrate_recovers_known_constants_within_2_percent(tmp_path, capsys):
    src = synthetic_csv(tmp_path / "synthetic.csv")
    out = tmp_path / "profile.yaml"
    code, stdout, err = run(["calibrate", str(src), "--out", str(out), "-o", "json"], capsys)
    assert code == 0, err
    res = json.loads(stdout)
    fitted = {c["name"]: c["value"] for c in res["constants"] if c["fitted"]}
    assert set(TRUE) <= set(fitted), (fitted, res["constants"])
    for name, value in TRUE.items():
        assert fitted[name] == pytest.approx(value, rel=0.02), name
    # Every row is predicted (nearly) exactly after the fit, and was not before.
    assert max(abs(r["speed_error_after"]) for r in res["rows"]) < 0.01
    assert max(abs(r["speed_error_before"]) for r in res["rows"]) > 0.1
    # The profile on disk holds the same figures, its sources and its date.
    prof = resolve_profile(str(out), None, {}).profile
    entry = prof.gpus["B200"]
    assert entry.constants.matmul_efficiency["fp8+compile"] == pytest.approx(0.41, rel=0.02)
    assert prof.sources[0].kind == "csv" and prof.sources[0].rows == len(res["rows"])
    assert prof.created.endswith("Z") and prof.version == 1


def test_what_the_rows_cannot_identify_keeps_its_default_and_says_why():
    row = csv_row(
        {
            "id": "one",
            "model": "llama-3.1-8b",
            "gpu": "B200",
            "num_gpus": "8",
            "precision": "bf16",
            "seq_len": "8192",
            "micro_batch": "1",
            "global_batch": "8",
            "activation_checkpointing": "full",
            "shard_degree": "8",
            "replicate_degree": "1",
            "compile": "false",
            "tokens_per_s_per_gpu": "9000",
            "peak_memory_gib": "",
            "memory_kind": "",
            "stack": "",
            "notes": "",
        }
    )
    f = fit_gpu([row])
    assert list(f.fitted) == ["matmul_efficiency.bf16"]  # one figure: one constant
    assert predict(row, f.constants).tokens_per_s_per_gpu == pytest.approx(9000, rel=1e-3)
    assert "no measured row depends on it" in f.kept["fragmentation"]  # no memory figure
    assert "efa_efficiency" in f.kept and "comm_overlap" in f.kept
    for name in f.kept:
        assert get_param(f.constants, name) == get_param(f.base, name)
    # One row proves nothing about the spread: the range is narrowed only halfway.
    assert f.speed_range == (0.175, 0.35)  # halfway: B200 anchored (0.25, 0.6), calibrated 0.1


def _profile(path: Path, name: str, bf16: float, **gpu) -> Path:
    prof = CalibrationProfile(
        name=name,
        created="2026-12-03T00:00:00Z",
        gpus={
            "B200": GpuProfile(constants=ProfileConstants(matmul_efficiency={"bf16": bf16}), **gpu)
        },
    )
    path.write_text(prof.to_yaml())
    return path


def test_plan_names_the_profile_and_its_changes_and_narrows_the_range(tmp_path, capsys):
    prof = _profile(tmp_path / "p.yaml", "mine", 0.5, speed_range=(0.08, 0.05))
    sets = ["--set", "precision=bf16", "--set", "compile=false"]
    args = ["plan", "--model", "llama-3.1-8b", *sets, "-o", "json"]
    code, out, err = run(args, capsys)
    assert code == 0, err
    before = json.loads(out)
    code, out, err = run([*args, "--calibration", str(prof)], capsys)
    assert code == 0, err
    after = json.loads(out)
    assert before["calibration"] is None and before["throughput"]["evidence"] == "anchored"
    cal = after["calibration"]
    assert cal["profile"] == str(prof) and cal["name"] == "mine" and cal["origin"] == "flag"
    assert cal["gpu"] == "B200"
    assert cal["changed"]["matmul_efficiency.bf16"] == {"default": 0.58, "profile": 0.5}
    t0, t1 = before["throughput"], after["throughput"]
    assert t1["evidence"] == "calibrated"

    def width(t):
        return (t["tokens_per_s_per_gpu_range"][1] - t["tokens_per_s_per_gpu_range"][0]) / t[
            "tokens_per_s_per_gpu"
        ]

    assert width(t1) < width(t0)
    assert t1["tokens_per_s_per_gpu"] < t0["tokens_per_s_per_gpu"]  # less efficient matmuls
    code, out, err = run(["plan", "--model", "llama-3.1-8b", "--calibration", str(prof)], capsys)
    assert code == 0 and "calibration mine (" in " ".join(out.split())
    assert f"{prof}," in "".join(out.split())  # the path, wrapped at 80 columns
    code, out, err = run(
        ["plan", "--model", "llama-3.1-8b", "--calibration", str(prof), "-v"], capsys
    )
    assert code == 0 and "0.58 -> 0.5" in " ".join(out.split())


def test_precedence_flag_over_spec_over_environment(tmp_path, monkeypatch):
    flag = _profile(tmp_path / "flag.yaml", "flag", 0.40)
    spec_p = _profile(tmp_path / "spec.yaml", "spec", 0.45)
    env_p = _profile(tmp_path / "env.yaml", "env", 0.50)
    bare = parse_spec(
        {"model": "llama-3.1-8b", "training": {"precision": "bf16", "pins": {"compile": False}}}
    )
    with_spec = parse_spec(
        {
            "model": "llama-3.1-8b",
            "training": {"precision": "bf16", "pins": {"compile": False}},
            "compute": {"calibration": str(spec_p)},
        }
    )
    from blackwell_sm.planner.profile import profile_for

    monkeypatch.delenv(ENV_CALIBRATION, raising=False)
    assert profile_for(bare) is None
    monkeypatch.setenv(ENV_CALIBRATION, str(env_p))
    assert make_plan(bare).calibration is None  # the planner reads no variable or file itself
    assert make_plan(bare, calibration=profile_for(bare)).calibration.name == "env"
    p = make_plan(with_spec, calibration=profile_for(with_spec))
    assert (p.calibration.name, p.calibration.origin) == ("spec", "spec")
    p = make_plan(with_spec, calibration=profile_for(with_spec, str(flag)))
    assert (p.calibration.name, p.calibration.origin) == ("flag", "flag")
    assert make_plan(with_spec).calibration is None
    speeds = [make_plan(bare, calibration=resolve_profile(str(x), None, {})) for x in (flag, env_p)]
    assert speeds[0].throughput.tokens_per_s_per_gpu < speeds[1].throughput.tokens_per_s_per_gpu


def test_a_profile_describes_a_power_capped_part_and_a_gpu_the_catalog_lacks(tmp_path):
    spec = parse_spec(
        {"model": "llama-3.1-8b", "training": {"precision": "bf16", "pins": {"compile": False}}}
    )
    base = make_plan(spec)
    capped = _profile(tmp_path / "cap.yaml", "cap", 0.58, peak_scale=0.8, memory_gib=150.0)
    p = make_plan(spec, calibration=resolve_profile(str(capped), None, {}))
    assert p.instance.peak_flops_bf16 == pytest.approx(0.8 * base.instance.peak_flops_bf16)
    assert p.memory_gib.limit == 150.0 and p.instance.gpu_memory_gib == 150.0
    assert p.throughput.tokens_per_s_per_gpu < 0.9 * base.throughput.tokens_per_s_per_gpu
    assert "gpu.peak_tflops" in p.calibration.changed and "gpu.memory_gib" in p.calibration.changed

    new = CalibrationProfile(
        name="x9",
        created="2026-12-03T00:00:00Z",
        gpus={
            "X9": GpuProfile(
                peak_tflops={"bf16": 500.0, "fp8": 1000.0},
                hbm_tb_s=2.0,
                memory_gib=64.0,
                instance_types=["ml.p6-b200.48xlarge"],
            )
        },
    )
    (tmp_path / "x9.yaml").write_text(new.to_yaml())
    p = make_plan(spec, calibration=resolve_profile(str(tmp_path / "x9.yaml"), None, {}))
    assert p.instance.gpu == "X9" and p.instance.peak_flops_bf16 == 500e12
    assert p.memory_gib.limit == 64.0 and p.calibration.gpu == "X9"
    assert p.throughput.tokens_per_s_per_gpu < base.throughput.tokens_per_s_per_gpu


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("version: 2\ncreated: x\n", "version"),
        (
            "created: x\ngpus: {B200: {constants: {matmul_efficiency: {bf17: 0.5}}}}\n",
            "gpus.B200.constants.matmul_efficiency.bf17",
        ),
        (
            "created: x\ngpus: {B200: {constants: {comm_overlap: 1.5}}}\n",
            "gpus.B200.constants.comm_overlap",
        ),
        ("created: x\ngpus: {B200: {speed: 1}}\n", "gpus.B200.speed"),
        ("created: x\ngpus: {Z1: {instance_types: [ml.p5.48xlarge]}}\n", "gpus.Z1.instance_types"),
    ],
)
def test_a_bad_profile_is_exit_2_naming_the_field(tmp_path, capsys, text, field):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    code, out, _ = run(["plan", "--model", "tiny", "--calibration", str(bad), "-o", "json"], capsys)
    assert code == 2
    assert json.loads(out)["error"]["field"] == field


def test_a_missing_profile_is_exit_2(tmp_path, capsys):
    args = ["plan", "--model", "tiny", "--calibration", str(tmp_path / "nope.yaml"), "-o", "json"]
    code, out, _ = run(args, capsys)
    assert code == 2 and json.loads(out)["error"]["field"] == "--calibration"


# ---------------------------------------------------------------------------------------------
# Job sources on moto: the plan from the code bundle, figures from output.tar.gz or the logs
# ---------------------------------------------------------------------------------------------


def test_a_job_without_output_is_read_from_its_step_lines(aws):
    import time

    from aws_support import spec_dict

    from blackwell_sm.aws.logs import LOG_GROUP
    from blackwell_sm.aws.submit import submit
    from blackwell_sm.metrics import format_step_line

    job = submit(spec_dict(), aws=aws)
    aws.logs.create_log_group(logGroupName=LOG_GROUP)
    stream = f"{job.name}/algo-1-1700000000"
    aws.logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
    v = step_figures(tok_s_gpu=None, step_time_s=1.0, mem_alloc_gib=1.0, mem_reserved_gib=2.0)
    speeds = [500.0, 900.0, 1000.0, 1100.0, 1050.0]  # the first two are warm-up
    now = int(time.time() * 1000)
    aws.logs.put_log_events(
        logGroupName=LOG_GROUP,
        logStreamName=stream,
        logEvents=[
            {"timestamp": now + i, "message": format_step_line(i + 1, tok_s_gpu=s, **v)}
            for i, s in enumerate(speeds)
        ],
    )
    [row] = job_rows(job.name, aws)
    assert row.tokens_per_s_per_gpu == 1050.0  # median of the steady steps 3..5


def test_a_job_source_for_calibrate_and_report(aws, tmp_path):
    """A job name: the plan from its code bundle, summary.json and metrics.jsonl from its
    output.tar.gz, for `bsm calibrate` (the summary's figures) and `bsm report` (the records)."""
    from aws_support import spec_dict

    from blackwell_sm.aws.s3 import split_s3_uri
    from blackwell_sm.aws.submit import submit
    from blackwell_sm.runs.report import read_plot_data, write_report

    job = submit(spec_dict(), aws=aws)
    d = aws.sagemaker.describe_training_job(TrainingJobName=job.name)
    records = [
        r | {"mfu": 0.4 + r["step"] / 1000, "mem_reserved_gib": 12.0 + r["step"] / 10}
        for r in train_records(range(1, 6))
    ] + [{"kind": "val", "step": 5, "loss": 2.9, "time": 1_700_000_006.0}]
    jsonl = "".join(json.dumps(r) + "\n" for r in records).encode()
    output = tar_gz({"metrics.jsonl": jsonl, "summary.json": summary_json(1234.5, 3.25).encode()})
    bucket, key = split_s3_uri(d["OutputDataConfig"]["S3OutputPath"].rstrip("/"))
    aws.s3.put_object(
        Bucket=bucket,
        Key=f"{key}/{job.name}/output/output.tar.gz",
        Body=output,
    )
    [row] = job_rows(job.name, aws)
    assert row.id == job.name and row.tokens_per_s_per_gpu == 1234.5
    assert row.memory_gib == 3.25 and row.memory_kind == "max_reserved"
    assert row.ctx.instance.name == "ml.p6-b200.48xlarge" and row.ctx.model.spec.name == "tiny"

    res = write_report(job.name, tmp_path / "job.html", aws=aws)
    data = read_plot_data(res.path.read_text())
    assert data["speed"]["measured tokens/s/GPU"]["y"] == [1001.0, 1002.0, 1003.0, 1004.0, 1005.0]
    assert data["loss"]["validation loss"] == {"x": [5.0], "y": [2.9]}
    assert data["memory"]["measured peak memory"]["y"] == [
        r["mem_reserved_gib"] for r in records[:5]
    ]
    assert "predicted allocator reserved" in data["memory"]  # a CUDA run: the allocator's figure
    assert "tokens/s/GPU measured 1,234 vs predicted" in res.summary  # the summary's figure


def test_a_profile_without_the_plans_gpu_changes_nothing_and_says_so(tmp_path):
    spec = parse_spec({"model": "llama-3.1-8b"})
    prof = CalibrationProfile(
        name="cpu-only",
        created="2026-12-03T00:00:00Z",
        gpus={"cpu": GpuProfile(constants=ProfileConstants(matmul_efficiency={"bf16": 0.1}))},
    )
    (tmp_path / "cpu.yaml").write_text(prof.to_yaml())
    p = make_plan(spec, calibration=resolve_profile(str(tmp_path / "cpu.yaml"), None, {}))
    base = make_plan(spec)
    assert p.calibration.gpu == "" and p.calibration.changed == {}
    assert p.throughput == base.throughput
    assert any("has no entry for B200" in w and "cpu" in w for w in p.warnings)


def test_a_job_source_that_is_not_there_is_an_aws_error_not_a_crash(aws, tmp_path):
    """The job reader's calls go through the AWS layer (describe_raw, get_object_or_none): a job
    that does not exist is `not_found`, and a run directory with a broken plan names the field."""
    from blackwell_sm.errors import AwsError, SpecError
    from blackwell_sm.runs.read import read_job, read_run_dir

    with pytest.raises(AwsError) as e:
        read_job(aws, "bsm-no-such-job")
    assert e.value.code == "not_found"
    (tmp_path / "plan.json").write_text('{"schema_version": 1}')
    with pytest.raises(SpecError, match="required field is missing"):
        read_run_dir(tmp_path)


def test_measured_figures_from_step_records_skip_warm_up_of_each_launch():
    """No summary: medians of the timed step records, the first WARMUP_STEPS of each launch (a
    `start` record, or a step that does not increase in a version 1 file) left out."""
    from blackwell_sm.metrics import WARMUP_STEPS
    from blackwell_sm.records import StartRecord, TrainRecord, measured_from

    def step(i: int, tok: float, mem: float = 1.0) -> TrainRecord:
        return TrainRecord(
            step=i,
            loss=1.0,
            lr=1e-4,
            grad_norm=1.0,
            tok_s_gpu=tok,
            mfu=tok / 1000,
            step_time_s=100 / tok,
            mem_alloc_gib=mem,
            mem_reserved_gib=mem,
            memory_kind="cuda_max_allocated_reserved",
            time=1.0,
        )

    warm = [step(i, 1.0) for i in range(1, WARMUP_STEPS + 1)]
    m = measured_from([*warm, step(10, 100.0), step(11, 300.0, mem=3.0)])
    assert m.tokens_per_s_per_gpu == 200.0 and m.steps_timed == 2 and m.mfu == 0.2
    assert m.peak_memory_reserved_gib == 3.0 and m.memory_kind == "cuda_max_allocated_reserved"
    start = StartRecord(step=0, world_size=8, time=0.0)
    resumed = StartRecord(step=11, resumed_from_step=11, world_size=8, time=9.0)
    two = [
        start,
        *warm,
        step(10, 100.0),
        resumed,
        *[step(12 + i, 1.0) for i in range(WARMUP_STEPS)],
        step(20, 500.0),
    ]
    assert measured_from(two).tokens_per_s_per_gpu == 300.0  # 100 and 500: warm-ups left out
    v1 = [*warm, step(10, 100.0), *[step(5 + i, 1.0) for i in range(WARMUP_STEPS)], step(9, 500.0)]
    assert measured_from(v1).tokens_per_s_per_gpu == 300.0
    assert measured_from([start]).tokens_per_s_per_gpu is None  # nothing measured: None, not 0


def test_calibration_reaches_every_preferences_plan(tmp_path, capsys):
    """`plan(spec, calibration=...)` and `bsm plan --calibration` with instance preferences: each
    preference's plan applies the profile, named as the flag's (the B200 entry changes the B200
    plan only)."""
    from aws_support import spec_dict

    from blackwell_sm.api.plan import plan

    prof = _profile(tmp_path / "b200.yaml", "b200-fit", 0.40)
    d = spec_dict("llama-3.1-8b")
    d["training"] = {"total_tokens": 2_000_000_000, "precision": "bf16", "pins": {"compile": False}}
    d["compute"] = {
        "instance_preferences": [
            {"instance_type": "ml.p6-b200.48xlarge", "instance_count": 1},
            {"instance_type": "ml.p5en.48xlarge", "instance_count": 1},
        ]
    }
    plans = plan(d, calibration=str(prof)).plans
    assert [p.calibration.origin for p in plans] == ["flag", "flag"]
    assert plans[0].calibration.changed and not plans[1].calibration.changed
    (tmp_path / "spec.yaml").write_text(json.dumps(d))
    code, out, _ = run(
        ["plan", str(tmp_path / "spec.yaml"), "--calibration", str(prof), "--output", "json"],
        capsys,
    )
    assert code == 0
    got = json.loads(out)
    assert [p["plan"]["calibration"]["origin"] for p in got["preferences"]] == ["flag", "flag"]
