"""Hugging Face Hub ids for `model: {hf: ORG/NAME[@REVISION]}`, resolved with huggingface_hub.

Planning needs the config (and the tokenizer files, fetched beside it for data preparation),
never the weights. With `HF_HUB_OFFLINE=1`, or no network, only the local cache answers
(`HF_HUB_CACHE`, else huggingface_hub's default); a gated repository needs `HF_TOKEN` in the
environment (never a spec field). A local path that exists always wins over a hub id.

Refused with exit 2 and `model.hf`: a repository the hub (or, offline, the cache) does not
know, a revision it does not have, a gated repository without a token, a repository without a
config.json; an architecture outside the families is refused by `spec/hf.py` as for a folder.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from blackwell_sm.errors import SpecError

FIELD = "model.hf"
HUB_ID_RE = re.compile(
    r"^(?P<repo>[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95})"
    r"(?:@(?P<revision>[A-Za-z0-9][A-Za-z0-9._/-]{0,254}))?$"
)
#: Fetched with the config when present: what `bsm data prepare` and the export read.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "generation_config.json",
)


def parse_hub_id(value: str) -> tuple[str, str | None] | None:
    """(repo id, revision or None) when `value` reads as a hub id and is not a local path."""
    m = HUB_ID_RE.match(value)
    if m is None or Path(value).expanduser().exists():
        return None
    return m["repo"], m["revision"]


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def _refuse(message: str, hint: str) -> SpecError:
    return SpecError(message, field=FIELD, hint=hint, code="bad_input")


def _cached(repo: str, revision: str | None) -> tuple[bool, bool]:
    """(the repository is in the cache, this revision of it is: a ref or a snapshot)."""
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    cache = Path(os.environ.get("HF_HUB_CACHE") or constants.HF_HUB_CACHE)
    folder = cache / repo_folder_name(repo_id=repo, repo_type="model")
    rev = revision or "main"
    return folder.is_dir(), (folder / "refs" / rev).is_file() or (
        folder / "snapshots" / rev
    ).is_dir()


def resolve(value: str) -> tuple[Path, str]:
    """(the snapshot folder holding config.json, the model's name) of hub id `value`."""
    try:
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import (
            EntryNotFoundError,
            GatedRepoError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
            RevisionNotFoundError,
        )
    except ImportError:
        raise _refuse(
            f"model.hf {value!r} is a Hugging Face Hub id, and huggingface_hub is not installed",
            "pip install huggingface_hub, or give model.hf a local folder",
        ) from None
    parsed = parse_hub_id(value)
    assert parsed is not None
    repo, revision = parsed
    offline = _offline()
    kw: dict[str, Any] = {
        "revision": revision,
        "cache_dir": os.environ.get("HF_HUB_CACHE") or None,
        "local_files_only": offline,
    }
    at = f"{repo}@{revision}" if revision else repo
    try:
        config = Path(hf_hub_download(repo, "config.json", **kw))
    except LocalEntryNotFoundError:
        where = "the local cache" + (" (HF_HUB_OFFLINE is set)" if offline else "")
        has_repo, has_revision = _cached(repo, revision)
        if not has_repo:
            raise _refuse(
                f"no Hugging Face repository {repo!r} in {where}",
                "download it first (huggingface-cli download "
                f"{repo} config.json), or unset HF_HUB_OFFLINE",
            ) from None
        if has_revision:
            raise _refuse(
                f"{at} has no config.json in {where}",
                "model.hf needs a transformers model's config.json",
            ) from None
        raise _refuse(
            f"{repo} has no revision {revision or 'main'!r} in {where}",
            f"download that revision first (huggingface-cli download {repo} --revision "
            f"{revision or 'main'}), or name a cached one",
        ) from None
    except GatedRepoError:
        raise _refuse(
            f"{at} is a gated repository and no token was given",
            "accept its terms on the hub and set HF_TOKEN in the environment",
        ) from None
    except RevisionNotFoundError:
        raise _refuse(
            f"{repo} has no revision {revision!r}", "use a branch, tag or commit the repository has"
        ) from None
    except RepositoryNotFoundError:
        raise _refuse(
            f"no Hugging Face repository {repo!r}",
            "check ORG/NAME on the hub (a private one needs HF_TOKEN)",
        ) from None
    except EntryNotFoundError:  # the hub's answer (a missing cached file is the one above)
        raise _refuse(f"{at} has no config.json", "model.hf needs a transformers model") from None
    for name in TOKENIZER_FILES:  # best effort: a model without a tokenizer still plans
        try:
            hf_hub_download(repo, name, **kw)
        except (EntryNotFoundError, LocalEntryNotFoundError):
            continue
    return config.parent, repo.split("/", 1)[1].lower()


def local_source(value: object) -> tuple[object, str | None]:
    """`model.hf` as a local path for spec/hf.py: a hub id resolved (and its name), anything
    else unchanged (spec/hf.py refuses what is not a path)."""
    if isinstance(value, str) and parse_hub_id(value) is not None:
        path, name = resolve(value)
        return path, name
    return value, None
