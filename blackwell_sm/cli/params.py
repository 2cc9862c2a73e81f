"""Parameter types that check local input while click parses the command line.

One rule for every command: local input (a name, an ARN, a region, a time, a spec file) is
checked before any AWS setup. click converts every parameter before it calls a command, and a
command makes its AWS context only in its body, so a parameter whose *type* checks it can never
be reached by an AWS error first: `plans extend 'bad name!'` is exit 2 naming PLAN, not "no AWS
region", exit 4. `tests/reliability/test_command_order.py` holds every command to it: each
parameter of a command has a checking type or a reason not to need one.

The rules come from their sources: names, ARNs, offering ids, job statuses and instance types
from botocore's SageMaker model (the same data the request is validated against, loaded without
a client, credentials or a region), regions from `aws/session.py`, specs from `load_spec`.
A refusal is a SpecError (exit 2, one JSON error object) whose field is the parameter as typed.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import click

from blackwell_sm.errors import SpecError


def flag_of(param: click.Parameter | None) -> str:
    """The parameter as a user types it: `--name`, or an argument's metavar (`PLAN`)."""
    if param is None:
        return "value"
    if isinstance(param, click.Option):
        return max(param.opts, key=len)
    return param.metavar or (param.name or "value").upper()


@cache
def api_shape(shape: str) -> dict[str, Any]:
    """(pattern, min, max, enum) of a SageMaker API shape, from botocore's model."""
    from blackwell_sm.aws.session import service_model

    s = service_model("sagemaker").shape_for(shape)
    return {**s.metadata, "enum": list(getattr(s, "enum", []) or [])}


def shape_problem(shape: str, value: str) -> str | None:
    """Why the API would refuse `value` for `shape` (its pattern, length or enum), or None."""
    rule = api_shape(shape)
    if rule["enum"] and value not in rule["enum"]:
        return "one of " + ", ".join(rule["enum"])
    lo, hi = rule.get("min"), rule.get("max")
    if (lo is not None and len(value) < lo) or (hi is not None and len(value) > hi):
        return f"{lo}-{hi} characters"
    pattern = rule.get("pattern")
    if pattern and not re.fullmatch(pattern, value):
        return f"the API's pattern {pattern}"
    return None


class ApiValue(click.ParamType):
    """A string the SageMaker API takes as `shape`, checked against the model's rule."""

    def __init__(self, shape: str, what: str) -> None:
        self.shape, self.name = shape, what

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        problem = shape_problem(self.shape, str(value))
        if problem:
            raise SpecError(
                f"{flag_of(param)}: {value!r} is not a {self.name} ({problem})",
                field=flag_of(param),
            )
        return str(value)


class PlanRef(click.ParamType):
    """A training plan's name or ARN (the ARN's name part checked as a name); with `auto`, the
    word `auto` too (search and reserve one)."""

    name = "training plan name or ARN"

    def __init__(self, *, auto: bool = False) -> None:
        self.auto = auto

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = str(value)
        if self.auto and text == "auto":
            return text
        if text.startswith("arn:"):
            problem = shape_problem("TrainingPlanArn", text)
            name = text.rsplit("/", 1)[-1]
            problem = problem or shape_problem("TrainingPlanName", name)
        else:
            problem = shape_problem("TrainingPlanName", text)
        if problem:
            raise SpecError(
                f"{flag_of(param)}: {text!r} is not a {self.name} ({problem})",
                field=flag_of(param),
                hint="a name such as my-plan, or arn:aws:sagemaker:REGION:ACCOUNT:training-plan/"
                "NAME (bsm plans list shows yours)",
            )
        return text


class Region(click.ParamType):
    """An AWS region name (the shape `aws/session.py` checks AWS_REGION against)."""

    name = "region"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from blackwell_sm.aws.session import REGION_RE_TEXT

        if not re.match(REGION_RE_TEXT, str(value)):
            raise SpecError(
                f"{flag_of(param)}: {value!r} is not an AWS region (such as us-east-1)",
                field=flag_of(param),
            )
        return str(value)


def _refuse_time(flag: str, value: Any, why: str) -> SpecError:
    return SpecError(
        f"{flag} {why}, got {value!r}",
        field=flag,
        hint="an ISO date or date-time such as 2026-12-24 or 2026-12-24T08:00 (UTC unless it "
        "names a zone)",
    )


def parse_iso(value: Any, flag: str, *, future: bool = False) -> Any:
    """An ISO date or date-time (a datetime passes through; None stays None); UTC when it
    carries no zone; no further ahead than the API's longest plan (`horizon_hours`); with
    `future`, not in the past. SpecError naming `flag` otherwise."""
    from datetime import UTC, datetime, timedelta

    if value is None:
        return None
    if isinstance(value, datetime):
        ts = value
    else:
        try:
            ts = datetime.fromisoformat(str(value).strip())
        except ValueError:
            raise _refuse_time(
                flag, value, "takes an ISO date/time such as 2026-12-24 or 2026-12-24T08:00"
            ) from None
    ts = ts if ts.tzinfo else ts.replace(tzinfo=UTC)
    now = datetime.now(UTC)
    if future and ts <= now:
        raise _refuse_time(flag, value, f"is in the past (now is {now:%Y-%m-%dT%H:%M} UTC)")
    horizon = horizon_hours()
    if ts - now > timedelta(hours=horizon):
        raise _refuse_time(
            flag, value, f"is more than {horizon:,} h ahead (the API's longest training plan)"
        )
    return ts


def horizon_hours() -> int:
    """The longest training plan the API sells, in hours (botocore's model)."""
    return int(api_shape("TrainingPlanDurationHoursInput")["max"])


def check_window(start: Any, end: Any, *, hours: float | None = None) -> None:
    """A search window (`--start-after`, `--end-before`) that is not reversed and can hold
    `hours`; SpecError naming `--end-before` otherwise."""
    if start is None or end is None:
        return
    span = (end - start).total_seconds() / 3600
    if span <= 0:
        raise SpecError(
            f"--end-before {end:%Y-%m-%dT%H:%M} is not after --start-after "
            f"{start:%Y-%m-%dT%H:%M}: the window is reversed",
            field="--end-before",
        )
    if hours is not None and span < hours:
        raise SpecError(
            f"the window from --start-after to --end-before is {span:,.1f} h, shorter than "
            f"the {hours:,.1f} h asked for",
            field="--end-before",
            hint="widen the window or ask for fewer hours",
        )


class IsoTime(click.ParamType):
    """An ISO date or date-time (`parse_iso`); with `future`, not in the past."""

    name = "ISO time"

    def __init__(self, *, future: bool = False) -> None:
        self.future = future

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return parse_iso(value, flag_of(param), future=self.future)


class Seconds(click.ParamType):
    """A finite number of seconds, at least 1 (NaN and inf refused: a NaN timeout never ends)."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        import math

        flag, text = flag_of(param), str(value).strip()
        try:
            num = float(text) if len(text) <= 40 else math.nan
        except ValueError:
            num = math.nan
        if not (math.isfinite(num) and num >= 1):
            raise SpecError(f"{flag} {text[:40]!r} is not a number of seconds >= 1", field=flag)
        return num


class ApiNumber(click.ParamType):
    """A number the SageMaker API takes as `shape`: finite, whole where `integer`, and within
    the model's min..max (raised to `floor` where the command needs more)."""

    def __init__(self, shape: str, what: str, *, integer: bool, floor: float | None = None) -> None:
        self.shape, self.name, self.integer, self.floor = shape, what, integer, floor

    def bounds(self) -> tuple[float | None, float | None]:
        rule = api_shape(self.shape)
        lo, hi = rule.get("min"), rule.get("max")
        if self.floor is not None:
            lo = self.floor if lo is None else max(lo, self.floor)
        return lo, hi

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        import math

        flag, text = flag_of(param), str(value).strip()
        lo, hi = self.bounds()
        allowed = f"{'a whole number' if self.integer else 'a number'} from {lo:g} to {hi:g}"
        try:
            num = float(text) if len(text) <= 40 else math.nan
        except ValueError:
            num = math.nan
        problem = None
        if not math.isfinite(num):
            problem = "is not a finite number"
        elif self.integer and not num.is_integer():
            problem = "is not a whole number"
        elif (lo is not None and num < lo) or (hi is not None and num > hi):
            problem = "is outside the API's limits"
        if problem:
            raise SpecError(
                f"{flag} {text[:40]!r} {problem}: {allowed} ({self.shape}, botocore's model)",
                field=flag,
            )
        return int(num) if self.integer else num


class SpecFile(click.ParamType):
    """A spec file, loaded (and so checked: every field, any model folder) while parsing; the
    command receives the path and loads it again (milliseconds)."""

    name = "spec file"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from blackwell_sm.spec import load_spec

        try:
            load_spec(str(value))
        except SpecError as e:
            if e.field == "SPEC" and isinstance(param, click.Option):  # the file: name --spec
                e.field = flag_of(param)
            raise
        return str(value)


class RunOrJob(click.ParamType):
    """An existing run folder or file, or else a training job's name; with `csv`, also a
    measurements `.csv` (whose absence the command reports itself: no AWS is involved)."""

    name = "run folder, file or job name"

    def __init__(self, *, csv: bool = False) -> None:
        self.csv = csv

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = str(value)
        local = Path(text).exists() or (self.csv and Path(text).suffix.lower() == ".csv")
        if local or not shape_problem("TrainingJobName", text):
            return text
        raise SpecError(
            f"{flag_of(param)}: {text!r} is neither an existing run folder or file nor a "
            "training job name (1-63 letters, digits and hyphens)",
            field=flag_of(param),
        )


JOB_NAME = ApiValue("TrainingJobName", "training job name")
PLAN_NAME = ApiValue("TrainingPlanName", "training plan name")
OFFERING_ID = ApiValue("TrainingPlanOfferingId", "training plan offering id")
EXTENSION_ID = ApiValue("TrainingPlanExtensionOfferingId", "training plan extension offering id")
JOB_STATUS = ApiValue("TrainingJobStatus", "training job status")
NAME_CONTAINS = ApiValue("NameContains", "job name fragment")
INSTANCE_TYPE = ApiValue("TrainingInstanceType", "training instance type")
PLAN_REF = PlanRef()
PLAN_OR_AUTO = PlanRef(auto=True)
REGION = Region()
ISO_TIME = IsoTime()
FUTURE_TIME = IsoTime(future=True)
SECONDS = Seconds()
INSTANCE_COUNT = ApiNumber("ReservedCapacityInstanceCount", "instance count", integer=True, floor=1)
PLAN_HOURS = ApiNumber("TrainingPlanDurationHoursInput", "hours", integer=False)
SPEC_FILE = SpecFile()
RUN_OR_JOB = RunOrJob()
SOURCE = RunOrJob(csv=True)
