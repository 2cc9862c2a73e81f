"""AWS sessions and clients: the one place boto3 is configured.

Honours AWS_PROFILE, AWS_REGION / AWS_DEFAULT_REGION, AWS_MAX_ATTEMPTS and AWS_ENDPOINT_URL
(botocore reads the endpoint variables itself, including per-service ones such as
AWS_ENDPOINT_URL_S3); `check_settings` validates the ones the toolkit reads before any call
(exit 2 naming the variable). Every client uses botocore's *standard* retry mode (throttling,
5xx and connection errors, exponential backoff), with short per-attempt timeouts and a bound on
the whole call: a silent endpoint fails within `CALL_DEADLINE_S`, an upload gets time in
proportion to its size. Credentials are never read, logged or printed here: boto3 resolves them.
"""

from __future__ import annotations

import io
import os
import time
from functools import cache, cached_property
from typing import Any
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict

from blackwell_sm import __version__
from blackwell_sm.errors import AwsError, SpecError

MAX_ATTEMPTS = 8  # first try + 7 retries; standard mode caps each backoff at 20 s
USER_AGENT = f"blackwell-sm/{__version__}"
REGION_RE_TEXT = r"^[a-z]{2}(-[a-z]+)+-\d+$"


class Timeouts(BaseModel):
    """Per-attempt timeouts and the bound on one whole call (all retries), in seconds.

    Each can be set with an environment variable (BSM_AWS_CONNECT_TIMEOUT_S,
    BSM_AWS_READ_TIMEOUT_S, BSM_AWS_CALL_DEADLINE_S, BSM_AWS_UPLOAD_MIB_PER_S) so that tests and
    slow links can change them without code.
    """

    model_config = ConfigDict(extra="forbid")

    connect_s: float = 5.0
    read_s: float = 20.0
    call_deadline_s: float = 55.0  # a silent endpoint is reported within 60 s
    upload_mib_per_s: float = 1.0  # an upload's deadline grows by 1 s per MiB at this rate


TIMEOUT_ENV = {
    "connect_s": "BSM_AWS_CONNECT_TIMEOUT_S",
    "read_s": "BSM_AWS_READ_TIMEOUT_S",
    "call_deadline_s": "BSM_AWS_CALL_DEADLINE_S",
    "upload_mib_per_s": "BSM_AWS_UPLOAD_MIB_PER_S",
}


#: The most any BSM_AWS_* / AWS_MAX_ATTEMPTS setting may be: a day, in seconds (or attempts).
MAX_SETTING = 86_400


def _positive(var: str, text: str, *, integer: bool = False) -> float:
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        value = -1
    if not 0 < value <= MAX_SETTING:  # NaN and inf fail too; 1e300 s would overflow the clock
        kind = ("a whole number ≥ 1" if integer else "a positive number") + (
            f" up to {MAX_SETTING:,}"
        )
        raise SpecError(
            f"{var}={text!r} is not {kind}",
            field=var,
            code="bad_setting",
            hint=f"unset {var} or set it to {kind}",
        )
    return value


def timeouts() -> Timeouts:
    """The timeouts in force (defaults, overridden by BSM_AWS_* variables)."""
    values = {
        key: _positive(var, os.environ[var])
        for key, var in TIMEOUT_ENV.items()
        if var in os.environ
    }
    return Timeouts(**values)


def max_attempts() -> int:
    """AWS_MAX_ATTEMPTS (validated) or the toolkit's default."""
    text = os.environ.get("AWS_MAX_ATTEMPTS")
    return MAX_ATTEMPTS if text is None else int(_positive("AWS_MAX_ATTEMPTS", text, integer=True))


def check_settings() -> None:
    """Validate the AWS_* / BSM_AWS_* variables the toolkit reads, before any call (exit 2)."""
    import re

    max_attempts()
    timeouts()
    for var, value in sorted(os.environ.items()):
        if var == "AWS_ENDPOINT_URL" or var.startswith("AWS_ENDPOINT_URL_"):
            url = urlparse(value)
            if url.scheme not in ("http", "https") or not url.netloc:
                raise SpecError(
                    f"{var}={value!r} is not an http(s) URL",
                    field=var,
                    code="bad_setting",
                    hint=f"set {var} to e.g. https://host:port, or unset it",
                )
    for var in ("AWS_REGION", "AWS_DEFAULT_REGION"):
        region = os.environ.get(var)
        if region and not re.match(REGION_RE_TEXT, region):
            raise SpecError(
                f"{var}={region!r} is not an AWS region",
                field=var,
                code="bad_setting",
                hint=f"set {var} to a region such as us-east-1",
            )


def client_config() -> Any:
    """The botocore Config every client of this toolkit uses."""
    from botocore.config import Config

    t = timeouts()
    return Config(
        retries={"mode": "standard", "total_max_attempts": max_attempts()},
        user_agent_extra=USER_AGENT,
        connect_timeout=t.connect_s,
        # per attempt; a PUT's body is sent before this clock starts, so uploads need no more
        read_timeout=t.read_s,
    )


class CallDeadlineExceeded(Exception):
    """A call (with its retries) would run past its deadline; `last` is the final attempt's
    error, `response` the service's parsed answer when it answered (a throttle, a 5xx)."""

    def __init__(
        self, operation: str, waited_s: float, attempts: int, last: Any, response: Any = None
    ) -> None:
        super().__init__(f"{operation} gave up after {waited_s:.0f} s and {attempts} attempts")
        self.operation = operation
        self.waited_s = waited_s
        self.attempts = attempts
        self.last = last
        self.response = response


def _call_budget(params: Any, model: Any, t: Timeouts) -> float:
    body = params.get("Body") if isinstance(params, dict) else None
    if isinstance(body, io.BytesIO):  # an upload that reports its progress (aws/s3.py)
        size = body.getbuffer().nbytes
    else:
        size = len(body) if isinstance(body, (bytes, bytearray)) else 0
    return t.call_deadline_s + size / (t.upload_mib_per_s * 2**20)


#: botocore's standard retry mode (botocore/retries/standard.py ExponentialBackoff): the
#: longest back-off before attempt n+1 is min(scale * 2**(n-1), 20) s, scale 1 s for a throttle
#: and 0.05 s for other errors, plus up to 5 s more when the answer carries x-amz-retry-after.
_MAX_BACKOFF_S, _RETRY_AFTER_EXTRA_S = 20.0, 5.0
_SCALE_ANSWERED_S, _SCALE_TRANSPORT_S = 1.0, 0.05


def longest_backoff(attempts: int, response: Any) -> float:
    """The longest sleep botocore's standard mode can take after `attempts` attempts (an answer
    from the service may be a throttle: its scale; a transport error has the short one)."""
    scale = _SCALE_ANSWERED_S if response else _SCALE_TRANSPORT_S
    backoff = min(scale * 2.0 ** (attempts - 1), _MAX_BACKOFF_S)
    headers = getattr(response[0], "headers", {}) if response else {}
    return backoff + (_RETRY_AFTER_EXTRA_S if "x-amz-retry-after" in (headers or {}) else 0.0)


def _failed(response: Any) -> bool:
    """Whether a (http response, parsed) pair is an error answer (what botocore may retry)."""
    status = getattr(response[0], "status_code", 200)
    return status >= 400 or bool((response[1] or {}).get("Error"))


def install_deadline(client: Any) -> None:
    """Bound each call's total time, retries and back-offs included: no retry starts unless its
    longest back-off and one more attempt still end within the call's budget. A connection that
    fails or hangs is given the per-attempt timeouts; a service that answers (a throttle, a 5xx)
    the time its last answer took. The call then ends with the last attempt's error."""
    t = timeouts()

    def start(params: Any, model: Any, context: dict, **_: Any) -> None:
        context["bsm_start"] = time.monotonic()
        context["bsm_budget"] = _call_budget(params, model, t)

    def attempt(request: Any, **_: Any) -> None:
        context = getattr(request, "context", None)
        if isinstance(context, dict):
            context["bsm_attempt"] = time.monotonic()

    def before_retry(attempts: int, operation: Any, request_dict: dict, **kw: Any) -> None:
        context = request_dict.get("context", {})
        began = context.get("bsm_start")
        last, response = kw.get("caught_exception"), kw.get("response")
        if began is None or (last is None and (response is None or not _failed(response))):
            return  # a success, or a call this handler did not time
        now = time.monotonic()
        elapsed = now - began
        if last is not None:
            next_try = t.connect_s + t.read_s
        else:
            next_try = now - context.get("bsm_attempt", began)
        budget = context.get("bsm_budget", t.call_deadline_s)
        if elapsed + longest_backoff(attempts, response) + next_try > budget:
            raise CallDeadlineExceeded(operation.name, elapsed, attempts, last, response)

    events = client.meta.events
    events.register_first("provide-client-params.*.*", start)
    events.register_first("request-created.*.*", attempt)
    events.register_first("needs-retry.*.*", before_retry)


@cache
def _shared_loader() -> Any:
    """One botocore data loader per process: the SageMaker model (~MBs of JSON) is parsed once,
    not once per session."""
    from botocore.loaders import create_loader

    return create_loader()


def service_model(service: str) -> Any:
    """botocore's model of `service` (shapes, patterns, enums): no client, credentials or region,
    so local input can be checked against it before any AWS setup (`cli/params.py`)."""
    from botocore.model import ServiceModel

    return ServiceModel(_shared_loader().load_service_model(service, "service-2"), service)


def new_session(profile: str | None = None) -> Any:
    """A boto3 Session for `profile` (default AWS_PROFILE) sharing the process's model cache."""
    import boto3
    import botocore.session

    core = botocore.session.Session()
    core.register_component("data_loader", _shared_loader())
    return boto3.Session(
        botocore_session=core, profile_name=profile or os.environ.get("AWS_PROFILE")
    )


class RegionChoice(BaseModel):
    """The region in force and where it came from (flag, spec, environment, profile)."""

    model_config = ConfigDict(extra="forbid")

    region: str | None
    source: str
    overridden: list[str] = []  # lower-precedence settings that named another region

    def describe(self) -> str:
        text = f"region {self.region} (from {self.source})"
        if self.overridden:
            text += "; ignored: " + ", ".join(self.overridden)
        return text


def choose_region(
    flag: str | None = None,
    spec_region: str | None = None,
    session: Any = None,
    *,
    flag_name: str = "--region",
) -> RegionChoice:
    """One precedence: --region, then job.region, then AWS_REGION / AWS_DEFAULT_REGION, then the
    profile's region. Settings it overrides are listed, so nothing is overridden silently."""
    env_var = next((v for v in ("AWS_REGION", "AWS_DEFAULT_REGION") if os.environ.get(v)), None)
    candidates: list[tuple[str, str | None]] = [
        (flag_name, flag),
        ("job.region", spec_region),
        (env_var or "AWS_REGION", os.environ.get(env_var) if env_var else None),
    ]
    if not any(v for _, v in candidates):
        if session is None:
            try:
                session = new_session()
            except Exception:  # a broken profile is reported when a client is made
                session = None
        profile = getattr(session, "profile_name", None) or "default"
        candidates.append((f"profile {profile}", getattr(session, "region_name", None)))
    chosen = next(((s, v) for s, v in candidates if v), None)
    if chosen is None:
        return RegionChoice(region=None, source="nothing")
    overridden = [f"{s}={v}" for s, v in candidates if v and v != chosen[1]]
    return RegionChoice(region=chosen[1], source=chosen[0], overridden=overridden)


def credential_source() -> str:
    """Which credentials boto3 is most likely using, in words (never the credentials)."""
    if os.environ.get("AWS_ACCESS_KEY_ID") and not os.environ.get("AWS_PROFILE"):
        token = " and AWS_SESSION_TOKEN" if os.environ.get("AWS_SESSION_TOKEN") else ""
        return f"the environment variables AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY{token}"
    if os.environ.get("AWS_PROFILE"):
        return f"profile {os.environ['AWS_PROFILE']!r} (AWS_PROFILE)"
    return "the default profile, or the instance/container role"


class AwsContext:
    """A boto3 session for one region, with lazily created, shared clients.

    Pass one to the functions of `blackwell_sm.aws` (tests attach botocore Stubbers to its
    clients); by default each call makes its own from the environment.
    """

    def __init__(self, region: str | None = None, *, profile: str | None = None) -> None:
        from botocore.exceptions import ProfileNotFound

        check_settings()
        try:
            self.session = new_session(profile)
            wanted = self.session.profile_name
            if wanted not in ("default", *self.session.available_profiles):
                raise ProfileNotFound(profile=wanted)
        except ProfileNotFound as e:
            raise AwsError(
                f"AWS profile not found: {e}",
                code="profile_not_found",
                hint="check AWS_PROFILE (or --profile) against ~/.aws/config",
            ) from None
        self.region_choice = choose_region(region, session=self.session, flag_name="the caller")
        if self.region_choice.region is None:
            raise AwsError(
                "no AWS region: set job.region in the spec, AWS_REGION, or a region in the profile",
                code="no_region",
            )
        self.region: str = self.region_choice.region

    def region_source_for(self, spec_region: str | None) -> str:
        """Where this region came from, told as a dry run tells it: the spec's `job.region` or
        the environment when they name this region, else whoever made this context."""
        choice = choose_region(None, spec_region, session=self.session)
        return choice.source if choice.region == self.region else self.region_choice.source

    def client(self, service: str) -> Any:
        client = self.session.client(service, region_name=self.region, config=client_config())
        install_deadline(client)
        return client

    @cached_property
    def sagemaker(self) -> Any:
        return self.client("sagemaker")

    @cached_property
    def plans(self) -> Any:
        """A SageMaker client of its own for Flexible Training Plan calls.

        Kept apart from `sagemaker` so that tests can stub the training-plan API (which moto
        lacks) with botocore's Stubber while moto serves the job calls.
        """
        return self.client("sagemaker")

    @cached_property
    def s3(self) -> Any:
        return self.client("s3")

    @cached_property
    def logs(self) -> Any:
        return self.client("logs")

    def __repr__(self) -> str:  # no credentials, ever
        return f"AwsContext(region={self.region!r}, profile={self.session.profile_name!r})"


def resolve_region(session: Any = None) -> str | None:
    """AWS_REGION, then AWS_DEFAULT_REGION / the profile's region (no network call)."""
    return choose_region(session=session).region
