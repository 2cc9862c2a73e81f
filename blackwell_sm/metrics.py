"""The metric lines: written by the training loop (from its typed records, blackwell_sm/records),
parsed by SageMaker metric definitions, and read back as records by `records.record_from_line`.

One source of truth: `format_step_line`, `format_check_line` and `format_alert_line` write
exactly what `METRIC_REGEXES` reads, and the job builder turns `METRIC_REGEXES` into
CreateTrainingJob `MetricDefinitions`. docs/training-loop.md lists every field.
"""

from __future__ import annotations

import re

_NUM = r"([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
STEP_PREFIX = "[bsm-step]"
#: Steps of a process that speed figures leave out: allocator warm-up and compile. Shared by the
#: in-job check, summary.json's medians, `bsm calibrate` and `bsm report`.
WARMUP_STEPS = 2

# field in the log line -> SageMaker metric name
METRIC_FIELDS: dict[str, str] = {
    "loss": "train:loss",
    "lr": "train:lr",
    "grad_norm": "train:grad_norm",
    "tok_s_gpu": "train:tokens_per_s_per_gpu",
    "mfu": "train:mfu",
    "step_time_s": "train:step_time_s",
    "mem_alloc_gib": "train:peak_mem_allocated_gib",
    "mem_reserved_gib": "train:peak_mem_reserved_gib",
}
#: Optional step-line fields: written once the measured-against-predicted check has run.
STEP_OPTIONAL_FIELDS: dict[str, str] = {"eta_s": "train:eta_s"}
VAL_PREFIX = "[bsm-val]"

#: The one `[bsm-check]` line (train/check.py): measured beside predicted, after warm-up.
CHECK_PREFIX = "[bsm-check]"
CHECK_FIELDS: dict[str, str] = {
    "tok_s_gpu": "check:tokens_per_s_per_gpu",
    "pred_tok_s_gpu": "check:predicted_tokens_per_s_per_gpu",
    "pred_tok_s_gpu_low": "check:predicted_tokens_per_s_per_gpu_low",
    "pred_tok_s_gpu_high": "check:predicted_tokens_per_s_per_gpu_high",
    "speed_ratio": "check:speed_measured_over_predicted",
    "step_time_s": "check:step_time_s",
    "compute_s": "check:compute_s",
    "exposed_comm_s": "check:exposed_comm_s",
    "mfu": "check:mfu",
    "mem_reserved_gib": "check:peak_mem_reserved_gib",
    "pred_mem_high_gib": "check:predicted_mem_high_gib",
    "eta_s": "check:eta_s",
    "total_steps": "check:total_steps",
}

#: `[bsm-alert]` lines: the run will not end before its deadline, or memory is above the plan.
ALERT_PREFIX = "[bsm-alert]"
ALERT_FIELDS: dict[str, str] = {
    "overrun_s": "alert:overrun_s",
    "mem_over_gib": "alert:memory_over_plan_gib",
}

#: What to do, named by the alerts (train/check.py) and by `bsm status` (aws/progress.py).
OVERRUN_ADVICE = (
    "extend the training plan (`bsm plans extend`), add instances (compute.instance_count), "
    "or accept a resume in a second job (`bsm submit SPEC --until-done`)"
)
MEMORY_ADVICE = (
    "lower training.micro_batch_size or turn on activation checkpointing before it runs out of "
    "memory; `bsm plan` shows the configurations that fit"
)


def _regex(prefix: str, key: str) -> str:
    return re.escape(prefix) + r" .*?\b" + key + "=" + _NUM


METRIC_REGEXES: dict[str, str] = {
    name: _regex(STEP_PREFIX, key) for key, name in (METRIC_FIELDS | STEP_OPTIONAL_FIELDS).items()
}
METRIC_REGEXES["val:loss"] = _regex(VAL_PREFIX, "loss")
METRIC_REGEXES.update({name: _regex(CHECK_PREFIX, key) for key, name in CHECK_FIELDS.items()})
METRIC_REGEXES.update({name: _regex(ALERT_PREFIX, key) for key, name in ALERT_FIELDS.items()})


def _fmt(value: float | int | str) -> str:
    """Words as they are, whole numbers exactly (a step count past 999,999 too), floats in 6
    significant digits."""
    if isinstance(value, str):
        return value
    return str(value) if isinstance(value, int) else f"{value:.6g}"


def format_step_line(step: int, *, eta_s: float | None = None, **values: float) -> str:
    """`[bsm-step] step=N loss=... lr=...` with the fields of METRIC_FIELDS (all required), then
    `eta_s=` once the loop knows its measured rate."""
    missing = set(METRIC_FIELDS) - set(values)
    if missing:
        raise ValueError(f"missing metric fields: {sorted(missing)}")
    parts = [f"step={step}"] + [f"{k}={values[k]:.6g}" for k in METRIC_FIELDS]
    if eta_s is not None:
        parts.append(f"eta_s={eta_s:.6g}")
    return f"{STEP_PREFIX} " + " ".join(parts)


def format_check_line(step: int, values: dict[str, float | int | str]) -> str:
    """`[bsm-check] step=N key=value ...`: every CHECK_FIELDS key (required) and any extra
    key=value (a value with no spaces: numbers, words joined by `_`)."""
    missing = set(CHECK_FIELDS) - set(values)
    if missing:
        raise ValueError(f"missing check fields: {sorted(missing)}")
    return f"{CHECK_PREFIX} step={step} " + " ".join(f"{k}={_fmt(v)}" for k, v in values.items())


def format_alert_line(step: int, kind: str, key: str, value: float, message: str) -> str:
    """`[bsm-alert] step=N kind=K <key>=V <message>`; `key` is one of ALERT_FIELDS."""
    if key not in ALERT_FIELDS:
        raise ValueError(f"unknown alert field {key!r}")
    return f"{ALERT_PREFIX} step={step} kind={kind} {key}={value:.6g} {message}"


def format_val_line(step: int, loss: float) -> str:
    return f"{VAL_PREFIX} step={step} loss={loss:.6g}"


def parse_line(line: str) -> dict[str, float]:
    """Metric name -> value for every metric regex that matches `line`."""
    out = {}
    for name, rx in METRIC_REGEXES.items():
        m = re.search(rx, line)
        if m:
            out[name] = float(m.group(1))
    return out
