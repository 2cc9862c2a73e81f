"""The container command the request sets, run for real: unpack the builder's bundle from an
/opt/ml-shaped tree and start the shipped launcher on the shipped plan (its --dry-run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from job_plans import plan_for, run_spec

from blackwell_sm.job.request import build_job_request
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
    assert (code / "entrypoints" / "launch.py").is_file()
    torchrun = launch["torchrun"]
    assert torchrun[torchrun.index("-m", 3) + 1] == "blackwell_sm.train.main"
    assert torchrun[torchrun.index("--plan") + 1] == str(shipped.resolve())
    assert torchrun[torchrun.index("--opt-ml") + 1] == str(opt_ml.resolve())
    # the workers import the bundle's package, not the one installed on this machine
    assert launch["env"]["PYTHONPATH"].split(os.pathsep)[0] == str(code.resolve())
    assert (launch["nnodes"], launch["node_rank"], launch["nproc_per_node"]) == (2, 1, 8)
    assert launch["master_addr"] == "algo-1"
