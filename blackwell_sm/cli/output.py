"""Output helpers: JSON (only JSON) on stdout for scripts, everything else on stderr."""

from __future__ import annotations

import json
import sys
from functools import cache
from typing import Any

import click

OUTPUT_OPTION = click.option(
    "--output",
    "-o",
    type=click.Choice(["table", "json"]),
    default="table",
    show_default=True,
    help="json: machine-readable JSON only on stdout.",
)


@cache
def err_console() -> Any:
    """A rich Console on stderr (imported lazily)."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


@cache
def out_console() -> Any:
    from rich.console import Console

    return Console(highlight=False)


def emit_json(obj: Any) -> None:
    """Print `obj` as JSON on stdout (pydantic models are dumped in JSON mode)."""
    if hasattr(obj, "model_dump"):
        obj = obj.model_dump(mode="json")
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")
    sys.stdout.flush()


def info(msg: str) -> None:
    """A message for people: on stderr, never mixed into JSON output."""
    err_console().print(msg, markup=True)
