"""The code bundle in S3: uploaded once per content hash, and never half there.

The key is content-addressed (`<code prefix>/<sha256>/bundle.tar.gz`), so an object at that key
that has the right size and hash metadata *is* the bundle: a second submit skips the upload.
PutObject is atomic (the key appears only after the whole body arrived) and carries the
SHA-256 checksum, which S3 verifies before it stores anything; afterwards HEAD checks size and
hash once more, and a mismatch deletes the key so that no job can use it.
"""

from __future__ import annotations

import base64
import hashlib
import io
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

from blackwell_sm.aws.errors import translate
from blackwell_sm.errors import AwsError, SpecError

HASH_METADATA = "bsm-sha256"  # x-amz-meta-bsm-sha256: the bundle's hex sha256


class UploadResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    s3_uri: str
    sha256: str
    size_bytes: int
    uploaded: bool  # False: the same bytes were already there


def split_s3_uri(uri: str) -> tuple[str, str]:
    """`s3://bucket/key` → (bucket, key)."""
    if not uri.startswith("s3://") or "/" not in uri[5:]:
        raise ValueError(f"not an S3 object URI: {uri!r}")
    bucket, key = uri[5:].split("/", 1)
    return bucket, key


_NOT_FOUND = {"404", "NoSuchKey", "NotFound"}


def _head(s3: Any, bucket: str, key: str) -> dict[str, Any] | None:
    from botocore.exceptions import ClientError

    with translate(f"checking s3://{bucket}/{key}", service="s3"):
        try:
            return s3.head_object(Bucket=bucket, Key=key)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in _NOT_FOUND:
                return None
            raise


def get_object_or_none(s3: Any, uri: str) -> bytes | None:
    """The bytes of the S3 object `uri`, or None when there is no such object."""
    from botocore.exceptions import ClientError

    bucket, key = split_s3_uri(uri)
    with translate(f"reading {uri}", service="s3"):
        try:
            return s3.get_object(Bucket=bucket, Key=key)["Body"].read()
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in _NOT_FOUND:
                return None
            raise


def _matches(head: dict[str, Any] | None, sha256: str, size: int) -> bool:
    if head is None:
        return False
    return (
        head.get("ContentLength") == size and head.get("Metadata", {}).get(HASH_METADATA) == sha256
    )


def upload_bundle(
    s3: Any,
    data: bytes,
    s3_uri: str,
    *,
    sha256: str | None = None,
    progress: Callable[..., None] | None = None,
) -> UploadResult:
    """Make sure `data` is at `s3_uri` (content-addressed); upload only if it is not there yet.
    `progress(key, done, total)` hears the bytes sent ("upload"), as a display wants them."""
    digest = hashlib.sha256(data).hexdigest()
    if sha256 is not None and sha256 != digest:
        raise AwsError(
            f"code bundle hash mismatch before upload: expected {sha256}, computed {digest}",
            code="bundle_hash_mismatch",
        )
    bucket, key = split_s3_uri(s3_uri)
    if _matches(_head(s3, bucket, key), digest, len(data)):
        return UploadResult(s3_uri=s3_uri, sha256=digest, size_bytes=len(data), uploaded=False)

    with translate(f"uploading the code bundle to {s3_uri}", service="s3"):
        s3.put_object(
            Bucket=bucket,
            Key=key,
            Body=data if progress is None else ProgressReader(data, progress),
            ContentType="application/gzip",
            ChecksumSHA256=base64.b64encode(hashlib.sha256(data).digest()).decode(),
            Metadata={HASH_METADATA: digest},
        )
    if not _matches(_head(s3, bucket, key), digest, len(data)):
        with translate(f"removing the bad upload at {s3_uri}", service="s3"):
            s3.delete_object(Bucket=bucket, Key=key)
        raise AwsError(
            f"the code bundle at {s3_uri} does not have the uploaded size/hash; it was removed "
            "and no job was created",
            code="bundle_verify_failed",
            hint="run the command again",
        )
    return UploadResult(s3_uri=s3_uri, sha256=digest, size_bytes=len(data), uploaded=True)


class ProgressReader(io.BytesIO):
    """The upload's body, telling `progress("upload", position, size)` as botocore reads it (a
    retry seeks back, and the display follows)."""

    def __init__(self, data: bytes, progress: Callable[..., None]) -> None:
        super().__init__(data)
        self._size, self._progress = len(data), progress

    def read(self, size: int | None = -1) -> bytes:
        chunk = super().read(size)
        self._progress("upload", self.tell(), self._size)
        return chunk


def bucket_region(s3: Any, bucket: str) -> str:
    """GetBucketLocation, normalised (us-east-1 answers no constraint, old buckets say 'EU')."""
    with translate(f"finding the region of bucket {bucket}", service="s3"):
        constraint = s3.get_bucket_location(Bucket=bucket).get("LocationConstraint")
    return {None: "us-east-1", "": "us-east-1", "EU": "eu-west-1"}.get(constraint, constraint)


def check_bucket_region(s3: Any, s3_uri: str, region: str) -> None:
    """Refuse (before any upload) a bucket that is not in the job's region."""
    bucket, _ = split_s3_uri(s3_uri)
    where = bucket_region(s3, bucket)
    if where != region:
        raise SpecError(
            f"bucket {bucket} is in {where}, but the job runs in {region}: SageMaker reads "
            "code, data and checkpoints only from buckets of the job's region",
            field="job.s3_prefix",
            code="bucket_region_mismatch",
            hint=f"use a bucket in {region} for job.s3_prefix, or run the job in {where} "
            f"(--region {where} or job.region: {where})",
        )
