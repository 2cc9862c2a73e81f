"""Instance catalog: GPUs, usable memory, dense peak FLOP/s per precision, links and prices.

Figures are per GPU, dense (no sparsity). Sources: NVIDIA datasheets (H100 SXM, H200, HGX B200,
B300), AWS instance pages; collected in shared/notes/sagemaker-facts.md. Usable memory is what
`nvidia-smi` reports, which is what the CUDA allocator can reach.
"""

from __future__ import annotations

import math
import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from blackwell_sm.errors import SpecError
from blackwell_sm.opt_ml import LOCAL_INSTANCE_PREFIX


class GpuSpec(BaseModel):
    """One accelerator (or, for local runs, one CPU worker process)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    kind: Literal["cuda", "cpu"] = "cuda"
    memory_gib: float = Field(description="Usable device memory per GPU, GiB.")
    peak_tflops: dict[str, float] = Field(description="Dense peak TFLOP/s by precision.")
    hbm_tb_s: float = Field(description="Memory bandwidth, TB/s.")
    compute_capability: tuple[int, int] | None = None

    def supports(self, precision: str) -> bool:
        return precision in self.peak_tflops

    def peak_flops(self, precision: str) -> float:
        """Dense peak FLOP/s for `precision` (raises if the GPU has no such mode)."""
        if precision not in self.peak_tflops:
            raise SpecError(
                f"{self.name} does not support {precision}; supported: {', '.join(self.peak_tflops)}",
                field="training.precision",
            )
        return self.peak_tflops[precision] * 1e12


class InstanceType(BaseModel):
    """A SageMaker instance type (or the local machine)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    gpu: GpuSpec
    gpus_per_instance: int
    intra_node_gb_s: float = Field(description="Per-GPU, one-direction NVLink (or memcpy) GB/s.")
    inter_node_gbps: float = Field(description="EFA per instance, Gbit/s (0: single node only).")
    vcpus: int
    host_memory_gib: float = Field(
        description="Host (CPU) memory per instance, GiB: AWS's instance page (p6-b200.48xlarge: "
        "2 TiB; shared/notes/sagemaker-facts.md)."
    )
    pcie_gb_s: float | None = Field(
        None,
        description="Host-to-GPU PCIe bandwidth per GPU, one direction, GB/s, as offload can "
        "use it (None: unknown, offload not planned).",
    )
    host_memory_gb_s: float | None = Field(
        None,
        description="Host memory bandwidth per instance, GB/s, which a CPU optimizer step is "
        "bound by (None: unknown).",
    )
    local_nvme_tb: float = 0.0
    price_per_hour: float | None = Field(None, description="USD per instance-hour, see PRICES.")
    price_source: str | None = None
    supports_training_plans: bool = True
    efa_provider_env: bool = Field(
        True, description="Inter-node traffic over EFA: the launcher sets FI_PROVIDER=efa."
    )

    @property
    def total_memory_gib(self) -> float:
        return self.gpu.memory_gib * self.gpus_per_instance


H100 = GpuSpec(
    name="H100 SXM 80GB",
    memory_gib=79.65,
    hbm_tb_s=3.35,
    compute_capability=(9, 0),
    peak_tflops={"bf16": 989.0, "fp8": 1979.0},
)
H200 = GpuSpec(
    name="H200 141GB",
    memory_gib=139.81,
    hbm_tb_s=4.8,
    compute_capability=(9, 0),
    peak_tflops={"bf16": 989.0, "fp8": 1979.0},
)
B200 = GpuSpec(
    name="B200 180GB",
    memory_gib=179.06,
    hbm_tb_s=8.0,
    compute_capability=(10, 0),
    peak_tflops={"bf16": 2250.0, "fp8": 4500.0, "mxfp8": 4500.0},
)
B300 = GpuSpec(
    name="B300 288GB",
    memory_gib=267.0,
    hbm_tb_s=8.0,
    compute_capability=(10, 3),
    peak_tflops={"bf16": 2250.0, "fp8": 4500.0, "mxfp8": 4500.0},
)

# Price table: USD per instance-hour. SageMaker `ml.` prices for these types were not published
# where we looked; these are EC2 on-demand list prices (us-east-1) as a lower-bound proxy.
# Override per run with compute.price_per_hour or BSM_PRICE_<TYPE> (dots/hyphens as underscores),
# and a training plan offering's own UpfrontFee wins over both.
PRICES_AS_OF = "2026-11"
PRICES: dict[str, tuple[float, str]] = {
    "ml.p6-b200.48xlarge": (113.93, "EC2 p6-b200.48xlarge on-demand list price, us-east-1"),
    "ml.p6-b300.48xlarge": (
        142.42,
        "EC2 p6-b300.48xlarge on-demand list price, us-east-1 (unverified)",
    ),
    "ml.p5.48xlarge": (
        55.04,
        "EC2 p5.48xlarge on-demand list price after the 2025-06 cut, us-east-1",
    ),
    "ml.p5en.48xlarge": (63.30, "EC2 p5en.48xlarge on-demand list price, us-east-1 (unverified)"),
}

CATALOG: dict[str, InstanceType] = {
    t.name: t
    for t in [
        InstanceType(
            name="ml.p6-b200.48xlarge",
            gpu=B200,
            gpus_per_instance=8,
            intra_node_gb_s=900.0,
            inter_node_gbps=3200.0,
            vcpus=192,
            host_memory_gib=2048.0,
            # PCIe Gen5 x16 per B200 (NVIDIA HGX B200): 64 GB/s per direction nominal, taken at
            # 50 achievable; host memory: two 5th-gen Xeon sockets of 8 DDR5-5600 channels
            # (717 GB/s nominal), taken at 400 GB/s a CPU AdamW streams. Nominal, not measured.
            pcie_gb_s=50.0,
            host_memory_gb_s=400.0,
            local_nvme_tb=30.72,
        ),
        InstanceType(
            name="ml.p6-b300.48xlarge",
            gpu=B300,
            gpus_per_instance=8,
            intra_node_gb_s=900.0,
            inter_node_gbps=6400.0,
            vcpus=192,
            host_memory_gib=4096.0,
            local_nvme_tb=30.72,
        ),
        InstanceType(
            name="ml.p5.48xlarge",
            gpu=H100,
            gpus_per_instance=8,
            intra_node_gb_s=450.0,
            inter_node_gbps=3200.0,
            vcpus=192,
            host_memory_gib=2048.0,
            local_nvme_tb=30.72,
        ),
        InstanceType(
            name="ml.p5en.48xlarge",
            gpu=H200,
            gpus_per_instance=8,
            intra_node_gb_s=450.0,
            inter_node_gbps=3200.0,
            vcpus=192,
            host_memory_gib=2048.0,
            local_nvme_tb=30.72,
        ),
    ]
}


def _price(name: str) -> tuple[float | None, str | None]:
    env = "BSM_PRICE_" + name.upper().replace(".", "_").replace("-", "_")
    if os.environ.get(env):
        try:
            value = float(os.environ[env])
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):  # "inf" and "nan" parse as floats
            raise SpecError(
                f"${env} must be a finite number > 0 (USD per hour), got {os.environ[env]!r}",
                field=env,
            )
        return value, f"override from ${env}"
    return PRICES.get(name, (None, None))


def get_instance(name: str) -> InstanceType:
    """The catalogued instance type `name` with its current price, or a SpecError."""
    if name not in CATALOG:
        raise SpecError(
            f"unknown compute.instance_type; allowed: {', '.join(CATALOG)} (got {name!r})",
            field="compute.instance_type",
        )
    price, source = _price(name)
    return CATALOG[name].model_copy(update={"price_per_hour": price, "price_source": source})


def local_instance(
    *,
    nproc: int,
    device: Literal["cpu", "cuda"] = "cpu",
    memory_gib: float | None = None,
    gpu: GpuSpec | None = None,
    peak_tflops: float | None = None,
) -> InstanceType:
    """The local machine as an instance: `nproc` worker processes (CPU) or local GPUs.

    On CPU `peak_tflops` is the achieved bf16 matmul rate per process that `bsm run-local`
    measures at start (`train/peak.py`); without it a nominal 0.1 TFLOP/s, so that times are
    comparable only between local runs. Memory is host memory split across processes.
    """
    if device == "cuda":
        if gpu is None:
            raise SpecError("local CUDA planning needs the GPU's spec", field="gpu")
        g = gpu
    else:
        mem = memory_gib if memory_gib is not None else 8.0 * nproc
        g = GpuSpec(
            name="cpu",
            kind="cpu",
            memory_gib=mem / nproc,
            hbm_tb_s=0.02,
            peak_tflops={"bf16": peak_tflops or 0.1},
        )
    return InstanceType(
        name=f"{LOCAL_INSTANCE_PREFIX}{device}",
        gpu=g,
        gpus_per_instance=nproc,
        intra_node_gb_s=5.0,
        inter_node_gbps=10.0,
        vcpus=os.cpu_count() or 1,
        host_memory_gib=memory_gib or 0.0,
        supports_training_plans=False,
        efa_provider_env=False,
    )
