"""The per-step metric line: written by the training loop, parsed by SageMaker metric definitions.

One source of truth: `format_step_line` writes exactly what `METRIC_REGEXES` reads, and the job
builder turns `METRIC_REGEXES` into CreateTrainingJob `MetricDefinitions`.
"""

from __future__ import annotations

import re

_NUM = r"([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
STEP_PREFIX = "[bsm-step]"

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
VAL_PREFIX = "[bsm-val]"

METRIC_REGEXES: dict[str, str] = {
    name: re.escape(STEP_PREFIX) + r" .*?\b" + key + "=" + _NUM
    for key, name in METRIC_FIELDS.items()
}
METRIC_REGEXES["val:loss"] = re.escape(VAL_PREFIX) + r" .*?\bloss=" + _NUM


def format_step_line(step: int, **values: float) -> str:
    """`[bsm-step] step=N loss=... lr=...` with the fields of METRIC_FIELDS (all required)."""
    missing = set(METRIC_FIELDS) - set(values)
    if missing:
        raise ValueError(f"missing metric fields: {sorted(missing)}")
    parts = [f"step={step}"] + [f"{k}={values[k]:.6g}" for k in METRIC_FIELDS]
    return f"{STEP_PREFIX} " + " ".join(parts)


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
