"""Submit's data step: each data channel's `manifest.json` read from S3 (one GET per channel) and
an S3 `training.init_from`'s tokenizer files (a listing and one GET per file), checked against the
spec and the model by `data/agree.py`, before any capacity is taken or job created.

A channel without a manifest cannot be checked: said loudly, not refused (the loop then reads
every `*.bin` in name order, as `bsm data prepare`'s format allows).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from blackwell_sm.aws.errors import translate
from blackwell_sm.aws.s3 import get_object_or_none, split_s3_uri
from blackwell_sm.data.agree import Tokenizer, check_data_agrees, data_channels, model_side
from blackwell_sm.data.manifest import MANIFEST_FILE, MAX_MANIFEST_BYTES, parse_manifest
from blackwell_sm.data.tokenizer_files import TOKENIZER_FILES
from blackwell_sm.errors import DataError

if TYPE_CHECKING:
    from blackwell_sm.aws.session import AwsContext
    from blackwell_sm.spec.run import RunSpec


def _under(uri: str, name: str) -> str:
    return uri.rstrip("/") + "/" + name


def read_manifest(s3: Any, uri: str) -> Any:
    """The `Manifest` at `uri`, or None when there is none; DataError when it is not one."""
    body = get_object_or_none(s3, uri)
    if body is None:
        return None
    if len(body) > MAX_MANIFEST_BYTES:
        raise DataError(f"{uri}: {len(body):,} bytes, above the {MAX_MANIFEST_BYTES:,} allowed")
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as e:
        raise DataError(f"{uri}: not JSON ({e})", hint="prepare the data again") from None
    if not isinstance(data, dict):
        raise DataError(f"{uri}: not a manifest (a JSON {type(data).__name__})")
    return parse_manifest(data, uri)


def s3_tokenizer(s3: Any, prefix: str) -> Tokenizer | None:
    """The tokenizer under the S3 folder `prefix` (a listing, one GET per tokenizer file), or
    None when it holds none."""
    bucket, key = split_s3_uri(_under(prefix, ""))
    with translate(f"listing {prefix}", service="s3"):
        listed = s3.list_objects_v2(Bucket=bucket, Prefix=key, Delimiter="/")
    names = {o["Key"][len(key) :] for o in listed.get("Contents", [])}
    files = {}
    for name in TOKENIZER_FILES:
        if name in names:
            body = get_object_or_none(s3, _under(prefix, name))
            if body is not None:
                files[name] = body
    return Tokenizer.of(files)


def check_submit_data(aws: AwsContext, spec: RunSpec, say: Callable[[str], None]) -> None:
    """Refuse data that does not agree with the spec and the model (DataError, exit 2), before
    CreateTrainingJob; what cannot be checked goes to `say`."""
    job = spec.job
    if job is None:
        return
    want = model_side(spec)
    init = spec.training.init_from
    if init and init.startswith("s3://"):
        want = want._replace(init_tokenizer=s3_tokenizer(aws.s3, init))
    train = spec.training.data.train_channel
    for name in data_channels(spec):
        channel = job.channels.get(name)
        if channel is None:
            continue  # the request builder refuses it, naming the field
        if "." in channel.s3_uri.rstrip("/").rsplit("/", 1)[-1] and not channel.s3_uri.endswith(
            "/"
        ):
            say(f"warning: channel {name} ({channel.s3_uri}) is one object: not checked")
            continue
        uri = _under(channel.s3_uri, MANIFEST_FILE)
        manifest = read_manifest(aws.s3, uri)
        where = f"channel {name} ({uri})"
        if manifest is None:
            say(f"warning: {where}: no manifest: the data is not checked against the model")
            continue
        side = want if name == train else want._replace(sequences=None)
        data_tok = None
        if manifest.tokenizer_dir and want.init_tokenizer is not None:  # only to compare
            data_tok = s3_tokenizer(aws.s3, _under(channel.s3_uri, manifest.tokenizer_dir))
        for line in check_data_agrees(manifest, side, where=where, data_tokenizer=data_tok):
            say(f"warning: {line}")
