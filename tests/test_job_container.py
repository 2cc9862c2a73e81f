"""The container command the request sets, run for real: unpack the builder's bundle from an
/opt/ml-shaped tree and start the shipped launcher on the shipped plan (its --dry-run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from aws_support import plan_for, run_spec

from blackwell_sm.job.request import CONTAINER_COMMAND, build_job_request
from blackwell_sm.planner.plan import Plan


def test_container_command_starts_the_launcher_with_the_shipped_plan(tmp_path):
    spec = run_spec()
    plan = plan_for(spec)
    req = build_job_request(spec, plan)
    opt_ml = tmp_path / "opt" / "ml"
    channel = opt_ml / "input" / "data" / "code"
    channel.mkdir(parents=True)
    (channel / "bundle.tar.gz").write_bytes(req.bundle.data)
    config = opt_ml / "input" / "config"
    config.mkdir(parents=True)
    hosts = ["algo-1", "algo-2"]  # the plan is for 2 instances; this is the second
    (config / "resourceconfig.json").write_text(
        json.dumps({"current_host": "algo-2", "hosts": hosts, "network_interface_name": "eth0"})
    )
    entrypoint = req.request["AlgorithmSpecification"]["ContainerEntrypoint"]
    assert entrypoint[:2] == ["bash", "-c"]
    argv = [*entrypoint[:2], entrypoint[2] + " --dry-run"]  # the launcher's contract flag
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "BSM_", "AWS_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["BSM_OPT_ML"] = str(opt_ml)
    out = subprocess.run(
        argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    launch = json.loads(out.stdout)

    code = opt_ml / "code"
    shipped = code / "plan.json"
    assert Plan.from_json(shipped.read_text()) == plan
    assert (code / "blackwell_sm" / "entrypoints" / "launch.py").is_file()
    torchrun = launch["torchrun"]
    assert torchrun[torchrun.index("-m", 3) + 1] == "blackwell_sm.train.main"
    assert torchrun[torchrun.index("--plan") + 1] == str(shipped.resolve())
    assert torchrun[torchrun.index("--opt-ml") + 1] == str(opt_ml.resolve())
    # the workers import the bundle's package, not the one installed on this machine
    assert launch["env"]["PYTHONPATH"].split(os.pathsep)[0] == str(code.resolve())
    assert (launch["nnodes"], launch["node_rank"], launch["nproc_per_node"]) == (2, 1, 8)
    assert launch["master_addr"] == "algo-1"


def test_container_command_execs_the_launcher_so_it_receives_sigterm(tmp_path):
    """The process that runs `python blackwell_sm/entrypoints/launch.py` is the entrypoint process itself
    (PID 1 in the container), so SageMaker's SIGTERM goes straight to the launcher. Recent bash
    often execs a -c string's last command by itself; the explicit `exec` makes it certain on
    every bash, which is why the command must keep it."""
    assert "; exec python blackwell_sm/entrypoints/launch.py " in CONTAINER_COMMAND
    spec = run_spec()
    req = build_job_request(spec, plan_for(spec))
    opt_ml = tmp_path / "ml"
    (opt_ml / "input" / "data" / "code").mkdir(parents=True)
    (opt_ml / "input" / "data" / "code" / "bundle.tar.gz").write_bytes(req.bundle.data)
    shim_dir = tmp_path / "bin"
    shim_dir.mkdir()
    shim = shim_dir / "python"  # stands in for the image's python: reports who runs it
    shim.write_text('#!/bin/sh\necho "$$ $*"\n')
    shim.chmod(0o755)
    env = {"PATH": f"{shim_dir}{os.pathsep}/usr/bin{os.pathsep}/bin", "BSM_OPT_ML": str(opt_ml)}
    proc = subprocess.Popen(
        req.request["AlgorithmSpecification"]["ContainerEntrypoint"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    pid, args = out.strip().split(" ", 1)
    assert int(pid) == proc.pid
    assert args == f"blackwell_sm/entrypoints/launch.py --plan plan.json --opt-ml {opt_ml}"
