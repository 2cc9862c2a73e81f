"""Default training images: SageMaker's PyTorch training image that runs on B200, per region.

B200 is compute capability 10.0 (sm_100): it needs PyTorch >= 2.7 built with CUDA >= 12.8.
Pinned: `pytorch-training:2.8.0-gpu-py312-cu129-ubuntu22.04-sagemaker` (PyTorch 2.8, CUDA 12.9,
NCCL 2.27). Registry accounts per region are transcribed from the SageMaker Python SDK 3.27
(`sagemaker/core/image_uri_config/pytorch.json`, training 2.8.0); a test checks them against the
installed SDK's table. Override with `job.image_uri` for any other image.

`TARGETS` records what the code bundle's carried wheels are built for (`job/wheels.py`): each
image's Python, platform tags and torch, and the torchao release built against that torch.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from blackwell_sm.errors import SpecError

REPOSITORY = "pytorch-training"
TAG = "2.8.0-gpu-py312-cu129-ubuntu22.04-sagemaker"
PYTORCH_VERSION = "2.8.0"
CUDA_VERSION = "12.9"
SOURCE = "SageMaker Python SDK 3.27 image_uri_config/pytorch.json, training 2.8.0 registries"

# manylinux tags pip accepts for an x86_64 glibc >= 2.28 image (Ubuntu 22.04 has glibc 2.35).
MANYLINUX_X86_64 = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)


class ImageTarget(BaseModel):
    """What wheels an image can install, and the torch it brings (never replaced)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    python: str = Field(description="The image's Python, major.minor ('3.12').")
    platforms: tuple[str, ...] = Field(description="pip --platform tags, best first.")
    torch: str = Field(description="The image's torch release.")
    torchao: str = Field(description="The torchao release built against that torch ('==0.13.0').")
    torchao_torch: str = Field(description="The torch range that torchao release loads on.")
    source: str


TARGETS: dict[str, ImageTarget] = {
    "sagemaker-pytorch-2.8": ImageTarget(
        name="sagemaker-pytorch-2.8",
        python="3.12",
        platforms=MANYLINUX_X86_64,
        torch=PYTORCH_VERSION,
        # torchao 0.13.0's own __init__ says it is built with torch 2.8.0 (not ABI-compatible
        # with 2.9+).
        torchao="==0.13.0",
        torchao_torch=">=2.8,<2.9",
        source=f"{REPOSITORY}:{TAG} (py312 in the tag; Ubuntu 22.04, x86_64)",
    ),
    # The machine the `device` tool lends for GPU checks (benchmarks/gpu_check.sh), not a
    # SageMaker image: Python 3.12.3, torch 2.11.0+cu130, no pydantic, no torchao.
    "lent-h200": ImageTarget(
        name="lent-h200",
        python="3.12",
        platforms=MANYLINUX_X86_64,
        torch="2.11.0",
        torchao="==0.17.0",  # its __init__ requires torch >= 2.11.0
        torchao_torch=">=2.11",
        source="/work/.library/device/KINDS.md, nvidia-h200 (2026-11)",
    ),
}
PINNED_TARGET = TARGETS["sagemaker-pytorch-2.8"]


def image_target(image_uri: str | None) -> tuple[ImageTarget, str | None]:
    """The wheel target for `image_uri` (None: the pinned image) and a warning when assumed."""
    if image_uri is None or image_uri.endswith(f"/{REPOSITORY}:{TAG}"):
        return PINNED_TARGET, None
    return PINNED_TARGET, (
        f"job.image_uri {image_uri} is not in the image table: the carried wheels are built for "
        f"{PINNED_TARGET.source} (Python {PINNED_TARGET.python}, x86_64); the container's "
        "bootstrap refuses to install them on another Python"
    )


_DEFAULT_ACCOUNT = "763104351884"
# region -> ECR registry account of the AWS Deep Learning Containers.
REGISTRIES: dict[str, str] = {
    "af-south-1": "626614931356",
    "ap-east-1": "871362719292",
    "ap-east-2": "975050140332",
    "ap-northeast-1": _DEFAULT_ACCOUNT,
    "ap-northeast-2": _DEFAULT_ACCOUNT,
    "ap-northeast-3": "364406365360",
    "ap-south-1": _DEFAULT_ACCOUNT,
    "ap-south-2": "772153158452",
    "ap-southeast-1": _DEFAULT_ACCOUNT,
    "ap-southeast-2": _DEFAULT_ACCOUNT,
    "ap-southeast-3": "907027046896",
    "ap-southeast-4": "457447274322",
    "ap-southeast-5": "550225433462",
    "ap-southeast-6": "633930458069",
    "ap-southeast-7": "590183813437",
    "ca-central-1": _DEFAULT_ACCOUNT,
    "ca-west-1": "204538143572",
    "cn-north-1": "727897471807",
    "cn-northwest-1": "727897471807",
    "eu-central-1": _DEFAULT_ACCOUNT,
    "eu-central-2": "380420809688",
    "eu-north-1": _DEFAULT_ACCOUNT,
    "eu-south-1": "692866216735",
    "eu-south-2": "503227376785",
    "eu-west-1": _DEFAULT_ACCOUNT,
    "eu-west-2": _DEFAULT_ACCOUNT,
    "eu-west-3": _DEFAULT_ACCOUNT,
    "il-central-1": "780543022126",
    "me-central-1": "914824155844",
    "me-south-1": "217643126080",
    "me-west-1": "124382933778",
    "mx-central-1": "637423239942",
    "sa-east-1": _DEFAULT_ACCOUNT,
    "us-east-1": _DEFAULT_ACCOUNT,
    "us-east-2": _DEFAULT_ACCOUNT,
    "us-gov-east-1": "446045086412",
    "us-gov-west-1": "442386744353",
    "us-west-1": _DEFAULT_ACCOUNT,
    "us-west-2": _DEFAULT_ACCOUNT,
}


def default_image_uri(region: str) -> str:
    """The pinned B200-capable PyTorch training image in `region`, or SpecError."""
    account = REGISTRIES.get(region)
    if account is None:
        raise SpecError(
            f"no pinned PyTorch training image for region {region!r}; known regions: "
            f"{', '.join(sorted(REGISTRIES))}",
            field="job.image_uri",
            hint="set job.image_uri to a PyTorch >= 2.7 / CUDA >= 12.8 training image in that region",
        )
    domain = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"{account}.dkr.ecr.{region}.{domain}/{REPOSITORY}:{TAG}"
