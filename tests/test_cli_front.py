"""The front door (issue 21): the catch-all for unexpected exceptions, help examples, shell
completion, did-you-mean, and defaults that bend (a note) where set values are refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import yaml
from cli_support import run

from blackwell_sm.cli import COMMANDS, cli
from blackwell_sm.cli.help import EXAMPLES

ROOT = Path(__file__).resolve().parents[1]

# A real `bsm plan` in its own process, with a fault planted in the planner it calls.
FAULT = """
import sys
import blackwell_sm.planner.pipeline as api
def boom(*a, **k):
    raise RuntimeError("planted fault [not markup]")
api.make_plan = boom
from blackwell_sm.cli import main
main(sys.argv[1:])
"""


def _bsm_with_fault(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-c", FAULT, *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)


def test_an_unexpected_exception_is_one_internal_error_object():
    p = _bsm_with_fault("plan", "--model", "tiny", "--output", "json")
    assert p.returncode == 1
    err = json.loads(p.stdout)["error"]  # stdout holds exactly one JSON document
    assert err["code"] == "internal" and err["exit_code"] == 1
    assert err["message"] == "RuntimeError: planted fault [not markup]"
    assert "bug" in err["hint"]
    assert "Traceback (most recent call last)" in p.stderr and "in boom" in p.stderr
    assert "error: internal error: RuntimeError: planted fault [not markup]" in p.stderr


def test_an_unexpected_exception_in_table_mode_keeps_stdout_clean():
    p = _bsm_with_fault("plan", "--model", "tiny")
    assert p.returncode == 1 and p.stdout == ""
    assert "Traceback" in p.stderr and "internal error" in p.stderr


def _all_commands() -> list[tuple[str, object]]:
    import click

    out = []
    ctx = click.Context(cli)
    for name in COMMANDS:
        cmd = cli.get_command(ctx, name)
        out.append((name, cmd))
        if isinstance(cmd, click.Group):
            out += [(f"{name} {sub}", c) for sub, c in cmd.commands.items()]
    return out


@pytest.mark.parametrize("path", ["", *COMMANDS, "plans search", "data prepare"])
def test_help_shows_examples(path):
    code, out, _ = run(*path.split(), "--help")
    assert code == 0
    assert "Examples:" in out and "  bsm " in out, path


def test_every_command_has_examples():
    missing = [path for path, _ in _all_commands() if not EXAMPLES.get(path)]
    assert missing == []


def test_every_example_is_a_command_the_tree_accepts():
    from doc_commands import check_invocation

    bad = []
    for path, rows in EXAMPLES.items():
        for line, _ in rows:
            problem = check_invocation(line)
            if problem:
                bad.append((path, line, problem))
    assert bad == []


def _complete(words: str) -> list[str]:
    """What bash completion offers for the command line `words` (click's bash protocol)."""
    cword = len(words.split()) - (0 if words.endswith(" ") else 1)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "_BSM_COMPLETE": "bash_complete",
        "COMP_WORDS": words,
        "COMP_CWORD": str(cword),
    }
    cmd = [sys.executable, "-m", "blackwell_sm"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()  # "type,value" per candidate
    return [ln.split(",", 1)[1] for ln in lines]


def test_completion_scripts_for_each_shell():
    for shell, marker in (
        ("bash", "complete -o"),
        ("zsh", "compdef"),
        ("fish", "complete --no-files --command bsm"),
    ):
        code, out, err = run("completion", shell)
        assert code == 0, err
        assert "_BSM_COMPLETE" in out and marker in out, shell
    code, _, err = run("completion", "tcsh")
    assert code == 2 and "tcsh" in err


def test_completion_offers_presets_instance_types_and_spec_files(tmp_path):
    assert _complete("bsm plan --model llama-3.1") == ["llama-3.1-8b", "llama-3.1-70b"]
    assert "ml.p6-b200.48xlarge" in _complete("bsm plan --instance-type ml.p6")
    assert _complete("bsm pla") == ["plan", "plans"]
    spec = "templates/llama-3.1-8b.yaml"
    assert spec in _complete("bsm submit templates/llama-3.1")
    assert _complete("bsm init llama-3.1") == ["llama-3.1-8b", "llama-3.1-70b", "llama-3.1-8b-64k"]
    assert _complete("bsm init llama-3.2-1b-") == ["llama-3.2-1b-128k"]  # a template's name
    assert _complete("bsm init temp") == ["templates/"]  # HF-DIR


def test_an_unknown_command_gets_a_suggestion():
    code, _, err = run("plna")
    assert code == 2 and "Did you mean 'plan'?" in err
    code, out, _ = run("plna", "--output", "json")
    assert code == 2 and "Did you mean 'plan'?" in json.loads(out)["error"]["message"]


def test_unknown_keys_and_presets_get_suggestions_in_the_hint(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("model: llama-3.1-8bb\ntraining: {seq_lne: 4096}\n")
    code, out, _ = run("plan", str(spec), "--output", "json")
    err = json.loads(out)["error"]
    assert code == 2 and err["field"] == "model"
    assert err["hint"] == (
        "model: did you mean 'llama-3.1-8b'?; training.seq_lne: did you mean 'seq_len'?"
    )
    code, out, _ = run("plan", "--model", "lama-3.1-70b", "--output", "json")
    assert code == 2 and "did you mean 'llama-3.1-70b'?" in json.loads(out)["error"]["hint"]
    code, out, _ = run("plan", "--model", "zzz", "--output", "json")  # nothing near: no hint
    assert code == 2 and json.loads(out)["error"]["hint"] is None


SMOKE = {"model": "tiny", "training": {"total_steps": 1, "data": {"source": "synthetic"}}}


def test_a_one_step_smoke_run_is_planned_with_notes(tmp_path):
    spec = tmp_path / "smoke.yaml"
    spec.write_text(yaml.safe_dump(SMOKE))
    code, out, err = run("plan", str(spec), "--output", "json")
    assert code == 0, err
    assert json.loads(out)["config"]["seq_len"] == 512
    assert "note: training.schedule.warmup_steps: the default 100 was lowered to 1" in err
    assert "note: training.seq_len: the default 4096 was lowered to 512" in err


def test_what_the_user_set_is_still_checked_strictly(tmp_path):
    d = {"model": "tiny", "training": {"total_steps": 1, "schedule": {"warmup_steps": 100}}}
    spec = tmp_path / "strict.yaml"
    spec.write_text(yaml.safe_dump(d))
    code, out, _ = run("plan", str(spec), "--output", "json")
    err = json.loads(out)["error"]
    assert code == 2 and "warmup_steps 100 is longer than the run's 1 steps" in err["message"]
    d["training"] = {"seq_len": 4096}
    spec.write_text(yaml.safe_dump(d))
    code, out, _ = run("plan", str(spec), "--output", "json")
    assert (
        code == 2 and "exceeds the model's max_seq_len 512" in json.loads(out)["error"]["message"]
    )


def test_adjusted_defaults_follow_later_overrides():
    """A lowered default stays a default: overrides that make room bring the default back, and
    steps derived from epochs use the lowered seq_len, not the default's."""
    from blackwell_sm.spec import parse_spec, with_overrides
    from blackwell_sm.spec.defaults import DefaultAdjusted

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rs = parse_spec(SMOKE)
    assert rs.training.schedule.warmup_steps == 1 and rs.training.seq_len == 512
    assert {w.category for w in caught} == {DefaultAdjusted}
    assert len(rs.notes) == 2
    longer = with_overrides(rs, {"training.total_steps": 1000})
    assert longer.training.schedule.warmup_steps == 100 and longer.notes == [rs.notes[0]]
    assert with_overrides(rs, {"model.max_seq_len": 8192}).training.seq_len == 4096
    # epochs -> steps at the lowered seq_len: 8,192 sequences a step (4 Mi tokens / 512)
    ft = parse_spec({"model": "tiny", "training": {"epochs": 1, "data": {"sequences": 8192 * 3}}})
    assert ft.training.total_steps == 3
