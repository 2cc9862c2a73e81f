"""The CI example (docs/examples/github-actions.yml, explained in docs/ci.md) is a workflow
GitHub would run: check-jsonschema validates it against the GitHub workflow schema it ships
(SchemaStore's, offline), and the checks below hold what a schema cannot: every `bsm` line is a
real command, no `${{ }}` is pasted into a shell script, and every output it reads is written.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from doc_commands import check_invocation, invocations

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / "docs" / "examples" / "github-actions.yml"


def _lint(path: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.fail("check-jsonschema is missing: `make install` (it is in the [dev] extra)")
    cmd = [exe, "--builtin-schema", "vendor.github-workflows", str(path)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


def _workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def test_the_workflow_passes_the_linter_and_the_linter_catches_a_broken_one(tmp_path):
    ok = _lint(WORKFLOW)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    broken = tmp_path / "broken.yml"
    broken.write_text(WORKFLOW.read_text().replace("runs-on:", "runs_on:", 1))
    assert _lint(broken).returncode != 0


def _steps():
    for job_id, job in _workflow()["jobs"].items():
        for step in job["steps"]:
            yield job_id, job, step


def test_every_bsm_line_is_a_real_command():
    scripts = [s.get("run", "") for _, _, s in _steps()]
    lines = [inv for run in scripts for ln in run.splitlines() for inv in invocations(ln.strip())]
    assert any("--resume" in ln for ln in lines) and any("--yes" in ln for ln in lines)
    assert [(ln, why) for ln in lines if (why := check_invocation(ln))] == []


def test_no_expression_is_pasted_into_a_shell_script():
    """`${{ ... }}` in `run:` is script injection waiting to happen: pass values through env."""
    assert [s["run"] for _, _, s in _steps() if "${{" in s.get("run", "")] == []


def test_every_output_read_is_written():
    wf = _workflow()
    text = WORKFLOW.read_text()
    for job_id, job in wf["jobs"].items():
        for ref_step, name in re.findall(
            r"steps\.([\w-]+)\.outputs\.([\w-]+)", yaml.safe_dump(job)
        ):
            writer = next((s for s in job["steps"] if s.get("id") == ref_step), None)
            assert writer is not None, (job_id, ref_step)
            assert f'echo "{name}=' in writer["run"], (job_id, ref_step, name)
    for job_id, name in re.findall(r"needs\.([\w-]+)\.outputs\.([\w-]+)", text):
        assert name in wf["jobs"][job_id]["outputs"], (job_id, name)
    assert wf["permissions"]["id-token"] == "write"  # the OIDC role needs the token
