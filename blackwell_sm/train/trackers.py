"""Trackers from inside the job (`training.report_to`): TensorBoard, MLflow, W&B, on rank 0.

`MetricsLog.write` hands every record to `Trackers.write` (`train/tracker_process.py`), which
only puts it on a bounded queue: the trackers run in a process of their own, so a slow or dead
tracker never stops or slows training, and their libraries never weigh on rank 0's memory. A
tracker that fails (server down, bad credentials, a missing package) prints one `[bsm] warning:`
line and is off for the rest of the run; a full queue drops records with one warning; one that
hangs is named at the end with the records it did not send. MLflow's metrics go in one
`log_batch` every `MLFLOW_FLUSH_S` (a transaction per step cost more than the step on a CPU).

What each record becomes (the same names in every tracker):
- train: train/loss, train/lr, train/grad_norm, speed/tokens_per_s_per_gpu, speed/mfu,
  speed/step_time_s, memory/allocated_gib, memory/reserved_gib (and eta/seconds_left);
- val: val/loss; check: check/<figure> for each `[bsm-check]` figure, and its verdicts as text;
- alert, save, stop, start, bad_step: text (TensorBoard), tags (MLflow), a log line (W&B);
- the plan: plan/<prediction> scalars at the first step, the configuration as text (TensorBoard)
  and as parameters (MLflow, W&B's config).

Container side: no boto3. mlflow and wandb are imported only when named (their wheels travel
in the bundle: job/wheels.py); TensorBoard uses the standard-library writer in tb_events.py.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Protocol

from blackwell_sm.opt_ml import ENV_EXPORT_URI, ENV_TRAINING_JOB_NAME
from blackwell_sm.planner.plan import Plan
from blackwell_sm.records import (
    AlertRecord,
    BadStepRecord,
    CheckRecord,
    Record,
    SaveRecord,
    StartRecord,
    StopRecord,
    TrainRecord,
    ValRecord,
)
from blackwell_sm.records.kinds import CheckFigures

MLFLOW_FLUSH_S = 5.0  # MLflow's metrics are sent in one log_batch this often (and at the end)
MLFLOW_BATCH_MAX = 1000  # MLflow's log_batch limit on metrics per call
# MLflow's client retries a dead server for minutes by default: fewer, shorter tries (the user's
# own MLFLOW_HTTP_REQUEST_* variables win).
MLFLOW_HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}


def warn(message: str) -> None:
    print(f"[bsm] warning: {message}", flush=True)


def scalars(rec: Record) -> dict[str, float]:
    """The record's figures under the trackers' names (module docstring)."""
    if isinstance(rec, TrainRecord):
        out = {
            "train/loss": rec.loss,
            "train/lr": rec.lr,
            "train/grad_norm": rec.grad_norm,
            "speed/tokens_per_s_per_gpu": rec.tok_s_gpu,
            "speed/mfu": rec.mfu,
            "speed/step_time_s": rec.step_time_s,
            "memory/allocated_gib": rec.mem_alloc_gib,
            "memory/reserved_gib": rec.mem_reserved_gib,
        }
        if rec.eta_s is not None:
            out["eta/seconds_left"] = rec.eta_s
        return out
    if isinstance(rec, ValRecord):
        return {"val/loss": rec.loss}
    if isinstance(rec, CheckRecord):
        return {
            f"check/{k}": float(v)
            for k in CheckFigures.model_fields
            if isinstance(v := getattr(rec, k), int | float) and not isinstance(v, bool)
        }
    if isinstance(rec, AlertRecord):
        key, value = rec.figure
        return {f"alert/{key}": value}
    if isinstance(rec, BadStepRecord):
        return {"bad_step/in_row": float(rec.in_row)}
    return {}


def text(rec: Record) -> tuple[str, str] | None:
    """(tag, words) for the events a scalar cannot say."""
    if isinstance(rec, CheckRecord):
        return "check", (
            f"step {rec.step}: speed {rec.speed} (x{rec.speed_ratio:.2f} of the "
            f"prediction), memory {rec.memory}, timing {rec.timing}"
        )
    if isinstance(rec, AlertRecord):
        return f"alert/{rec.alert}", rec.message
    if isinstance(rec, SaveRecord):
        return "events", f"checkpoint {rec.checkpoint} saved at step {rec.step}"
    if isinstance(rec, StopRecord):
        return "events", f"stopped after step {rec.step}: {rec.reason}"
    if isinstance(rec, StartRecord):
        how = (
            "fresh start"
            if rec.resumed_from_step is None
            else f"resumed from step {rec.resumed_from_step} ({rec.checkpoint})"
        )
        return "events", f"launch at step {rec.step} on {rec.world_size} processes: {how}"
    if isinstance(rec, BadStepRecord):
        return "events", (
            f"step {rec.step} skipped: loss {rec.loss}, grad norm {rec.grad_norm} "
            f"({rec.in_row} in a row)"
        )
    return None


def plan_scalars(plan: Plan) -> dict[str, float]:
    t = plan.throughput
    return {
        "plan/tokens_per_s_per_gpu": t.tokens_per_s_per_gpu,
        "plan/mfu": t.mfu,
        "plan/step_time_s": t.step_time_s,
        "plan/memory_gib": plan.predicted_memory_gib(),
        "plan/hours": plan.run.hours,
    }


def plan_params(plan: Plan) -> dict[str, str]:
    """The plan as flat parameters: model, instance, configuration, run length, predictions."""
    c, t = plan.config, plan.throughput
    out = {
        "model": plan.model.name,
        "instance_type": plan.instance.type,
        "instance_count": str(plan.instance.count),
        "steps": str(plan.run.steps),
        "lr": str(plan.spec.training.optimizer.lr),
        "seed": str(plan.spec.training.seed),
        **{f"config.{k}": str(v) for k, v in c.model_dump(mode="json").items()},
        "predicted.tokens_per_s_per_gpu": f"{t.tokens_per_s_per_gpu:.6g}",
        "predicted.mfu": f"{t.mfu:.6g}",
        "predicted.step_time_s": f"{t.step_time_s:.6g}",
        "predicted.memory_gib": f"{plan.predicted_memory_gib():.6g}",
    }
    if t.tokens_per_s_per_gpu_range:
        lo, hi = t.tokens_per_s_per_gpu_range
        out["predicted.tokens_per_s_per_gpu_range"] = f"{lo:.6g}-{hi:.6g}"
    return out


def run_name(plan: Plan) -> str:
    """The tracker run's name: the spec's, else the SageMaker job's, else model-<time>."""
    ml = plan.spec.training.mlflow
    if ml is not None and ml.run_name:
        return ml.run_name
    return os.environ.get(ENV_TRAINING_JOB_NAME) or f"{plan.model.name}-{int(time.time())}"


class Tracker(Protocol):
    name: str
    where: str  # where it sends: a directory, a tracking URI, a project (named in warnings)

    def record(self, rec: Record) -> None: ...

    def close(self, status: str) -> None: ...


class TensorBoardTracker:
    name = "tensorboard"

    def __init__(self, plan: Plan, logdir: Path) -> None:
        from blackwell_sm.train.tb_events import EventWriter

        self.plan, self.writer, self.first = plan, EventWriter(logdir), True
        self.where = where_of(self.name, plan, logdir)
        params = plan_params(plan)
        self.writer.text(0, "plan", "\n".join(f"{k}: {v}" for k, v in params.items()))

    def record(self, rec: Record) -> None:
        when = getattr(rec, "time", None)
        if self.first and isinstance(rec, TrainRecord):
            self.writer.scalars(rec.step, plan_scalars(self.plan), when)
            self.first = False
        self.writer.scalars(rec.step, scalars(rec), when)
        words = text(rec)
        if words is not None:
            self.writer.text(rec.step, *words, wall_time=when)
        self.writer.flush()

    def close(self, status: str) -> None:
        self.writer.text(0, "events", f"run ended: {status}")
        self.writer.close()


class MlflowTracker:
    """MLflow's client API: a SageMaker ARN (the sagemaker-mlflow plugin signs the calls), an
    http(s) server or a local store. Joins the run SageMaker made when MLFLOW_RUN_ID is set,
    else the unfinished run of the same name (a resumed launch), else starts one."""

    name = "mlflow"

    def __init__(self, plan: Plan) -> None:
        for k, v in MLFLOW_HTTP_DEFAULTS.items():
            os.environ.setdefault(k, v)
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        settings = plan.spec.training.mlflow
        assert settings is not None  # TrainingSpec checked report_to against it
        self.client = MlflowClient(tracking_uri=settings.tracking_uri)
        self.where = where_of(self.name, plan, Path())
        self.plan, self.first = plan, True
        self.pending: list[Any] = []  # metrics not sent yet (one log_batch per MLFLOW_FLUSH_S)
        self.sent_at = time.monotonic()
        run_id = os.environ.get("MLFLOW_RUN_ID")
        if run_id is None:
            name = settings.experiment or plan.model.name
            exp = self.client.get_experiment_by_name(name)
            exp_id = exp.experiment_id if exp is not None else self.client.create_experiment(name)
            run_id = self._unfinished(exp_id, run_name(plan))
            if run_id is None:
                run_id = self.client.create_run(exp_id, run_name=run_name(plan)).info.run_id
        self.run_id = run_id
        params = [Param(k, v) for k, v in plan_params(plan).items()]
        self.client.log_batch(self.run_id, params=params)

    def _unfinished(self, exp_id: str, name: str) -> str | None:
        """The newest run of this name that did not finish (a launch killed or stopped before
        this one, which resumes it): its steps continue in the same MLflow run."""
        found = self.client.search_runs(
            [exp_id],
            filter_string=f"attributes.run_name = '{name}'",
            order_by=["attributes.start_time DESC"],
            max_results=1,
        )
        if found and found[0].info.status != "FINISHED":
            self.client.update_run(found[0].info.run_id, status="RUNNING")
            return found[0].info.run_id
        return None

    def record(self, rec: Record) -> None:
        from mlflow.entities import Metric

        ms = int((getattr(rec, "time", None) or time.time()) * 1000)
        values = scalars(rec)
        if self.first and isinstance(rec, TrainRecord):
            values = {**plan_scalars(self.plan), **values}
            self.first = False
        self.pending += [Metric(k, v, ms, rec.step) for k, v in values.items()]
        if time.monotonic() - self.sent_at >= MLFLOW_FLUSH_S:
            self.flush()
        words = text(rec)
        if words is not None:
            self.client.set_tag(self.run_id, f"bsm.{words[0]}", words[1][:5000])

    def flush(self) -> None:
        """Send the metrics held, MLFLOW_BATCH_MAX per call."""
        while self.pending:
            batch, self.pending = self.pending[:MLFLOW_BATCH_MAX], self.pending[MLFLOW_BATCH_MAX:]
            self.client.log_batch(self.run_id, metrics=batch)
        self.sent_at = time.monotonic()

    def close(self, status: str) -> None:
        self.flush()
        export = os.environ.get(ENV_EXPORT_URI)
        if export:
            self.client.set_tag(self.run_id, "bsm.export_uri", export)
        state = "FINISHED" if status == "completed" else "KILLED"
        self.client.set_terminated(self.run_id, status=state)


class WandbTracker:
    """W&B: the API key from WANDB_API_KEY (never the spec); offline mode writes locally."""

    name = "wandb"

    def __init__(self, plan: Plan, out_dir: Path) -> None:
        import wandb

        settings = plan.spec.training.wandb
        assert settings is not None
        self.run = wandb.init(
            project=settings.project,
            entity=settings.entity,
            mode=settings.mode,
            name=run_name(plan),
            config=plan_params(plan),
            dir=str(out_dir),
            reinit=True,
        )
        self.where = where_of(self.name, plan, Path())
        self.plan, self.first = plan, True

    def record(self, rec: Record) -> None:
        values: dict[str, Any] = dict(scalars(rec))
        if self.first and isinstance(rec, TrainRecord):
            values.update(plan_scalars(self.plan))
            self.first = False
        words = text(rec)
        if words is not None:
            values[f"text/{words[0]}"] = words[1]
        if values:
            self.run.log(values, step=rec.step)

    def close(self, status: str) -> None:
        self.run.finish(exit_code=0 if status == "completed" else 1)


def where_of(name: str, plan: Plan, tensorboard_dir: Path) -> str:
    """Where the tracker `name` sends (for warnings): a directory, a tracking URI, a project."""
    tr = plan.spec.training
    if name == "mlflow" and tr.mlflow is not None:
        return tr.mlflow.tracking_uri
    if name == "wandb" and tr.wandb is not None:
        return f"project {tr.wandb.project}"
    return str(tensorboard_dir)


def make_tracker(name: str, plan: Plan, tensorboard_dir: Path, out_dir: Path) -> Tracker:
    """The tracker `name` of `training.report_to`, started."""
    if name == "tensorboard":
        return TensorBoardTracker(plan, tensorboard_dir)
    if name == "mlflow":
        return MlflowTracker(plan)
    return WandbTracker(plan, out_dir)
