"""Default training images: SageMaker's PyTorch training image that runs on B200, per region.

B200 is compute capability 10.0 (sm_100): it needs PyTorch >= 2.7 built with CUDA >= 12.8.
Pinned: `pytorch-training:2.8.0-gpu-py312-cu129-ubuntu22.04-sagemaker` (PyTorch 2.8, CUDA 12.9,
NCCL 2.27). Registry accounts per region are transcribed from the SageMaker Python SDK 3.27
(`sagemaker/core/image_uri_config/pytorch.json`, training 2.8.0); a test checks them against the
installed SDK's table. Override with `job.image_uri` for any other image.
"""

from __future__ import annotations

from blackwell_sm.errors import SpecError

REPOSITORY = "pytorch-training"
TAG = "2.8.0-gpu-py312-cu129-ubuntu22.04-sagemaker"
PYTORCH_VERSION = "2.8.0"
CUDA_VERSION = "12.9"
SOURCE = "SageMaker Python SDK 3.27 image_uri_config/pytorch.json, training 2.8.0 registries"

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
