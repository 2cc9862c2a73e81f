"""Trackers from inside the job (`training.report_to`, train/trackers.py), with real parts:

- a `bsm run-local` run with `report_to: [tensorboard, mlflow]` against a real MLflow tracking
  server on 127.0.0.1 (started here): TensorBoard's own reader loads its event files (loss, lr,
  the check's figures, the plan's predictions, the events as text) and the MLflow run holds the
  same metrics, step for step, and the plan as parameters;
- a tracker whose server is down, and one whose server accepts and never answers: one warning
  each, every record still in metrics.jsonl, and `write` never waits (the hanging server would
  hold it forever);
- W&B in offline mode; bad tracker settings refused through the real command.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from cli_support import REPO, run, run_local_process
from harness import free_port
from net_support import silent_server
from records_support import step_figures
from tracker_support import scalars_of, texts_of
from train_support import local_plan

from blackwell_sm.records import TrainRecord, read_metrics

pytestmark = pytest.mark.slow
DEMO = REPO / "templates" / "demo-tiny.yaml"


def tracker_spec(tmp: Path, **training) -> Path:
    spec = yaml.safe_load(DEMO.read_text())
    spec["training"].update(total_steps=8, **training)
    spec["training"]["checkpoint"]["interval_steps"] = 4
    path = tmp / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _wait_until_up(url: str, proc: subprocess.Popen, log: Path, timeout_s: float = 120) -> None:
    """Until the server answers its health check (it takes seconds to start on two cores)."""
    import time
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"mlflow server exited: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"mlflow server not up in {timeout_s} s: {log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory):
    """`mlflow server` on 127.0.0.1 (a SQLite store), stopped after the module."""
    pytest.importorskip("mlflow")
    tmp = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--backend-store-uri",
            f"sqlite:///{tmp}/mlflow.db",
            "--default-artifact-root",
            str(tmp / "artifacts"),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp / "server.log").open("w"),
        cwd=tmp,
        start_new_session=True,  # its own process group: the server and its workers stop together
    )
    url = f"http://127.0.0.1:{port}"
    _wait_until_up(url, proc, tmp / "server.log")
    yield url, proc, tmp / "server.log"
    os.killpg(proc.pid, signal.SIGKILL)  # a throwaway server: nothing to shut down gracefully
    proc.wait()


@pytest.fixture(scope="module")
def tracked(tmp_path_factory: pytest.TempPathFactory, mlflow_server) -> dict:
    """A run-local run reporting to TensorBoard and the MLflow server (started together: the
    tracker's client retries until the server answers)."""
    uri, _, log = mlflow_server
    tmp = tmp_path_factory.mktemp("tracked")
    spec = tracker_spec(
        tmp,
        report_to=["tensorboard", "mlflow"],
        mlflow={"tracking_uri": uri, "experiment": "bsm-test"},
    )
    env = {
        **os.environ,
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "7",
        "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "2",
    }
    proc = run_local_process(spec, tmp / "run", nproc=1, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:] + log.read_text()[-2000:]
    return {"root": tmp / "run", "uri": uri, "stdout": proc.stdout, "stderr": proc.stderr}


def test_tensorboard_reads_the_runs_event_files(tracked):
    root = tracked["root"]
    logdir = root / "output" / "tensorboard"
    assert list(logdir.glob("events.out.tfevents.*")), list(root.rglob("*"))
    got = scalars_of(logdir)
    train = [
        r for r in read_metrics(root / "output/data/metrics.jsonl") if isinstance(r, TrainRecord)
    ]
    assert [r.step for r in train] == list(range(1, 9))
    for tag, key in (
        ("train/loss", "loss"),
        ("train/lr", "lr"),
        ("train/grad_norm", "grad_norm"),
        ("speed/tokens_per_s_per_gpu", "tok_s_gpu"),
        ("speed/mfu", "mfu"),
        ("memory/reserved_gib", "mem_reserved_gib"),
    ):
        want = {r.step: getattr(r, key) for r in train}
        assert got[tag] == pytest.approx(want, rel=1e-6), tag  # float32 in the event file
    plan = json.loads((root / "plan.json").read_text())
    assert got["plan/tokens_per_s_per_gpu"][1] == pytest.approx(
        plan["throughput"]["tokens_per_s_per_gpu"], rel=1e-6
    )
    check = [
        json.loads(x)
        for x in (root / "output/data/metrics.jsonl").read_text().splitlines()
        if '"kind": "check"' in x
    ]
    assert len(check) == 1
    for fig in ("tok_s_gpu", "pred_tok_s_gpu", "speed_ratio", "compute_s", "pred_mfu"):
        assert got[f"check/{fig}"] == {check[0]["step"]: pytest.approx(check[0][fig], rel=1e-6)}
    texts = texts_of(logdir)
    assert any("speed" in t and "memory" in t for t in texts["check"])
    assert any("checkpoint step-00000004 saved" in t for t in texts["events"])
    assert "model: tiny" in texts["plan"][0]


def test_the_mlflow_server_holds_the_same_metrics(tracked):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracked["uri"])
    exp = client.get_experiment_by_name("bsm-test")
    (run_,) = client.search_runs([exp.experiment_id])
    assert run_.info.status == "FINISHED"
    train = [
        r
        for r in read_metrics(tracked["root"] / "output/data/metrics.jsonl")
        if isinstance(r, TrainRecord)
    ]
    for key, field in (("train/loss", "loss"), ("train/lr", "lr"), ("speed/mfu", "mfu")):
        hist = {m.step: m.value for m in client.get_metric_history(run_.info.run_id, key)}
        assert hist == {r.step: getattr(r, field) for r in train}, key  # float64: exact
    assert "check/speed_ratio" in run_.data.metrics
    params = run_.data.params
    assert params["model"] == "tiny" and params["config.shard_degree"] == "1"
    assert "bsm.check" in run_.data.tags and "warning" not in tracked["stdout"]


def test_a_resumed_launch_continues_its_mlflow_run(mlflow_server, monkeypatch):
    """One job, one MLflow run: a launch stopped by SIGTERM leaves its run unfinished; the next
    launch (same run name) continues it; a completed run is never reopened."""
    from mlflow.tracking import MlflowClient

    from blackwell_sm.train.trackers import MlflowTracker

    uri = mlflow_server[0]
    monkeypatch.setenv("TRAINING_JOB_NAME", "bsm-tiny-resumed")
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    plan = local_plan(
        training={"report_to": ["mlflow"], "mlflow": {"tracking_uri": uri, "experiment": "resumes"}}
    )
    first = MlflowTracker(plan)
    first.record(_train(1))
    first.close("stopped (SIGTERM)")
    second = MlflowTracker(plan)
    assert second.run_id == first.run_id
    second.record(_train(2))
    second.close("completed")
    third = MlflowTracker(plan)
    assert third.run_id != first.run_id
    client = MlflowClient(tracking_uri=uri)
    assert client.get_run(first.run_id).info.status == "FINISHED"
    steps = [m.step for m in client.get_metric_history(first.run_id, "train/loss")]
    assert steps == [1, 2]


# ---------------------------------------------------------------------------------------------
# A tracker that fails never stops or slows training
# ---------------------------------------------------------------------------------------------


def _metrics_log(tmp: Path, uri: str):
    from blackwell_sm.train.metrics_log import MetricsLog

    plan = local_plan(
        training={"report_to": ["mlflow", "tensorboard"], "mlflow": {"tracking_uri": uri}}
    )
    import torch

    return MetricsLog(tmp / "output" / "data", plan, torch.device("cpu"), is_main=True)


def _train(step: int) -> TrainRecord:
    figures = step_figures(lr=1e-3, tok_s_gpu=10.0, mfu=0.1, step_time_s=0.1, mem_alloc_gib=0.1)
    figures.update(mem_reserved_gib=0.1, memory_kind="cpu_max_rss")
    return TrainRecord(step=step, time=1.0e9 + step, **figures)


def test_a_tracker_whose_server_is_down_warns_once_and_training_goes_on(
    tmp_path, capfd, monkeypatch
):
    pytest.importorskip("mlflow")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    # A port held bound and never listening refuses every connection, and no other process can
    # take it meanwhile (a port found free and let go could be, by another worker's server).
    with socket.socket() as dead:
        dead.bind(("127.0.0.1", 0))
        log = _metrics_log(tmp_path, f"http://127.0.0.1:{dead.getsockname()[1]}")
        for s in range(1, 51):
            log.write(_train(s))
        log.write_summary(log.summary(status="completed", final_step=50, resumed_from=None))
    out = capfd.readouterr().out
    warnings = [ln for ln in out.splitlines() if ln.startswith("[bsm] warning: tracker")]
    assert len(warnings) == 1 and "tracker mlflow (http://127.0.0.1:" in warnings[0], warnings
    assert ") failed to start" in warnings[0]
    assert "training goes on" in warnings[0]
    recs = read_metrics(tmp_path / "output/data/metrics.jsonl")
    assert [r.step for r in recs] == list(range(1, 51))
    assert len(scalars_of(tmp_path / "output" / "tensorboard")["train/loss"]) == 50  # the other


def test_a_server_that_never_answers_never_blocks_a_step(tmp_path, capfd, monkeypatch):
    """The server accepts and stays silent: the tracker hangs in its first call, yet every write
    returns (more than the queue holds: the rest are dropped, with one warning), the end of the
    run waits only its close timeout, and the warning names the tracker and what it lost."""
    pytest.importorskip("mlflow")
    from blackwell_sm.train import tracker_process as trackers

    monkeypatch.setattr(trackers, "QUEUE_MAX", 100)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "600")
    with silent_server() as (url, _held):
        t = trackers.Trackers(
            local_plan(training={"report_to": ["mlflow"], "mlflow": {"tracking_uri": url}}),
            tensorboard_dir=tmp_path / "tb",
            out_dir=tmp_path,
        )
        start = time.monotonic()
        for s in range(1, 100_001):
            t.write(_train(s))  # returns at once: the queue, never the server
        assert time.monotonic() - start < 30 and t.dropped >= 1  # past what the pipes hold
        assert t.close("completed", timeout_s=0.5) is False
    out = capfd.readouterr().out
    assert out.count("dropping records") == 1
    # the hung tracker is named, where it sends, and what it did not send (issue 37)
    assert f"tracker mlflow ({url}) did not answer in 0 s" in out, out
    assert "record(s) still queued for it are not sent (every record is in metrics.jsonl)" in out


# ---------------------------------------------------------------------------------------------
# W&B offline, and bad settings
# ---------------------------------------------------------------------------------------------


def test_wandb_offline_logs_the_runs_metrics(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from blackwell_sm.train.trackers import WandbTracker

    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    plan = local_plan(
        training={"report_to": ["wandb"], "wandb": {"project": "bsm-test", "mode": "offline"}}
    )
    w = WandbTracker(plan, tmp_path)
    for s in (1, 2, 3):
        w.record(_train(s))
    w.close("completed")
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb")), list(tmp_path.rglob("*"))


@pytest.mark.parametrize(
    ("training", "field", "words"),
    [
        ({"report_to": ["mlflow"]}, "training", "training.mlflow is unset"),
        ({"report_to": ["tensorboard", "tensorboard"]}, "training", "more than once"),
        ({"report_to": ["comet"]}, "training.report_to.0", "tensorboard"),
        (
            {"report_to": ["mlflow"], "mlflow": {"tracking_uri": "ftp://x"}},
            "training.mlflow.tracking_uri",
            "http(s)://",
        ),
        (  # MLflow 3 refuses file stores: refused here, with the fix (issue 37)
            {"report_to": ["mlflow"], "mlflow": {"tracking_uri": "file:/tmp/mlruns"}},
            "training.mlflow.tracking_uri",
            "use a database store, sqlite:////tmp/mlruns/mlflow.db",
        ),
        (
            {"report_to": ["mlflow"], "mlflow": {"tracking_uri": "./mlruns"}},
            "training.mlflow.tracking_uri",
            "MLflow 3 refuses",
        ),
        (
            {
                "report_to": ["mlflow"],
                "mlflow": {"tracking_uri": "arn:aws:sagemaker:us-east-1:1:x"},
            },
            "training.mlflow.tracking_uri",
            "SageMaker MLflow ARN",
        ),
        (
            {"report_to": ["wandb"], "wandb": {"project": "p", "api_key": "k"}},
            "training.wandb.api_key",
            "unknown key",
        ),
    ],
)
def test_bad_tracker_settings_are_refused_naming_the_field(tmp_path, training, field, words):
    spec = tracker_spec(tmp_path, **training)
    code, out, err = run("plan", str(spec), "-o", "json")
    assert code == 2, out + err
    error = json.loads(out)["error"]
    assert error["field"] == field and words in error["message"], error
    assert "Traceback" not in err


def test_event_file_framing_checks_with_crc32c():
    """The writer's CRC-32C against the standard check value (RFC 3720's test vector)."""
    from blackwell_sm.train.tb_events import crc32c

    assert crc32c(b"123456789") == 0xE3069283
