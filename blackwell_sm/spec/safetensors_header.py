"""A safetensors file's header (names, dtypes, shapes, byte ranges), read without torch and
without reading the tensors: the client checks weights before anything is paid for, and the
container repeats the same check before step 0 (`train/hf_import.py`).

The format (huggingface/safetensors, "Format"): 8 bytes, a little-endian unsigned 64-bit N; N
bytes of UTF-8 JSON, an object mapping each tensor name to `{"dtype", "shape", "data_offsets":
[begin, end]}` (offsets into the data that follows the header) plus an optional `__metadata__`
object of strings; then the data. Everything is checked before it is believed: the header's
length against the file's size and the format's 100 MB cap, the JSON by the project's strict
reader (no duplicate names, no NaN), each dtype, each shape (non-negative integers, not
booleans), each byte range against its shape x dtype size, the ranges tiling the data without
gap or overlap, and the data ending exactly at the end of the file (a truncated copy, or bytes
appended to it, is refused by its size alone).
"""

from __future__ import annotations

import math
import os
import stat
import struct
from pathlib import Path
from typing import Any, NamedTuple

from blackwell_sm.errors import SpecError

MAX_HEADER_BYTES = 100_000_000  # safetensors refuses larger headers (MAX_HEADER_SIZE)
MAX_DIMS = 8
#: Bytes per element of each safetensors dtype.
DTYPE_BYTES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E5M2": 1,
    "F8_E4M3": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}
#: The dtypes a model's weights may be stored in here (the importer casts to the parameter's).
WEIGHT_DTYPES = ("F32", "BF16", "F16")


class TensorInfo(NamedTuple):
    """One tensor as the header describes it."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


def _bad(path: Path, what: str, field: str) -> SpecError:
    return SpecError(
        f"{path}: not a valid safetensors file: {what}",
        field=field,
        hint="copy the file again from its source (a truncated or corrupted download?)",
    )


def _read_head(path: Path, field: str) -> tuple[bytes, int]:
    """(the header's JSON bytes, the file's size) of a regular file."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise SpecError(f"cannot read {path}: {e.strerror}", field=field) from None
    if not stat.S_ISREG(st.st_mode):
        raise SpecError(f"{path} is not a regular file", field=field)
    if st.st_size < 8:
        raise _bad(path, f"{st.st_size} bytes, shorter than the 8-byte header length", field)
    try:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > MAX_HEADER_BYTES or 8 + n > st.st_size:
                raise _bad(
                    path,
                    f"a header of {n:,} bytes in a file of {st.st_size:,} bytes "
                    f"(at most {MAX_HEADER_BYTES:,})",
                    field,
                )
            head = f.read(n)
    except OSError as e:
        raise SpecError(f"cannot read {path}: {e.strerror}", field=field) from None
    return head, st.st_size


def _shape(path: Path, name: str, raw: Any, field: str) -> tuple[int, ...]:
    ok = (
        isinstance(raw, list)
        and len(raw) <= MAX_DIMS
        and all(type(d) is int and d >= 0 for d in raw)
    )
    if not ok:
        raise _bad(
            path,
            f"tensor {name!r}: shape {raw!r} is not a list of at most {MAX_DIMS} "
            "non-negative integers",
            field,
        )
    return tuple(raw)


def _entry(path: Path, name: str, raw: Any, field: str) -> TensorInfo:
    if not isinstance(raw, dict) or set(raw) != {"dtype", "shape", "data_offsets"}:
        raise _bad(
            path,
            f"tensor {name!r}: expected exactly dtype, shape and data_offsets, got "
            f"{sorted(raw) if isinstance(raw, dict) else type(raw).__name__}",
            field,
        )
    dtype = raw["dtype"]
    if dtype not in DTYPE_BYTES:
        raise _bad(path, f"tensor {name!r}: unknown dtype {dtype!r}", field)
    shape = _shape(path, name, raw["shape"], field)
    offsets = raw["data_offsets"]
    if not (
        isinstance(offsets, list)
        and len(offsets) == 2
        and all(type(o) is int and o >= 0 for o in offsets)
        and offsets[0] <= offsets[1]
    ):
        raise _bad(
            path,
            f"tensor {name!r}: data_offsets {offsets!r} is not [begin, end] with 0 <= begin <= end",
            field,
        )
    want = math.prod(shape) * DTYPE_BYTES[dtype]
    if offsets[1] - offsets[0] != want:
        raise _bad(
            path,
            f"tensor {name!r}: {offsets[1] - offsets[0]:,} bytes for shape "
            f"{list(shape)} of {dtype} ({want:,} bytes)",
            field,
        )
    return TensorInfo(name, dtype, shape, offsets[0], offsets[1])


def read_header(path: str | Path, *, field: str = "FILE") -> dict[str, TensorInfo]:
    """Every tensor of a safetensors file by name, checked as the module says; SpecError (exit
    2) naming the file and the tensor on any problem. Reads the header only."""
    from blackwell_sm.safe_load import parse_json

    path = Path(path)
    head, size = _read_head(path, field)
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _bad(path, f"the header is not UTF-8 (byte offset {8 + e.start})", field) from None
    try:
        data = parse_json(text, name=f"{path} (header)", field=field)
    except SpecError as e:
        raise _bad(path, e.message, field) from None
    if not isinstance(data, dict):
        raise _bad(path, f"the header is a JSON {type(data).__name__}, not an object", field)
    meta = data.pop("__metadata__", None)
    if meta is not None and not (
        isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())
    ):
        raise _bad(path, "__metadata__ is not an object of strings", field)
    tensors = {name: _entry(path, name, raw, field) for name, raw in data.items()}
    at = 0
    for t in sorted(tensors.values(), key=lambda t: (t.begin, t.end)):
        if t.begin != at:
            what = "overlaps the previous tensor" if t.begin < at else f"leaves a gap at {at:,}"
            raise _bad(path, f"tensor {t.name!r}: data_offsets {[t.begin, t.end]} {what}", field)
        at = t.end
    data_bytes = size - 8 - len(head)
    if at != data_bytes:
        what = "truncated" if data_bytes < at else "longer than its tensors"
        raise _bad(
            path,
            f"the tensors need {at:,} bytes of data after the header, the file has "
            f"{data_bytes:,} ({what})",
            field,
        )
    return tensors
