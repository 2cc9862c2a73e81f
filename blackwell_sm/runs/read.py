"""A finished (or running) run's files, typed: its plan, `summary.json` and `metrics.jsonl`
records, from a run folder (`bsm run-local --out DIR`, an /opt/ml tree) or a SageMaker job (the
plan from its code bundle; the records from `output.tar.gz`, else its CloudWatch `[bsm-*]`
lines). `bsm calibrate` and `bsm report` read runs only through `read_run`; every file goes
through `blackwell_sm.records`, so a malformed one is refused naming the file and the field.
"""

from __future__ import annotations

import io
import tarfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

from blackwell_sm.errors import SpecError
from blackwell_sm.opt_ml import METRICS_FILE, PLAN_FILE, SUMMARY_FILE, OptMl
from blackwell_sm.planner.plan import Plan
from blackwell_sm.records import (
    Measured,
    Record,
    Summary,
    measured_from,
    parse_metrics,
    parse_summary,
    read_metrics,
    read_summary,
    record_from_line,
)
from blackwell_sm.records.codec import MAX_METRICS_BYTES


class RunFiles(NamedTuple):
    """What a run left: `summary` None when it wrote none (killed, or still running)."""

    source: str
    plan: Plan
    summary: Summary | None
    records: list[Record]
    from_logs: bool = False  # the records are the job's log lines (no output.tar.gz)

    def measured(self) -> Measured:
        """The summary's measured figures, else those of the records (`records.measured_from`)."""
        if self.summary is not None and self.summary.measured.tokens_per_s_per_gpu is not None:
            return self.summary.measured
        return measured_from(self.records)


def is_run_dir(source: str) -> bool:
    return Path(source).is_dir()


def read_run(source: str, aws: Any = None, *, field: str = "SOURCE") -> RunFiles:
    """A run folder, or a job name (`aws`: an AwsContext, made when None)."""
    p = Path(source)
    if p.is_dir():
        return read_run_dir(p, field=field)
    if "/" in source or p.exists():
        raise SpecError(f"{source} is neither a run directory nor a job name", field=field)
    if aws is None:
        from blackwell_sm.aws.session import AwsContext

        aws = AwsContext()
    return read_job(aws, source)


def read_run_dir(run_dir: Path, *, field: str = "SOURCE") -> RunFiles:
    tree = OptMl(run_dir)
    plan_path = run_dir / PLAN_FILE
    if not plan_path.is_file():
        raise SpecError(f"{run_dir} has no {PLAN_FILE}: not a run directory", field=field)
    plan = Plan.read(plan_path)
    summary = read_summary(tree.summary) if tree.summary.is_file() else None
    records = read_metrics(tree.metrics) if tree.metrics.is_file() else []
    return RunFiles(str(run_dir), plan, summary, records)


# ---------------------------------------------------------------------------------------------
# SageMaker jobs
# ---------------------------------------------------------------------------------------------


def tar_members(data: bytes, names: Mapping[str, tuple[str, ...]], where: str) -> dict[str, bytes]:
    """{key: bytes} of the first member named as each `names[key]` lists (a `./` prefix
    allowed), each at most MAX_METRICS_BYTES; a corrupt or truncated archive is SpecError."""
    out: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            for m in tar:
                name = m.name.removeprefix("./")
                key = next((k for k, ns in names.items() if name in ns and k not in out), None)
                if key is None or not m.isfile():
                    continue
                if m.size > MAX_METRICS_BYTES:
                    limit = f"{MAX_METRICS_BYTES:,}"
                    raise SpecError(
                        f"{where}: {name} is {m.size:,} bytes, over {limit}", field=name
                    )
                f = tar.extractfile(m)
                out[key] = f.read() if f else b""
    except (tarfile.TarError, EOFError, zlib.error, OSError) as e:
        raise SpecError(
            f"{where} is not a readable archive ({type(e).__name__}: {e})",
            field="output.tar.gz",
            hint="the job's output is damaged; read its figures from the logs by moving the "
            "archive aside, or re-run the job",
            code="bad_run_record",
        ) from None
    return out


def _plan_from_bytes(raw: bytes, where: str) -> Plan:
    """A plan read out of an archive: invalid fields named by path, as `Plan.read` names them."""
    from pydantic import ValidationError

    from blackwell_sm.spec.run import spec_error

    try:
        return Plan.model_validate_json(raw)
    except ValidationError as e:
        raise spec_error(e, root=Plan, source=f"plan in {where}") from None


def _text(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(f"{where} is not UTF-8 ({e})", field=where, code="bad_run_record") from None


def job_plan(aws: Any, name: str, described: dict[str, Any]) -> Plan:
    """The plan a job ran: its code bundle's `plans/<type>.json`, else `plan.json`."""
    from blackwell_sm.aws.s3 import get_object_or_none
    from blackwell_sm.job.bundle import BUNDLE_FILE
    from blackwell_sm.opt_ml import plan_file_for

    uris = [
        c.get("DataSource", {}).get("S3DataSource", {}).get("S3Uri", "")
        for c in described.get("InputDataConfig", [])
    ]
    code = next((u for u in uris if u.endswith(BUNDLE_FILE)), None)
    if code is None:
        raise SpecError(f"job {name} has no blackwell_sm code bundle", field="SOURCE")
    bundle = get_object_or_none(aws.s3, code)
    if bundle is None:
        raise SpecError(f"job {name}: its code bundle {code} is gone", field="SOURCE")
    itype = described.get("ResourceConfig", {}).get("InstanceType", "")
    names = {"plan": (plan_file_for(itype), PLAN_FILE)}
    raw = tar_members(bundle, names, f"job {name}'s code bundle {code}").get("plan")
    if raw is None:
        raise SpecError(f"job {name}: no plan in its code bundle", field="SOURCE")
    return _plan_from_bytes(raw, f"job {name}'s bundle")


def read_job(aws: Any, name: str) -> RunFiles:
    """A job's plan, summary and records: from `<S3OutputPath>/<job>/output/output.tar.gz`, else
    (no archive yet) the records of algo-1's log lines."""
    from blackwell_sm.aws.jobs import describe_raw
    from blackwell_sm.aws.s3 import get_object_or_none

    d = describe_raw(aws.sagemaker, name)
    plan = job_plan(aws, name, d)
    out_uri = d.get("OutputDataConfig", {}).get("S3OutputPath", "").rstrip("/")
    tar = get_object_or_none(aws.s3, f"{out_uri}/{name}/output/output.tar.gz") if out_uri else None
    if tar is not None:
        where = f"job {name}'s {out_uri}/{name}/output/output.tar.gz"
        names = {
            k: (f, f"data/{f}") for k, f in (("summary", SUMMARY_FILE), ("metrics", METRICS_FILE))
        }
        files = tar_members(tar, names, where)
        summary = None
        if "summary" in files:
            at = f"{where}: {SUMMARY_FILE}"
            summary = parse_summary(_text(files["summary"], at), at)
        records: list[Record] = []
        if "metrics" in files:
            at = f"{where}: {METRICS_FILE}"
            records = parse_metrics(_text(files["metrics"], at), at)
        if summary is not None or records:
            return RunFiles(name, plan, summary, records)
    from blackwell_sm.aws.logs import iter_logs

    records = []
    for ev in iter_logs(aws.sagemaker, aws.logs, name, follow=False):
        if ev.host == "algo-1":
            rec = record_from_line(ev.message, time=ev.timestamp_ms / 1000.0)
            if rec is not None:
                records.append(rec)
    return RunFiles(name, plan, None, records, from_logs=True)
