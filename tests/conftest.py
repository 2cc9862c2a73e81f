"""Shared fixtures."""

from __future__ import annotations

import pytest


@pytest.fixture
def aws(monkeypatch, tmp_path):
    """An AwsContext on moto (S3, SageMaker, Logs) with planted fake credentials and the test
    bucket. Test modules that need more (a log group, a patched CLI) extend it by name."""
    from aws_support import BUCKET, REGION, fake_credentials
    from moto import mock_aws

    from blackwell_sm.aws.session import AwsContext

    fake_credentials(monkeypatch, tmp_path)
    with mock_aws():
        ctx = AwsContext(REGION)
        ctx.s3.create_bucket(Bucket=BUCKET)
        yield ctx
