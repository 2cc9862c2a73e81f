"""Records to strict JSON and log lines, and back: the one reader of metrics.jsonl,
summary.json and the `[bsm-*]` lines of a job's logs."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from blackwell_sm.errors import SpecError
from blackwell_sm.metrics import (
    ALERT_PREFIX,
    CHECK_PREFIX,
    METRIC_FIELDS,
    STEP_PREFIX,
    VAL_PREFIX,
    format_alert_line,
    format_check_line,
    format_step_line,
    format_val_line,
)
from blackwell_sm.records.kinds import (
    KINDS,
    RECORDS_VERSION,
    AlertRecord,
    BadStepRecord,
    CheckRecord,
    Record,
    StartRecord,
    TrainRecord,
    ValRecord,
)
from blackwell_sm.records.summary import SUMMARY_VERSION, Summary

#: Largest metrics.jsonl / summary.json read (a run logs ~300 bytes a step).
MAX_METRICS_BYTES = 256 * 1024 * 1024
MAX_SUMMARY_BYTES = 4 * 1024 * 1024
NON_FINITE = "non_finite"


def _finite_json(data: Any, path: str, out: dict[str, str]) -> Any:
    if isinstance(data, float) and not math.isfinite(data):
        out[path] = "nan" if math.isnan(data) else ("inf" if data > 0 else "-inf")
        return None
    if isinstance(data, dict):
        return {k: _finite_json(v, f"{path}.{k}" if path else k, out) for k, v in data.items()}
    if isinstance(data, list):
        return [_finite_json(v, f"{path}.{i}", out) for i, v in enumerate(data)]
    return data


def to_json(model: BaseModel, *, indent: int | None = None) -> str:
    """Strict JSON of a record or summary: None fields left out, a non-finite figure as null
    named under `non_finite`."""
    nan: dict[str, str] = {}
    data = _finite_json(model.model_dump(mode="python", exclude_none=True), "", nan)
    if nan:
        data[NON_FINITE] = nan
    return json.dumps(data, indent=indent, allow_nan=False)


def record_line(rec: Record) -> str | None:
    """The record's `[bsm-*]` log line (SageMaker's metric regexes read it), or None."""
    if isinstance(rec, TrainRecord):
        figures = rec.model_dump(include=set(METRIC_FIELDS))
        return format_step_line(rec.step, eta_s=rec.eta_s, **figures)
    if isinstance(rec, ValRecord):
        return format_val_line(rec.step, rec.loss)
    if isinstance(rec, CheckRecord):
        return format_check_line(
            rec.step, rec.model_dump(exclude={"kind", "step"}, exclude_none=True)
        )
    if isinstance(rec, AlertRecord):
        return format_alert_line(rec.step, rec.alert, *rec.figure, rec.message)
    return None


# ---------------------------------------------------------------------------------------------
# Reading: files and log lines
# ---------------------------------------------------------------------------------------------


def _error(e: ValidationError, root: type[BaseModel], where: str) -> SpecError:
    from blackwell_sm.spec.run import spec_error

    err = spec_error(e, root=root, source=where)
    err.code = "bad_run_record"
    return err


def _restore(data: dict[str, Any], where: str) -> dict[str, Any]:
    """`data` with the figures its `non_finite` names put back as floats."""
    nan = data.pop(NON_FINITE, None)
    if nan is None:
        return data
    if not isinstance(nan, dict):
        raise SpecError(f"{where}: {NON_FINITE} is not a mapping", field=NON_FINITE)
    for path, word in nan.items():
        *parents, leaf = str(path).split(".")
        node: Any = data
        try:
            for p in parents:
                node = node[int(p)] if isinstance(node, list) else node[p]
            ok = word in ("nan", "inf", "-inf") and node[leaf] is None
        except (KeyError, IndexError, TypeError, ValueError):
            ok = False
        if not ok:
            raise SpecError(
                f"{where}: {NON_FINITE}.{path} does not name a null figure (nan, inf or -inf)",
                field=f"{NON_FINITE}.{path}",
                code="bad_run_record",
            )
        node[leaf] = float(word)
    return data


def parse_record(data: Any, where: str) -> Record:
    """One metrics.jsonl object as its record, or SpecError naming `where` and the field."""
    if not isinstance(data, dict):
        raise SpecError(
            f"{where}: a record is a JSON object, not {type(data).__name__}",
            field="(top level)",
            code="bad_run_record",
        )
    cls = KINDS.get(data.get("kind"))  # type: ignore[arg-type]
    if cls is None:
        raise SpecError(
            f"{where}: unknown record kind {data.get('kind')!r}; known: {', '.join(KINDS)}",
            field="kind",
            code="bad_run_record",
        )
    data = _restore(dict(data), where)
    if cls is BadStepRecord:  # version 1 wrote the non-finite figures as strings
        data.update(
            {
                k: float(v)
                for k, v in data.items()
                if k in ("loss", "grad_norm") and v in ("nan", "inf", "-inf")
            }
        )
    if (
        cls is StartRecord
        and isinstance(data.get("version"), int)
        and data["version"] > RECORDS_VERSION
    ):
        raise SpecError(
            f"{where}: records of format version {data['version']}; this blackwell_sm "
            f"reads up to {RECORDS_VERSION}",
            field="version",
            code="newer_version",
            hint="upgrade blackwell_sm to read this run",
        )
    try:
        return cls.model_validate(data)  # type: ignore[return-value]
    except ValidationError as e:
        raise _error(e, cls, f"record ({where})") from None


def parse_metrics(text: str, source: str) -> list[Record]:
    """metrics.jsonl's records in file order. A last line without its newline (a run killed
    mid-write) is left out; any other line that is not a valid record is refused."""
    lines = text.split("\n")
    out = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except ValueError as e:
            if i == len(lines):  # torn: the writer ends every record with a newline
                break
            raise SpecError(
                f"{source} line {i} is not JSON ({e})", field=f"{source}:{i}", code="bad_run_record"
            ) from None
        out.append(parse_record(data, f"{source} line {i}"))
    return out


def parse_summary(text: str | bytes, source: str) -> Summary:
    """A summary.json's text as its Summary (version 1 and 2), or SpecError naming the field."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise SpecError(
            f"{source} is not JSON ({e})", field=source, code="bad_run_record"
        ) from None
    if not isinstance(data, dict):
        raise SpecError(f"{source} is not a JSON object", field=source, code="bad_run_record")
    version = data.setdefault("schema_version", 1)
    if isinstance(version, int) and version > SUMMARY_VERSION:
        raise SpecError(
            f"{source} is summary version {version}; this blackwell_sm reads up to "
            f"{SUMMARY_VERSION}",
            field="schema_version",
            code="newer_version",
            hint="upgrade blackwell_sm to read this run",
        )
    try:
        return Summary.model_validate(_restore(data, source))
    except ValidationError as e:
        raise _error(e, Summary, source) from None


def read_metrics(path: str | Path) -> list[Record]:
    """A metrics.jsonl file's records (`parse_metrics`), read through the safe loader."""
    from blackwell_sm.safe_load import read_text

    text = read_text(path, field=str(path), max_bytes=MAX_METRICS_BYTES, label="metrics.jsonl")
    return parse_metrics(text, str(path))


def read_summary(path: str | Path) -> Summary:
    from blackwell_sm.safe_load import read_text

    text = read_text(path, field=str(path), max_bytes=MAX_SUMMARY_BYTES, label="summary.json")
    return parse_summary(text, str(path))


_PREFIXES = {STEP_PREFIX: "train", VAL_PREFIX: "val", CHECK_PREFIX: "check", ALERT_PREFIX: "alert"}


def _value(text: str) -> int | float | str:
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def record_from_line(line: str, *, time: float | None = None) -> Record | None:
    """The record a `[bsm-step|val|check|alert]` log line carries (`time`: the log event's, unix
    seconds), None for any other line; SpecError for a metric line that does not read."""
    hits = sorted((line.find(p + " "), p) for p in _PREFIXES if p + " " in line)
    if not hits:
        return None
    at, prefix = hits[0]
    kind = _PREFIXES[prefix]
    data: dict[str, Any] = {"kind": kind}
    words = line[at + len(prefix) + 1 :].split(" ")
    for n, word in enumerate(words):
        key, eq, value = word.partition("=")
        if not eq:  # an alert's message follows its figures
            data["message"] = " ".join(words[n:])
            break
        data["alert" if kind == "alert" and key == "kind" else key] = _value(value)
    if kind in ("train", "val", "alert") and time is not None:
        data["time"] = time
    return parse_record(data, f"log line {line[at:][:80]!r}")
