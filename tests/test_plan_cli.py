"""`bsm plan` through the real entry point (`blackwell_sm.cli.main`): JSON shape, table, --set,
exit 3 with the full prediction and advice, and that the plan path never imports torch/boto3."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from blackwell_sm.cli import main
from blackwell_sm.spec.presets import PRESETS

ROOT = Path(__file__).resolve().parents[1]

# The stable JSON shape (schema_version 2): keys may be added, none removed or renamed.
REQUIRED_KEYS = {
    "schema_version",
    "feasible",
    "model",
    "instance",
    "config",
    "memory_gib",
    "throughput",
    "run",
    "alternatives",
    "warnings",
}
NESTED = {
    "model": {"name", "n_params"},
    "instance": {"type", "count", "gpus_per_instance"},
    "config": {
        "shard_degree",
        "replicate_degree",
        "micro_batch_size",
        "grad_accum_steps",
        "seq_len",
        "precision",
        "activation_checkpointing",
        "compile",
        "reshard_after_forward",
    },
    "memory_gib": {
        "params_fp32",
        "grads_fp32",
        "optimizer_states",
        "params_unsharded",
        "grads_unsharded",
        "activations",
        "logits_and_loss",
        "overhead",
        "total",
        "limit",
    },
    "throughput": {"step_time_s", "tokens_per_s_per_gpu", "mfu", "flops_per_token"},
    "run": {"steps", "hours", "cost_usd"},
}
# Exactly today's keys: a change here is a schema change and must be deliberate.
SNAPSHOT = {
    "": [
        "advice",
        "alternatives",
        "calibration",
        "checkpoint",
        "config",
        "feasible",
        "instance",
        "memory_gib",
        "model",
        "notes",
        "objective",
        "other_objective",
        "reasons",
        "run",
        "schema_version",
        "spec",
        "throughput",
        "warnings",
    ],
    "memory_gib": [
        "activations",
        "allocator_reserved",
        "fp8_extras",
        "grads_fp32",
        "grads_unsharded",
        "limit",
        "logits_and_loss",
        "optimizer_states",
        "overhead",
        "params_fp32",
        "params_unsharded",
        "total",
        "usable",
    ],
    "throughput": [
        "breakdown_s",
        "evidence",
        "flops_per_token",
        "mfu",
        "mfu_basis",
        "step_time_s",
        "tokens_per_s_per_gpu",
        "tokens_per_s_per_gpu_range",
    ],
    "run": [
        "cost_usd",
        "cost_usd_range",
        "hours",
        "hours_range",
        "jobs",
        "price_per_hour",
        "price_source",
        "steps",
        "tokens",
    ],
    "instance": [
        "count",
        "device",
        "efa",
        "gpu",
        "gpu_memory_gib",
        "gpus_per_instance",
        "peak_flops",
        "peak_flops_bf16",
        "type",
    ],
}


def run(args: list[str], capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(args)
    out, err = capsys.readouterr()
    return int(e.value.code or 0), out, err


def plan_json(args: list[str], capsys) -> dict:
    """`bsm plan ARGS` that must succeed: its JSON."""
    code, out, err = run(args, capsys)
    assert code == 0, err
    return json.loads(out)


def test_json_shape_is_stable(capsys):
    code, out, err = run(["plan", "--model", "llama-3.1-8b", "--output", "json"], capsys)
    assert code == 0, err
    data = json.loads(out)  # only JSON on stdout
    assert set(data) >= REQUIRED_KEYS
    for key, sub in NESTED.items():
        assert sub <= set(data[key]), key
    for key, keys in SNAPSHOT.items():
        node = data[key] if key else data
        assert sorted(node) == keys, key
    assert data["schema_version"] == 2 and data["feasible"] is True
    assert "seq_len" not in data["spec"]["training"]  # stored once: config.seq_len
    assert {n["kind"] for n in data["notes"]} <= {"warning", "reason", "advice"}
    assert data["warnings"] == [n["text"] for n in data["notes"] if n["kind"] == "warning"]
    assert "6 x (all params except input embedding)" in data["throughput"]["mfu_basis"]
    alt = data["alternatives"][0]
    assert {"config", "instance_count", "feasible", "hours", "why_not"} <= set(alt)


def test_verbose_table_shows_config_memory_speed_cost_and_runner_ups(capsys):
    code, out, _ = run(["plan", str(ROOT / "templates" / "llama-64b.yaml"), "-v"], capsys)
    out = " ".join(out.split())
    assert code == 0
    for words in (
        "shard_degree",
        "memory per GPU",
        "usable",
        "tokens/s/GPU",
        "MFU",
        "MFU basis",
        "cost",
        "runner-ups",
        "--set",
        "range",
        "checkpoint",
        "exposed communication",
        "fits",
    ):
        assert words in out, words


def test_flags_and_set_pin_knobs(capsys):
    args = [
        "plan",
        "--model",
        "llama-3.1-8b",
        "--seq-len",
        "4096",
        "--global-batch-tokens",
        "1048576",
        "--total-tokens",
        "1000000000",
        "--set",
        "micro_batch_size=2",
        "--set",
        "activation_checkpointing=selective",
        "--set",
        "precision=bf16",
        "--set",
        "compile=true",
        "--set",
        "shard_degree=8",
        "--output",
        "json",
    ]
    d = plan_json(args, capsys)
    c = d["config"]
    assert (c["micro_batch_size"], c["activation_checkpointing"], c["precision"]) == (
        2,
        "selective",
        "bf16",
    )
    assert c["compile"] is True and c["shard_degree"] == 8 and c["seq_len"] == 4096
    assert c["grad_accum_steps"] == 1048576 // 4096 // (2 * 8)
    assert d["run"]["tokens"] >= 1_000_000_000


def test_instance_count_auto_and_type(capsys):
    args = [
        "plan",
        "--model",
        "llama-3.1-70b",
        "--instance-type",
        "ml.p5.48xlarge",
        "--instance-count",
        "auto",
        "--total-tokens",
        "100000000000",
        "--output",
        "json",
    ]
    code, out, _ = run(args, capsys)
    d = json.loads(out)
    assert code == 0 and d["instance"]["type"] == "ml.p5.48xlarge" and d["instance"]["count"] > 1


def test_seventy_b_bf16_long_sequences_exits_3_with_prediction_and_advice(capsys):
    args = [
        "plan",
        "--model",
        "llama-3.1-70b",
        "--seq-len",
        "131072",
        "--set",
        "precision=bf16",
        "--set",
        "training.pins.offload=false",  # with offload it fits (tests/test_offload_lever.py)
        "--output",
        "json",
    ]
    code, out, err = run(args, capsys)
    assert code == 3
    obj = json.loads(out)  # one object: the error, and the whole prediction under "plan"
    assert obj["error"]["code"] == "infeasible_plan" and obj["error"]["exit_code"] == 3
    d = obj["plan"]
    assert d["feasible"] is False and d["memory_gib"]["total"] > d["memory_gib"]["usable"]
    assert d["throughput"]["step_time_s"] > 0 and d["advice"]
    assert "GiB" in err and "instances" in err and "seq_len" in err


def test_infeasible_table_also_shows_advice(capsys):
    args = ["plan", "--model", "llama-3.1-70b", "--seq-len", "131072", "--set", "precision=bf16"]
    args += ["--set", "training.pins.offload=false"]  # with offload it fits
    code, out, err = run(args, capsys)
    out = " ".join(out.split())  # rich wraps at the terminal width
    assert code == 3 and "does NOT fit" in out and "to make it fit" in out
    assert "needs" in err


def test_plan_path_imports_no_torch_or_boto3():
    code = (
        "import sys\n"
        "from blackwell_sm.cli import main\n"
        "try:\n"
        "    main(['plan', '--model', 'llama-3.1-8b', '--output', 'json'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "bad = [m for m in ('torch', 'boto3', 'botocore', 'sagemaker') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr


def test_selective_op_is_selectable_and_keeps_less_than_selective(capsys):
    """torchtitan's per-op policy: between selective and full in memory, with its recompute."""
    got = {}
    for mode in ("selective", "selective-op", "full"):
        args = [
            "plan",
            "--model",
            "llama-3.1-8b",
            "--seq-len",
            "8192",
            "--set",
            f"activation_checkpointing={mode}",
            "--set",
            "micro_batch_size=2",
            "--set",
            "precision=bf16",
            "--output",
            "json",
        ]
        d = plan_json(args, capsys)
        assert d["config"]["activation_checkpointing"] == mode
        got[mode] = (d["memory_gib"]["activations"], d["throughput"]["step_time_s"])
    assert got["full"][0] < got["selective-op"][0] < got["selective"][0]
    assert got["selective"][1] < got["selective-op"][1] < got["full"][1]


@pytest.mark.parametrize("tokens", [1.4e12, 2e12, 2e13])
def test_a_run_longer_than_one_job_is_never_a_bare_fits(capsys, tokens):
    """A 958-day plan is not 'fits': the headline says how long, and the warnings name the count
    that would finish, or (beyond the search) a count no smaller than the search's ceiling + 1."""
    args = ["plan", "--model", "llama-3.1-70b", "--set", f"training.total_tokens={int(tokens)}"]
    code, out, _ = run(args, capsys)
    assert code == 0
    head = " ".join(" ".join(out.split("\n")[:3]).split())  # the table wraps long lines
    assert ": fits in memory, but takes" in head and "28-day" in head
    code, out, _ = run([*args, "--output", "json"], capsys)
    p = json.loads(out)
    miss = [w for w in p["warnings"] if "miss the 672 h limit" in w]
    assert len(miss) == 1 and p["run"]["jobs"] > 1
    if "at least" in miss[0]:
        need = int(miss[0].split("at least ")[1].split()[0])
        assert need > 64 and need * 672 >= p["run"]["hours"]
    else:
        assert "compute.instance_count:" in miss[0]


SUMMARY_SPECS = [["--model", name] for name in PRESETS] + [
    [str(p)] for p in sorted((ROOT / "templates").glob("*.yaml"))
]


def test_the_default_plan_fits_30_lines_of_80_columns(capsys, monkeypatch):
    """Issue 21: every preset's and template's default plan reads in ten seconds: a headline,
    the run (hours, cost with its range, $ per billion tokens), configuration, memory, three
    runner-ups; everything else behind -v."""
    monkeypatch.setenv("COLUMNS", "80")
    for args in SUMMARY_SPECS:
        code, out, _ = run(["plan", *args], capsys)
        lines = out.splitlines()
        assert code == 0 and 15 <= len(lines) <= 30, (args, len(lines))
        assert [ln for ln in lines if len(ln) > 80] == [], args
        flat = " ".join(out.split())
        words = ["params) on", "instances", "time", "configuration", "memory per GPU", "usable"]
        words += ["bsm plan -v", "per billion tokens"]
        # runner-ups give way to the warnings that change what to do (issue 37 item 10)
        words += ["runner-ups", "#1"] if "\nwarnings\n" not in out else ["more runner-up"]
        assert [w for w in words if w not in flat] == [], args
        head = " ".join(out.split("\nwarnings\n")[0].split())  # a warning may name flags
        assert "MFU basis" not in flat and "--set" not in head  # behind -v
        code, full, _ = run(["plan", *args, "-v"], capsys)
        assert code == 0 and len(full.splitlines()) > len(lines) and "--set" in full
