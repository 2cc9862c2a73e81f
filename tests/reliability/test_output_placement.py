"""Nothing a user owns is deleted or overwritten by a command that writes (issue 37 item 9).

Through the real commands: every way an output can meet an input (the same file, its folder, a
folder holding it, a symlink to either, a hard link) is exit 2 naming both paths, one JSON error
object, and nothing written; `--overwrite` replaces only what `bsm data prepare` recorded as its
own; `report` and `calibrate` never replace a run's own file or any file they did not write;
state files (the purchase lock, purchase records) are never opened through a symlink, and a
folder, FIFO, device or symlink loop in their place is exit 2 naming the file. And the one atomic
writer: no module but `atomic_write.py` renames a temporary file into place.
"""

from __future__ import annotations

import ast
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_support import run

from blackwell_sm.output_place import RECORD

REPO = Path(__file__).resolve().parents[2]
TEXT = "the quick brown fox jumps over the lazy dog\n" * 40


def snapshot(root: Path) -> dict[str, bytes | str]:
    """Every entry under `root` (links as their target's name, files by content)."""
    out: dict[str, bytes | str] = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        if p.is_symlink():
            out[rel] = "-> " + os.readlink(p)
        elif p.is_file():
            out[rel] = p.read_bytes()
        else:
            out[rel] = "dir"
    return out


def refused(args: list[str], *words: str) -> dict:
    """Run `bsm ARGS -o json`: exit 2, one JSON error object naming every word; also the text
    mode's exit 2 with no traceback. Returns the error object."""
    code, out, err = run(*args, "-o", "json")
    assert code == 2, (code, out, err)
    assert "Traceback" not in err
    obj = json.loads(out)["error"]
    for w in words:
        assert w in obj["message"] or w == obj["field"], (w, obj)
    code, out, err = run(*args)
    assert code == 2 and "Traceback" not in err and "error:" in err
    return obj


# -- data prepare: the output against its inputs ------------------------------------------------
def _inputs(tmp: Path) -> Path:
    data = tmp / "data"
    data.mkdir()
    (data / "a.txt").write_text(TEXT)
    (data / "notes.md").write_text("mine, not an input")
    return data


WAYS: dict[str, Callable[[Path, Path], Path]] = {
    # the reported case: the input's own folder, with --overwrite
    "its-folder": lambda tmp, data: data,
    "a-folder-holding-it": lambda tmp, data: tmp,
    "a-symlink-to-its-folder": lambda tmp, data: _link(tmp / "link", data),
    "the-file-itself": lambda tmp, data: data / "a.txt",
    "a-symlink-to-the-file": lambda tmp, data: _link(tmp / "f-link", data / "a.txt"),
    "a-hard-link-to-the-file": lambda tmp, data: _hard(tmp / "hard.txt", data / "a.txt"),
}


def _link(p: Path, to: Path) -> Path:
    p.symlink_to(to)
    return p


def _hard(p: Path, to: Path) -> Path:
    os.link(to, p)
    return p


@pytest.mark.parametrize("way", list(WAYS))
def test_data_prepare_never_writes_over_or_around_its_input(tmp_path, way):
    data = _inputs(tmp_path)
    out = WAYS[way](tmp_path, data)
    before = snapshot(tmp_path)
    err = refused(["data", "prepare", str(data / "a.txt"), "--out", str(out), "--overwrite"])
    assert err["field"] == "--out" and str(out) in err["message"]
    assert snapshot(tmp_path) == before  # nothing deleted, nothing written


def test_data_prepare_tokenizer_is_an_input_too(tmp_path):
    data = _inputs(tmp_path)
    tok = tmp_path / "tok"
    tok.mkdir()
    (tok / "tokenizer.json").write_text("{}")
    refused(
        ["data", "prepare", str(data / "a.txt"), "--tokenizer", str(tok), "--out", str(tok)],
        "--out",
        str(tok),
    )
    assert sorted(p.name for p in tok.iterdir()) == ["tokenizer.json"]


def test_overwrite_replaces_only_what_data_prepare_recorded(tmp_path):
    data = _inputs(tmp_path)
    out = tmp_path / "shards"
    args = ["data", "prepare", str(data / "a.txt"), "--out", str(out)]
    assert run(*args)[0] == 0
    record = json.loads((out / RECORD).read_text())
    assert record["written_by"] == "bsm data prepare"
    assert set(record["entries"]) == {p.name for p in out.iterdir()} - {RECORD}
    # its own output: replaced
    assert run(*args, "--overwrite")[0] == 0
    # a file of the user's put beside it: the folder is no longer only ours, and is kept
    (out / "my-notes.txt").write_text("mine")
    before = snapshot(out)
    err = refused([*args, "--overwrite"], "my-notes.txt", "did not write")
    assert err["field"] == "--out"
    assert snapshot(out) == before
    # a folder without a record (made by hand, or by something else): never replaced
    other = tmp_path / "other"
    other.mkdir()
    (other / "manifest.json").write_text("{}")
    refused(["data", "prepare", str(data / "a.txt"), "--out", str(other), "--overwrite"], RECORD)
    assert (other / "manifest.json").read_text() == "{}"


# -- report and calibrate: a run's own files ----------------------------------------------------
@pytest.fixture
def run_folder(tmp_path: Path) -> Path:
    from test_report import run_dir

    return run_dir(tmp_path / "run")


def test_report_never_replaces_a_runs_own_file(run_folder):
    for name in ("plan.json", "output/data/metrics.jsonl"):
        target = run_folder / name
        before = target.read_bytes()
        refused(["report", str(run_folder), "--out", str(target)], "--out", "not written by")
        assert target.read_bytes() == before


def test_report_is_written_into_the_run_and_replaces_only_its_own_report(run_folder, tmp_path):
    assert run("report", str(run_folder))[0] == 0  # the default: RUN/report.html, new
    page = run_folder / "report.html"
    first = page.read_bytes()
    assert run("report", str(run_folder))[0] == 0  # its own file: replaced
    assert page.read_bytes().startswith(first[:40])
    mine = tmp_path / "mine.html"
    mine.write_text("<html>my page</html>")
    refused(["report", str(run_folder), "--out", str(mine)], "not written by bsm report")
    assert mine.read_text() == "<html>my page</html>"
    refused(["report", str(run_folder), "--out", str(tmp_path)], "--out")  # holds the run


def test_calibrate_never_replaces_a_source_or_a_file_it_did_not_write(run_folder, tmp_path):
    pytest.importorskip("scipy")
    csv = tmp_path / "rows.csv"
    csv.write_text("id,model\n")
    for out, words in (
        (csv, ("is the input",)),
        (run_folder / "plan.json", ("not written by bsm calibrate",)),
        (tmp_path, ("holding the input",)),
    ):
        before = snapshot(tmp_path)
        refused(["calibrate", str(csv), str(run_folder), "--out", str(out)], "--out", *words)
        assert snapshot(tmp_path) == before


# -- state files ----------------------------------------------------------------------------------
def _fifo(p: Path) -> None:
    os.mkfifo(p)


STATE_KINDS: dict[str, Callable[[Path, Path], None]] = {
    "symlink-to-a-file": lambda p, victim: p.symlink_to(victim),
    "symlink-loop": lambda p, victim: p.symlink_to(p),
    "folder": lambda p, victim: p.mkdir(),
    "fifo": lambda p, victim: _fifo(p),
    "device": lambda p, victim: p.symlink_to("/dev/null"),
}


@pytest.mark.parametrize("kind", list(STATE_KINDS))
def test_a_lock_file_that_is_not_a_regular_file_is_refused_naming_it(tmp_path, monkeypatch, kind):
    from blackwell_sm.aws.purchases import _safe, intent_lock
    from blackwell_sm.errors import SpecError

    monkeypatch.setenv("BSM_STATE_DIR", str(tmp_path / "state"))
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "state" / "locks").mkdir(parents=True)
    lock = tmp_path / "state" / "locks" / f"{_safe('my-plan')}.lock"
    STATE_KINDS[kind](lock, victim)
    with pytest.raises(SpecError) as e, intent_lock("my-plan"):
        pass
    assert e.value.exit_code == 2 and str(lock) in e.value.message
    assert e.value.field == "BSM_STATE_DIR"
    assert victim.read_text() == "precious"


def test_a_purchase_record_is_never_written_or_read_through_a_link(tmp_path, monkeypatch):
    from datetime import UTC, datetime

    from blackwell_sm.aws.purchases import Purchase, purchases, record_purchase

    monkeypatch.setenv("BSM_STATE_DIR", str(tmp_path / "state"))
    bought = datetime(2026, 12, 1, tzinfo=UTC)
    p = Purchase(
        key="training_plan-0123456789abcdef",
        kind="training_plan",
        intent="test",
        bought_at=bought,
        region="us-east-1",
        plan_name="p",
        offering_id="o",
    )
    folder = tmp_path / "state" / "purchases"
    folder.mkdir(parents=True)
    victim = tmp_path / "victim.json"
    victim.write_text(p.model_dump_json())
    name = f"{bought:%Y%m%dT%H%M%S}-{p.key}.json"
    (folder / name).symlink_to(victim)
    said: list[str] = []
    out = record_purchase(p, say=said.append)
    assert out.record is None and "could not be written" in said[0] and name in said[0]
    assert victim.read_text() == p.model_dump_json()
    assert purchases() == []  # the link is not read through


# -- one atomic writer ----------------------------------------------------------------------------
def test_one_atomic_writer():
    """No module but atomic_write.py renames into place or syncs a file: a second home for
    atomic writes fails here (docs/layout.md: one atomic writer)."""
    found = []
    for path in (REPO / "blackwell_sm").rglob("*.py"):
        if path.name == "atomic_write.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            f, owner = node.func, node.func.value
            name = owner.id if isinstance(owner, ast.Name) else ""
            if (name == "os" and f.attr in ("replace", "fsync")) or (
                f.attr == "replace" and "tmp" in name.lower() and len(node.args) == 1
            ):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert found == []


def test_run_local_never_writes_into_or_around_a_channel(tmp_path):
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "shard-00000.bin").write_bytes(b"\0" * 64)
    spec = tmp_path / "spec.yaml"
    spec.write_text("model: tiny\ntraining:\n  total_steps: 2\n  data: {source: channel}\n")
    for out in (shards, shards / "run", tmp_path):
        before = snapshot(tmp_path)
        refused(
            ["run-local", str(spec), "--out", str(out), "--channel", f"train={shards}", "--fresh"],
            "--out",
            str(shards),
        )
        assert snapshot(tmp_path) == before
