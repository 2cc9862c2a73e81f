"""The launcher's reading of resourceconfig.json and its environment, without starting torchrun.

Plans come from the real planner; directories are laid out by run-local's own layout function.
"""

from __future__ import annotations

import json
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

from blackwell_sm.errors import BsmError, CapabilityError, SpecError
from blackwell_sm.hardware import get_instance, local_instance
from blackwell_sm.launch.main import build_launch
from blackwell_sm.launch.topology import (
    check_devices,
    derive_topology,
    natural_key,
    read_resource_config,
)
from blackwell_sm.local import host_names, launcher_env, layout_opt_ml
from blackwell_sm.planner.api import make_plan
from blackwell_sm.planner.plan import Plan
from blackwell_sm.spec import load_spec, with_overrides

REPO = Path(__file__).resolve().parents[1]
CONTRACT_KEYS = {"torchrun", "env", "nnodes", "node_rank", "nproc_per_node"}
CONTRACT_KEYS |= {"master_addr", "master_port"}


@cache
def cluster_plan(instance_type: str, count: int) -> Plan:
    spec = with_overrides(
        load_spec(REPO / "templates" / "llama-3.1-8b.yaml"),
        {"compute.instance_type": instance_type, "compute.instance_count": count},
    )
    plan = make_plan(spec)
    assert plan.feasible and plan.instance.count == count, plan.advice
    return plan


@cache
def local_plan(nproc: int = 2) -> Plan:
    spec = load_spec(REPO / "templates" / "demo-tiny.yaml")
    return make_plan(spec, instance=local_instance(nproc=nproc))


def host_dir(tmp: Path, plan: Plan, host: str, hosts: list[str], iface: str = "eth0") -> Path:
    root = tmp / host
    layout_opt_ml(root, plan, current_host=host, hosts=hosts, network_interface_name=iface)
    return root


@pytest.mark.parametrize("count", [1, 2, 4])
def test_topology_for_1_2_4_hosts(tmp_path: Path, count: int) -> None:
    plan = cluster_plan("ml.p6-b200.48xlarge", count)
    hosts = host_names(count)
    for rank, host in enumerate(hosts):
        root = host_dir(tmp_path, plan, host, hosts)
        launch = build_launch(root / "plan.json", root, environ={})
        assert (launch.nnodes, launch.node_rank, launch.nproc_per_node) == (count, rank, 8)
        # One host: the master is this host, on loopback; several: the first host by name.
        assert launch.master_addr == ("127.0.0.1" if count == 1 else "algo-1")
        assert launch.master_port == 29500
        argv = launch.torchrun
        assert argv[1:3] == ["-m", "torch.distributed.run"]
        for flag, value in [
            ("--nnodes", count),
            ("--node-rank", rank),
            ("--nproc-per-node", 8),
            ("--master-addr", launch.master_addr),
            ("--master-port", 29500),
            ("--rdzv-backend", "static"),
        ]:
            assert argv[argv.index(flag) + 1] == str(value)
        assert argv[argv.index("-m", 3) + 1] == "blackwell_sm.train.main"
        assert argv[-4:] == ["--plan", str((root / "plan.json").resolve()), "--opt-ml", str(root)]
        # Every host agrees on the world: shard x replicate = hosts x GPUs per host.
        assert plan.config.data_parallel_size == count * 8
        env = launch.env
        assert env["FI_PROVIDER"] == "efa" and env["NCCL_SOCKET_IFNAME"] == "eth0"
        assert env["BSM_OPT_ML"] == str(root) and float(env["BSM_JOB_START_UNIX"]) > 0


def test_node_rank_follows_natural_host_order(tmp_path: Path) -> None:
    """SageMaker names hosts algo-1..algo-N; algo-10 comes after algo-9, whatever the list order."""
    hosts = host_names(10)
    shuffled = [hosts[i] for i in (9, 1, 0, 5, 3, 2, 8, 4, 7, 6)]
    assert sorted(shuffled, key=natural_key) == hosts
    plan = cluster_plan("ml.p6-b200.48xlarge", 10)
    root = host_dir(tmp_path, plan, "algo-10", shuffled)
    topo = derive_topology(read_resource_config(root), plan, {})
    assert (topo.node_rank, topo.master_addr) == (9, "algo-1")
    root2 = host_dir(tmp_path, plan, "algo-2", shuffled)
    assert derive_topology(read_resource_config(root2), plan, {}).node_rank == 1


def test_env_p6_b200_vs_p5_vs_local(tmp_path: Path) -> None:
    inherited = {"NCCL_PROTO": "simple"}  # what the SageMaker SDK's torchrun driver sets
    envs = {}
    for itype in ("ml.p6-b200.48xlarge", "ml.p5.48xlarge"):
        plan = cluster_plan(itype, 2)
        root = host_dir(tmp_path / itype, plan, "algo-2", host_names(2))
        envs[itype] = build_launch(root / "plan.json", root, environ=dict(inherited))
    lp = local_plan()
    root = host_dir(tmp_path / "local", lp, "algo-1", ["algo-1"], iface="lo")
    envs["local"] = build_launch(root / "plan.json", root, environ=dict(inherited))

    for itype in ("ml.p6-b200.48xlarge", "ml.p5.48xlarge"):
        ls = envs[itype]
        assert plan.instance.efa and ls.topology.efa
        assert ls.env["FI_PROVIDER"] == "efa"
        assert ls.env["FI_EFA_USE_DEVICE_RDMA"] == "1"
        assert ls.env["FI_EFA_USE_HUGE_PAGE"] == "0"
        assert ls.env["NCCL_SOCKET_IFNAME"] == ls.env["GLOO_SOCKET_IFNAME"] == "eth0"
        assert ls.env["NCCL_DEBUG"] == "INFO" and "NET" in ls.env["NCCL_DEBUG_SUBSYS"]
        assert "NCCL_PROTO" in ls.env_removed and "NCCL_PROTO" not in ls.env
        assert any("NCCL_PROTO=simple removed" in n for n in ls.notes)
        assert "BSM_DEVICE" not in ls.env
    loc = envs["local"]
    assert loc.env["BSM_DEVICE"] == "cpu" and loc.env["GLOO_SOCKET_IFNAME"] == "lo"
    assert not any(k.startswith(("FI_", "NCCL_")) for k in loc.env)
    assert loc.nproc_per_node == lp.instance.gpus_per_instance == 2


def test_user_values_kept_and_nvlink_devices_never_used(tmp_path: Path) -> None:
    plan = cluster_plan("ml.p6-b200.48xlarge", 2)
    root = host_dir(tmp_path / "a", plan, "algo-1", host_names(2))
    ls = build_launch(
        root / "plan.json", root, environ={"FI_EFA_USE_HUGE_PAGE": "1", "NCCL_PROTO": "LL128"}
    )
    assert "FI_EFA_USE_HUGE_PAGE" not in ls.env and "NCCL_PROTO" not in ls.env_removed
    assert any("FI_EFA_USE_HUGE_PAGE=1 kept" in n for n in ls.notes)
    # An ibp* (NVLink controller) or missing interface name: exclude ibp*, lo, docker instead.
    for iface in ("ibp24s0", ""):
        root = host_dir(tmp_path / (iface or "none"), plan, "algo-1", host_names(2), iface=iface)
        rc = json.loads((root / "input/config/resourceconfig.json").read_text())
        if not iface:
            del rc["network_interface_name"]
        (root / "input/config/resourceconfig.json").write_text(json.dumps(rc))
        ls = build_launch(root / "plan.json", root, environ={})
        assert ls.env["NCCL_SOCKET_IFNAME"] == "^lo,docker,ibp"
        assert "GLOO_SOCKET_IFNAME" not in ls.env


def test_host_count_mismatch_refused(tmp_path: Path) -> None:
    plan = cluster_plan("ml.p6-b200.48xlarge", 2)
    root = host_dir(tmp_path, plan, "algo-1", host_names(4))
    with pytest.raises(BsmError, match=r"4 host\(s\).*instance.count=2"):
        build_launch(root / "plan.json", root, environ={})
    # Through the real command: a non-zero exit and the reason where SageMaker looks for it.
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "blackwell_sm.launch",
            "--plan",
            str(root / "plan.json"),
            "--opt-ml",
            str(root),
        ],
        env=launcher_env(master_port=29500),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1, out.stderr
    failure = (root / "output" / "failure").read_text()
    assert "4 host(s)" in failure and "instance.count=2" in failure and len(failure) <= 1025


def test_bad_resourceconfig_and_overrides(tmp_path: Path) -> None:
    plan = cluster_plan("ml.p6-b200.48xlarge", 2)
    root = host_dir(tmp_path, plan, "algo-1", host_names(2))
    rc_path = root / "input/config/resourceconfig.json"
    ok = build_launch(
        root / "plan.json",
        root,
        environ={"BSM_MASTER_ADDR": "127.0.0.1", "BSM_MASTER_PORT": "29611"},
    )
    assert (ok.master_addr, ok.master_port) == ("127.0.0.1", 29611)
    with pytest.raises(SpecError, match="BSM_MASTER_PORT"):
        build_launch(root / "plan.json", root, environ={"BSM_MASTER_PORT": "http"})
    rc_path.write_text(json.dumps({"current_host": "algo-3", "hosts": ["algo-1", "algo-2"]}))
    with pytest.raises(BsmError, match=r"algo-3.*not among"):
        build_launch(root / "plan.json", root, environ={})
    rc_path.write_text(json.dumps({"current_host": "algo-1", "hosts": ["algo-1", "algo-1"]}))
    with pytest.raises(BsmError, match="twice"):
        build_launch(root / "plan.json", root, environ={})
    rc_path.write_text("{not json")
    with pytest.raises(BsmError, match="not valid JSON"):
        build_launch(root / "plan.json", root, environ={})
    rc_path.unlink()
    with pytest.raises(BsmError, match=r"resourceconfig\.json not found"):
        build_launch(root / "plan.json", root, environ={})


def test_cuda_plan_needs_visible_gpus(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import torch

    plan = cluster_plan("ml.p6-b200.48xlarge", 1)
    root = host_dir(tmp_path, plan, "algo-1", ["algo-1"])
    topo = build_launch(root / "plan.json", root, environ={}).topology
    if torch.cuda.device_count() >= 8:
        pytest.skip("this machine has 8 GPUs")
    with pytest.raises(CapabilityError, match=r"8 processes per node.*visible CUDA device"):
        check_devices(topo)


def test_dry_run_via_the_bundle_entrypoint(tmp_path: Path) -> None:
    """`python blackwell_sm/entrypoints/launch.py --dry-run` in a bundle's layout (the package's
    files where the code bundle puts them), from another directory, no PYTHONPATH: the
    entrypoint finds its bundle's package and prints the contract's JSON."""
    from blackwell_sm.job.bundle import ENTRYPOINT_SCRIPT
    from blackwell_sm.job.package_files import package_files

    code = tmp_path / "code"
    for f in package_files().files:
        (code / f.arcname).parent.mkdir(parents=True, exist_ok=True)
        (code / f.arcname).write_bytes(f.path.read_bytes())
    plan = cluster_plan("ml.p6-b200.48xlarge", 2)
    root = host_dir(tmp_path, plan, "algo-2", host_names(2))
    env = {k: v for k, v in launcher_env(master_port=29500).items() if k != "PYTHONPATH"}
    env["NCCL_PROTO"] = "simple"
    out = subprocess.run(
        [
            sys.executable,
            str(code / ENTRYPOINT_SCRIPT),
            "--plan",
            "plan.json",
            "--dry-run",
        ],
        cwd=root,
        env=env | {"BSM_OPT_ML": str(root)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    data = json.loads(out.stdout)
    assert set(data) >= CONTRACT_KEYS
    assert (data["nnodes"], data["node_rank"], data["master_addr"]) == (2, 1, "algo-1")
    assert data["env"]["FI_PROVIDER"] == "efa" and data["env_removed"] == ["NCCL_PROTO"]
    assert not (root / "output" / "failure").exists()


def test_launcher_and_run_local_import_no_torch_or_aws() -> None:
    code = (
        "import sys, blackwell_sm.launch.main, blackwell_sm.local, blackwell_sm.cli.local; "
        "bad = [m for m in ('torch', 'boto3', 'botocore', 'sagemaker') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_nccl_network_choice_is_reported(capfd: pytest.CaptureFixture[str]) -> None:
    """The launcher reads NCCL's INIT/NET lines from the workers' output and says what NCCL chose;
    TCP sockets between EFA hosts is a loud warning. (Lines as NCCL 2.2x and aws-ofi-nccl print
    them; on CPU there is no NCCL, so a child process prints them into a real pipe.)"""
    from blackwell_sm.launch.supervise import OutputPump
    from blackwell_sm.launch.topology import Topology

    def pump(lines: list[str], instance_type: str, nnodes: int) -> dict[str, str]:
        topo = Topology(
            hosts=host_names(nnodes),
            current_host="algo-1",
            nnodes=nnodes,
            node_rank=0,
            master_addr="algo-1",
            master_port=29500,
            nproc_per_node=8,
            device="cuda",
            instance_type=instance_type,
            efa=get_instance(instance_type).efa_provider_env,
        )
        code = "import sys; sys.stdout.write(sys.stdin.read())"
        child = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        p = OutputPump(child.stdout, sys.stdout, tail_lines=10, topo=topo)
        # Only write: communicate() would also read stdout and race the pump for the lines.
        assert child.stdin is not None
        child.stdin.write("".join(f"[default0]:{ln}\n" for ln in lines).encode())
        child.stdin.close()
        child.wait(timeout=30)
        p.thread.join(timeout=10)
        return p.nccl

    efa = pump(
        [
            "ip-10-0-0-1:123:123 [0] NCCL INFO NET/Plugin: Loaded net plugin Libfabric (v9)",
            "ip-10-0-0-1:123:123 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa",
            "ip-10-0-0-1:123:123 [0] NCCL INFO Using network Libfabric",
            "ip-10-0-0-1:123:123 [0] NCCL INFO Using network Socket",  # only the first counts
        ],
        "ml.p6-b200.48xlarge",
        2,
    )
    assert efa == {
        "plugin": "Loaded net plugin Libfabric (v9)",
        "ofi_provider": "efa",
        "network": "Libfabric",
    }
    err = capfd.readouterr().err
    assert "[bsm-launch] NCCL network: Libfabric" in err and "WARNING" not in err

    tcp = pump(["h:1:1 [0] NCCL INFO Using network Socket"], "ml.p6-b200.48xlarge", 2)
    assert tcp == {"network": "Socket"}
    assert "WARNING: NCCL is using TCP sockets between hosts, not EFA" in capfd.readouterr().err
