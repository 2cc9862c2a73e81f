"""Where a run also reports, from inside the job: `training.report_to` and each tracker's settings.

TensorBoard needs none (event files under the job's TensorBoard path, synced to S3 by
SageMaker); MLflow a tracking URI (a SageMaker managed MLflow ARN, an http(s) server or a
sqlite:/// store; not a file store, which MLflow 3 refuses); W&B a project. Credentials never live in the spec: W&B's API key comes from
run-local's environment (`WANDB_API_KEY`); a SageMaker job runs W&B offline (job/native.py
`check_wandb` says why).
These fields do not change what is trained, so they stay out of the job's spec hash
(`TRACKER_FIELDS`): adding a tracker to a running spec keeps its job name and checkpoints.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Tracker = Literal["tensorboard", "mlflow", "wandb"]
#: TrainingSpec fields that only say where the run reports (left out of the spec hash).
TRACKER_FIELDS = ("report_to", "mlflow", "wandb")

# The MlflowConfig.MlflowResourceArn pattern of the API model (botocore 1.44).
MLFLOW_ARN_RE = re.compile(
    r"^arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]*:[0-9]{12}:mlflow-[a-zA-Z-]*/.+$"
)
_URI_RE = re.compile(r"^(https?://[^\s/]+(/\S*)?|sqlite:///\S+)$")
_NAME_RE = re.compile(r"^[^\x00-\x1f]{1,256}$")
# The client packages each tracker needs in the container, carried in the bundle (TensorBoard:
# none, train/tb_events.py writes the event files). mlflow-skinny is MLflow's client without the
# server; sagemaker-mlflow signs the calls to a SageMaker managed MLflow ARN.
TRACKER_PACKAGES: dict[str, tuple[tuple[str, str], ...]] = {
    "tensorboard": (),
    "mlflow": (("mlflow-skinny", ">=2.16"),),
    "wandb": (("wandb", ">=0.17"),),
}
SAGEMAKER_MLFLOW = ("sagemaker-mlflow", ">=0.1")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class MlflowSpec(_Strict):
    """MLflow from inside the job: SageMaker's managed MLflow (sent as the request's
    MlflowConfig) or any tracking server."""

    tracking_uri: str = Field(
        min_length=1,
        max_length=2048,
        description="1-2048 characters: a SageMaker managed MLflow ARN (arn:aws:sagemaker:"
        "REGION:ACCOUNT:mlflow-tracking-server/NAME or mlflow-app/ID; sent as MlflowConfig), an "
        "http(s):// tracking server, or a local sqlite:///PATH store (run-local). Not a file "
        "store (file: or a plain path): MLflow 3 refuses those.",
    )
    experiment: str | None = Field(
        None, description="Experiment name, 1-256 characters; default: the model's name."
    )
    run_name: str | None = Field(
        None, description="Run name, 1-256 characters; default: the job's name."
    )

    @field_validator("tracking_uri")
    @classmethod
    def _uri(cls, v: str) -> str:
        if v.startswith("arn:"):
            if not MLFLOW_ARN_RE.match(v):
                raise ValueError(
                    f"{v!r} is not a SageMaker MLflow ARN (arn:aws:sagemaker:REGION:ACCOUNT:"
                    "mlflow-tracking-server/NAME)"
                )
            return v
        if v.startswith("file:") or ("://" not in v and not v.startswith(("sqlite:", "http"))):
            path = v.removeprefix("file://").removeprefix("file:") or "."
            raise ValueError(
                f"{v!r} is an MLflow file store, which MLflow 3 refuses (the tracker would turn "
                f"itself off at the first step): use a database store, sqlite:///{path.rstrip('/')}"
                "/mlflow.db (a path after the three slashes; four for an absolute one), or a "
                "tracking server (http(s)://HOST:PORT, or a SageMaker MLflow ARN)"
            )
        if not _URI_RE.match(v):
            raise ValueError(
                f"expected a SageMaker MLflow ARN, an http(s):// URL, or a sqlite:///PATH store; "
                f"got {v!r}"
            )
        return v

    @field_validator("experiment", "run_name")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and not _NAME_RE.match(v):
            raise ValueError("1-256 characters, no control characters (MlflowConfig's limit)")
        return v

    @property
    def is_sagemaker(self) -> bool:
        """A SageMaker managed MLflow server (MlflowConfig, SigV4 through sagemaker-mlflow)."""
        return self.tracking_uri.startswith("arn:")


class WandbSpec(_Strict):
    """Weights & Biases from inside the job. The API key is never a spec field: WANDB_API_KEY
    in run-local's environment; offline in a SageMaker job."""

    project: str = Field(min_length=1, max_length=128, description="W&B project, 1-128 characters.")
    entity: str | None = Field(
        None, min_length=1, max_length=128, description="Team or user, 1-128 characters."
    )
    mode: Literal["online", "offline"] = Field(
        "online", description="offline: write runs locally only (`wandb sync` later)."
    )


def check_trackers(
    report_to: Sequence[str], mlflow: MlflowSpec | None, wandb: WandbSpec | None
) -> None:
    """Each tracker named once, with its settings (ValueError otherwise)."""
    dupes = sorted({t for t in report_to if report_to.count(t) > 1})
    if dupes:
        raise ValueError(f"report_to names {', '.join(dupes)} more than once")
    if "mlflow" in report_to and mlflow is None:
        raise ValueError(
            "report_to has mlflow but training.mlflow is unset: add training.mlflow.tracking_uri "
            "(a SageMaker MLflow ARN, an http(s):// server or a sqlite:/// store)"
        )
    if "wandb" in report_to and wandb is None:
        raise ValueError("report_to has wandb but training.wandb is unset: add its project")


def tracker_packages(
    report_to: list[Tracker], mlflow: MlflowSpec | None
) -> list[tuple[str, str, str]]:
    """(package, version spec, why) for each package these trackers need in the container."""
    out = []
    for tracker in report_to:
        pairs = TRACKER_PACKAGES[tracker]
        if tracker == "mlflow" and mlflow is not None and mlflow.is_sagemaker:
            pairs = (*pairs, SAGEMAKER_MLFLOW)
        out += [(name, spec, f"training.report_to: {tracker}") for name, spec in pairs]
    return out
