"""Issue 29 part 4 (and issue 27's `--out` classes): every file the client writes appears whole or
not at all (`blackwell_sm/atomic_write.py`).

* `--out` naming a folder, a missing folder, a file as its folder, or a read-only folder: exit 2
  naming the flag and the path, one JSON error object, no traceback, nothing left behind;
* a write that fails half-way (disk full) leaves the old file as it was and no temporary file;
* concurrent writers (real `bsm` processes, each writing in a bounded loop) and a reader in this
  process: the reader never sees an empty or partial profile, report or prepared folder, and no
  writer prints a traceback. BSM_ATOMIC_ROUNDS raises the loops (default 4).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aws_support import plan_for, spec_dict, train_records
from cli_support import REPO, run
from reliability.test_container_inputs import read_only

from blackwell_sm.atomic_write import atomic_open, write_text
from blackwell_sm.errors import BsmError
from blackwell_sm.opt_ml import OptMl
from blackwell_sm.spec import parse_spec

ROUNDS = int(os.environ.get("BSM_ATOMIC_ROUNDS", "4"))
REPORT_ROUNDS = int(os.environ.get("BSM_ATOMIC_ROUNDS", "2"))  # a report draws its plots: slow
LOOP = """
import contextlib, io, json, sys
from blackwell_sm.cli import main
results = []
for _ in range(int(sys.argv[1])):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(sys.argv[2:])
            code = 0
        except SystemExit as e:
            code = int(e.code or 0)
    results.append({"code": code, "out": out.getvalue(), "err": err.getvalue()})
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A finished run's folder: plan.json and metrics.jsonl (what run-local leaves; the
    measured figures come from the step records), with figures of its own."""
    d = tmp_path_factory.mktemp("run")
    plan = plan_for(parse_spec(spec_dict("tiny")))
    (d / "plan.json").write_text(plan.to_json())
    tree = OptMl(d)
    tree.metrics.parent.mkdir(parents=True, exist_ok=True)
    records = train_records(range(1, 30))
    tree.metrics.write_text("".join(json.dumps(r) + "\n" for r in records))
    return d


COMMANDS = {
    "calibrate": lambda run_dir, out: ["calibrate", str(run_dir), "--out", str(out)],
    "report": lambda run_dir, out: ["report", str(run_dir), "--out", str(out)],
}


def _refused(args: list[str], *words: str) -> dict:
    code, out, err = run(*args, "--output", "json")
    assert code == 2, (args, err)
    assert "Traceback" not in err
    error = json.loads(out)["error"]
    assert error["field"] == "--out"
    for w in words:
        assert w in error["message"], error["message"]
    return error


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_out_that_cannot_be_a_file_is_exit_2_naming_flag_and_path(command, run_dir, tmp_path):
    make = COMMANDS[command]
    folder = tmp_path / "a-folder"
    folder.mkdir()
    _refused(make(run_dir, folder), str(folder), "is a folder")
    missing = tmp_path / "no" / "such" / "x.out"
    _refused(make(run_dir, missing), str(missing), "does not exist")
    (tmp_path / "plain").write_text("a file, not a folder")
    under_file = tmp_path / "plain" / "x.out"
    _refused(make(run_dir, under_file), str(under_file), "is not a folder")
    locked = tmp_path / "locked"
    locked.mkdir()
    with read_only(locked):
        _refused(make(run_dir, locked / "x.out"), str(locked / "x.out"), "cannot write")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-folder", "locked", "plain"]
    assert list(folder.iterdir()) == [] and list(locked.iterdir()) == []


def test_a_write_that_fails_half_way_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "profile.yaml"
    write_text(path, "old: whole\n")
    with pytest.raises(BsmError) as e, atomic_open(path, "wb") as f:
        f.write(b"new: half")
        raise OSError(errno.ENOSPC, "No space left on device")
    assert e.value.code == "write_failed" and "No space left" in e.value.message
    assert str(path) in e.value.message
    assert path.read_text() == "old: whole\n"
    assert [p.name for p in tmp_path.iterdir()] == ["profile.yaml"]


def _writers(args: list[str], n: int, cwd: Path, rounds: int = ROUNDS) -> list[subprocess.Popen]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "MPLBACKEND": "Agg"}
    return [
        subprocess.Popen(
            [sys.executable, "-c", LOOP, str(rounds), *args, "--output", "json"],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]


def _read_while(procs: list[subprocess.Popen], read) -> int:
    """Call `read()` until every writer is done; the number of whole reads."""
    reads = 0
    while any(p.poll() is None for p in procs):
        reads += read()
        time.sleep(0.001)
    return reads + read()


def _finished(procs: list[subprocess.Popen]) -> list[dict]:
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and "Traceback" not in err, err[-3000:]
        results += json.loads(out)
    for r in results:
        assert "Traceback" not in r["err"]
        json.loads(r["out"])  # one JSON document each time, result or error
    return results


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_concurrent_writers_never_show_a_reader_a_partial_file(command, run_dir, tmp_path):
    from blackwell_sm.planner.profile import parse_profile
    from blackwell_sm.runs.report import read_plot_data
    from blackwell_sm.safe_load import parse_yaml

    out = tmp_path / ("profile.yaml" if command == "calibrate" else "report.html")
    seen: list[int] = []

    def read() -> int:
        try:
            data = out.read_text()
        except FileNotFoundError:
            return 0  # before the first rename
        seen.append(len(data))
        assert data, "an empty file was read"
        if command == "calibrate":
            parse_profile(parse_yaml(data, name=str(out)))
        else:
            assert data.rstrip().endswith("</html>"), data[-200:]
            read_plot_data(data)
        return 1

    rounds = ROUNDS if command == "calibrate" else REPORT_ROUNDS
    procs = _writers(COMMANDS[command](run_dir, out), 2, tmp_path, rounds)
    reads = _read_while(procs, read)
    results = _finished(procs)
    assert [r["code"] for r in results] == [0] * (2 * rounds)
    assert reads > 0 and min(seen) > 0
    assert [p.name for p in tmp_path.iterdir()] == [out.name]  # no temporary left


def test_concurrent_overwrites_of_prepared_data_never_show_a_partial_folder(tmp_path):
    from blackwell_sm.data.channel import open_channel

    text = tmp_path / "corpus.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 400)
    out = tmp_path / "shards"
    checked: list[int] = []

    def read() -> int:
        if not out.exists():
            assert not checked, "the folder was missing after a writer had put it in place"
            return 0  # before the first writer's rename
        manifest = json.loads((out / "manifest.json").read_text())  # never missing, never half
        # every listed shard there, whole (sizes and headers), tokens under the vocabulary
        channel = open_channel(out, vocab_size=manifest["vocab_size"], verify_sha256=True)
        checked.append(len(channel.shards))
        return 1

    args = [
        "data",
        "prepare",
        str(text),
        "--out",
        str(out),
        "--overwrite",
        "--shard-tokens",
        "1024",
    ]
    procs = _writers(args, 2, tmp_path)
    reads = _read_while(procs, read)
    results = _finished(procs)
    assert [r["code"] for r in results] == [0] * (2 * ROUNDS), [r["err"] for r in results]
    assert reads > 0 and min(checked) > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "shards"]
