"""What reads finished runs, given what it should refuse, through the real commands: `bsm report`
and `bsm calibrate` on malformed or half-written run folders, on measurements CSVs with negative,
text or non-finite figures, and on jobs whose output.tar.gz is corrupt (moto); calibration
profiles that are unbounded or non-finite, from the flag, the spec and $BSM_CALIBRATION. Each is
exit 2 with one JSON error naming the file and the field, no traceback, and no file left behind."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from cli_support import run
from train_support import local_plan

from blackwell_sm.opt_ml import OptMl
from blackwell_sm.records import StartRecord, TrainRecord, to_json

T0 = 1_764_000_000.0


def train(step: int, tok: float = 1000.0) -> TrainRecord:
    return TrainRecord(
        step=step,
        loss=3.0 - step / 100,
        lr=1e-3,
        grad_norm=1.0,
        tok_s_gpu=tok,
        mfu=0.1,
        step_time_s=0.2,
        mem_alloc_gib=0.3,
        mem_reserved_gib=0.3,
        memory_kind="cpu_max_rss",
        time=T0 + step,
    )


def run_dir(root: Path, lines: list[str] | None = None, summary: str | None = None) -> Path:
    """An /opt/ml-shaped run folder: plan.json, and metrics.jsonl / summary.json as given
    (default: a fresh start and six logged steps, no summary)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "plan.json").write_text(local_plan(steps=6).to_json())
    tree = OptMl(root)
    tree.output_data.mkdir(parents=True, exist_ok=True)
    if lines is None:
        recs = [StartRecord(step=0, world_size=2, time=T0), *(train(s) for s in range(1, 7))]
        lines = [to_json(r) for r in recs]
    tree.metrics.write_text("".join(line + "\n" for line in lines))
    if summary is not None:
        tree.summary.write_text(summary)
    return root


def error_of(code: int, out: str) -> dict:
    assert code == 2, out
    return json.loads(out)["error"]


def test_a_good_run_folder_reports_and_calibrates(tmp_path):
    d = run_dir(tmp_path / "run")
    code, out, err = run("report", str(d), "-o", "json")
    assert code == 0, err
    assert "tokens/s/GPU measured 1,000" in json.loads(out)["summary"]
    code, out, err = run("calibrate", str(d), "--out", str(tmp_path / "p.yaml"), "-o", "json")
    assert code == 0, err
    assert json.loads(out)["rows"][0]["measured_tokens_per_s_per_gpu"] == 1000.0


GOOD = to_json(train(1))


@pytest.mark.parametrize(
    ("line", "field", "words"),
    [
        (GOOD.replace('"tok_s_gpu": 1000.0', '"tok_s_gpu": -1000.0'), "tok_s_gpu", "greater than"),
        (GOOD.replace('"tok_s_gpu": 1000.0', '"tok_s_gpu": "1000"'), "tok_s_gpu", "valid number"),
        (GOOD.replace('"tok_s_gpu": 1000.0', '"tok_s_gpu": NaN'), "tok_s_gpu", "finite number"),
        (GOOD.replace('"tok_s_gpu": 1000.0, ', ""), "tok_s_gpu", "required field is missing"),
        (GOOD.replace('"train"', '"trian"'), "kind", "unknown record kind"),
        ("[1, 2, 3]", "(top level)", "a record is a JSON object"),
        ('{"kind": "train", "step": 1', None, "is not JSON"),
    ],
)
@pytest.mark.parametrize("command", ["report", "calibrate"])
def test_a_malformed_metrics_line_is_exit_2_naming_file_line_and_field(
    tmp_path, command, line, field, words
):
    d = run_dir(tmp_path / "run", [to_json(train(s)) for s in (1, 2)] + [line, to_json(train(4))])
    out_file = tmp_path / "out.file"
    code, out, err = run(command, str(d), "--out", str(out_file), "-o", "json")
    e = error_of(code, out)
    assert "Traceback" not in err
    assert f"{d / 'output/data/metrics.jsonl'} line 3" in e["message"] and words in e["message"]
    assert e["field"] == (field or f"{d / 'output/data/metrics.jsonl'}:3")
    assert not out_file.exists()


@pytest.mark.parametrize(
    ("summary", "field"),
    [
        ('{"status": "completed"}', "final_step"),
        ("[]", None),
        ('{"status": "completed", "final_step": 6', None),
        (json.dumps({"schema_version": 99}), "schema_version"),
    ],
)
@pytest.mark.parametrize("command", ["report", "calibrate"])
def test_a_malformed_summary_is_exit_2_naming_it(tmp_path, command, summary, field):
    d = run_dir(tmp_path / "run", summary=summary)
    code, out, _ = run(command, str(d), "--out", str(tmp_path / "x"), "-o", "json")
    e = error_of(code, out)
    assert str(d / "output/data/summary.json") in e["message"]
    assert e["field"] == (field or str(d / "output/data/summary.json"))
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    "lines",
    [[], [to_json(StartRecord(step=0, world_size=2, time=T0))], None],
    ids=["empty-metrics", "start-only", "no-metrics-file"],
)
@pytest.mark.parametrize("command", ["report", "calibrate"])
def test_a_half_written_run_says_nothing_was_measured(tmp_path, command, lines):
    d = run_dir(tmp_path / "run", lines if lines is not None else [])
    if lines is None:
        OptMl(d).metrics.unlink()
    code, out, _ = run(command, str(d), "--out", str(tmp_path / "x"), "-o", "json")
    e = error_of(code, out)
    assert "nothing was measured" in e["message"] and not (tmp_path / "x").exists()


# ---------------------------------------------------------------------------------------------
# Measurements CSVs
# ---------------------------------------------------------------------------------------------

CSV_HEAD = (
    "id,model,gpu,num_gpus,precision,seq_len,micro_batch,global_batch,activation_checkpointing,"
    "shard_degree,replicate_degree,compile,tokens_per_s_per_gpu,peak_memory_gib,memory_kind,"
    "stack,notes,source\n"
)


def csv_line(**over: str) -> str:
    row = (
        dict(
            id="r1",
            model="llama-3.1-8b",
            gpu="H100",
            num_gpus="8",
            precision="bf16",
            seq_len="8192",
            micro_batch="1",
            global_batch="8",
            activation_checkpointing="full",
            shard_degree="8",
            replicate_degree="1",
            compile="false",
            tokens_per_s_per_gpu="5000",
            peak_memory_gib="40",
            memory_kind="max_reserved",
            stack="",
            notes="",
            source="",
        )
        | over
    )
    return ",".join(row.values()) + "\n"


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"tokens_per_s_per_gpu": "-5000"}, "tokens_per_s_per_gpu"),
        ({"tokens_per_s_per_gpu": "fast"}, "tokens_per_s_per_gpu"),
        ({"tokens_per_s_per_gpu": "nan"}, "tokens_per_s_per_gpu"),
        ({"tokens_per_s_per_gpu": "inf"}, "tokens_per_s_per_gpu"),
        ({"tokens_per_s_per_gpu": "0"}, "tokens_per_s_per_gpu"),
        ({"peak_memory_gib": "-1"}, "peak_memory_gib"),
        ({"peak_memory_gib": "1e999"}, "peak_memory_gib"),
        ({"num_gpus": "-8"}, "num_gpus"),
        ({"seq_len": "8k"}, "seq_len"),
        ({"micro_batch": "0"}, "micro_batch"),
        ({"global_batch": "4"}, "global_batch"),
        ({"gpu": "A100"}, "gpu"),
        ({"precision": "fp4"}, "precision"),
        ({"model": "gpt-5"}, "model"),
    ],
)
def test_a_bad_csv_cell_is_exit_2_naming_the_row_and_column_and_writes_nothing(
    tmp_path, over, field
):
    src = tmp_path / "m.csv"
    src.write_text(CSV_HEAD + csv_line(id="good") + csv_line(**over))
    out_file = tmp_path / "profile.yaml"
    code, out, err = run("calibrate", str(src), "--out", str(out_file), "-o", "json")
    e = error_of(code, out)
    assert e["field"] == field and f"{src}: row r1" in e["message"] and "Traceback" not in err
    assert not out_file.exists()


def test_a_csv_row_cut_short_is_refused_not_a_crash(tmp_path):
    src = tmp_path / "m.csv"
    src.write_text(CSV_HEAD + "r1,llama-3.1-8b,H100\n")
    e = error_of(*run("calibrate", str(src), "--out", str(tmp_path / "p.yaml"), "-o", "json")[:2])
    assert e["field"] == "num_gpus"


def test_a_one_row_fit_is_exact_by_construction_not_a_zero_error(tmp_path):
    """One speed figure, one fitted constant: the error after says it validates nothing."""
    src = tmp_path / "m.csv"
    src.write_text(CSV_HEAD + csv_line(peak_memory_gib=""))
    out_file = tmp_path / "p.yaml"
    code, out, err = run("calibrate", str(src), "--out", str(out_file), "-o", "json")
    assert code == 0, err
    res = json.loads(out)
    [row] = res["rows"]
    assert row["speed_error_after"] is None and row["exact_by_construction"] == ["speed"]
    entry = res["profile"]["gpus"]["H100"]
    assert entry["median_abs_error_after"] is None and entry["exact_by_construction"] == ["speed"]
    code, out, _ = run("calibrate", str(src), "--out", str(out_file))
    assert code == 0 and "exact by construction, not validated" in " ".join(out.split())
    assert "0.0% after" not in out


def test_calibrate_reports_the_memory_error_beside_the_speed_error(tmp_path):
    src = tmp_path / "m.csv"
    rows = [
        csv_line(id=f"r{i}", seq_len=str(seq), tokens_per_s_per_gpu=str(t), peak_memory_gib=str(m))
        for i, (seq, t, m) in enumerate([(2048, 6000, 30), (4096, 5500, 34), (8192, 5000, 41)])
    ]
    src.write_text(CSV_HEAD + "".join(rows))
    code, out, err = run("calibrate", str(src), "--out", str(tmp_path / "p.yaml"), "-o", "json")
    assert code == 0, err
    entry = json.loads(out)["profile"]["gpus"]["H100"]
    assert entry["memory_median_abs_error_before"] > 0
    assert entry["memory_median_abs_error_after"] is not None
    code, out, _ = run("calibrate", str(src), "--out", str(tmp_path / "p.yaml"))
    text = " ".join(out.split())
    assert "speed median |error|" in text and "memory median |error|" in text


# ---------------------------------------------------------------------------------------------
# Jobs: a corrupt output.tar.gz (moto)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body", [b"not an archive", b"\x1f\x8b\x08\x00" + b"\x00" * 20], ids=["text", "cut-gzip"]
)
@pytest.mark.parametrize("command", ["report", "calibrate"])
def test_a_corrupt_output_archive_is_exit_2_naming_it(aws, tmp_path, command, body):
    from aws_support import spec_dict

    from blackwell_sm.aws.s3 import split_s3_uri
    from blackwell_sm.aws.submit import submit

    job = submit(spec_dict(), aws=aws)
    d = aws.sagemaker.describe_training_job(TrainingJobName=job.name)
    bucket, key = split_s3_uri(d["OutputDataConfig"]["S3OutputPath"].rstrip("/"))
    aws.s3.put_object(Bucket=bucket, Key=f"{key}/{job.name}/output/output.tar.gz", Body=body)
    out_file = tmp_path / "out"
    code, out, err = run(
        command, job.name, "--out", str(out_file), "--region", aws.region, "-o", "json"
    )
    e = error_of(code, out)
    assert "output.tar.gz" in e["message"] and "not a readable archive" in e["message"]
    assert "Traceback" not in err and not out_file.exists()


# ---------------------------------------------------------------------------------------------
# Calibration profiles: bounded and finite, refused naming the file, the field and the origin
# ---------------------------------------------------------------------------------------------

BAD_PROFILES = [
    ("B200: {peak_tflops: {bf16: .inf}}", "gpus.B200.peak_tflops.bf16"),
    ("B200: {peak_tflops: {bf16: -2250}}", "gpus.B200.peak_tflops.bf16"),
    ("B200: {peak_tflops: {bf16: 1.0e9}}", "gpus.B200.peak_tflops.bf16"),
    ("B200: {peak_tflops: {fp8: 4500}}", "gpus.B200.peak_tflops"),
    ("B200: {peak_tflops: {bf16: 2250, fp4: 9000}}", "gpus.B200.peak_tflops.fp4"),
    ("B200: {speed_range: [.nan, 0.1]}", "gpus.B200.speed_range.0"),
    ("B200: {speed_range: [-0.1, 0.1]}", "gpus.B200.speed_range.0"),
    ("B200: {speed_range: [0.1, -0.5]}", "gpus.B200.speed_range.1"),
    ("B200: {speed_range: [1.5, 0.1]}", "gpus.B200.speed_range.0"),
    ("B200: {peak_scale: .nan}", "gpus.B200.peak_scale"),
    ("B200: {memory_gib: .inf}", "gpus.B200.memory_gib"),
    ("B200: {constants: {fragmentation: .nan}}", "gpus.B200.constants.fragmentation"),
    (
        "B200: {constants: {matmul_efficiency: {bf16: .nan}}}",
        "gpus.B200.constants.matmul_efficiency.bf16",
    ),
    ("B200: {median_abs_error_after: -0.1}", "gpus.B200.median_abs_error_after"),
    (
        "X1: {peak_tflops: {bf16: 100}, hbm_tb_s: 1, memory_gib: 10, instance_types: [ml.c5.xlarge]}",
        "gpus.X1.instance_types.0",
    ),
    (
        "X1: {peak_tflops: {bf16: 100}, hbm_tb_s: 1, memory_gib: 10, instance_types: [local-cpu]}",
        "gpus.X1.instance_types.0",
    ),
]


@pytest.mark.parametrize(("entry", "field"), BAD_PROFILES)
def test_an_unbounded_profile_is_exit_2_naming_file_field_and_flag(tmp_path, entry, field):
    prof = tmp_path / "calib.yaml"
    prof.write_text(f"created: x\ngpus:\n  {entry}\n")
    code, out, err = run(
        "plan", "--model", "llama-3.1-8b", "--calibration", str(prof), "-o", "json"
    )
    e = error_of(code, out)
    assert e["field"] == field and "Traceback" not in err
    assert str(prof) in e["message"] and "given by --calibration" in e["message"]


@pytest.mark.parametrize("origin", ["spec", "env"])
def test_a_refused_profile_names_where_it_came_from(tmp_path, monkeypatch, origin):
    prof = tmp_path / "calib.yaml"
    prof.write_text("created: x\ngpus:\n  B200: {peak_tflops: {bf16: .inf}}\n")
    spec = {"model": "llama-3.1-8b"}
    if origin == "spec":
        spec["compute"] = {"calibration": str(prof)}
    else:
        monkeypatch.setenv("BSM_CALIBRATION", str(prof))
    (tmp_path / "spec.yaml").write_text(json.dumps(spec))
    e = error_of(*run("plan", str(tmp_path / "spec.yaml"), "-o", "json")[:2])
    given = "the spec's compute.calibration" if origin == "spec" else "$BSM_CALIBRATION"
    assert f"given by {given}" in e["message"] and str(prof) in e["message"]
    assert e["field"] == "gpus.B200.peak_tflops.bf16"


def test_a_mode_the_profile_did_not_fit_is_not_called_calibrated(tmp_path):
    """A profile fitted on bf16 runs: a bf16 plan is calibrated; an fp8 plan keeps the GPU's
    uncalibrated range, lists the constants it uses at their defaults, and says so."""
    prof = tmp_path / "bf16.yaml"
    prof.write_text(
        "created: x\ngpus:\n  B200:\n    constants: {matmul_efficiency: {bf16: 0.5}}\n"
        "    speed_range: [0.05, 0.05]\n    fitted: [matmul_efficiency.bf16]\n"
    )

    def plan(precision: str, compile: bool = True) -> dict:
        args = [
            "plan",
            "--model",
            "llama-3.1-8b",
            "--set",
            f"precision={precision}",
            "--set",
            f"compile={str(compile).lower()}",
            "--calibration",
            str(prof),
            "-o",
            "json",
        ]
        code, out, err = run(*args)
        assert code == 0, err
        return json.loads(out)

    bf16, fp8, eager = plan("bf16"), plan("fp8"), plan("bf16", compile=False)
    assert (
        bf16["calibration"]["fitted"] == fp8["calibration"]["fitted"] == ["matmul_efficiency.bf16"]
    )
    # compile=true: the bf16 key the profile fitted is the eager one.
    assert "matmul_efficiency.bf16+compile" in bf16["calibration"]["defaults"]
    assert bf16["throughput"]["evidence"] != "calibrated"
    assert eager["throughput"]["evidence"] == "calibrated"
    assert "matmul_efficiency.bf16" not in eager["calibration"]["defaults"]
    lo, hi = eager["throughput"]["tokens_per_s_per_gpu_range"]
    assert math.isclose(hi / lo, 1.05 / 0.95, rel_tol=1e-2)
    assert fp8["throughput"]["evidence"] == "anchored"  # B200's own, without the profile
    assert "matmul_efficiency.fp8+compile" in fp8["calibration"]["defaults"]
    assert any("not the fp8+compile matmul efficiency" in w for w in fp8["warnings"])


def test_calibrate_without_scipy_says_which_extra_before_reading_anything(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "scipy", None)  # `import scipy.optimize` now fails
    monkeypatch.setitem(sys.modules, "scipy.optimize", None)
    missing = tmp_path / "not-there.csv"  # never read: the extra is checked first
    code, out, _ = run("calibrate", str(missing), "--out", str(tmp_path / "p.yaml"), "-o", "json")
    e = json.loads(out)["error"]
    assert code == 6 and e["code"] == "missing_extra" and "blackwell-sm[calibrate]" in e["hint"]
