"""The launcher command: build the launch from the files and the environment, then supervise it."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from blackwell_sm.errors import BsmError
from blackwell_sm.launch import WORKER_MODULE, log
from blackwell_sm.launch.checks import check_before_launch
from blackwell_sm.launch.failure import (
    RankFailure,
    failure_reason,
    failure_timeline,
    signal_name,
    torchrun_failures,
    write_failure,
)
from blackwell_sm.launch.network import network_env
from blackwell_sm.launch.select import GpuProbe, cuda_gpus, select_plan
from blackwell_sm.launch.supervise import Supervisor
from blackwell_sm.launch.topology import (
    Topology,
    check_devices,
    derive_topology,
    read_plan,
    read_resource_config,
    wait_for_master,
)
from blackwell_sm.opt_ml import (
    ENV_DNS_WAIT_S,
    ENV_JOB_START_UNIX,
    ENV_OPT_ML,
    ENV_STOP_GRACE_S,
    OptMl,
    root_from_env,
)
from blackwell_sm.records import Summary, read_summary

# SageMaker kills ~120 s after SIGTERM; workers get this long to finish the step and save.
DEFAULT_STOP_GRACE_S = 100.0


class LaunchSpec(BaseModel):
    """The full launch: torchrun argv, environment changes and topology (the --dry-run output)."""

    model_config = ConfigDict(extra="forbid")

    torchrun: list[str]
    env: dict[str, str] = Field(description="Variables added or changed for the workers.")
    env_removed: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list, description="Why each env change was made.")
    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int
    nproc_per_node: int
    topology: Topology
    plan_path: str = Field(
        description="The plan the workers run (plans/<type>.json with instance preferences)."
    )
    plan_choice: str | None = Field(None, description="Why that plan, with instance preferences.")


def package_root() -> Path:
    """The directory holding the `blackwell_sm` package (the bundle root in the container)."""
    return Path(__file__).resolve().parents[2]


def build_launch(
    plan_path: Path,
    opt_ml: Path,
    environ: dict[str, str] | None = None,
    *,
    log_dir: Path | None = None,
    start_unix: float | None = None,
    gpu_probe: GpuProbe = cuda_gpus,
) -> LaunchSpec:
    """Everything the launcher will run, derived from the files and the environment (pure but
    for `gpu_probe`, asked only when a bundle with plans/ meets a resourceconfig without
    current_instance_type)."""
    environ = dict(os.environ if environ is None else environ)
    rc = read_resource_config(opt_ml)
    plan_path, choice = select_plan(plan_path, rc.current_instance_type, read_plan, gpu_probe)
    plan = read_plan(plan_path)
    topo = derive_topology(rc, plan, environ)
    add, remove, notes = network_env(topo, rc, environ)

    add[ENV_JOB_START_UNIX] = f"{start_unix if start_unix is not None else time.time():.3f}"
    add[ENV_OPT_ML] = str(opt_ml)
    add["PYTHONUNBUFFERED"] = "1"
    root = str(package_root())
    pp = environ.get("PYTHONPATH", "")
    if root not in pp.split(os.pathsep):
        add["PYTHONPATH"] = root + (os.pathsep + pp if pp else "")
    if "OMP_NUM_THREADS" not in environ:
        threads = max(1, (os.cpu_count() or 1) // topo.nproc_per_node)
        add["OMP_NUM_THREADS"] = str(min(threads, 8))

    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(topo.nnodes),
        "--node-rank",
        str(topo.node_rank),
        "--nproc-per-node",
        str(topo.nproc_per_node),
        "--rdzv-backend",
        "static",
        "--master-addr",
        topo.master_addr,
        "--master-port",
        str(topo.master_port),
        # SageMaker (or the user) restarts the job; resuming from the checkpoint is the loop's.
        "--max-restarts",
        "0",
    ]
    if log_dir is not None:
        # Per-rank stdout/stderr files and torchelastic error files land here (for `failure`).
        argv += ["--log-dir", str(log_dir), "--tee", "3"]
    argv += ["-m", WORKER_MODULE, "--plan", str(plan_path.resolve()), "--opt-ml", str(opt_ml)]
    return LaunchSpec(
        torchrun=argv,
        env=add,
        env_removed=remove,
        notes=notes,
        nnodes=topo.nnodes,
        node_rank=topo.node_rank,
        master_addr=topo.master_addr,
        master_port=topo.master_port,
        nproc_per_node=topo.nproc_per_node,
        topology=topo,
        plan_path=str(plan_path),
        plan_choice=choice,
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m blackwell_sm.launch",
        description="The container's launcher: read /opt/ml, set the network environment, supervise torchrun.",
    )
    p.add_argument("--plan", required=True, type=Path, help="plan.json (shipped in the bundle)")
    p.add_argument(
        "--opt-ml",
        type=Path,
        default=None,
        help="the /opt/ml root (default: $BSM_OPT_ML or /opt/ml)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the launch as JSON and exit")
    return p


def completed_before_teardown(
    opt_ml: Path, since: float, failures: list[RankFailure]
) -> Summary | None:
    """The run's summary if this launch wrote a `completed` summary.json and every rank torchrun
    reports failed died of a signal (an abort in process teardown, after everything was written);
    else None. Such a run is a success: the work is on disk, and a retry would only redo it.
    Only the first host has summary.json (rank 0 writes it): on the others a teardown abort is
    still a failure, and the clean exit (train/main.py exit_now) is what prevents it."""
    path = OptMl(opt_ml).summary
    if not failures or any(f.exitcode >= 0 for f in failures):
        return None
    try:
        if path.stat().st_mtime < since:
            return None  # an earlier launch's summary
        summary = read_summary(path)
    except (OSError, BsmError):  # unreadable or malformed: not a proof of completion
        return None
    return summary if summary.completed else None


def run(spec: LaunchSpec, opt_ml: Path, log_dir: Path) -> int:
    """Supervise torchrun for `spec`; on failure write `opt_ml/output/failure`. Returns its code."""
    topo = spec.topology
    started = time.time()
    env = {k: v for k, v in os.environ.items() if k not in spec.env_removed}
    env.update(spec.env)
    grace = float(os.environ.get(ENV_STOP_GRACE_S, DEFAULT_STOP_GRACE_S))
    sup = Supervisor(spec, env, grace)
    old = {s: signal.signal(s, sup.on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        rc = sup.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        sup.finish()
    if topo.device == "cuda" and "network" not in sup.out.nccl | sup.err.nccl and topo.nnodes > 1:
        log("NCCL did not report its network (NCCL_DEBUG was set by the user?)")
    if rc == 0:
        log("workers finished (exit 0)")
        return 0
    tail = list(sup.err.tail)
    failures = torchrun_failures(tail)
    done = (
        None
        if sup.stop_signal is not None
        else completed_before_teardown(opt_ml, started, failures)
    )
    if done is not None:
        who = ", ".join(f"rank {f.rank} by {signal_name(-f.exitcode)}" for f in failures)
        log(
            f"the run completed (summary.json: status completed at step {done.final_step}), "
            f"then worker(s) died in process teardown ({who}); counted as a success, exit 0"
        )
        return 0
    if failures:
        log(f"failed ranks by time: {failure_timeline(failures, sup.exit_watch.exits)}")
    reason = failure_reason(
        rc, topo=topo, log_dir=log_dir, stderr_tail=tail, exit_times=sup.exit_watch.exits
    )
    if sup.stop_signal is not None:
        reason = f"stopped by {signal_name(sup.stop_signal)}; " + reason
    write_failure(opt_ml, reason)
    log(f"FAILED (exit {rc}): {reason.splitlines()[0]}")
    log(f"reason written to {OptMl(opt_ml).failure}")
    return rc


def main(argv: list[str] | None = None) -> int:
    """Launcher entry point (also called by `entrypoints/launch.py`)."""
    start = time.time()
    args = _parser().parse_args(argv)
    opt_ml = (args.opt_ml or root_from_env()).resolve()
    log_dir = None
    try:
        if args.dry_run:
            spec = build_launch(args.plan, opt_ml, start_unix=start)
            sys.stdout.write(spec.model_dump_json(indent=2) + "\n")
            return 0
        # A previous attempt's reason (a SageMaker retry, a rerun of run-local) must not outlive
        # this one, whatever ends it.
        OptMl(opt_ml).failure.unlink(missing_ok=True)
        log_dir = Path(tempfile.mkdtemp(prefix="bsm-torchrun-"))
        spec = build_launch(args.plan, opt_ml, log_dir=log_dir, start_unix=start)
        topo = spec.topology
        log(
            f"host {topo.current_host}: node {topo.node_rank} of {topo.nnodes}, "
            f"{topo.nproc_per_node} process(es) on {topo.device}, master "
            f"{topo.master_addr}:{topo.master_port}"
        )
        if spec.plan_choice:
            log(f"plan {spec.plan_path}: for {spec.plan_choice}")
        for note in spec.notes:
            log(f"env: {note}")
        check_devices(topo)
        for line in check_before_launch(Path(spec.plan_path), opt_ml, topo.current_host):
            log(line)
        wait_for_master(topo, float(os.environ.get(ENV_DNS_WAIT_S, "300")))
        return run(spec, opt_ml, log_dir)
    except BsmError as e:
        msg = f"launcher on {os.environ.get('HOSTNAME', socket.gethostname())}: {e.message}"
        if e.hint:
            msg += f" (hint: {e.hint})"
        if not args.dry_run:
            write_failure(opt_ml, msg)
        log(f"error: {msg}")
        return e.exit_code
    finally:
        if log_dir is not None:
            shutil.rmtree(log_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
