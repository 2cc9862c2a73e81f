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


def parse_iso(value: Any, flag: str) -> Any:
    """An ISO date or date-time (a datetime passes through; None stays None); UTC when it
    carries no zone; SpecError naming `flag` otherwise."""
    from datetime import UTC, datetime

    if value is None or isinstance(value, datetime):
        return value
    try:
        ts = datetime.fromisoformat(str(value))
    except ValueError:
        raise SpecError(
            f"{flag} takes an ISO date/time such as 2026-12-24 or 2026-12-24T08:00, got {value!r}",
            field=flag,
        ) from None
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


class IsoTime(click.ParamType):
    """An ISO date or date-time (`parse_iso`)."""

    name = "ISO time"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return parse_iso(value, flag_of(param))


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
SPEC_FILE = SpecFile()
RUN_OR_JOB = RunOrJob()
SOURCE = RunOrJob(csv=True)
