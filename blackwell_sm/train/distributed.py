"""Process group, device and mesh set-up for one worker started by torchrun."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from blackwell_sm.errors import BsmError, CapabilityError
from blackwell_sm.opt_ml import ENV_DEVICE
from blackwell_sm.planner.batch import data_parallel_ranks
from blackwell_sm.planner.plan import PlanConfig


@dataclass(frozen=True)
class Env:
    """Who this process is: ranks from torchrun's environment and the device it drives."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def pick_device(local_rank: int) -> torch.device:
    """`BSM_DEVICE` (cpu|cuda) if set, else CUDA when available. Never silently CPU on request."""
    wanted = os.environ.get(ENV_DEVICE, "").strip().lower()
    if wanted not in ("", "cpu", "cuda"):
        raise BsmError(f"BSM_DEVICE must be cpu or cuda, not {wanted!r}")
    if wanted == "cuda" and not torch.cuda.is_available():
        raise CapabilityError("BSM_DEVICE=cuda but this PyTorch sees no CUDA device")
    if wanted == "cpu" or (not wanted and not torch.cuda.is_available()):
        return torch.device("cpu")
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def init_distributed() -> Env:
    """Join the process group torchrun set up (gloo on CPU, NCCL on CUDA)."""
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(local_rank)
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        kwargs = {"device_id": device} if device.type == "cuda" else {}
        dist.init_process_group(
            backend, rank=rank, world_size=world, timeout=timedelta(minutes=30), **kwargs
        )
    return Env(rank=rank, world_size=world, local_rank=local_rank, device=device)


def build_mesh(config: PlanConfig, env: Env):
    """The FSDP mesh: 1-D ("shard",), or 2-D ("replicate", "shard") for HSDP. Context-parallel
    ranks are part of "shard" (parameters are sharded over them too, as torchtitan does)."""
    from torch.distributed.device_mesh import init_device_mesh

    if config.world_size != env.world_size:
        raise BsmError(
            f"the plan is for {config.world_size} processes (shard_degree "
            f"{config.shard_degree} x replicate_degree {config.replicate_degree}) but torchrun "
            f"started {env.world_size}",
            hint="launch with the plan's process count, or re-plan for this machine",
        )
    if config.replicate_degree > 1:
        return init_device_mesh(
            env.device.type,
            (config.replicate_degree, config.shard_degree),
            mesh_dim_names=("replicate", "shard"),
        )
    return init_device_mesh(env.device.type, (config.shard_degree,), mesh_dim_names=("shard",))


def build_cp_mesh(config: PlanConfig, env: Env):
    """("dp", "cp") mesh whose "cp" groups are `cp_degree` consecutive ranks (inside one shard
    group, so inside one node when cp_degree <= GPUs per node); None without CP."""
    from torch.distributed.device_mesh import init_device_mesh

    if config.cp_degree == 1:
        return None
    return init_device_mesh(
        env.device.type,
        (data_parallel_ranks(env.world_size, config.cp_degree), config.cp_degree),
        mesh_dim_names=("dp", "cp"),
    )


def all_agree(*flags: bool, device: torch.device) -> tuple[bool, ...]:
    """Each flag true on every rank if it is true on any rank (one all-reduce for all of them),
    so every rank takes the same branch."""
    t = torch.tensor([1 if f else 0 for f in flags], dtype=torch.int32, device=device)
    if dist.is_initialized():
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return tuple(bool(v) for v in t.tolist())
