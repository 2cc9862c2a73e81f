"""Defaults that bend, values that do not: a default the user did not set never makes a spec
invalid. When one would (the default 100 warm-up steps of a 1-step smoke run, the default 4096
tokens of a model with a shorter context), it is lowered to what the spec allows and a note says
so; a value the user wrote is still checked strictly.

The adjusted value is written without marking the field as set (`model_fields_set`), so a spec
rebuilt with other overrides (`with_overrides`) derives it again from its new neighbours.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from pydantic import BaseModel

# The model's context length while RunSpec validates its `training` (see `model_context`).
_MAX_SEQ_LEN: ContextVar[int | None] = ContextVar("bsm_model_max_seq_len", default=None)


class DefaultAdjusted(UserWarning):
    """A default the user did not set was changed so that the spec stays valid."""

    label = "note"  # how the CLI prints it: `note: ...`


def was_set(model: BaseModel, field: str) -> bool:
    """Whether the user (or a caller) gave `field` a value, rather than leaving its default."""
    return field in model.model_fields_set


def adjust_default(
    model: BaseModel, field: str, value: Any, *, path: str, why: str, notes: list[str]
) -> None:
    """Give the unset `field` of `model` the value `value`, keep it unset, and say so: the note
    goes to `notes` (the spec's `notes`) and out as a `DefaultAdjusted` warning, which the CLI
    prints as `note: ...` and a notebook shows as a Python warning."""
    old = getattr(model, field)
    object.__setattr__(model, field, value)
    note = f"{path}: the default {old} was lowered to {value} ({why}); set it to choose another"
    if note not in notes:  # validate_assignment runs the validators again
        notes.append(note)
        warnings.warn(note, DefaultAdjusted, stacklevel=2)


@contextmanager
def model_context(max_seq_len: int | None) -> Iterator[None]:
    """While RunSpec validates `training`, the model's max_seq_len: TrainingSpec lowers its
    default seq_len to it *before* deriving steps from tokens or epochs (a later fix-up would
    leave those derived at the default's length)."""
    token = _MAX_SEQ_LEN.set(max_seq_len)
    try:
        yield
    finally:
        _MAX_SEQ_LEN.reset(token)


def model_max_seq_len() -> int | None:
    """The max_seq_len set by `model_context`, or None outside a RunSpec's validation."""
    return _MAX_SEQ_LEN.get()
