"""End to end through the real launcher on one host: `bsm run-local` (the `make demo` run) as the
uninterrupted reference, then one interrupted history of the same plan in one /opt/ml dir:

    run A: fresh start; SIGKILL of rank 1 after the step-10 checkpoint  -> exit != 0, `failure`
    run B: resumes from step 10 (the newest complete); SIGTERM to the launcher
                                                 -> finishes its step, saves, exit 0

Every claim is checked against the reference run, step for step. Runs are module-scoped; each test
asserts one property of them. (Three launches: ~10 s of torch start-up each on 2 cores.)
"""

from __future__ import annotations

import json
import re
import signal
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_support import bsm_json, run_local_process
from harness import OptMlHost, complete_checkpoints, free_port, segments

from blackwell_sm.local import plan_local
from blackwell_sm.spec import load_spec

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "templates" / "demo-tiny.yaml"


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """`bsm run-local templates/demo-tiny.yaml` exactly as `make demo` runs it (JSON output)."""
    out = tmp_path_factory.mktemp("ref") / "demo"
    proc = run_local_process(DEMO, out, timeout=240)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {"result": json.loads(proc.stdout), "stderr": proc.stderr, "root": out}


@dataclass
class History:
    host: OptMlHost
    rc_a: int
    killed_after: int
    failure_a: str | None
    rc_b: int
    stopped_at: int


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> History:
    plan = plan_local(load_spec(DEMO), nproc=2)
    assert plan.config.shard_degree == 2 and plan.spec.training.checkpoint.interval_steps == 10
    host = OptMlHost.create(tmp_path_factory.mktemp("hist") / "opt-ml", plan)

    a = host.start(port=free_port())
    a.wait_for(r"checkpoint step 10 saved")
    a.wait_for_step(12)
    a.kill_rank(1, signal.SIGKILL)
    rc_a = a.wait()
    failure_a = host.failure()

    b = host.start(port=free_port())
    b.wait_for_step(13)
    b.signal(signal.SIGTERM)
    rc_b = b.wait()
    m = re.search(r"stopped \(SIGTERM\) after step (\d+)", b.output)
    return History(host, rc_a, max(a.losses()), failure_a, rc_b, int(m.group(1)) if m else -1)


def _ref_losses(reference: dict) -> dict[int, float]:
    segs = segments(reference["root"])
    assert len(segs) == 1, "the reference ran once, uninterrupted"
    return segs[0]


def test_run_local_demo_leaves_checkpoints_metrics_and_model(reference: dict) -> None:
    res = reference["result"]
    assert res["exit_code"] == 0 and res["failure"] is None
    # keep_last 2 of the every-10-steps checkpoints, the last one at the final step
    assert [Path(p).name for p in res["checkpoints"]] == ["step-00000030", "step-00000040"]
    assert "config.json" in res["model_files"]
    assert any(f.endswith(".safetensors") for f in res["model_files"])
    s = res["summary"]
    assert s["final_step"] == 40 and s["status"] == "completed"
    assert s["measured"]["tokens_per_s_per_gpu"] > 0 and s["predicted"]["tokens_per_s_per_gpu"] > 0
    assert len(_ref_losses(reference)) == 40
    assert Path(res["plan_path"]).is_file()
    rc = json.loads((reference["root"] / "input/config/resourceconfig.json").read_text())
    assert rc["hosts"] == ["algo-1"] and rc["current_host"] == "algo-1"


def test_the_demo_prints_the_check_and_then_the_eta(reference: dict) -> None:
    """`make demo`'s output: one [bsm-check] line after the warm-up, then eta_s on each step."""
    lines = reference["stderr"].splitlines()  # the workers' lines, as `make demo` shows them
    checks = [ln for ln in lines if "[bsm-check] step=5 " in ln]
    assert len(checks) == 1 and "pred_tok_s_gpu=" in checks[0] and "compute_s=" in checks[0]
    etas = [ln for ln in lines if "[bsm-step]" in ln and " eta_s=" in ln]
    assert len(etas) == 40 - 5 + 1 and etas[-1].endswith("eta_s=0")


def test_loss_falls(reference: dict) -> None:
    losses = _ref_losses(reference)
    first, last5 = losses[1], [losses[s] for s in range(36, 41)]
    assert max(last5) < 0.8 * first, (first, last5)


def test_reproducible(reference: dict, history: History) -> None:
    """Run A started from nothing with the same plan: identical losses to the reference."""
    ref, run_a = _ref_losses(reference), history.host.launches[0].losses()
    assert len(run_a) >= 12
    assert run_a == {s: ref[s] for s in run_a}


def test_sigkill_of_a_rank_is_reported(history: History) -> None:
    assert history.rc_a != 0
    assert history.killed_after >= 12
    # The failure file names the rank that died and how, not the peer's lost connection.
    assert history.failure_a is not None
    assert history.failure_a.startswith(
        "rank 1 (host algo-1, local rank 1) was killed by signal SIGKILL"
    ), history.failure_a
    assert len(history.failure_a) <= 1025
    # Run B succeeded, and a stale reason must not outlive it.
    assert history.host.failure() is None


def test_resume_after_sigkill_matches_uninterrupted(reference: dict, history: History) -> None:
    launch_b = history.host.launches[1]
    assert "resumed from step-00000010" in launch_b.output
    ref, run_b = _ref_losses(reference), launch_b.losses()
    assert min(run_b) == 11 and max(run_b) >= 13
    assert run_b == {s: ref[s] for s in run_b}


def test_sigterm_saves_and_exits_cleanly(history: History) -> None:
    assert history.rc_b == 0
    assert history.stopped_at >= 13
    assert "SIGTERM received" in history.host.launches[1].output
    # The step it was on when the signal came was saved completely (marker written last).
    assert history.stopped_at in complete_checkpoints(history.host.root)
    assert max(history.host.launches[1].losses()) == history.stopped_at


def test_worker_exception_is_the_failure_reason(tmp_path: Path) -> None:
    """A worker that raises: its exception and rank, from torchelastic's error file. (One
    process: each one costs ~4 CPU-seconds of torch import.)"""
    plan = plan_local(load_spec(DEMO), nproc=1).model_copy(update={"feasible": False})
    host = OptMlHost.create(tmp_path / "opt-ml", plan)
    launch = host.start(port=free_port())
    assert launch.wait() != 0
    failure = host.failure()
    assert failure is not None
    assert re.match(
        r"rank 0 \(host algo-1, local rank 0\): BsmError: the plan in .* is "
        r"not feasible",
        failure,
    ), failure
    assert "main.py" in failure  # where it was raised


def test_report_of_the_demo_run_plots_what_metrics_jsonl_holds(reference: dict) -> None:
    """`bsm report` on the `make demo` run: the arrays the figures plot (read back from the
    matplotlib lines, embedded in the HTML) are metrics.jsonl's, value for value."""
    from harness import metric_records

    from blackwell_sm.runs.report import read_plot_data

    root = reference["root"]
    res = bsm_json("report", str(root))
    page = Path(res["report"]).read_text()
    assert Path(res["report"]) == root / "report.html" and "tokens/s/GPU measured" in res["summary"]
    assert page.count("<svg") == 5 and "<img" not in page and "http" not in page.split("<svg")[0]
    data = read_plot_data(page)
    train = metric_records(root)
    steps = [float(r["step"]) for r in train]
    for fig, label, key in (
        ("loss", "train loss", "loss"),
        ("speed", "measured tokens/s/GPU", "tok_s_gpu"),
        ("speed", "measured MFU", "mfu"),
        ("memory", "measured peak memory", "mem_reserved_gib"),
    ):
        assert data[fig][label]["x"] == steps, (fig, label)
        assert data[fig][label]["y"] == [r[key] for r in train], (fig, label)
    plan = json.loads(Path(reference["result"]["plan_path"]).read_text())
    assert set(data["speed"]["predicted tokens/s/GPU"]["y"]) == {
        plan["throughput"]["tokens_per_s_per_gpu"]
    }
    assert set(data["memory"]["usable limit"]["y"]) == {plan["memory_gib"]["usable"]}
    # Every save, from the log's save records: keep_last 2 left only 30 and 40 on disk.
    assert data["timeline"]["checkpoint save"]["y"] == [10.0, 20.0, 30.0, 40.0]


def test_report_marks_the_stop_and_the_resume(history: History, tmp_path: Path) -> None:
    from blackwell_sm.runs.report import read_plot_data, write_report

    res = write_report(str(history.host.root), tmp_path / "r.html")
    data = read_plot_data(res.path.read_text())
    killed, resumed_from = history.killed_after, 10  # run B resumed from the step-10 checkpoint
    assert data["timeline"]["launch ended (killed or failed)"]["y"] == [float(killed)]
    assert data["timeline"]["stop"]["y"] == [float(history.stopped_at)]  # run B's SIGTERM
    assert data["timeline"]["resume"]["y"] == [float(resumed_from)]
