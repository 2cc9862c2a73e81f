"""The surfaces added last round, as hard as the old ones (issue 37 item 11), by class.

Each case runs the real command in-process (`cli_support.run`, as the older suites do), in text
and in JSON mode, from an empty working folder: exit 2, the message or the field naming the
field, variable or file; one JSON error object under `-o json`; no traceback; nothing written.
The classes: shell completion's protocol variables; an output that is its own input or a second
input missing; odd text; YAML recursion and null keys; hub ids and `init_from` schemes; dates
and bounds at the training-plan API's limits (botocore's model); BSM_* variables at their
extremes. State files that are folders, FIFOs, devices or symlink loops, and every way an
output meets an input, are in `test_output_placement.py`.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cli_support import run

TEXT = "a document of plain text\n" * 20
SPEC = "model: tiny\ntraining: {total_steps: 10}\n"


def _files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


def check(tmp: Path, args: list[str], field: str, *words: str, env: dict | None = None) -> None:
    """`bsm ARGS` in `tmp` is exit 2 naming `field` (and `words`), in text and JSON, with no
    traceback and no file written."""
    mp = pytest.MonkeyPatch()
    try:
        mp.chdir(tmp)
        for k, v in (env or {}).items():
            mp.setenv(k, v)
        before = _files(tmp)
        code, out, err = run(*args, "-o", "json")
        assert code == 2, (code, out, err)
        assert "Traceback" not in err + out
        obj = json.loads(out)  # one object, nothing else on stdout
        e = obj["error"]
        assert e["exit_code"] == 2 and (e["field"] == field or field in e["message"]), e
        for w in words:
            assert w in e["message"], (w, e)
        code, out, err = run(*args)
        assert code == 2 and "Traceback" not in err + out and "error:" in err
        assert _files(tmp) == before
    finally:
        mp.undo()


@pytest.fixture
def here(tmp_path: Path) -> Path:
    (tmp_path / "a.txt").write_text(TEXT)
    (tmp_path / "spec.yaml").write_text(SPEC)
    return tmp_path


# -- shell completion's protocol variables ---------------------------------------------------------
COMPLETION = [
    ("instruction-unknown", {"_BSM_COMPLETE": "bash_sourcex"}, "_BSM_COMPLETE"),
    ("instruction-empty", {"_BSM_COMPLETE": ""}, "_BSM_COMPLETE"),
    ("instruction-no-shell", {"_BSM_COMPLETE": "tcsh_complete"}, "_BSM_COMPLETE"),
    ("cword-word", {"COMP_WORDS": "bsm plan", "COMP_CWORD": "x"}, "COMP_CWORD"),
    ("cword-empty", {"COMP_WORDS": "bsm plan", "COMP_CWORD": ""}, "COMP_CWORD"),
    ("cword-negative", {"COMP_WORDS": "bsm plan", "COMP_CWORD": "-1"}, "COMP_CWORD"),
    ("cword-past-the-line", {"COMP_WORDS": "bsm plan", "COMP_CWORD": "99"}, "COMP_CWORD"),
    ("cword-huge", {"COMP_WORDS": "bsm", "COMP_CWORD": "9" * 5000}, "COMP_CWORD"),
    ("words-missing", {"COMP_CWORD": "1"}, "COMP_WORDS"),
    ("words-huge", {"COMP_WORDS": "bsm " + "x" * 100_000, "COMP_CWORD": "1"}, "COMP_WORDS"),
    ("cword-missing", {"COMP_WORDS": "bsm pl"}, "COMP_CWORD"),
]


@pytest.mark.parametrize(("case", "env", "var"), COMPLETION, ids=[c[0] for c in COMPLETION])
def test_completion_protocol(here, monkeypatch, case, env, var):
    for k in ("COMP_WORDS", "COMP_CWORD"):
        monkeypatch.delenv(k, raising=False)
    env = {"_BSM_COMPLETE": "bash_complete", **env}
    check(here, [], var, env=env)


def test_completion_still_completes(here):
    """A well-formed request still gets candidates (a process: click writes bytes to stdout)."""
    import subprocess
    import sys

    env = {**os.environ, "_BSM_COMPLETE": "bash_complete", "COMP_WORDS": "bsm pla"}
    env["COMP_CWORD"] = "1"
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        [sys.executable, "-m", "blackwell_sm"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and "plain,plan" in done.stdout, done.stderr


# -- an output that is its own input, or a second input missing -------------------------------------
def test_outputs_and_missing_inputs(here):
    check(here, ["data", "prepare", "a.txt", "--out", "."], "--out", "holding the input")
    check(here, ["data", "prepare", "a.txt", "--out", "a.txt"], "--out")
    check(here, ["data", "prepare", "a.txt", "gone.txt", "--out", "o"], "INPUT", "gone.txt")
    run_ = here / "run"
    run_.mkdir()
    (run_ / "plan.json").write_text("{}")
    check(here, ["report", "run", "--out", "run/plan.json"], "--out", "not written by")
    check(here, ["report", "run", "--out", "."], "--out", "holding the input")
    check(here, ["report", "run", "gone/", "--out", "r.html"], "RUN_DIR|JOB", "gone/")
    pytest.importorskip("scipy")
    check(here, ["calibrate", "run", "--out", "run/plan.json"], "--out", "not written by")
    check(here, ["calibrate", "run", "gone.csv", "--out", "c.yaml"], "gone.csv")


# -- odd text -------------------------------------------------------------------------------------------
def test_odd_text(here):
    (here / "empty.txt").write_text("")
    (here / "blank.txt").write_text("\n  \n")
    (here / "rows.csv").write_text("id,text\n1,hello\n")
    (here / "lone.jsonl").write_text('{"text": "abc \\ud800 def"}\n')
    (here / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (here / "surrogate-bytes.txt").write_bytes(b"ab\xed\xa0\x80cd")  # a surrogate, UTF-8-coded
    (here / "none.jsonl").write_text("\n\n")
    os.symlink(here / "a.txt", here / "again.txt")
    for args, words in (
        (["empty.txt"], ("empty.txt", "no text")),
        (["blank.txt"], ("no text",)),
        (["rows.csv"], ("rows.csv", "not text")),
        (["lone.jsonl"], ("lone surrogate", "U+D800")),
        (["latin1.txt"], ("not UTF-8",)),
        (["surrogate-bytes.txt"], ("not UTF-8",)),
        (["none.jsonl"], ("no text",)),
        (["a.txt", "a.txt"], ("given twice",)),
        (["a.txt", "again.txt"], ("same file",)),
    ):
        check(here, ["data", "prepare", *args, "--out", "o"], "INPUT", *words)


# -- YAML recursion and null keys -----------------------------------------------------------------------
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdef", "bcdefg", strict=True)
)
YAML_CASES = {
    "alias-bomb": (BOMB, "aliases are expanded"),
    "recursive-anchor": ("model: tiny\nx: &a {b: *a}\n", "its own anchor"),
    "recursive-sequence": ("model: tiny\nx: &a [1, *a]\n", "its own anchor"),
    "null-key-tilde": ("model: tiny\n~: 3\n", "null key"),
    "null-key-word": ("model: tiny\nnull: 3\n", "null key"),
    "null-key-empty": ("model: tiny\n? \n: 3\n", "null key"),
    "null-key-nested": ("model: tiny\ntraining: {~: 1}\n", "null key"),
}


@pytest.mark.parametrize("case", list(YAML_CASES))
def test_yaml_recursion_and_null_keys(here, case):
    text, words = YAML_CASES[case]
    (here / "bad.yaml").write_text(text)
    check(here, ["plan", "bad.yaml"], "bad.yaml", words)


# -- hub ids and init_from schemes ------------------------------------------------------------------------
HUB_IDS = [
    "a..b/model",
    "org--x/model",
    "org/model.git",
    "-org/model",
    "org/model@x/../y",
    "org/model@x//y",
    "org/model@main.lock",
    "org/" + "m" * 120,
]


@pytest.mark.parametrize("hub", HUB_IDS)
def test_hub_ids_to_the_hubs_rules(here, monkeypatch, hub):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (here / "hub.yaml").write_text(f"model: {{hf: '{hub}'}}\ntraining: {{total_steps: 10}}\n")
    check(here, ["plan", "hub.yaml"], "model.hf")


INIT_FROM = {
    "hf-traversal": "hf://../../etc/passwd",
    "hf-doubled-slash": "hf://meta-llama//Llama-3.1-8B",
    "hf-id": "hf://meta-llama/Llama-3.1-8B",
    "file-scheme": "file:///etc",
    "http": "https://example.com/weights/",
    "gs": "gs://bucket/prefix/",
}


@pytest.mark.parametrize("case", list(INIT_FROM))
def test_init_from_takes_a_folder_or_s3_only(here, case):
    (here / "i.yaml").write_text(
        f"model: tiny\ntraining:\n  total_steps: 10\n  init_from: '{INIT_FROM[case]}'\n"
    )
    check(here, ["plan", "i.yaml"], "training.init_from")


# -- dates and bounds at the API's limits ------------------------------------------------------------------
def _iso(days: float) -> str:
    return (datetime.now(UTC) + timedelta(days=days)).strftime("%Y-%m-%dT%H:%M")


TYPE = ["--instance-type", "ml.p6-b200.48xlarge"]
BOUNDS = {
    "hours-nan": (["plans", "search", *TYPE, "--hours", "nan"], "--hours"),
    "hours-inf": (["plans", "search", *TYPE, "--hours", "inf"], "--hours"),
    "hours-negative": (["plans", "search", *TYPE, "--hours", "-5"], "--hours"),
    "hours-over-api-max": (["plans", "search", *TYPE, "--hours", "87601"], "--hours"),
    "hours-word": (["plans", "search", *TYPE, "--hours", "lots"], "--hours"),
    "count-over-api-max": (
        ["plans", "search", *TYPE, "--hours", "24", "--count", "257"],
        "--count",
    ),
    "count-fraction": (
        ["plans", "reserve", "o-1", *TYPE, "--hours", "24", "--count", "1.5"],
        "--count",
    ),
    "count-zero": (["plans", "search", *TYPE, "--hours", "24", "--count", "0"], "--count"),
    "until-past": (["plans", "extend", "my-plan", "--until", _iso(-1)], "--until"),
    "until-past-the-api": (["plans", "extend", "my-plan", "--until", _iso(3651 + 366)], "--until"),
    "until-nan": (["plans", "extend", "my-plan", "--until", "NaN"], "--until"),
    "end-before-past": (
        ["plans", "search", *TYPE, "--hours", "24", "--end-before", _iso(-2)],
        "--end-before",
    ),
    "window-reversed": (
        [
            "plans",
            "search",
            *TYPE,
            "--hours",
            "24",
            "--start-after",
            _iso(10),
            "--end-before",
            _iso(5),
        ],
        "--end-before",
    ),
    "window-too-short": (
        [
            "plans",
            "search",
            *TYPE,
            "--hours",
            "48",
            "--start-after",
            _iso(10),
            "--end-before",
            _iso(11),
        ],
        "--end-before",
    ),
    "logs-timeout-nan": (["logs", "some-job", "--follow", "--timeout", "nan"], "--timeout"),
    "logs-timeout-inf": (["logs", "some-job", "--follow", "--timeout", "inf"], "--timeout"),
}


@pytest.mark.parametrize("case", list(BOUNDS))
def test_dates_and_bounds_at_the_apis_limits(here, case):
    args, field = BOUNDS[case]
    check(here, args, field)


def test_the_bounds_are_botocores():
    """The limits come from the service model, not a copy: the message quotes them."""
    from blackwell_sm.aws.session import service_model

    shape = service_model("sagemaker").shape_for("TrainingPlanDurationHoursInput")
    code, out, _ = run("plans", "search", *TYPE, "--hours", "1e9", "-o", "json")
    assert code == 2 and f"to {shape.metadata['max']}" in json.loads(out)["error"]["message"]


# -- BSM_* variables at their extremes -----------------------------------------------------------------------
ENV_CASES = [
    (var, value)
    for var in (
        "BSM_AWS_CONNECT_TIMEOUT_S",
        "BSM_AWS_READ_TIMEOUT_S",
        "BSM_AWS_CALL_DEADLINE_S",
        "BSM_AWS_UPLOAD_MIB_PER_S",
    )
    for value in ("", "soon", "1e300", "9" * 5000, "nan", "-1")
]


@pytest.mark.parametrize(("var", "value"), ENV_CASES, ids=[f"{v}={x[:6]}" for v, x in ENV_CASES])
def test_aws_settings_at_their_extremes(here, var, value):
    check(here, ["status", "some-job", "--region", "us-east-1"], var, env={var: value})


@pytest.mark.parametrize("value", ["soon", "nan", "inf", "-3", "9" * 5000, "0"])
def test_price_override_at_its_extremes(here, value):
    var = "BSM_PRICE_ML_P6_B200_48XLARGE"
    (here / "b.yaml").write_text("model: llama-3.2-1b\ntraining: {total_tokens: 1000000000}\n")
    check(here, ["plan", "b.yaml"], var, env={var: value})


@pytest.mark.parametrize("value", ["nowhere.yaml", "x" * 5000, "/dev/null", "."])
def test_calibration_variable_at_its_extremes(here, value):
    check(here, ["plan", "spec.yaml"], "BSM_CALIBRATION", env={"BSM_CALIBRATION": value})
