"""Shared fixtures."""

from __future__ import annotations

import pytest


@pytest.fixture
def aws(monkeypatch, tmp_path):
    """An AwsContext on moto (S3, SageMaker, Logs) with planted fake credentials and the test
    bucket. Test modules that need more (a log group, a patched CLI) extend it by name."""
    import boto3
    from aws_support import BUCKET, REGION, fake_credentials
    from moto import mock_aws

    from blackwell_sm.aws.session import AwsContext

    fake_credentials(monkeypatch, tmp_path)
    with mock_aws():
        # The bucket through a side client: the context's own clients are made on first use, so
        # a module extending this fixture can still set their configuration (AWS_MAX_ATTEMPTS).
        boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
        yield AwsContext(REGION)


@pytest.fixture(autouse=True)
def _no_calibration_from_the_environment(monkeypatch):
    """A developer's $BSM_CALIBRATION must not change what the tests plan (tests that mean it
    set it themselves)."""
    monkeypatch.delenv("BSM_CALIBRATION", raising=False)


@pytest.fixture(autouse=True)
def _purchase_state_in_tmp(monkeypatch, tmp_path_factory):
    """Purchase locks and records (`aws/purchases.py`) go to a folder of the test's own, never
    the developer's ~/.local/state."""
    monkeypatch.setenv("BSM_STATE_DIR", str(tmp_path_factory.mktemp("bsm-state")))


@pytest.fixture
def plans(aws, monkeypatch):
    """A botocore Stubber on the context's training-plan client (moto has no training-plan
    API), with the CLI using that context; every queued response must be used."""
    from botocore.stub import Stubber

    from blackwell_sm.cli import submit as submit_cli

    monkeypatch.setattr(submit_cli, "aws_context", lambda region: aws)
    with Stubber(aws.plans) as st:
        yield st
        st.assert_no_pending_responses()


@pytest.fixture(scope="module")
def moto_server():
    """A moto server on 127.0.0.1 (a free port) for `bsm` processes: its URL."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()
