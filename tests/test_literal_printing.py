"""Messages are printed literally: brackets in paths, in file contents and in exception text
(`[b]`, `[/x]`, `[train]`, gloo's `[/__w/pytorch/...]`) reach the terminal as written, never as
rich markup (which drops `[b]`/`[train]` and raises MarkupError on `[/x]`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import demo_spec, run_local_process

from blackwell_sm.cli import main

REPO = Path(__file__).resolve().parents[1]
BRACKETS = "[b]bold[/b] [/x] [train]"
# A path that reads like the source location gloo puts in its exceptions.
GLOO_DIR = ("x [", "__w", "pytorch", "third_party", "gloo", "pair.cc:534]")


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        main(args)
    got = capsys.readouterr()
    return int(e.value.code or 0), got.out, " ".join(got.err.split())  # unwrap rich's wrapping


def test_spec_paths_and_values_with_brackets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / BRACKETS
    folder.mkdir(parents=True)  # "[/b]" and "[/x]" are nested folders: the path text holds them
    spec = folder / "[train].yaml"
    spec.write_text("model: tiny\ntraining: {seq_len: '[b]long[/x]'}\n")
    for cmd in ("plan", "run-local"):
        code, out, err = _cli([cmd, str(spec)], capsys)
        assert code == 2, err
        assert "MarkupError" not in err and "Traceback" not in err
        assert "training.seq_len" in err and "[b]long[/x]" in err
        code, out, err = _cli([cmd, str(spec), "--output", "json"], capsys)
        assert code == 2 and "[b]long[/x]" in json.loads(out)["error"]["message"]
    missing = folder / "[" / "x]" / "missing.yaml"  # .../[/x]/missing.yaml
    code, out, err = _cli(["run-local", str(missing)], capsys)
    assert code == 2 and str(missing) in err, err
    valid = folder / "[ok].yaml"
    valid.write_text("model: tiny\ntraining: {data: {source: synthetic}}\n")
    code, out, err = _cli(["run-local", str(valid), "--channel", f"[train]={folder}"], capsys)
    assert code == 2 and "--channel [train]" in err and "MarkupError" not in err, err


@pytest.mark.slow
def test_a_failed_run_with_gloo_style_brackets_is_reported_verbatim(tmp_path: Path) -> None:
    """A real run-local whose worker fails with a message holding the run folder's path (shaped
    like gloo's `[/__w/pytorch/...]`): exit 1 and the reason printed as written, in table and
    JSON mode."""
    out = tmp_path.joinpath(*GLOO_DIR)
    shards = tmp_path / "empty [train]"
    shards.mkdir()
    spec = demo_spec(
        tmp_path / "channel.yaml",
        ("data: {source: synthetic}", "data: {source: channel, train_channel: train}"),
        ("total_steps: 40", "total_steps: 6"),
    )
    done = run_local_process(spec, out, "--channel", f"train={shards}", timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]
    err = json.loads(done.stdout)["error"]
    assert "[/__w/pytorch/third_party/gloo/pair.cc:534]" in err["message"], err
    human = done.stderr.replace("\n", "")
    assert "MarkupError" not in human
    assert "error: the local run failed" in " ".join(done.stderr.split())
    assert "[/__w/pytorch/third_party/gloo/pair.cc:534]" in " ".join(done.stderr.split())
    failure = (out / "output" / "failure").read_text()
    assert failure.startswith("rank 0") or failure.startswith("rank 1"), failure
