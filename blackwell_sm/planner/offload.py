"""Offload to host memory as a memory lever: what it frees on the GPU, what it needs on the host,
and what it costs per step. Pure.

The lever is FSDP2's `CPUOffloadPolicy` (all or nothing per module): the sharded fp32 parameters,
the sharded fp32 gradients and AdamW's two fp32 moments live in host memory; every all-gather
first copies a shard host-to-device, every reduce-scatter's shard goes device-to-host and is
accumulated there, and the optimizer step runs on the CPU. What stays on the GPU: the gathered
bf16 parameters, the unsharded gradients in flight, the activations and the loss.

Costs, per optimizer step and per GPU (no overlap assumed, so an upper bound): PCIe traffic of
2 x 4 B x P/N per micro-batch host-to-device (the forward's and the backward's all-gather) and
4 B x P/N per micro-batch device-to-host (the reduced gradient), at the instance's `pcie_gb_s`;
the CPU AdamW step streams about 28 B per parameter shard (read the parameter, the gradient and
two moments, write the parameter and the moments) for all the node's GPUs at once, at the
instance's `host_memory_gb_s`. Host memory: 16 B per parameter shard for every GPU of the node,
within `HOST_MEMORY_FRACTION` of the instance's (the rest: the OS, the data loader, pinned
staging, the container).
"""

from __future__ import annotations

from typing import NamedTuple

from blackwell_sm.hardware import InstanceType
from blackwell_sm.planner.memory import GIB, MemoryTerms
from blackwell_sm.planner.shape import Shape

#: Share of the host's memory the offloaded state may take. Engineering margin, not fitted.
HOST_MEMORY_FRACTION = 0.75
#: Bytes per parameter shard kept on the host: fp32 parameter, fp32 gradient, two fp32 moments.
HOST_BYTES_PER_PARAM = 16
#: Bytes the CPU AdamW step streams per parameter shard (reads 4 tensors, writes 3).
CPU_STEP_BYTES_PER_PARAM = 28


class Offload(NamedTuple):
    """One configuration with its state offloaded: GPU bytes, host bytes, added seconds."""

    gpu_bytes: float  # the configuration's peak per GPU without the offloaded state
    host_bytes_per_node: float
    host_limit_bytes: float
    pcie_s: float  # per step, per GPU
    cpu_step_s: float  # per step
    fits_host: bool

    @property
    def added_s(self) -> float:
        return self.pcie_s + self.cpu_step_s


def offloadable(instance: InstanceType) -> bool:
    """Whether the catalog knows the instance's PCIe and host-memory bandwidth."""
    return bool(instance.pcie_gb_s and instance.host_memory_gb_s and instance.host_memory_gib)


def seconds(
    model: Shape, instance: InstanceType, *, shard_degree: int, grad_accum: int
) -> tuple[float, float]:
    """(PCIe, CPU AdamW) seconds per step with the state on the host (see above); none on a
    CPU instance (run-local: the state is on the host already, the step as without offload)."""
    if instance.gpu.kind == "cpu":
        return 0.0, 0.0
    if not offloadable(instance):
        raise ValueError(f"{instance.name}: no PCIe or host-memory bandwidth in the catalog")
    shard = model.n_params / shard_degree
    pcie = grad_accum * 12.0 * shard / (instance.pcie_gb_s or 1.0) / 1e9
    cpu = CPU_STEP_BYTES_PER_PARAM * shard * instance.gpus_per_instance
    return pcie, cpu / (instance.host_memory_gb_s or 1.0) / 1e9


def host_bytes(model: Shape, instance: InstanceType, shard_degree: int) -> tuple[float, float]:
    """(offloaded state per node, the part of the host's memory it may take), bytes."""
    per_node = HOST_BYTES_PER_PARAM * model.n_params / shard_degree * instance.gpus_per_instance
    return per_node, HOST_MEMORY_FRACTION * instance.host_memory_gib * GIB


def fits_host(model: Shape, instance: InstanceType, shard_degree: int) -> bool:
    """Whether the offloaded state fits the host (the one check; a CPU instance's host is its
    device, whose memory the state is counted in already)."""
    if instance.gpu.kind == "cpu":
        return True
    need, limit = host_bytes(model, instance, shard_degree)
    return need <= limit


def offload(
    model: Shape, mem: MemoryTerms, instance: InstanceType, *, shard_degree: int, grad_accum: int
) -> Offload:
    """`mem` (a configuration's peak terms) with its sharded state on the host (see above). On a
    CPU instance (run-local) the host is the device: the state stays in `mem` (phase_terms keeps
    it there), nothing moves and nothing more is needed."""
    pcie, cpu_s = seconds(model, instance, shard_degree=shard_degree, grad_accum=grad_accum)
    if instance.gpu.kind == "cpu":
        return Offload(mem.total, 0.0, 0.0, pcie, cpu_s, True)
    gpu = mem.total - mem.params_fp32 - mem.grads_fp32 - mem.optimizer_states
    host, limit = host_bytes(model, instance, shard_degree)
    return Offload(gpu, host, limit, pcie, cpu_s, fits_host(model, instance, shard_degree))


def describe(o: Offload, step_s: float) -> str:
    """The lever in one clause: GPU and host memory, and its cost in time."""
    return (
        f"{o.gpu_bytes / GIB:.1f} GiB per GPU with parameters, gradients and AdamW state in "
        f"host memory (FSDP2 CPUOffloadPolicy; {o.host_bytes_per_node / GIB:.0f} GiB of the "
        f"node's {o.host_limit_bytes / GIB:.0f} usable), about {o.added_s:.0f} s more per "
        f"{step_s:.0f} s step (+{o.added_s / step_s:.0%}: PCIe {o.pcie_s:.0f} s, CPU AdamW "
        f"{o.cpu_step_s:.0f} s, no overlap assumed)"
    )
