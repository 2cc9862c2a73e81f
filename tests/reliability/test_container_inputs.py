"""Bad container inputs through the real launcher (1 CPU process, `tiny`): each fails before
step 0 with exit != 0 and an `output/failure` that names the problem.

Plan fields, read-only folders and too little disk are caught by the launcher before torchrun
(launch/checks.py: seconds each). Checkpoint problems need the worker (torch): another run's
checkpoint and a COMPLETE checkpoint that cannot be loaded (which falls back to the previous one,
or fails when none is left) start from one real checkpointed run (the `trained` fixture).

Read-only: chmod 0555 as a normal user; as root (who ignores mode bits) `chattr +i`; skipped
where neither holds.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import OptMlHost, free_port
from train_support import local_plan

from blackwell_sm.opt_ml import COMPLETE_MARKER, ENV_TEST_FREE_BYTES, OptMl

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

STEPS = 4


def _plan():
    return local_plan(
        nproc=1,
        steps=STEPS,
        micro_batch_size=2,
        grad_accum_steps=1,
        training={
            "checkpoint": {
                "interval_steps": 2,
                "keep_last": 2,
                "interval_minutes": None,
                "async_save": False,
            },
        },
    )


def _host(tmp: Path) -> OptMlHost:
    return OptMlHost.create(tmp / "run", _plan())


def _launch(host: OptMlHost, env: dict[str, str] | None = None) -> tuple[int, str]:
    run = host.start(port=free_port(), env=env)
    rc = run.wait(timeout=240)
    return rc, run.output


def _assert_failed_before_step_0(host: OptMlHost, rc: int, out: str, *expected: str) -> str:
    assert rc != 0, out
    failure = host.failure()
    assert failure is not None, out
    for text in expected:
        assert text in failure, (text, failure)
    assert "[bsm-step]" not in out
    assert not OptMl(host.root).metrics.exists()
    return failure


def _edit(d: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    for p in parents:
        d = d[p]
    d[leaf] = value


# -- the plan --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        (
            "config.grad_accum_steps",
            3,
            [
                "config.grad_accum_steps: micro_batch_size 2 x grad_accum_steps 3 x 1 data-parallel "
                "ranks",
                "= 6 sequences per step, but the spec's global batch is 2 sequences",
            ],
        ),
        ("run.steps", 0, ["run.steps: 0; a run trains at least 1 step"]),
        ("schema_version", 99, ["schema_version 99 is not one this bsm reads (1, 2)"]),
        ("schema_version", 1, ["schema_version: 1, but this container reads schema_version 2"]),
        ("config.seq_len", 1 << 20, ["config.seq_len: 1048576 is above the model's max_seq_len"]),
        (
            "config.micro_batch_size",
            "two",
            ["config.micro_batch_size: Input should be a valid integer", "(got 'two')"],
        ),
        (
            "spec.training.seq_len",
            0,
            ["spec.training.seq_len: the plan holds seq_len once, in config.seq_len"],
        ),
        (
            "spec.training.total_steps",
            7,
            ["run.steps: 4, but the spec says training.total_steps 7"],
        ),
        (
            "config.cp_degree",
            2,
            ["config.cp_degree: 2 does not divide shard_degree 1", "allowed: 1"],
        ),
        ("config.cp_degree", 0, ["config.cp_degree: Input should be greater than or equal to 1"]),
    ],
    ids=[
        "grad_accum",
        "steps_0",
        "schema_99",
        "schema_1",
        "seq_len",
        "wrong_type",
        "spec_type",
        "steps",
        "cp_not_dividing",
        "cp_zero",
    ],
)
def test_corrupt_plan_field(tmp_path: Path, field: str, value: Any, expected: list[str]) -> None:
    host = _host(tmp_path)
    data = json.loads(host.plan_path.read_text())
    _edit(data, field, value)
    host.plan_path.write_text(json.dumps(data))
    rc, out = _launch(host)
    _assert_failed_before_step_0(host, rc, out, *expected)
    assert "torch.distributed.run" not in out  # refused before torchrun


def test_missing_plan_field(tmp_path: Path) -> None:
    host = _host(tmp_path)
    data = json.loads(host.plan_path.read_text())
    del data["config"]["seq_len"]
    host.plan_path.write_text(json.dumps(data))
    rc, out = _launch(host)
    _assert_failed_before_step_0(host, rc, out, "config.seq_len: required field is missing")


# -- folders and disk ------------------------------------------------------------------------
@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """`path` unwritable for this process: mode 0555, or the immutable flag as root."""
    if os.geteuid() != 0:
        path.chmod(0o555)
        try:
            yield
        finally:
            path.chmod(0o755)
        return
    if shutil.which("chattr") is None:
        pytest.skip("root without chattr: cannot make a folder read-only")
    r = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"chattr +i unsupported here: {r.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


@pytest.mark.parametrize("folder", ["checkpoints", "model"])
def test_read_only_output_folder(tmp_path: Path, folder: str) -> None:
    host = _host(tmp_path)
    path = host.root / folder
    with read_only(path):
        rc, out = _launch(host)
    _assert_failed_before_step_0(host, rc, out, f"{path} is not writable", f"its {folder} there")


def test_read_only_output(tmp_path: Path) -> None:
    """output/ itself: the failure file cannot be written, so the launcher's log carries it."""
    host = _host(tmp_path)
    path = host.root / "output"
    with read_only(path):
        rc, out = _launch(host)
    assert rc != 0
    assert f"{path} is not writable" in out
    assert "could not write" in out and "Traceback" not in out
    assert "[bsm-step]" not in out


def test_too_little_disk(tmp_path: Path) -> None:
    host = _host(tmp_path)
    need = _plan().checkpoint.bytes_per_save
    rc, out = _launch(host, env={ENV_TEST_FREE_BYTES: str(need - 1)})
    failure = _assert_failed_before_step_0(
        host,
        rc,
        out,
        f"{host.root / 'checkpoints'} has",
        f"({need - 1:,} bytes) free",
        f"one checkpoint of this host's shards is 0.001 GiB ({need:,} bytes)",
    )
    assert "job.volume_size_gb" in failure


# -- checkpoints (the worker) ----------------------------------------------------------------
@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished run's checkpoints/: step-00000002 and step-00000004, both COMPLETE."""
    host = _host(tmp_path_factory.mktemp("trained"))
    rc, out = _launch(host)
    assert rc == 0, out
    ck = host.root / "checkpoints"
    assert sorted(p.name for p in ck.iterdir()) == ["step-00000002", "step-00000004"]
    return ck


def _seeded(tmp: Path, trained: Path) -> OptMlHost:
    host = _host(tmp)
    shutil.rmtree(host.root / "checkpoints")
    shutil.copytree(trained, host.root / "checkpoints")
    return host


def _flip_byte(host: OptMlHost, step: int, name: str) -> None:
    """One byte in the middle of a checkpoint file changed, its size kept: only a checksum sees
    it (a truncated file would fail DCP's own reading too)."""
    f = host.root / "checkpoints" / f"step-{step:08d}" / name
    raw = bytearray(f.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    f.write_bytes(bytes(raw))


def test_another_runs_checkpoint(tmp_path: Path, trained: Path) -> None:
    host = _seeded(tmp_path, trained)
    for marker in (host.root / "checkpoints").glob(f"step-*/{COMPLETE_MARKER}"):
        data = json.loads(marker.read_text())
        data["run"]["seed"] = 7
        marker.write_text(json.dumps(data))
    rc, out = _launch(host)
    _assert_failed_before_step_0(
        host, rc, out, "checkpoint step-00000004", "belongs to another run (seed: 7 there, 0 in"
    )


def test_corrupt_complete_checkpoint_falls_back_to_the_previous(
    tmp_path: Path, trained: Path
) -> None:
    """A flipped byte inside a model shard (size unchanged): the checksums written with the save
    catch it before any rank loads it; the checkpoint is set aside with the reason and the run
    resumes from the previous one."""
    host = _seeded(tmp_path, trained)
    _flip_byte(host, 4, "__0_0.distcp")
    run = host.start(port=free_port())
    assert run.wait(timeout=240) == 0, run.output
    assert "WARNING: complete checkpoint" in run.output
    assert "step-00000004 failed to load (rank 0: __0_0.distcp: sha256 " in run.output
    assert "resumed from step-00000002 at step 2" in run.output
    assert sorted(run.losses()) == [3, 4]  # steps 3 and 4 trained again
    ck = host.root / "checkpoints"
    aside = ck / "step-00000004.corrupt-step-4"
    assert "__0_0.distcp: sha256" in json.loads((aside / "SET_ASIDE").read_text())["reason"]
    assert (ck / "step-00000004" / COMPLETE_MARKER).is_file()  # saved anew at the end
    assert host.failure() is None


def test_corrupt_complete_checkpoint_with_none_left(tmp_path: Path, trained: Path) -> None:
    """Flipped bytes in the newest checkpoint's RNG file and the older one's DCP metadata: both
    set aside, and the run fails before step 0 naming each file."""
    host = _seeded(tmp_path, trained)
    _flip_byte(host, 4, "rng/rank-00000.pt")
    _flip_byte(host, 2, ".metadata")
    rc, out = _launch(host)
    _assert_failed_before_step_0(
        host,
        rc,
        out,
        "no complete checkpoint in",
        "could be loaded; tried (and set aside): step-00000004 (rank 0: rng/rank-00000.pt: sha256 ",
        "step-00000002 (rank 0: .metadata: sha256 ",
    )
