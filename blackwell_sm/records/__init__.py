"""Run records: everything a run writes, as typed data. A shared contract like the Plan.

- `metrics.jsonl` (rank 0, one JSON object a line): `start` (each launch: the format version
  and where it resumed from), `train` (a logged step), `val`, `bad_step` (a step the NaN guard
  skipped), `check` (the in-job `[bsm-check]`), `alert` (`[bsm-alert]`), `save` (a checkpoint
  written), `stop` (the loop stopped before its last step).
- `summary.json`: `Summary`, versioned (`schema_version`; a file without one is version 1).
- The `[bsm-step]`, `[bsm-val]`, `[bsm-check]` and `[bsm-alert]` log lines (`metrics.py` formats,
  SageMaker's regexes): `record_line` writes them from a record, `record_from_line` reads one back.

Strict JSON: a non-finite figure (a skipped step's NaN loss) is written as `null`, and the record
names it in `"non_finite": {"loss": "nan"}`; the reader gives the float back. Every figure is
checked (a number, finite, in its range); a malformed record is refused naming the file, the line
and the field, never read as 0. `docs/training-loop.md` lists every field and how old files read.

The train loop writes (train/metrics_log.py); everything that reads a run reads through here:
the launcher, run-local, `bsm status`, `bsm calibrate` and `bsm report` (`runs/`). A new summary
field: add it below with a default and bump SUMMARY_VERSION. Pydantic only: no torch, no boto3.
"""

from blackwell_sm.records.codec import (
    NON_FINITE,
    parse_metrics,
    parse_record,
    parse_summary,
    read_metrics,
    read_summary,
    record_from_line,
    record_line,
    to_json,
)
from blackwell_sm.records.kinds import (
    RECORDS_VERSION,
    AlertRecord,
    BadStepRecord,
    CheckFigures,
    CheckRecord,
    Record,
    SaveRecord,
    StartRecord,
    StopRecord,
    TrainRecord,
    ValRecord,
)
from blackwell_sm.records.summary import (
    SUMMARY_VERSION,
    Eta,
    Measured,
    Predicted,
    Ratios,
    Summary,
    measured_from,
    segments,
)

__all__ = [
    "NON_FINITE",
    "RECORDS_VERSION",
    "SUMMARY_VERSION",
    "AlertRecord",
    "BadStepRecord",
    "CheckFigures",
    "CheckRecord",
    "Eta",
    "Measured",
    "Predicted",
    "Ratios",
    "Record",
    "SaveRecord",
    "StartRecord",
    "StopRecord",
    "Summary",
    "TrainRecord",
    "ValRecord",
    "measured_from",
    "parse_metrics",
    "parse_record",
    "parse_summary",
    "read_metrics",
    "read_summary",
    "record_from_line",
    "record_line",
    "segments",
    "to_json",
]
