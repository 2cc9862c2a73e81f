"""Output helpers: JSON (only JSON) on stdout for scripts, everything else on stderr.

Messages are printed literally. Text that comes from users, files, AWS or exceptions may hold
brackets (`[train]`, `[/x]`, gloo's `[/__w/pytorch/...]`); it is never read as rich markup.
Styling is applied to whole pieces we own (`say(text, style=...)`), never by formatting markup
tags around somebody else's text.
"""

from __future__ import annotations

import json
import math
import re
import sys
from datetime import datetime
from typing import Any

import click

OUTPUT_OPTION = click.option(
    "--output",
    "-o",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="json: machine-readable JSON only on stdout (errors too, as one error object).",
)


def err_console() -> Any:
    """A rich Console on stderr (imported lazily); markup is off for everything printed.

    Made anew on each call (cheap), so the terminal width and the streams are read when printing.
    """
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True, markup=False)


def out_console() -> Any:
    """A rich Console on stdout for tables; markup is off for everything printed."""
    from rich.console import Console

    return Console(highlight=False, markup=False)


def text(*parts: str | tuple[str, str]) -> Any:
    """A rich Text built from literal parts: a str, or (str, style). Nothing is parsed."""
    from rich.text import Text

    t = Text()
    for part in parts:
        if isinstance(part, tuple):
            t.append(part[0], style=part[1])
        else:
            t.append(part)
    return t


def say(msg: str, *, style: str | None = None, console: Any = None) -> None:
    """Print `msg` literally (stderr by default), optionally in one style."""
    (console or err_console()).print(text((msg, style)) if style else text(msg))


def info(msg: str) -> None:
    """A message for people: on stderr, printed literally, never mixed into JSON output."""
    say(msg)


def _finite(obj: Any) -> Any:
    """Refuse NaN/Infinity before they reach JSON (which has no such values)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ValueError(f"non-finite number {obj!r} cannot be written as JSON")
    return obj


def dumps(obj: Any, *, indent: int | None = 2) -> str:
    """Strict JSON: pydantic models in JSON mode, no NaN or Infinity (allow_nan=False)."""
    if hasattr(obj, "model_dump"):
        obj = obj.model_dump(mode="json")
    return json.dumps(obj, indent=indent, default=str, allow_nan=False)


def snake_case(name: str) -> str:
    """AWS's PascalCase as the toolkit's snake_case: TrainingJobArn -> training_job_arn,
    KmsKeyId / KMSKeyId -> kms_key_id."""
    name = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()


def snake_keys(obj: Any) -> Any:
    """AWS data (dicts of PascalCase keys, datetimes) in the toolkit's JSON form: snake_case keys
    all the way down, ISO 8601 times. Every command's JSON is snake_case (tests/test_cli_json.py);
    AWS's own names stay only in the `request` a dry run prints."""
    if isinstance(obj, dict):
        return {snake_case(str(k)): snake_keys(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [snake_keys(v) for v in obj]
    if isinstance(obj, datetime):
        return obj.isoformat()
    return obj


def emit_json(obj: Any) -> None:
    """Print `obj` as strict JSON on stdout (pydantic models are dumped in JSON mode)."""
    sys.stdout.write(dumps(obj) + "\n")
    sys.stdout.flush()


def wants_json(argv: list[str]) -> bool:
    """Whether the command line asks for JSON output (`--output json`, `-o json`, `--output=json`).

    Read from argv so that errors raised while parsing (before any option callback ran) still
    honour the JSON error contract.
    """
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        if arg in ("--output", "-o") and i + 1 < len(argv) and argv[i + 1] == "json":
            return True
        if arg in ("--output=json", "-ojson"):
            return True
    return False
