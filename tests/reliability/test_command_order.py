"""One rule for every command: local input is checked before any AWS setup (`cli/params.py`).

Two halves. The structural half walks the whole command tree: every parameter has a type that
checks it while click parses (so no command body, where AWS contexts are made, runs first), or
is listed in FREE_TEXT with the reason it needs none. A new string option on any command fails
here until it gets a type or a reason. The behavioural half runs each command that reaches AWS
with a malformed value per parameter, in an environment with no region and no credentials: each
must be exit 2 naming the parameter, one JSON error object, no traceback, never "no AWS region"
(exit 4). Last, an exception no command expected is still one error object (exit 1, code
`internal`; main's catch-all in cli/__init__.py, its traceback on stderr for the bug report).
"""

from __future__ import annotations

import json

import click
import pytest
import yaml
from cli_support import run

from blackwell_sm.cli import cli

#: Parameters that take free text on purpose, and why that needs no check at parse time.
FREE_TEXT = {
    ("plan", "spec_path"): "the spec is loaded first thing; plan makes no AWS call",
    ("plan", "model"): "a preset name, checked by the spec it builds; no AWS call",
    ("plan", "instance_type"): "checked by the spec (compute.instance_type); no AWS call",
    ("plan", "instance_count"): "an integer or auto, checked by the spec; no AWS call",
    ("plan", "sets"): "KEY=VALUE, checked by the spec; no AWS call",
    ("plan", "calibration"): "a profile file, read by the planner; no AWS call",
    ("report", "out"): "a local file written at the end (records engineer: the atomic write)",
    ("calibrate", "out"): "a local file written at the end (records engineer: the atomic write)",
    ("calibrate", "name"): "the profile's name, checked by the profile model before any read",
    ("run-local", "channel"): "NAME=DIR pairs, checked by run-local; no AWS call",
    ("init", "target"): "a preset, template or folder, checked first thing; no AWS call",
    ("init", "out"): "a new local file, checked before it is written (never over one)",
    ("presets", "instance_type"): "checked against the catalog first thing; no AWS call",
}


def _commands() -> list[tuple[str, click.Command]]:
    ctx = click.Context(cli)
    out = []

    def walk(cmd: click.Command, name: str) -> None:
        if isinstance(cmd, click.Group):
            for sub in cmd.list_commands(ctx):
                walk(cmd.get_command(ctx, sub), f"{name} {sub}".strip())
        else:
            out.append((name, cmd))

    walk(cli, "")
    return out


def test_every_parameter_is_checked_while_parsing_or_says_why_not():
    unchecked = []
    for name, cmd in _commands():
        for p in cmd.params:
            free = isinstance(p.type, click.types.StringParamType)
            if free and (name, p.name) not in FREE_TEXT:
                unchecked.append(f"{name}: {p.name}")
    assert unchecked == [], "give these a type from cli/params.py, or a reason in FREE_TEXT"
    known = {(n, p.name) for n, c in _commands() for p in c.params}
    assert set(FREE_TEXT) <= known  # no stale reasons


@pytest.fixture
def no_aws(monkeypatch, tmp_path):
    """No region and no credentials anywhere: an AWS setup that ran would fail (exit 4)."""
    import os

    for var in list(os.environ):
        if var.startswith("AWS_"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return tmp_path


CAPACITY = ["--instance-type", "ml.p6-b200.48xlarge", "--count", "1", "--hours", "24"]
GOOD_ARN = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/my-plan"
CASES: list[tuple[str, list[str], str, str]] = [
    ("status-name", ["status", "bad name!"], "JOB", "'bad name!' is not a training job name"),
    ("status-long", ["status", "a" * 64], "JOB", "is not a training job name"),
    ("status-region", ["status", "job-1", "--region", "mars"], "--region", "not an AWS region"),
    ("logs-name", ["logs", "job_1"], "JOB", "'job_1' is not a training job name"),
    ("logs-region", ["logs", "job-1", "--region", "US-EAST-1"], "--region", "not an AWS region"),
    ("stop-name", ["stop", "job-"], "JOB", "is not a training job name"),
    ("list-status", ["list", "--status", "Running"], "--status", "one of InProgress, Completed"),
    ("list-contains", ["list", "--name-contains", "a b"], "--name-contains", "job name fragment"),
    ("list-contains-long", ["list", "--name-contains", "a" * 64], "--name-contains", "0-63 char"),
    ("list-region", ["list", "--region", "eu-west"], "--region", "not an AWS region"),
    (
        "search-type",
        ["plans", "search", "--instance-type", "ml.p6-b200", "--count", "1", "--hours", "24"],
        "--instance-type",
        "not a training instance type",
    ),
    (
        "search-after",
        ["plans", "search", "--instance-type", "ml.p6-b200.48xlarge", "--start-after", "tomorrow"],
        "--start-after",
        "takes an ISO date/time",
    ),
    ("search-before", ["plans", "search", "--end-before", "2026-13-40"], "--end-before", "ISO"),
    ("search-spec", ["plans", "search", "@SPEC_MISSING"], "SPEC", "cannot read spec file"),
    (
        "reserve-offer",
        ["plans", "reserve", "TPO_X", "--name", "p", *CAPACITY],
        "OFFERING_ID",
        "'TPO_X' is not a training plan offering id",
    ),
    (
        "reserve-name",
        ["plans", "reserve", "tpo-1", "--name", "my plan", *CAPACITY],
        "--name",
        "'my plan' is not a training plan name",
    ),
    ("extend-name", ["plans", "extend", "bad name!"], "PLAN", "not a training plan name or ARN"),
    ("extend-arn", ["plans", "extend", "arn:aws:bad"], "PLAN", "not a training plan name or ARN"),
    ("extend-arn-name", ["plans", "extend", GOOD_ARN + "!"], "PLAN", "not a training plan name"),
    (
        "extend-spec",
        ["plans", "extend", "my-plan", "--spec", "@SPEC_BAD"],
        "training.seq_len",
        "training.seq_len: Input should be greater than 0",
    ),
    (
        "extend-spec-missing",
        ["plans", "extend", "my-plan", "--spec", "@SPEC_MISSING"],
        "--spec",
        "cannot read spec file",
    ),
    ("extend-region", ["plans", "extend", "my-plan", "--region", "x"], "--region", "AWS region"),
    ("describe-name", ["plans", "describe", "plan_1"], "NAME|ARN", "not a training plan name"),
    (
        "describe-spec",
        ["plans", "describe", "my-plan", "--spec", "@SPEC_DIR"],
        "--spec",
        "is a directory",
    ),
    ("list-plans-region", ["plans", "list", "--region", "us_east_1"], "--region", "AWS region"),
    ("submit-spec", ["submit", "@SPEC_BAD"], "training.seq_len", "greater than 0"),
    (
        "submit-plan",
        ["submit", "@SPEC_GOOD", "--training-plan", "bad plan!"],
        "--training-plan",
        "not a training plan name or ARN",
    ),
    ("submit-region", ["submit", "@SPEC_GOOD", "--region", "moon-1"], "--region", "AWS region"),
    ("report-job", ["report", "bad name!"], "RUN_DIR|JOB", "neither an existing run folder"),
    ("report-region", ["report", "job-1", "--region", "x-1"], "--region", "not an AWS region"),
    ("calibrate-job", ["calibrate", "bad name!", "--out", "p.yaml"], "SOURCE...", "neither an"),
    ("calibrate-txt", ["calibrate", "rows.txt", "--out", "p.yaml"], "SOURCE...", "neither an"),
    ("report-csv", ["report", "rows.csv"], "RUN_DIR|JOB", "neither an existing run folder"),
    ("calibrate-csv", ["calibrate", "@CSV_MISSING", "--out", "p.yaml"], "SOURCE", "no such"),
    (
        "calibrate-region",
        ["calibrate", "job-1", "--out", "p.yaml", "--region", "1"],
        "--region",
        "not an AWS region",
    ),
]


@pytest.mark.parametrize(
    ("args", "field", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_malformed_local_input_is_exit_2_before_any_aws_setup(no_aws, args, field, expected):
    from aws_support import spec_dict

    good = no_aws / "good.yaml"
    good.write_text(yaml.safe_dump(spec_dict()))
    bad = no_aws / "bad.yaml"
    bad.write_text(yaml.safe_dump({**spec_dict(), "training": {"seq_len": -1}}))
    files = {
        "@SPEC_GOOD": str(good),
        "@SPEC_BAD": str(bad),
        "@SPEC_DIR": str(no_aws),
        "@SPEC_MISSING": str(no_aws / "missing.yaml"),
        "@CSV_MISSING": str(no_aws / "missing.csv"),
    }
    argv = [files.get(a, a) for a in args]
    code, out, err = run(*argv, "--output", "json")
    assert code == 2, (code, out, err)
    obj = json.loads(out)["error"]
    assert obj["field"] == field, obj
    assert expected in obj["message"], obj["message"]
    assert obj["code"] != "no_region" and "Traceback" not in err


def test_well_formed_values_pass_to_the_command(no_aws):
    """The other side: `auto` is a training plan for submit (the command then needs AWS: exit 4
    no_region or no_credentials, after parsing); a naive ISO time is UTC; an option is named by its long form."""
    from datetime import UTC, datetime

    from aws_support import spec_dict

    from blackwell_sm.cli.params import flag_of, parse_iso

    good = no_aws / "good.yaml"
    good.write_text(yaml.safe_dump(spec_dict()))
    code, out, _err = run("submit", str(good), "--training-plan", "auto", "--output", "json")
    assert code == 4 and json.loads(out)["error"]["code"] in ("no_region", "no_credentials"), out
    assert parse_iso("2026-12-24T08:00", "--x") == datetime(2026, 12, 24, 8, tzinfo=UTC)
    assert parse_iso("2026-12-24T08:00+01:00", "--x").utcoffset().total_seconds() == 3600
    assert flag_of(click.Option(["-r", "--region"])) == "--region"
    assert flag_of(click.Argument(["plan"], metavar="PLAN")) == "PLAN"


def test_an_unexpected_exception_is_one_error_object():
    from cli_support import run as run_cli

    from blackwell_sm.cli.output import OUTPUT_OPTION

    class Boom(Exception):  # nothing in bsm knows it: only a catch-all can report it
        pass

    @cli.command("boom-internal", hidden=True)
    @OUTPUT_OPTION
    def boom(output: str) -> None:
        raise Boom("a bug in a test")

    try:
        code, out, err = run_cli("boom-internal", "--output", "json")
    finally:
        cli.commands.pop("boom-internal", None)
    assert code == 1
    obj = json.loads(out)["error"]
    assert obj["code"] == "internal" and obj["exit_code"] == 1
    assert obj["message"] == "Boom: a bug in a test" and "bug" in obj["hint"]
    assert "Traceback" not in out and "error: internal error: Boom: a bug in a test" in err
