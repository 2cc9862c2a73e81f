"""The container's command: read /opt/ml, set the network environment, supervise torchrun.

`python -m blackwell_sm.train.launch --plan PLAN.json [--opt-ml DIR] [--dry-run]`

One launcher runs per host (SageMaker starts the same command on every instance). It

1. reads `DIR/input/config/resourceconfig.json` and the plan, and derives the torchrun topology:
   hosts in natural order (`algo-2` before `algo-10`), node rank = this host's index in that
   order, master = the first host (or `$BSM_MASTER_ADDR`), port `$BSM_MASTER_PORT` or 29500,
   processes per node = the plan's `gpus_per_instance`;
2. refuses a host count different from the plan's `instance.count`, a plan whose process count
   does not match its mesh, and (on CUDA) fewer visible GPUs than the plan needs;
3. sets the NCCL/EFA environment for EFA instances (p5, p5en, p6-b200, p6-b300) and drops the
   `NCCL_PROTO=simple` the SageMaker SDK's own driver forces;
4. runs `python -m torch.distributed.run` (static rendezvous) on the worker
   `blackwell_sm.train.main`, forwards SIGTERM/SIGINT to every worker, reports which NCCL network
   NCCL chose, and exits with the workers' status;
5. on failure writes the real reason (the failing rank's exception from its torchelastic error
   file, else the signal or exit code and the tail of its stderr) to `DIR/output/failure`, whose
   first 1024 characters SageMaker shows as the job's FailureReason.

It imports neither torch (except to count GPUs on CUDA plans) nor boto3/sagemaker.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from blackwell_sm.errors import BsmError, CapabilityError, SpecError
from blackwell_sm.hardware import CATALOG
from blackwell_sm.planner.plan import Plan

WORKER_MODULE = "blackwell_sm.train.main"
DEFAULT_MASTER_PORT = 29500
# SageMaker kills ~120 s after SIGTERM; workers get this long to finish the step and save.
DEFAULT_STOP_GRACE_S = 100.0
FAILURE_LIMIT = 1024
LOG = "[bsm-launch]"

# Instances whose inter-node traffic goes over EFA through the aws-ofi-nccl plugin (the catalog
# says which). The SDK's driver only sets FI_PROVIDER=efa up to p5e, so p5en/p6 silently fall
# back to TCP without this.
EFA_INSTANCES = frozenset(name for name, t in CATALOG.items() if t.efa_provider_env)
# NCCL's socket auto-detection prefers `ib*` interfaces; on p6-b200 the `ibp*` devices are NVLink
# controllers, so bootstrap traffic must never go there.
SOCKET_IFNAME_EXCLUDE = "^lo,docker,ibp"


class ResourceConfig(BaseModel):
    """SageMaker's `resourceconfig.json` (the keys this launcher uses).

    extra="ignore": SageMaker adds keys (instance groups, current_instance_type) that are not
    ours to forbid.
    """

    model_config = ConfigDict(extra="ignore")

    current_host: str = Field(description="This host's name, e.g. algo-1.")
    hosts: list[str] = Field(min_length=1, description="All hosts of the job.")
    network_interface_name: str | None = Field(None, description="Primary interface, e.g. eth0.")


class Topology(BaseModel):
    """What torchrun is told, and where it came from."""

    model_config = ConfigDict(extra="forbid")

    hosts: list[str]
    current_host: str
    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int
    nproc_per_node: int
    device: str = Field(description="cpu or cuda, from the plan's instance.")
    instance_type: str


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


def _log(msg: str) -> None:
    print(f"{LOG} {msg}", file=sys.stderr, flush=True)


def natural_key(name: str) -> list[Any]:
    """Sort key that orders `algo-2` before `algo-10`."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def read_resource_config(opt_ml: Path) -> ResourceConfig:
    """Parse `opt_ml/input/config/resourceconfig.json`, failing with the file named."""
    path = opt_ml / "input" / "config" / "resourceconfig.json"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise BsmError(
            f"{path} not found",
            hint="run inside a SageMaker training job, or pass --opt-ml to a directory laid "
            "out like /opt/ml (bsm run-local does this)",
        ) from None
    except json.JSONDecodeError as e:
        raise BsmError(f"{path} is not valid JSON: {e}") from None
    try:
        return ResourceConfig.model_validate(data)
    except ValidationError as e:
        fields = ", ".join(".".join(map(str, x["loc"])) + ": " + x["msg"] for x in e.errors())
        raise BsmError(f"{path} is not a resourceconfig: {fields}") from None


def read_plan(path: Path) -> Plan:
    from blackwell_sm.safe_load import load_mapping

    try:
        return Plan.model_validate(
            load_mapping(path, field="plan.json", fmt="json", label="plan file")
        )
    except ValidationError as e:
        raise BsmError(f"{path} is not a valid plan: {e.errors()[0]['msg']}") from None


def plan_device(plan: Plan) -> str:
    """cpu for a local CPU plan, else cuda."""
    return "cpu" if plan.instance.gpu == "cpu" or plan.instance.type == "local-cpu" else "cuda"


def derive_topology(rc: ResourceConfig, plan: Plan, environ: dict[str, str]) -> Topology:
    """nnodes, node rank, master address/port and processes per node; refuses mismatches."""
    hosts = sorted(rc.hosts, key=natural_key)
    if len(set(hosts)) != len(hosts):
        raise BsmError(f"resourceconfig.json lists a host twice: {rc.hosts}")
    if rc.current_host not in hosts:
        raise BsmError(
            f"resourceconfig.json: current_host {rc.current_host!r} is not among hosts {hosts}"
        )
    if len(hosts) != plan.instance.count:
        raise BsmError(
            f"the job has {len(hosts)} host(s) ({', '.join(hosts)}) but the plan was made for "
            f"instance.count={plan.instance.count} x {plan.instance.type}",
            hint="re-plan with compute.instance_count equal to the job's InstanceCount; the "
            "sharding layout depends on it",
        )
    nproc = plan.instance.gpus_per_instance
    world = nproc * len(hosts)
    if plan.config.data_parallel_size != world:
        raise BsmError(
            f"the plan's mesh is shard_degree {plan.config.shard_degree} x replicate_degree "
            f"{plan.config.replicate_degree} = {plan.config.data_parallel_size} processes, but "
            f"{len(hosts)} host(s) x {nproc} per host = {world}",
            hint="the plan is inconsistent; make it again with bsm plan",
        )
    if len(hosts) == 1:
        # The only node is this one: loopback needs no DNS.
        master = environ.get("BSM_MASTER_ADDR") or "127.0.0.1"
    else:
        master = environ.get("BSM_MASTER_ADDR") or hosts[0]
    port_s = environ.get("BSM_MASTER_PORT") or str(DEFAULT_MASTER_PORT)
    try:
        port = int(port_s)
        if not 0 < port < 65536:
            raise ValueError
    except ValueError:
        raise SpecError(
            f"BSM_MASTER_PORT must be a TCP port 1-65535, not {port_s!r}", field="BSM_MASTER_PORT"
        ) from None
    return Topology(
        hosts=hosts,
        current_host=rc.current_host,
        nnodes=len(hosts),
        node_rank=hosts.index(rc.current_host),
        master_addr=master,
        master_port=port,
        nproc_per_node=nproc,
        device=plan_device(plan),
        instance_type=plan.instance.type,
    )


def _is_loopback(addr: str) -> bool:
    return addr in ("localhost", "::1") or addr.startswith("127.")


def network_env(
    topo: Topology, rc: ResourceConfig, environ: dict[str, str]
) -> tuple[dict[str, str], list[str], list[str]]:
    """(variables to set, variables to remove, notes) for this instance type.

    A value the user set explicitly is kept (and noted), except `NCCL_PROTO=simple`, which the
    SageMaker SDK driver forces on every job and which costs bandwidth on NVLink 5 / EFA.
    """
    add: dict[str, str] = {}
    remove: list[str] = []
    notes: list[str] = []

    def put(key: str, value: str, why: str) -> None:
        if key in environ and environ[key] != value:
            notes.append(
                f"{key}={environ[key]} kept from the environment (would set {value}: {why})"
            )
            return
        add[key] = value
        notes.append(f"{key}={value}: {why}")

    if environ.get("NCCL_PROTO", "").strip().lower() == "simple":
        remove.append("NCCL_PROTO")
        notes.append(
            "NCCL_PROTO=simple removed: inherited from the SageMaker SDK driver; NCCL picks "
            "LL/LL128/Simple per message size and forcing Simple slows small collectives"
        )
    elif "NCCL_PROTO" in environ:
        notes.append(f"NCCL_PROTO={environ['NCCL_PROTO']} kept (set explicitly, not by us)")

    if topo.device == "cpu":
        put("BSM_DEVICE", "cpu", "the plan is for local CPU processes (gloo)")
        if _is_loopback(topo.master_addr):
            put("GLOO_SOCKET_IFNAME", "lo", "master address is loopback: gloo binds to lo")
        return add, remove, notes

    if topo.instance_type in EFA_INSTANCES:
        put("FI_PROVIDER", "efa", "aws-ofi-nccl over EFA; the SDK driver omits it after p5e")
        put("FI_EFA_USE_DEVICE_RDMA", "1", "GPUDirect RDMA over EFA")
        put("FI_EFA_USE_HUGE_PAGE", "0", "AWS guidance for current libfabric")
    iface = rc.network_interface_name
    if iface and not iface.startswith("ibp"):
        put("NCCL_SOCKET_IFNAME", iface, "resourceconfig network_interface_name")
        put("GLOO_SOCKET_IFNAME", iface, "resourceconfig network_interface_name")
    else:
        if iface:
            notes.append(f"network_interface_name {iface!r} is an NVLink (ibp*) device: ignored")
        put("NCCL_SOCKET_IFNAME", SOCKET_IFNAME_EXCLUDE, "never loopback, docker or ibp* (NVLink)")
    if "NCCL_DEBUG" not in environ:
        put("NCCL_DEBUG", "INFO", "so the launcher can report the network NCCL chose")
        put("NCCL_DEBUG_SUBSYS", "INIT,NET", "only the init and network lines")
    return add, remove, notes


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
) -> LaunchSpec:
    """Everything the launcher will run, derived from the files and the environment (pure)."""
    environ = dict(os.environ if environ is None else environ)
    plan = read_plan(plan_path)
    rc = read_resource_config(opt_ml)
    topo = derive_topology(rc, plan, environ)
    add, remove, notes = network_env(topo, rc, environ)

    add["BSM_JOB_START_UNIX"] = f"{start_unix if start_unix is not None else time.time():.3f}"
    add["BSM_OPT_ML"] = str(opt_ml)
    add["PYTHONUNBUFFERED"] = "1"
    root = str(package_root())
    pp = environ.get("PYTHONPATH", "")
    if root not in pp.split(os.pathsep):
        add["PYTHONPATH"] = root + (os.pathsep + pp if pp else "")
    if "OMP_NUM_THREADS" not in environ:
        threads = max(1, (os.cpu_count() or 1) // topo.nproc_per_node)
        add["OMP_NUM_THREADS"] = str(min(threads, 8))

    argv = [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes", str(topo.nnodes),
        "--node-rank", str(topo.node_rank),
        "--nproc-per-node", str(topo.nproc_per_node),
        "--rdzv-backend", "static",
        "--master-addr", topo.master_addr,
        "--master-port", str(topo.master_port),
        # SageMaker (or the user) restarts the job; resuming from the checkpoint is the loop's.
        "--max-restarts", "0",
    ]  # fmt: skip
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
    )


def check_devices(topo: Topology) -> None:
    """On CUDA, at least nproc_per_node visible GPUs (torch imported only here)."""
    if topo.device != "cuda":
        return
    import torch

    n = torch.cuda.device_count()
    if n < topo.nproc_per_node:
        raise CapabilityError(
            f"the plan runs {topo.nproc_per_node} processes per node on {topo.instance_type} but "
            f"this host has {n} visible CUDA device(s)",
            hint="check CUDA_VISIBLE_DEVICES, or re-plan for this machine",
        )
    if n > topo.nproc_per_node:
        _log(f"{n} CUDA devices visible; the plan uses {topo.nproc_per_node}")


def wait_for_master(topo: Topology, timeout_s: float) -> None:
    """Multi-host: the master's name must resolve (SageMaker DNS can lag the container start)."""
    if topo.nnodes == 1:
        return
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.getaddrinfo(topo.master_addr, topo.master_port)
            return
        except OSError as e:
            if time.monotonic() > deadline:
                raise BsmError(
                    f"master address {topo.master_addr!r} does not resolve after {timeout_s:.0f} s: {e}",
                    hint="on one machine, set BSM_MASTER_ADDR=127.0.0.1",
                ) from None
            time.sleep(1.0)


# --------------------------------------------------------------------------- supervision


def child_pids(pid: int) -> list[int]:
    """Direct children of `pid` (Linux /proc)."""
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...; comm may contain spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            out.append(int(entry.name))
    return out


def worker_pids(torchrun_pid: int) -> list[int]:
    """torchrun's worker processes (they run in their own sessions, so signal them directly)."""
    pids = []
    for pid in child_pids(torchrun_pid):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if WORKER_MODULE.encode() in cmd:
            pids.append(pid)
    return pids


_NET_PATTERNS = [
    (re.compile(r"NCCL INFO .*Using network (\S[^\r\n]*)"), "network"),
    (re.compile(r"NCCL INFO .*NET/OFI Selected [Pp]rovider is (\w+)"), "ofi_provider"),
    (re.compile(r"NCCL INFO .*NET/Plugin\s*:?\s*(\S[^\r\n]*)"), "plugin"),
]  # fmt: skip


class OutputPump:
    """Copies a child's stream line by line to ours, keeps a tail, and notes NCCL's choices."""

    def __init__(self, src: Any, dst: Any, *, tail_lines: int, topo: Topology) -> None:
        self.tail: deque[str] = deque(maxlen=tail_lines)
        self.nccl: dict[str, str] = {}
        self._topo = topo
        self._src, self._dst = src, dst
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for raw in iter(self._src.readline, b""):
            line = raw.decode(errors="replace")
            try:
                self._dst.write(line)
                self._dst.flush()
            except (OSError, ValueError):
                pass
            self.tail.append(line.rstrip("\n"))
            if "NCCL INFO" in line:
                self._note_nccl(line)

    def _note_nccl(self, line: str) -> None:
        for rx, key in _NET_PATTERNS:
            m = rx.search(line)
            if m and key not in self.nccl:
                self.nccl[key] = m.group(1).strip()
                if key == "network":
                    net = self.nccl[key]
                    _log(f"NCCL network: {net}")
                    if (
                        "socket" in net.lower()
                        and self._topo.nnodes > 1
                        and self._topo.instance_type in EFA_INSTANCES
                    ):
                        _log(
                            "WARNING: NCCL is using TCP sockets between hosts, not EFA: the "
                            "aws-ofi-nccl plugin did not load (check FI_PROVIDER, the image's "
                            "libfabric); training will be slow or hang at scale"
                        )
                elif key == "ofi_provider":
                    _log(f"NCCL libfabric provider: {self.nccl[key]}")
                else:
                    _log(f"NCCL net plugin: {self.nccl[key]}")


class Supervisor:
    """Runs torchrun, forwards stop signals to every worker, escalates after a grace period."""

    def __init__(self, spec: LaunchSpec, env: dict[str, str], grace_s: float) -> None:
        self.spec = spec
        self.grace_s = grace_s
        self.stop_signal: int | None = None
        self.stop_at: float | None = None
        self._signalled: set[int] = set()
        self.proc = subprocess.Popen(
            spec.torchrun, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self.out = OutputPump(self.proc.stdout, sys.stdout, tail_lines=50, topo=spec.topology)
        self.err = OutputPump(self.proc.stderr, sys.stderr, tail_lines=400, topo=spec.topology)

    def on_signal(self, signum: int, _frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.stop_signal is not None and signum == signal.SIGINT:
            _log("second SIGINT: killing the workers now")
            self._kill_all()
            return
        if self.stop_signal is None:
            self.stop_signal = signum
            self.stop_at = time.monotonic() + self.grace_s
            _log(
                f"{name} received: asking every worker to finish its step, save and exit "
                f"(SIGKILL in {self.grace_s:.0f} s)"
            )
        self._forward()

    def _forward(self) -> None:
        assert self.stop_signal is not None
        pids = [p for p in worker_pids(self.proc.pid) if p not in self._signalled]
        if not pids and not self._signalled:
            # No worker started yet: torchrun itself shuts the (future) workers down.
            _send(self.proc.pid, self.stop_signal)
            self._signalled.add(self.proc.pid)
            return
        for pid in pids:
            _send(pid, self.stop_signal)
            self._signalled.add(pid)

    def _kill_all(self) -> None:
        for pid in worker_pids(self.proc.pid):
            _send(pid, signal.SIGKILL)
        _send(self.proc.pid, signal.SIGKILL)

    def wait(self) -> int:
        while True:
            try:
                return self.proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                pass
            if self.stop_signal is not None:
                self._forward()  # workers that appeared after the signal
                if self.stop_at is not None and time.monotonic() > self.stop_at:
                    _log(f"workers did not exit within {self.grace_s:.0f} s of the stop: SIGKILL")
                    self._kill_all()
                    self.stop_at = None

    def finish(self) -> None:
        self.out.thread.join(timeout=5)
        self.err.thread.join(timeout=5)


def _send(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


# --------------------------------------------------------------------------- failure reasons


def _read_error_files(log_dir: Path) -> list[tuple[int, float, str, str]]:
    """(local_rank, timestamp, message, traceback) from torchelastic error files, oldest first."""
    found = []
    for path in log_dir.glob("*/attempt_*/*/error.json"):
        try:
            data = json.loads(path.read_text())
            local_rank = int(path.parent.name)
        except (OSError, ValueError):
            continue
        msg = data.get("message", data)
        if isinstance(msg, dict):
            text = str(msg.get("message", ""))
            extra = msg.get("extraInfo", {}) or {}
            tb = str(extra.get("py_callstack", ""))
            ts = float(extra.get("timestamp", 0) or 0)
        else:
            text, tb, ts = str(msg), "", 0.0
        found.append((local_rank, ts, text, tb))
    return sorted(found, key=lambda x: (x[1], x[0]))


_ROOT_CAUSE = re.compile(
    r"Root Cause.*?rank\s*:\s*(?P<rank>\d+)\s*\(local_rank\s*:\s*(?P<local>\d+)\)"
    r".*?exitcode\s*:\s*(?P<code>-?\d+).*?error_file\s*:\s*(?P<file>\S+)",
    re.S,
)


def _stderr_tail(log_dir: Path, local_rank: int, lines: int = 12) -> str:
    files = sorted(log_dir.glob(f"*/attempt_*/{local_rank}/stderr.log"))
    if not files:
        return ""
    text = files[-1].read_text(errors="replace").splitlines()
    return "\n".join(ln for ln in text[-lines:] if ln.strip())


def _error_file_message(path: Path) -> tuple[str, str] | None:
    """(exception message, innermost `File ...` line) from a torchelastic error file."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    msg = data.get("message", data)
    if not isinstance(msg, dict):
        return str(msg), ""
    tb = str((msg.get("extraInfo") or {}).get("py_callstack", ""))
    frames = [ln.strip() for ln in tb.splitlines() if ln.strip().startswith("File ")]
    return str(msg.get("message", "")), (frames[-1] if frames else "")


def failure_reason(rc: int, *, topo: Topology, log_dir: Path | None, stderr_tail: list[str]) -> str:
    """The failing rank and its exception (or signal), then supporting detail.

    torchrun's "Root Cause (first observed failure)" names the rank that failed first (a SIGKILLed
    rank, not the peers that then lost their connection); its error file, written by `@record`
    in the worker, holds the exception. Without that block: the oldest error file; last, the
    tail of torchrun's stderr.
    """
    host = topo.current_host
    text = "\n".join(stderr_tail)
    m = _ROOT_CAUSE.search(text, max(0, text.rfind("Root Cause")))
    if m:
        rank, local_rank, code = int(m["rank"]), int(m["local"]), int(m["code"])
        who = f"rank {rank} (host {host}, local rank {local_rank})"
        err = _error_file_message(Path(m["file"])) if m["file"] != "<N/A>" else None
        if err and err[0]:
            return f"{who}: {err[0]}" + (f"\nat {err[1]}" if err[1] else "")
        if code < 0:
            try:
                what = f"was killed by signal {signal.Signals(-code).name}"
            except ValueError:
                what = f"was killed by signal {-code}"
        else:
            what = f"exited with code {code}"
        tail = _stderr_tail(log_dir, local_rank) if log_dir is not None else ""
        return f"{who} {what}" + (f"; its last stderr lines:\n{tail}" if tail else "")
    if log_dir is not None:
        errors = _read_error_files(log_dir)
        if errors:
            local_rank, _, msg, tb = errors[0]
            rank = topo.node_rank * topo.nproc_per_node + local_rank
            frames = [ln.strip() for ln in tb.splitlines() if ln.strip().startswith("File ")]
            where = f"\nat {frames[-1]}" if frames else ""
            return f"rank {rank} (host {host}, local rank {local_rank}): {msg}{where}"
    lines = [ln for ln in stderr_tail if ln.strip()][-12:]
    return f"torchrun on host {host} exited with code {rc}; last stderr lines:\n" + "\n".join(lines)


def write_failure(opt_ml: Path, reason: str) -> None:
    """`opt_ml/output/failure`: SageMaker shows the first 1024 characters as FailureReason."""
    out = opt_ml / "output"
    out.mkdir(parents=True, exist_ok=True)
    text = reason.strip()
    if len(text) > FAILURE_LIMIT:
        text = text[: FAILURE_LIMIT - 3] + "..."
    (out / "failure").write_text(text + "\n")


# --------------------------------------------------------------------------- main


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m blackwell_sm.train.launch", description=__doc__.split("\n")[0])  # fmt: skip
    p.add_argument("--plan", required=True, type=Path, help="plan.json (shipped in the bundle)")
    p.add_argument(
        "--opt-ml",
        type=Path,
        default=None,
        help="the /opt/ml root (default: $BSM_OPT_ML or /opt/ml)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the launch as JSON and exit")
    return p


def run(spec: LaunchSpec, opt_ml: Path, log_dir: Path) -> int:
    """Supervise torchrun for `spec`; on failure write `opt_ml/output/failure`. Returns its code."""
    topo = spec.topology
    env = {k: v for k, v in os.environ.items() if k not in spec.env_removed}
    env.update(spec.env)
    grace = float(os.environ.get("BSM_STOP_GRACE_S", DEFAULT_STOP_GRACE_S))
    sup = Supervisor(spec, env, grace)
    old = {s: signal.signal(s, sup.on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        rc = sup.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        sup.finish()
    if topo.device == "cuda" and "network" not in sup.out.nccl | sup.err.nccl and topo.nnodes > 1:
        _log("NCCL did not report its network (NCCL_DEBUG was set by the user?)")
    if rc == 0:
        _log("workers finished (exit 0)")
        return 0
    reason = failure_reason(rc, topo=topo, log_dir=log_dir, stderr_tail=list(sup.err.tail))
    if sup.stop_signal is not None:
        reason = f"stopped by {signal.Signals(sup.stop_signal).name}; " + reason
    write_failure(opt_ml, reason)
    _log(f"FAILED (exit {rc}): {reason.splitlines()[0]}")
    _log(f"reason written to {opt_ml / 'output' / 'failure'}")
    return rc


def main(argv: list[str] | None = None) -> int:
    """Launcher entry point (also called by `entrypoints/launch.py`)."""
    start = time.time()
    args = _parser().parse_args(argv)
    opt_ml = (args.opt_ml or Path(os.environ.get("BSM_OPT_ML") or "/opt/ml")).resolve()
    log_dir = None
    try:
        if args.dry_run:
            spec = build_launch(args.plan, opt_ml, start_unix=start)
            sys.stdout.write(spec.model_dump_json(indent=2) + "\n")
            return 0
        log_dir = Path(tempfile.mkdtemp(prefix="bsm-torchrun-"))
        spec = build_launch(args.plan, opt_ml, log_dir=log_dir, start_unix=start)
        topo = spec.topology
        _log(
            f"host {topo.current_host}: node {topo.node_rank} of {topo.nnodes}, "
            f"{topo.nproc_per_node} process(es) on {topo.device}, master "
            f"{topo.master_addr}:{topo.master_port}"
        )
        for note in spec.notes:
            _log(f"env: {note}")
        check_devices(topo)
        wait_for_master(topo, float(os.environ.get("BSM_DNS_WAIT_S", "300")))
        stale = opt_ml / "output" / "failure"
        if stale.exists():
            stale.unlink()  # a previous attempt's reason must not outlive a good run
        return run(spec, opt_ml, log_dir)
    except BsmError as e:
        msg = f"launcher on {os.environ.get('HOSTNAME', socket.gethostname())}: {e.message}"
        if e.hint:
            msg += f" (hint: {e.hint})"
        if not args.dry_run:
            write_failure(opt_ml, msg)
        _log(f"error: {msg}")
        return e.exit_code
    finally:
        if log_dir is not None:
            shutil.rmtree(log_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
