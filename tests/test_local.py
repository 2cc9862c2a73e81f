"""`bsm run-local`'s refusals, before anything is started (no launcher, no torch)."""

from __future__ import annotations

from pathlib import Path

import pytest

from blackwell_sm.cli import main

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
