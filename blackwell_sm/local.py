"""`bsm run-local`'s engine: plan for this machine, lay out an /opt/ml-shaped directory, and run the
real launcher (and through it torchrun and the training loop) as a subprocess.

Client side: never imports torch. The directory it leaves is what a SageMaker job leaves:

    DIR/plan.json                          the plan the launcher ran
    DIR/input/config/resourceconfig.json   one host per launcher (algo-1, algo-2, ...)
    DIR/input/config/hyperparameters.json
    DIR/input/config/inputdataconfig.json
    DIR/input/data/<channel>               linked from --channel NAME=PATH
    DIR/checkpoints/step-XXXXXXXX/         DCP checkpoints (COMPLETE marker last)
    DIR/model/                             the exported safetensors + config.json
    DIR/output/data/metrics.jsonl          one JSON record per logged step
    DIR/output/data/summary.json           measured vs predicted
    DIR/output/failure                     the reason, when it failed
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel, ConfigDict, Field

from blackwell_sm.errors import BsmError, InfeasiblePlanError, MissingExtraError, SpecError
from blackwell_sm.opt_ml import COMPLETE_MARKER, ENV_MASTER_PORT, PLAN_FILE, OptMl
from blackwell_sm.planner.plan import Plan
from blackwell_sm.records import Summary, read_summary
from blackwell_sm.spec import RunSpec

LAUNCHER_MODULE = "blackwell_sm.launch"
# In the run folder: held (flock) by the run-local that owns the folder, and by its launcher.
LOCK_FILE = ".bsm-run.lock"
# Stop signals run-local forwards to its launcher as it does Ctrl-C (the workers save and exit).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def host_names(count: int) -> list[str]:
    """SageMaker's host names: algo-1 ... algo-N."""
    return [f"algo-{i + 1}" for i in range(count)]


def layout_opt_ml(
    root: Path,
    plan: Plan,
    *,
    current_host: str = "algo-1",
    hosts: list[str] | None = None,
    channels: dict[str, Path] | None = None,
    network_interface_name: str = "lo",
) -> Path:
    """Write an /opt/ml-shaped tree at `root` for one host of `plan`; returns the plan path."""
    from blackwell_sm.atomic_write import write_text  # every file whole, as everywhere

    hosts = hosts or host_names(plan.instance.count)
    if current_host not in hosts:
        raise BsmError(f"current host {current_host!r} is not among {hosts}")
    tree = OptMl(root)
    for d in (tree.config_dir, tree.checkpoints, tree.model, tree.output_data):
        d.mkdir(parents=True, exist_ok=True)
    rc = {
        "current_host": current_host,
        "current_instance_type": plan.instance.type,
        "hosts": hosts,
        "network_interface_name": network_interface_name,
    }
    write_text(tree.resource_config, json.dumps(rc, indent=2) + "\n", flag=None)
    # SageMaker passes hyperparameters as strings; the plan is the real source of settings.
    hp = {"plan": PLAN_FILE, "model": plan.model.name}
    write_text(tree.hyperparameters, json.dumps(hp, indent=2) + "\n", flag=None)
    data_cfg: dict[str, Any] = {}
    for name, src in (channels or {}).items():
        dst = tree.channel(name)
        dst.parent.mkdir(parents=True, exist_ok=True)
        if dst.is_symlink() or dst.exists():
            if dst.is_symlink() or dst.is_file():
                dst.unlink()
            else:
                shutil.rmtree(dst)
        dst.symlink_to(Path(src).resolve(), target_is_directory=True)
        data_cfg[name] = {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated"}
    write_text(tree.input_data_config, json.dumps(data_cfg, indent=2) + "\n", flag=None)
    plan_path = root / PLAN_FILE
    write_text(plan_path, plan.to_json() + "\n", flag=None)
    return plan_path


def free_port() -> int:
    """A TCP port free on loopback now (for the local master)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launcher_command(plan_path: Path, opt_ml: Path, *, dry_run: bool = False) -> list[str]:
    cmd = [sys.executable, "-m", LAUNCHER_MODULE, "--plan", str(plan_path), "--opt-ml", str(opt_ml)]
    return cmd + (["--dry-run"] if dry_run else [])


def launcher_env(*, master_port: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a local launcher: the package importable, a free master port."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    env[ENV_MASTER_PORT] = str(master_port)
    env.update(extra or {})
    return env


class LocalRunResult(BaseModel):
    """Where a local run left its files, and what it measured."""

    model_config = ConfigDict(extra="forbid")

    out_dir: str
    exit_code: int
    plan_path: str
    checkpoints: list[str] = Field(description="Complete checkpoint directories, oldest first.")
    model_dir: str
    model_files: list[str]
    metrics_path: str
    summary: Summary | None = Field(description="The loop's summary.json, when written.")
    failure: str | None = None


def collect_result(out: Path, plan_path: Path, exit_code: int) -> LocalRunResult:
    """Read back what the run left in `out`."""
    tree = OptMl(out)
    ckpts = sorted(
        str(p)
        for p in tree.checkpoints.glob("step-*")
        if p.is_dir() and (p / COMPLETE_MARKER).is_file()
    )
    model_dir = tree.model
    summary_path, failure_path = tree.summary, tree.failure
    return LocalRunResult(
        out_dir=str(out),
        exit_code=exit_code,
        plan_path=str(plan_path),
        checkpoints=ckpts,
        model_dir=str(model_dir),
        model_files=sorted(p.name for p in model_dir.iterdir()) if model_dir.is_dir() else [],
        metrics_path=str(tree.metrics),
        summary=read_summary(summary_path) if summary_path.is_file() else None,
        failure=failure_path.read_text().strip() if failure_path.is_file() else None,
    )


def measure_cpu_peak(spec: RunSpec, nproc: int) -> float:
    """This machine's achieved bf16 matmul rate per worker, TFLOP/s: a ~0.25 s timed matmul of
    the model's largest per-sequence shape in a fresh Python with the workers' kernels and thread
    count (`blackwell_sm.train.peak`; this side never imports torch)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:  # the workers need it too
        raise MissingExtraError("torch", "`bsm run-local` (the real training loop)")
    m = spec.model
    threads = 1 if nproc > 1 else (os.cpu_count() or 1)  # torchrun: 1 thread per worker if > 1
    # Capped so that one call stays in milliseconds: past ~1k a dimension the rate is flat.
    dims = (min(spec.training.seq_len, 1024), min(m.d_model, 1024), min(m.ffn_dim, 2048))
    args = [*map(str, dims), str(threads)]
    cmd = [sys.executable, "-m", "blackwell_sm.train.peak", *args]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)
        return float(json.loads(done.stdout.strip().splitlines()[-1])["flops_per_s"]) / 1e12
    except (subprocess.SubprocessError, OSError, ValueError, KeyError, IndexError) as e:
        last = (getattr(e, "stderr", None) or "").strip().splitlines()[-1:]
        raise BsmError(
            f"could not measure this machine's matmul rate for the local plan: {e}"
            + (f" ({last[0]})" if last else ""),
            hint="the matmul probe (python -m blackwell_sm.train.peak) failed: see the error",
        ) from None


def plan_local(spec: RunSpec, *, nproc: int, peak_tflops: float | None = None) -> Plan:
    """The plan for `nproc` local CPU processes; an infeasible plan is an error. `peak_tflops`:
    the measured per-worker matmul rate (`measure_cpu_peak`); None: a nominal 0.1."""
    from blackwell_sm.hardware import local_instance
    from blackwell_sm.planner.api import make_plan
    from blackwell_sm.planner.profile import profile_for

    if nproc < 1:
        raise SpecError(f"--nproc must be at least 1, not {nproc}", field="--nproc")
    from blackwell_sm.spec.hf_files import check_init_from

    check_init_from(spec)  # before the launcher starts: the workers repeat it before step 0
    inst = local_instance(nproc=nproc, peak_tflops=peak_tflops)
    plan = make_plan(spec, instance=inst, calibration=profile_for(spec))
    if not plan.feasible:
        raise InfeasiblePlanError(
            f"no configuration of {spec.model.name} fits {nproc} local CPU process(es)",
            plan=plan,
            hint="; ".join(plan.advice) or "use a smaller model or batch",
        )
    return plan


@contextlib.contextmanager
def run_folder_lock(out: Path) -> Iterator[int]:
    """Hold an exclusive `flock` on `out/.bsm-run.lock` (our PID written in it); yields its fd,
    for the launcher to inherit, so the folder stays locked while the launcher lives. A folder
    already locked is refused with the PID that holds it: two runs in one folder delete each
    other's checkpoints and interleave their metrics."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            raise BsmError(
                f"the run folder {out} is in use by another run (PID {holder})",
                hint=f"wait for it, stop it (kill -TERM {holder}), or use another --out",
                field="--out",
                code="run_folder_locked",
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield fd
    finally:
        os.close(fd)  # releases the lock once the launcher (which inherited it) is gone too


class _StopSignal(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_stop(signum: int, _frame: Any) -> None:
    raise _StopSignal(signum)


@contextlib.contextmanager
def _stop_signals_raise() -> Iterator[None]:
    """SIGTERM/SIGHUP raise `_StopSignal` in the main thread while the launcher runs (elsewhere,
    e.g. in a worker thread, handlers cannot be set and they keep their meaning)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, _raise_stop) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _stop_launcher(proc: subprocess.Popen[bytes]) -> None:
    """Ask the launcher to stop the workers cleanly (they save) and wait; a second interrupt or
    stop signal, or 120 s, kills them. SIGTERM, not SIGINT: a terminal's Ctrl-C may already have
    sent it SIGINT, and a second SIGINT means "kill"."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=120)
    except (KeyboardInterrupt, _StopSignal, subprocess.TimeoutExpired):
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGINT)  # twice: the launcher kills the workers now
        proc.wait()


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def run_local(
    spec: RunSpec,
    *,
    out: Path,
    nproc: int = 2,
    channels: dict[str, Path] | None = None,
    fresh: bool = False,
    stdout: IO[str] | None = None,
    notify: Callable[[str], None] | None = None,
) -> LocalRunResult:
    """Plan `spec` for this machine, lay out `out` like /opt/ml and run the real launcher there.

    The launcher's output streams to `stdout` (default: ours). A run that fails raises BsmError
    with the launcher's failure reason. Ctrl-C, SIGTERM and SIGHUP stop the workers cleanly (they
    save) and wait for them; then Ctrl-C re-raises, a stop signal raises BsmError (exit 128 +
    the signal). The folder is locked for the run (`run_folder_lock`); a stale `output/failure`
    is removed at the start. The data channels' manifests are checked against the spec and the
    model first (`data/agree.py`: tokenizer, vocabulary, sequence length and count); what could
    not be checked goes to `notify` (default: stderr, as `warning: ...`).
    """
    from blackwell_sm.data.agree import check_local_channels

    for line in check_local_channels(spec, channels or {}):  # before any worker starts
        (notify or _warn)(line)
    plan_local(spec, nproc=nproc)  # memory does not depend on the peak: refuse before measuring
    out = out.resolve()
    with run_folder_lock(out) as lock_fd:
        plan = plan_local(spec, nproc=nproc, peak_tflops=measure_cpu_peak(spec, nproc))
        if fresh:
            for sub in ("checkpoints", "model", "output"):
                shutil.rmtree(out / sub, ignore_errors=True)
        plan_path = layout_opt_ml(out, plan, channels=channels)
        env = launcher_env(master_port=free_port())
        with _stop_signals_raise():
            proc = subprocess.Popen(
                launcher_command(plan_path, out),
                env=env,
                stdout=stdout if stdout is not None else None,
                stderr=None,
                pass_fds=(lock_fd,),
            )
            try:
                rc = proc.wait()
            except KeyboardInterrupt:
                _stop_launcher(proc)
                raise
            except _StopSignal as e:
                _stop_launcher(proc)
                name = signal.Signals(e.signum).name
                err = BsmError(
                    f"run-local stopped by {name}: the workers were asked to save and exit; the "
                    f"launcher exited {proc.returncode}",
                    hint=f"files are in {out}; run it again to resume from the newest checkpoint",
                    code="stopped",
                )
                err.exit_code = 128 + e.signum
                raise err from None
    result = collect_result(out, plan_path, rc)
    if rc != 0:
        raise BsmError(
            f"the local run failed (exit {rc}): {result.failure or 'no failure reason written'}",
            hint=f"files are in {out}",
        )
    return result
