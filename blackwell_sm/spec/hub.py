"""Hugging Face Hub ids for `model: {hf: ORG/NAME[@REVISION]}`, resolved with huggingface_hub.

Planning needs the config (and the tokenizer files, fetched beside it for data preparation),
never the weights. With `HF_HUB_OFFLINE=1`, or no network, only the local cache answers
(`HF_HUB_CACHE`, else huggingface_hub's default); a gated repository needs `HF_TOKEN` in the
environment (never a spec field). A local path that exists always wins over a hub id.

Refused with exit 2 and `model.hf`: an id the hub's own validator refuses (huggingface_hub's
`validate_repo_id`) or a revision git would refuse, before any download; a repository the hub
(or, offline, the cache) does not know, a revision it does not have, a gated repository without a token, a repository without a
config.json; an architecture outside the families is refused by `spec/hf.py` as for a folder.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

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


def revision_problem(revision: str) -> str | None:
    """Why git (and so the hub) would refuse `revision` as a branch, tag or commit
    (git check-ref-format's rules for the characters HUB_ID_RE lets through), or None."""
    parts = revision.split("/")
    if ".." in revision or "//" in revision or revision.endswith("/"):
        return "it holds '..' or an empty path part"
    if any(p.startswith(".") or p.endswith(".lock") for p in parts) or revision.endswith("."):
        return "a part starts with '.', ends with '.lock', or the name ends with '.'"
    return None


def check_hub_id(repo: str, revision: str | None) -> None:
    """Refuse (SpecError, `model.hf`) a repo id the hub's own validator refuses
    (huggingface_hub.utils.validate_repo_id: no '--' or '..', no leading or trailing '-' or
    '.', no '.git' at the end, 96 characters at most) or a revision git would refuse."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo)
    except HFValidationError as e:
        raise _refuse(
            f"model.hf {repo!r} is not a Hugging Face repository id: {e}",
            "ORG/NAME as the hub shows it, e.g. Qwen/Qwen3-14B",
        ) from None
    problem = revision_problem(revision) if revision is not None else None
    if problem:
        raise _refuse(
            f"model.hf revision {revision!r} is not a branch, tag or commit name: {problem}",
            "a branch (main), a tag (v1.0) or a commit hash",
        )


#: URI schemes `training.init_from` takes: only s3:// (a hub id there is not built yet).
INIT_SCHEMES = ("s3",)
_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(//)?")


def init_from_problem(value: str) -> str | None:
    """Why `training.init_from` refuses `value` for its scheme (hf://, file:, http://...), or
    None for a local path or an s3:// URI."""
    m = _SCHEME_RE.match(value)
    if m is None or (m[2] is None and m[1].lower() != "file") or m[1] in INIT_SCHEMES:
        return None
    if m[1].lower() == "hf":
        return (
            "hf:// ids are not accepted yet (docs/hub-ids.md): download the snapshot "
            "(huggingface-cli download ORG/NAME --revision COMMIT --local-dir DIR) and give DIR "
            "or its s3:// copy"
        )
    return f"the scheme {m[1]}: is not taken; give a local folder or an s3:// prefix"


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
    check_hub_id(repo, revision)
    offline = _offline()
    cache_dir = os.environ.get("HF_HUB_CACHE") or None

    def download(name: str) -> Path:
        return Path(
            str(
                hf_hub_download(
                    repo, name, revision=revision, cache_dir=cache_dir, local_files_only=offline
                )
            )
        )

    at = f"{repo}@{revision}" if revision else repo
    try:
        config = download("config.json")
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
            download(name)
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
