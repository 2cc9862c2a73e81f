"""The CLI's error contract: literal messages on stderr, one JSON error object under --output json."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from blackwell_sm.cli import cli, main
from blackwell_sm.cli.output import dumps, wants_json
from blackwell_sm.errors import BsmError, SpecError


def run_main(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(args)
    out, err = capsys.readouterr()
    return int(exc.value.code), out, err


def test_usage_error_json_object(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(
        ["plan", "--model", "llama-3.1-8b", "--no-such-flag", "-o", "json"], capsys
    )
    assert code == 2
    obj = json.loads(out)["error"]
    assert obj["code"] == "usage" and obj["exit_code"] == 2
    assert "no-such-flag" in obj["message"]
    assert "no-such-flag" in err


def test_bad_input_json_object_names_field(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_main(
        ["plan", "--model", "llama-3.1-8b", "--set", "seq_len=-5", "--output", "json"], capsys
    )
    assert code == 2
    obj = json.loads(out)["error"]
    assert obj["exit_code"] == 2 and obj["code"] == "bad_input"
    assert "seq_len" in (obj["field"] or "") + obj["message"]
    assert "error:" in err


def test_no_json_on_stdout_without_flag(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_main(["plan", "--model", "llama-3.1-8b", "--set", "seq_len=-5"], capsys)
    assert code == 2 and out == ""


@pytest.mark.parametrize("msg", ["[b]bold?[/b] in [train]", "path [/x] and [/__w/pytorch/x.cpp]"])
def test_messages_print_literally(msg: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Brackets in messages are never read as markup, and never crash the CLI."""

    @cli.command("boom-test", hidden=True)
    def boom() -> None:
        raise BsmError(msg, hint="see [yellow]here[/]")

    try:
        code, _out, err = run_main(["boom-test"], capsys)
    finally:
        cli.commands.pop("boom-test", None)
    assert code == 1
    assert msg in err.replace("\n", "")
    assert "[yellow]here[/]" in err


def test_error_object_fields() -> None:
    e = SpecError("bad", field="training.seq_len", hint="use 4096")
    assert e.to_json() == {
        "error": {
            "code": "bad_input",
            "message": "bad",
            "field": "training.seq_len",
            "hint": "use 4096",
            "exit_code": 2,
        }
    }


def test_strict_json_refuses_non_finite() -> None:
    with pytest.raises(ValueError):
        dumps({"x": float("inf")})


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["plan", "-o", "json"], True),
        (["plan", "--output=json"], True),
        (["plan", "--output", "table"], False),
        (["plan", "--", "--output", "json"], False),
    ],
)
def test_wants_json(argv: list[str], expected: bool) -> None:
    assert wants_json(argv) is expected


def test_click_runner_still_works() -> None:
    res = CliRunner().invoke(cli, ["--help"])
    assert res.exit_code == 0
