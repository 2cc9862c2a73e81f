"""Reading `bsm data prepare`'s inputs: every file checked the same way, before any tokenising.

- an input or a tokenizer must be a regular file (a device, FIFO or folder is refused before a
  byte is read: `/dev/zero` as a tokenizer would be read until memory runs out);
- text is strict UTF-8 (an error names the file, the line and the byte);
- a JSONL line is one JSON object read by the project's strict reader (duplicate keys, NaN,
  huge integers and deep nesting refused), its error naming `file:line`;
- a document may not hold a NUL byte: the byte-level tokenizer separates documents with it, so
  one inside would silently split a document in two.

`bsm data prepare` runs `validate` over every input first (parsing, no tokenising), so a bad last
line of a large file is found in the time it takes to read the file, not after tokenising it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from blackwell_sm.errors import SpecError

MAX_LINE_BYTES = 64 << 20  # one JSONL record; a longer "line" is not a sample


def check_regular(path: Path, *, field: str, what: str = "input") -> None:
    """`path` exists and is a regular file (followed through links), else SpecError."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise SpecError(f"{what} file not found: {path}", field=field) from None
    except OSError as e:
        raise SpecError(f"{what} {path}: {e.strerror}", field=field) from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file (a device or FIFO?)"
        raise SpecError(f"{what} {path} is {kind}; expected a regular file", field=field)


def check_inputs(paths: list[Path]) -> None:
    """Every input exists and is a regular file (all problems named at once)."""
    bad = []
    for p in paths:
        try:
            check_regular(p, field="INPUT")
        except SpecError as e:
            bad.append(e.message)
    if bad:
        raise SpecError("; ".join(bad), field="INPUT")
    from blackwell_sm.output_place import distinct_inputs

    distinct_inputs(paths)


def _utf8(path: Path, n: int, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(
            f"{path}:{n}: not UTF-8: byte 0x{raw[e.start]:02x} at column {e.start + 1} "
            f"({e.reason})",
            field="INPUT",
            hint="convert the file to UTF-8 (e.g. iconv -f LATIN1 -t UTF-8)",
        ) from None


def check_text(where: str, text: str) -> str:
    """`text` of one document, refused if it holds a NUL byte or a lone surrogate (a JSON
    `\\ud800` escape: no character, not encodable as UTF-8)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise SpecError(
            f"{where}: a lone surrogate (U+{ord(text[e.start]):04X}) at character {e.start + 1} "
            "is not a character",
            field="INPUT",
            hint="write the character itself, or a valid surrogate pair (\\ud83d\\ude00)",
        ) from None
    i = text.find("\0")
    if i >= 0:
        raise SpecError(
            f"{where}: a NUL byte (\\x00) inside a document, at character {i + 1}: NUL separates "
            "documents, so it would split this one",
            field="INPUT",
            hint="remove NUL bytes from the text (binary data is not text)",
        )
    return text


def read_text_file(path: Path) -> str:
    """A whole text file as one document: strict UTF-8, no NUL."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise SpecError(
            f"{path}:{line}: not UTF-8: byte 0x{raw[e.start]:02x} at column {column} "
            f"(byte offset {e.start}, {e.reason})",
            field="INPUT",
            hint="convert the file to UTF-8 (e.g. iconv -f LATIN1 -t UTF-8)",
        ) from None
    nul = text.find("\0")
    if nul >= 0:
        check_text(f"{path}:{text.count(chr(10), 0, nul) + 1}", text)
    return text


def jsonl_records(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(`file:line`, object) for every non-blank line of a JSONL file, each parsed strictly."""
    from blackwell_sm.safe_load import parse_json

    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            if len(raw) > MAX_LINE_BYTES:
                raise SpecError(
                    f"{path}:{n}: a line of {len(raw):,} bytes (at most {MAX_LINE_BYTES:,})",
                    field="INPUT",
                )
            line = _utf8(path, n, raw)
            if not line.strip():
                continue
            where = f"{path}:{n}"
            obj = parse_json(line, name=where, field="INPUT")
            if not isinstance(obj, dict):
                raise SpecError(
                    f"{where}: expected a JSON object, got {type(obj).__name__}", field="INPUT"
                )
            yield where, obj
