"""AWS sessions and clients: the one place boto3 is configured.

Honours AWS_PROFILE, AWS_REGION / AWS_DEFAULT_REGION and AWS_ENDPOINT_URL (botocore reads the
endpoint variables itself, including per-service ones such as AWS_ENDPOINT_URL_S3). Every client
uses botocore's *standard* retry mode, which retries throttling, 5xx and connection errors with
exponential backoff. Credentials are never read, logged or printed here: boto3 resolves them.
"""

from __future__ import annotations

import os
from functools import cache, cached_property
from typing import Any

from blackwell_sm import __version__
from blackwell_sm.errors import AwsError

MAX_ATTEMPTS = 8  # first try + 7 retries; standard mode caps each backoff at 20 s
USER_AGENT = f"blackwell-sm/{__version__}"


def client_config() -> Any:
    """The botocore Config every client of this toolkit uses."""
    from botocore.config import Config

    attempts = int(os.environ.get("AWS_MAX_ATTEMPTS", MAX_ATTEMPTS))
    return Config(
        retries={"mode": "standard", "total_max_attempts": attempts},
        user_agent_extra=USER_AGENT,
        connect_timeout=10,
        read_timeout=60,
    )


@cache
def _shared_loader() -> Any:
    """One botocore data loader per process: the SageMaker model (~MBs of JSON) is parsed once,
    not once per session."""
    from botocore.loaders import create_loader

    return create_loader()


def new_session(profile: str | None = None) -> Any:
    """A boto3 Session for `profile` (default AWS_PROFILE) sharing the process's model cache."""
    import boto3
    import botocore.session

    core = botocore.session.Session()
    core.register_component("data_loader", _shared_loader())
    return boto3.Session(
        botocore_session=core, profile_name=profile or os.environ.get("AWS_PROFILE")
    )


class AwsContext:
    """A boto3 session for one region, with lazily created, shared clients.

    Pass one to the functions of `blackwell_sm.aws` (tests attach botocore Stubbers to its
    clients); by default each call makes its own from the environment.
    """

    def __init__(self, region: str | None = None, *, profile: str | None = None) -> None:
        from botocore.exceptions import ProfileNotFound

        try:
            self.session = new_session(profile)
            wanted = self.session.profile_name
            if wanted not in ("default", *self.session.available_profiles):
                raise ProfileNotFound(profile=wanted)
        except ProfileNotFound as e:
            raise AwsError(
                f"AWS profile not found: {e}",
                code="ProfileNotFound",
                hint="check AWS_PROFILE (or --profile) against ~/.aws/config",
            ) from None
        self.region = region or resolve_region(self.session)
        if self.region is None:
            raise AwsError(
                "no AWS region: set job.region in the spec, AWS_REGION, or a region in the profile",
                code="NoRegion",
            )

    def client(self, service: str) -> Any:
        return self.session.client(service, region_name=self.region, config=client_config())

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
    region = os.environ.get("AWS_REGION")
    if region:
        return region
    if session is None:
        try:
            session = new_session()
        except Exception:  # a broken profile is reported when a client is made
            return os.environ.get("AWS_DEFAULT_REGION")
    return session.region_name
