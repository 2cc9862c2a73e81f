"""`bsm run-local`: its refusals before anything is started (no launcher, no torch), and one real
run that it must own: the folder locked, a stale failure cleared, SIGTERM leaving no orphans."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from cli_support import demo_spec

from blackwell_sm.cli import main
from blackwell_sm.launch.supervise import child_pids

REPO = Path(__file__).resolve().parents[1]


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        main(["run-local", *args])
    return int(e.value.code or 0), " ".join(capsys.readouterr().err.split())  # unwrap rich


def test_missing_spec_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run([str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "cannot read spec file" in err
    assert not (tmp_path / "o").exists()


def test_bad_channel_and_nproc(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    demo = str(REPO / "templates" / "demo-tiny.yaml")
    code, err = run([demo, "--out", str(tmp_path / "o"), "--channel", "train"], capsys)
    assert code == 2 and "NAME=PATH" in err
    code, err = run([demo, "--channel", f"train={tmp_path / 'missing'}"], capsys)
    assert code == 2 and "is not a directory" in err
    code, err = run([demo, "--nproc", "0"], capsys)
    assert code == 2 and "--nproc" in err


def test_model_too_big_for_this_machine_is_infeasible(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = REPO / "templates" / "llama-3.1-70b.yaml"
    code, err = run([str(spec), "--out", str(tmp_path / "o"), "--nproc", "2"], capsys)
    assert code == 3, err
    assert "local CPU process" in err
    assert not (tmp_path / "o").exists()  # nothing laid out for a plan that cannot run


def test_the_local_plan_uses_the_measured_matmul_rate():
    """run-local times a short bf16 matmul (train/peak.py) instead of a nominal CPU peak."""
    from blackwell_sm.local import plan_local
    from blackwell_sm.spec import parse_spec
    from blackwell_sm.train.peak import measure

    rate = measure(128, 64, 192, budget_s=0.05)
    assert rate > 1e8  # any CPU torch runs on does more than 0.1 GFLOP/s
    spec = parse_spec({"model": "tiny", "training": {"seq_len": 128, "total_steps": 400}})
    slow = plan_local(spec, nproc=2, peak_tflops=rate / 1e12)
    fast = plan_local(spec, nproc=2, peak_tflops=10 * rate / 1e12)
    assert (
        slow.instance.peak_flops_bf16 == pytest.approx(rate, rel=1e-9)
        and slow.throughput.evidence == "measured"
    )
    assert fast.throughput.breakdown_s.compute < slow.throughput.breakdown_s.compute


def test_channel_with_a_synthetic_source_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    demo = str(REPO / "templates" / "demo-tiny.yaml")  # training.data.source: synthetic
    code, err = run([demo, "--out", str(tmp_path / "o"), "--channel", f"train={tmp_path}"], capsys)
    assert code == 2 and "--channel train" in err and "training.data.source" in err
    assert not (tmp_path / "o").exists()
    with pytest.raises(SystemExit) as e:
        main(["run-local", demo, "--channel", f"train={tmp_path}", "--output", "json"])
    obj = json.loads(capsys.readouterr().out)["error"]
    assert (
        e.value.code == 2
        and obj["field"] == "--channel"
        and "training.data.source" in obj["message"]
    )


def _descendants(pid: int) -> set[int]:
    out, todo = set(), [pid]
    while todo:
        for child in child_pids(todo.pop()):
            out.add(child)
            todo.append(child)
    return out


def _alive(pid: int) -> bool:
    """Running (a zombie has ended; only its exit status is left to collect)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


@pytest.mark.slow
def test_run_local_owns_its_run(tmp_path: Path) -> None:
    """A stale output/failure is removed at the start; a second run-local on the folder is
    refused with the PID that holds it; SIGTERM to run-local stops the launcher, torchrun and
    the workers (they save first) and leaves no process behind."""
    out = tmp_path / "run [x]"
    (out / "output").mkdir(parents=True)
    (out / "output" / "failure").write_text("rank 1: an earlier run's reason\n")
    spec = demo_spec(
        tmp_path / "long.yaml",
        ("total_steps: 40", "total_steps: 100000"),
        ("interval_steps: 10", "interval_steps: 50000"),
    )
    cmd = [sys.executable, "-m", "blackwell_sm", "run-local", str(spec), "--out", str(out)]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cli = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    lines: list[str] = []
    stepped = threading.Event()

    def read() -> None:
        assert cli.stdout is not None
        for raw in iter(cli.stdout.readline, b""):
            lines.append(raw.decode(errors="replace"))
            if "[bsm-step] step=" in lines[-1]:
                stepped.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert stepped.wait(timeout=240), "".join(lines[-40:])
        assert not (out / "output" / "failure").exists()
        procs = _descendants(cli.pid)
        assert len(procs) >= 4, procs  # launcher, torchrun, 2 workers

        second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert second.returncode != 0
        assert f"in use by another run (PID {cli.pid})" in " ".join(second.stderr.split())

        os.kill(cli.pid, signal.SIGTERM)
        rc = cli.wait(timeout=240)
        reader.join(timeout=10)
        text = "".join(lines)
        assert rc == 128 + signal.SIGTERM, text[-3000:]
        assert "stopped by SIGTERM" in text and "checkpoint step" in text
        left = [p for p in procs if _alive(p)]
        assert not left, f"orphans: {left}"
        summary = json.loads((out / "output" / "data" / "summary.json").read_text())
        assert summary["status"].startswith("stopped")
    finally:
        for p in [cli.pid, *_descendants(cli.pid)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        cli.wait()


def test_the_speed_line_gives_the_checks_range_and_verdict():
    from blackwell_sm.cli.local import _speed_note
    from blackwell_sm.records import CheckFigures

    check = CheckFigures.model_construct(
        pred_tok_s_gpu_low=2911.3, pred_tok_s_gpu_high=6046.5, speed="below_range"
    )
    assert _speed_note(check) == "  (range 2911.3-6046.5: below range)"
    assert "matmul rate" in _speed_note(None)  # no check ran (a run shorter than its window)


def test_the_channels_a_spec_reads_include_init_for_s3_weights():
    """--channel is checked against what the run reads: its data channels, and `init` when
    training.init_from is on S3 (a synthetic run that starts from S3 weights is legitimate)."""
    from blackwell_sm.cli.local import _channels_read
    from blackwell_sm.spec import parse_spec

    synthetic = {"model": "tiny", "training": {"data": {"source": "synthetic"}}}
    assert _channels_read(parse_spec(synthetic)) == set()
    synthetic["training"]["init_from"] = "s3://bucket/weights/"
    assert _channels_read(parse_spec(synthetic)) == {"init"}
    shards = {
        "model": "tiny",
        "training": {
            "data": {"source": "channel", "train_channel": "train", "validation_channel": "val"}
        },
    }
    assert _channels_read(parse_spec(shards)) == {"train", "val"}
