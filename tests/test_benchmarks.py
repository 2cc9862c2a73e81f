"""Smoke tests of the benchmark scripts on tiny settings: they run end to end and print valid
JSON lines. The figures themselves are not asserted (they are measurements, not results); what is
asserted is what would break if the scripts or the code they drive rotted."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import _common  # noqa: E402
import cli_latency  # noqa: E402
import gpu_check  # noqa: E402
import loop_overhead  # noqa: E402
import run_all  # noqa: E402


def _records(text: str) -> dict[str, dict]:
    """Every stdout line is one JSON figure with name, value, unit and ok."""
    out = {}
    for line in text.splitlines():
        rec = json.loads(line)
        assert {"name", "value", "unit", "ok"} <= rec.keys(), rec
        out[rec["name"]] = rec
    return out


def test_check_parses_targets():
    assert _common.check(0.2, "< 0.3") is True
    assert _common.check(0.3, "< 0.3") is False
    assert _common.check(0.9, ">= 0.9") is True
    assert _common.check(1.0, "within 10% of predicted") is None
    assert _common.check(None, "< 1") is None


@pytest.mark.timeout(180)
def test_gpu_check_cpu_dry_runs_the_real_launcher_end_to_end(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        ["bash", "benchmarks/gpu_check.sh", "--cpu-dry", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=170,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    recs = _records(proc.stdout)
    assert set(recs) == {
        "gpu_check.tokens_per_s_per_gpu",
        "gpu_check.mfu",
        "gpu_check.peak_reserved_gib",
        "gpu_check.wall_s",
    }
    for rec in recs.values():
        assert rec["mode"] == "cpu-dry" and rec["model"] == "tiny"
        assert rec["ok"] is None and "goal_on_gpu" in rec  # goals shown, not applied on CPU
    assert recs["gpu_check.tokens_per_s_per_gpu"]["value"] > 0
    assert recs["gpu_check.tokens_per_s_per_gpu"]["reference"]["predicted"] > 0
    assert 0 < recs["gpu_check.mfu"]["value"] < 1
    assert recs["gpu_check.peak_reserved_gib"]["reference"]["memory_kind"] == "cpu_max_rss"
    wall = recs["gpu_check.wall_s"]
    assert wall["status"] == "completed" and math.isfinite(wall["final_loss"])
    assert wall["config"]["precision"] == "bf16" and wall["config"]["compile"] is False
    # The real launcher and worker ran: the step lines are on stderr, the files in --out.
    assert "[bsm-step] step=3 " in proc.stderr
    summary = json.loads((out / "output" / "data" / "summary.json").read_text())
    assert summary["final_step"] == 3


@pytest.mark.parametrize("gpu", ["H100", "H200", "B200"])
def test_gpu_check_plans_a_feasible_1b_run_for_each_gpu(gpu, capsys):
    assert gpu_check.main(["--plan-only", "--gpu", gpu]) == 0
    rec = _records(capsys.readouterr().out)["gpu_check.plan"]
    cfg, pred = rec["config"], rec["predicted"]
    assert rec["value"] == "llama-3.2-1b"
    assert cfg["seq_len"] == 4096 and cfg["precision"] == "bf16" and cfg["compile"] is True
    assert cfg["shard_degree"] == 1 and cfg["micro_batch_size"] * cfg["grad_accum_steps"] == 8
    assert 0 < pred["mfu"] < 1 and 0 < pred["reserved_gib"] <= pred["total_gib"]


@pytest.mark.timeout(180)
def test_loop_overhead_emits_every_figure(capsys):
    before = dict(os.environ)
    rc = loop_overhead.main(
        ["--steps", "4", "--warmup", "1", "--repeats", "1", "--seq-len", "16", "--accum", "1"]
    )
    assert rc == 0
    assert dict(os.environ) == before  # the rank variables do not leak out
    recs = _records(capsys.readouterr().out)
    for key in ("plain", "real", "plain_fsdp2"):
        rec = recs[f"loop.{key}_tokens_per_s"]
        assert rec["value"] > 0 and rec["per_cpu_second"] > 0
    for name in ("loop.real_over_plain_cpu", "loop.real_over_plain_wall"):
        assert recs[name]["target"] == ">= 0.9" and recs[name]["ok"] in (True, False)
    n_params = recs["loop.plain_tokens_per_s"]["setting"]["n_params"]
    # fp32 weights + two AdamW moments at least; the restore put back exactly the saved weights.
    assert recs["checkpoint.bytes"]["value"] >= 12 * n_params
    assert recs["checkpoint.save_s"]["value"] > 0
    assert recs["checkpoint.restore_s"]["ok"] is True


def test_cli_latency_times_commands_and_reports_missing_ones(monkeypatch, capsys):
    py = sys.executable
    cheap = {
        "python_startup": [py, "-c", "pass"],
        "bsm_help": [*cli_latency.bsm_argv(), "--help"],
        "bsm_plan": [py, "-c", "import sys; sys.exit('plan: not here')"],
        "bsm_submit_dry_run": [py, "-c", "import json"],
        "sdk_import": [py, "-c", "import json"],
    }
    monkeypatch.setattr(cli_latency, "commands", lambda: cheap)
    assert cli_latency.main(["--repeats", "1", "--sdk-repeats", "1"]) == 0
    recs = _records(capsys.readouterr().out)
    assert recs["cli.bsm_help_s"]["value"] > 0
    assert any(r["module"] == "click" for r in recs["cli.bsm_help_s"]["heaviest_imports"])
    plan = recs["cli.bsm_plan_s"]
    assert plan["value"] is None and plan["ok"] is False and "plan: not here" in plan["error"]
    assert recs["cli.bsm_plan_over_sdk_import"]["ok"] is False


def test_run_all_rejects_unknown_benchmarks():
    with pytest.raises(SystemExit) as e:
        run_all.main(["--only", "cli_latency,nope"])
    assert e.value.code == 2
