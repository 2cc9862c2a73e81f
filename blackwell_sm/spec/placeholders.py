"""Placeholders anywhere in a spec: every string field (and key), and the files it points to
that the client reads, checked for the marker (`aws_rules.PLACEHOLDER`, ``REPLACE-ME``).

Templates (`bsm init`) carry placeholders so that they plan and dry-run; `submit` refuses
while any is left (`job/request.py` lists them, `aws/submit.py` refuses), `submit --dry-run`
lists them, and `bsm iam-policy` grants none of them (`job/iam.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from blackwell_sm.spec.aws_rules import PLACEHOLDER, is_placeholder

if TYPE_CHECKING:
    from blackwell_sm.spec.run import RunSpec

# The files of a local `training.init_from` folder that the client reads (spec/hf_files.py),
# and the size read of each (they are small JSON; a larger one is not scanned).
_CLIENT_READ_FILES = ("config.json", "model.safetensors.index.json", "tokenizer_config.json")
_MAX_SCAN_BYTES = 4 << 20


def _walk(value: Any, path: str, found: list[str]) -> None:
    if isinstance(value, str):
        if is_placeholder(value):
            found.append(path)
    elif isinstance(value, dict):
        for key, item in value.items():
            sub = f"{path}.{key}" if path else str(key)
            if is_placeholder(str(key)):
                found.append(sub)
            else:
                _walk(item, sub, found)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _walk(item, f"{path}[{i}]", found)


def value_placeholders(data: Any, prefix: str = "") -> list[str]:
    """Dotted paths (list items as `[i]`) of every string or key in `data` holding the marker."""
    found: list[str] = []
    _walk(data, prefix, found)
    return found


def file_placeholders(spec: RunSpec) -> list[str]:
    """`training.init_from/<file>` for each file the client reads in a local `init_from`
    folder whose text holds the marker."""
    init = spec.training.init_from
    if not init or init.startswith("s3://"):
        return []
    folder = Path(init).expanduser()
    found = []
    for name in _CLIENT_READ_FILES:
        path = folder / name
        try:
            if not path.is_file() or path.stat().st_size > _MAX_SCAN_BYTES:
                continue
            text = path.read_bytes().decode("utf-8", errors="replace")
        except OSError:
            continue  # unreadable files are the readers' errors, with their own messages
        if PLACEHOLDER.lower() in text.lower():
            found.append(f"training.init_from/{name}")
    return found


def spec_placeholders(spec: RunSpec) -> list[str]:
    """Every field path of `spec` still holding a placeholder, then the files it points to."""
    return value_placeholders(spec.model_dump(mode="json")) + file_placeholders(spec)
