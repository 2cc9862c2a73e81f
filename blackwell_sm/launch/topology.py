"""Torchrun's topology from resourceconfig.json and the plan: hosts, node rank, master, processes."""

from __future__ import annotations

import json
import re
import socket
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from blackwell_sm.errors import BsmError, CapabilityError, SpecError
from blackwell_sm.launch import log
from blackwell_sm.opt_ml import ENV_MASTER_ADDR, ENV_MASTER_PORT, OptMl
from blackwell_sm.planner.plan import Plan

DEFAULT_MASTER_PORT = 29500


class ResourceConfig(BaseModel):
    """SageMaker's `resourceconfig.json` (the keys this launcher uses).

    extra="ignore": SageMaker adds keys (instance groups, current_instance_type) that are not
    ours to forbid.
    """

    model_config = ConfigDict(extra="ignore")

    current_host: str = Field(description="This host's name, e.g. algo-1.")
    hosts: list[str] = Field(min_length=1, description="All hosts of the job.")
    network_interface_name: str | None = Field(None, description="Primary interface, e.g. eth0.")
    current_instance_type: str | None = Field(
        None, description="This host's instance type (picks the plan with instance preferences)."
    )


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
    efa: bool = Field(description="Inter-node traffic over EFA (from the plan's instance).")


def natural_key(name: str) -> list[Any]:
    """Sort key that orders `algo-2` before `algo-10`."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def read_resource_config(opt_ml: Path) -> ResourceConfig:
    """Parse `opt_ml/input/config/resourceconfig.json`, failing with the file named."""
    path = OptMl(opt_ml).resource_config
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
    """plan.json through the safe loader (`Plan.read`); the launcher's plan selection takes it."""
    return Plan.read(path)


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
    if plan.config.world_size != world:
        raise BsmError(
            f"the plan's mesh is shard_degree {plan.config.shard_degree} x replicate_degree "
            f"{plan.config.replicate_degree} = {plan.config.world_size} processes, but "
            f"{len(hosts)} host(s) x {nproc} per host = {world}",
            hint="the plan is inconsistent; make it again with bsm plan",
        )
    if len(hosts) == 1:
        # The only node is this one: loopback needs no DNS.
        master = environ.get(ENV_MASTER_ADDR) or "127.0.0.1"
    else:
        master = environ.get(ENV_MASTER_ADDR) or hosts[0]
    port_s = environ.get(ENV_MASTER_PORT) or str(DEFAULT_MASTER_PORT)
    try:
        port = int(port_s)
        if not 0 < port < 65536:
            raise ValueError
    except ValueError:
        raise SpecError(
            f"{ENV_MASTER_PORT} must be a TCP port 1-65535, not {port_s!r}", field=ENV_MASTER_PORT
        ) from None
    return Topology(
        hosts=hosts,
        current_host=rc.current_host,
        nnodes=len(hosts),
        node_rank=hosts.index(rc.current_host),
        master_addr=master,
        master_port=port,
        nproc_per_node=nproc,
        device=plan.instance.device,
        instance_type=plan.instance.type,
        efa=plan.instance.efa,
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
        log(f"{n} CUDA devices visible; the plan uses {topo.nproc_per_node}")


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
                    hint=f"on one machine, set {ENV_MASTER_ADDR}=127.0.0.1",
                ) from None
            time.sleep(1.0)
