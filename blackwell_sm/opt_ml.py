"""The container contract, in one place: the /opt/ml tree, the files we write in it, and the
environment variables the client, the launcher and the training loop pass to each other.

SageMaker lays the tree out on every host; `bsm run-local` and the tests lay out the same tree in
a temporary directory and point `BSM_OPT_ML` at it. Pure constants and path arithmetic: both the
client and the container import this module, so it imports nothing heavy and nothing of ours.

Environment variables (name: unit, who sets it → who reads it):

- `BSM_OPT_ML`: a directory; the /opt/ml root (tests, run-local) → container command, launcher, loop.
- `BSM_MAX_RUNTIME_S`: seconds, integer; the job's MaxRuntimeInSeconds → the loop's stop trigger.
- `BSM_JOB_START_UNIX`: seconds since the epoch, float; the launcher's start → the loop's triggers.
- `BSM_MASTER_ADDR` / `BSM_MASTER_PORT`: host name / TCP port; user or run-local → launcher.
- `BSM_DEVICE`: `cpu` | `cuda`; the launcher (CPU plans) → the worker's device choice.
- `BSM_STOP_GRACE_S`: seconds; user → how long the launcher waits after SIGTERM before SIGKILL.
- `BSM_DNS_WAIT_S`: seconds; user → how long the launcher waits for the master to resolve.
- `BSM_EXPORT_URI`: an s3:// URI; the request builder (the job's model.tar.gz) → the MLflow
  tracker's `bsm.export_uri` tag (a reference to the export, not an upload).
- `TRAINING_JOB_NAME`: the job's name; SageMaker → the trackers' default run name.
- `SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP`: since the epoch, in seconds or
  milliseconds (AWS documents both); SageMaker on training plans → the loop's save-before-expiry.

Test-only hooks (the fault suites set them; never set in a job):

- `BSM_TEST_FREE_BYTES`: bytes; stands in for the free space the launcher's preflight reads.
- `BSM_TEST_NAN_STEPS`: 1-based steps (comma-separated) or `all`; rank 0's loss is made NaN there.
- `BSM_TEST_ABORT_AT_EXIT`: a rank; that worker aborts after a completed run (teardown guard).
- `BSM_TEST_FP32_COMPUTE`: `1`; FSDP computes in fp32, not bf16 (step-for-step comparisons of
  the loss paths and context-parallel layouts, tests/test_long_context_loop.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ROOT = "/opt/ml"

ENV_OPT_ML = "BSM_OPT_ML"
ENV_MAX_RUNTIME_S = "BSM_MAX_RUNTIME_S"
ENV_JOB_START_UNIX = "BSM_JOB_START_UNIX"
ENV_MASTER_ADDR = "BSM_MASTER_ADDR"
ENV_MASTER_PORT = "BSM_MASTER_PORT"
ENV_DEVICE = "BSM_DEVICE"
ENV_STOP_GRACE_S = "BSM_STOP_GRACE_S"
ENV_DNS_WAIT_S = "BSM_DNS_WAIT_S"
ENV_EXPORT_URI = "BSM_EXPORT_URI"
ENV_TRAINING_JOB_NAME = "TRAINING_JOB_NAME"
ENV_CAPACITY_EXPIRY = "SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP"
ENV_TEST_FREE_BYTES = "BSM_TEST_FREE_BYTES"
ENV_TEST_NAN_STEPS = "BSM_TEST_NAN_STEPS"
ENV_TEST_ABORT_AT_EXIT = "BSM_TEST_ABORT_AT_EXIT"
ENV_TEST_FP32_COMPUTE = "BSM_TEST_FP32_COMPUTE"

# SageMaker shows the first 1024 characters of output/failure as the job's FailureReason.
FAILURE_LIMIT = 1024
# A checkpoint directory is complete only when this file exists (written last).
COMPLETE_MARKER = "COMPLETE"
METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"
PLAN_FILE = "plan.json"
# With compute.instance_preferences the bundle carries one plan per type, `plans/<type>.json`,
# next to plan.json; the launcher runs the one for the hardware it woke up on, never another.
PLANS_DIR = "plans"

# Instance names of plans made for this machine (`hardware.local_instance`): local-cpu, local-cuda.
LOCAL_INSTANCE_PREFIX = "local-"


def is_local_run(instance_type: str) -> bool:
    """True for a plan made for this machine (`bsm run-local`), not a SageMaker instance type."""
    return instance_type.startswith(LOCAL_INSTANCE_PREFIX)


def plan_file_for(instance_type: str) -> str:
    """The bundle path of the plan for `instance_type` (`plans/ml.p5.48xlarge.json`)."""
    return f"{PLANS_DIR}/{instance_type}.json"


def root_from_env(environ: Mapping[str, str] | None = None) -> Path:
    """`$BSM_OPT_ML` or /opt/ml."""
    env = os.environ if environ is None else environ
    return Path(env.get(ENV_OPT_ML) or DEFAULT_ROOT)


@dataclass(frozen=True)
class OptMl:
    """The paths of one host's /opt/ml-shaped tree rooted at `root`."""

    root: Path

    @property
    def config_dir(self) -> Path:
        return self.root / "input" / "config"

    @property
    def resource_config(self) -> Path:
        """`current_host`, `hosts`, `network_interface_name` (written by SageMaker)."""
        return self.config_dir / "resourceconfig.json"

    @property
    def hyperparameters(self) -> Path:
        return self.config_dir / "hyperparameters.json"

    @property
    def input_data_config(self) -> Path:
        return self.config_dir / "inputdataconfig.json"

    def channel(self, name: str) -> Path:
        """Input channel `name`, as SageMaker mounts it."""
        return self.root / "input" / "data" / name

    @property
    def checkpoints(self) -> Path:
        """Seeded from CheckpointConfig.S3Uri at start, synced back while running."""
        return self.root / "checkpoints"

    @property
    def model(self) -> Path:
        """Packed into model.tar.gz at the end of the job."""
        return self.root / "model"

    @property
    def output_data(self) -> Path:
        return self.root / "output" / "data"

    @property
    def tensorboard(self) -> Path:
        """TensorBoard event files; SageMaker syncs them to TensorBoardOutputConfig.S3OutputPath
        (its LocalPath, the API's default)."""
        return self.root / "output" / "tensorboard"

    @property
    def failure(self) -> Path:
        """The reason a job failed; its first FAILURE_LIMIT characters become FailureReason."""
        return self.root / "output" / "failure"

    @property
    def metrics(self) -> Path:
        """One JSON record per logged step (rank 0)."""
        return self.output_data / METRICS_FILE

    @property
    def summary(self) -> Path:
        """The loop's end-of-run summary: measured against predicted."""
        return self.output_data / SUMMARY_FILE
