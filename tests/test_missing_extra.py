"""Missing extras (issue 37, item 4): one documented error (exit 6, code `missing_extra`) naming
the extra to install, never exit 1 (a bug). `bsm data prepare` and `data verify` run where numpy
cannot be imported (a `sys.meta_path` finder blocks it in a fresh interpreter: the client's
install without extras), and every optional package of the table maps to an extra that
pyproject.toml declares with it."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from blackwell_sm.errors import EXTRAS, MissingExtraError, missing_extra

REPO = Path(__file__).resolve().parents[1]

BLOCKED = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, Block())
from blackwell_sm.cli import main
main({argv!r})
"""


def _bsm_without(blocked: set[str], *argv: str) -> subprocess.CompletedProcess[str]:
    code = BLOCKED.format(blocked=blocked, argv=list(argv))
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )


def test_data_prepare_and_verify_without_numpy_name_the_data_extra(tmp_path):
    (tmp_path / "a.txt").write_text("some text\n")
    runs = {
        "prepare": _bsm_without(
            {"numpy"},
            "data",
            "prepare",
            str(tmp_path / "a.txt"),
            "--out",
            str(tmp_path / "d"),
            "-o",
            "json",
        ),
        "verify": _bsm_without({"numpy"}, "data", "verify", str(tmp_path), "-o", "json"),
    }
    for name, r in runs.items():
        assert r.returncode == 6, (name, r.stderr)
        error = json.loads(r.stdout)["error"]
        assert error["code"] == "missing_extra" and error["exit_code"] == 6
        assert f"`bsm data {name}` needs numpy" in error["message"]
        assert error["hint"] == "pip install 'blackwell-sm[data]'"
        assert "Traceback" not in r.stderr and "internal" not in r.stderr
    assert not (tmp_path / "d").exists()


def test_chat_preparation_without_transformers_names_the_data_extra(tmp_path):
    turns = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    (tmp_path / "c.jsonl").write_text(json.dumps({"messages": turns}) + "\n")
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text("{}")
    r = _bsm_without(
        {"transformers"},
        "data",
        "prepare",
        str(tmp_path / "c.jsonl"),
        "--out",
        str(tmp_path / "d"),
        "--format",
        "chat",
        "--tokenizer",
        str(tmp_path / "tok"),
        "--seq-len",
        "16",
        "-o",
        "json",
    )
    assert r.returncode == 6, r.stderr
    error = json.loads(r.stdout)["error"]
    assert error["code"] == "missing_extra" and "transformers" in error["message"]
    assert error["hint"] == "pip install 'blackwell-sm[data]'"


def test_every_optional_package_has_its_extra_in_pyproject():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for module, extra in EXTRAS.items():
        names = [r.split(">")[0].split("=")[0].split("[")[0] for r in extras[extra]]
        assert any(n == module or n.startswith(module + "-") for n in names), (module, extra)


def test_a_bug_stays_a_bug():
    assert missing_extra(ImportError("cannot import name 'x'", name="blackwell_sm.y"), "c") is None
    assert missing_extra(KeyError("numpy"), "c") is None
    e = missing_extra(
        ModuleNotFoundError("No module named 'scipy.optimize'", name="scipy.optimize"),
        "`bsm calibrate`",
    )
    assert isinstance(e, MissingExtraError) and e.exit_code == 6 and "[calibrate]" in str(e.hint)


@pytest.mark.parametrize("doc", ["README.md", "docs/install.md"])
def test_the_docs_name_the_data_extra(doc):
    assert "blackwell-sm[data]" in (REPO / doc).read_text()
