"""One safe loader for every file the toolkit reads: specs, manifests, plan.json, profiles.

Client and container both import it: stdlib only, plus PyYAML (imported when a YAML file is
read; the container reads only JSON and has no PyYAML). Every file is checked the same way:

- a regular file only (no `/dev/zero`, FIFO or directory), at most `max_bytes` long;
- UTF-8 only; a decode error names its byte offset;
- a mapping at the top; nesting at most `MAX_DEPTH` deep; at most `MAX_NODES` nodes (aliases
  count once per use, so an alias bomb is refused);
- duplicate keys refused; integers at most `MAX_INT_DIGITS` digits;
- YAML 1.2 core-schema scalars: only `true`/`false` are booleans and `yes`/`no`/`on`/`off`
  stay strings, so a number or boolean field refuses them with its path. `.inf`/`.nan` load as
  floats and the spec's finite-float fields refuse them.

The YAML rules are PyYAML's own mechanisms (a SafeLoader subclass with its own implicit
resolvers, constructors and composer hook), not string matching. JSON goes through `json` with
hooks for the same rules (and no NaN/Infinity at all).

Every failure is a `SpecError` (exit 2) whose `field` is the caller's label for the file.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

from blackwell_sm.errors import SpecError

MAX_BYTES = 1 << 20  # 1 MiB: a spec is a few KiB; anything near this is not a spec
MAX_DEPTH = 32
MAX_INT_DIGITS = 30  # 2**64 has 20 digits; int() refuses > 4300 digits with a traceback


def _mark(e: Exception) -> str:
    mark = getattr(e, "problem_mark", None)
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""


def parse_yaml(text: str, *, name: str = "<string>", field: str = "SPEC") -> Any:
    """Parse one YAML document under the rules above (any top-level type)."""
    import yaml  # lazily: the container reads only JSON and has no PyYAML

    from blackwell_sm._yaml12 import MAX_NODES, SafeYamlLoader, count_nodes

    loader = None
    try:
        loader = SafeYamlLoader(text)  # the reader refuses control characters right here
        node = loader.get_single_node()
        if node is None:
            return None
        count = count_nodes(node, {})
        if count > MAX_NODES:
            raise SpecError(
                f"{name} has {count:,} YAML nodes once aliases are expanded (at most "
                f"{MAX_NODES:,})",
                field=field,
            )
        return loader.construct_document(node)
    except yaml.YAMLError as e:
        problem = getattr(e, "problem", None) or str(e)
        raise SpecError(f"{name} is not valid YAML{_mark(e)}: {problem}", field=field) from None
    finally:
        if loader is not None:
            loader.dispose()


def parse_scalar(raw: str, *, field: str) -> Any:
    """A YAML scalar typed by the same rules (for `--set KEY=VALUE`); plain text stays text."""
    value = parse_yaml(raw, name=f"the value of --set {field}", field=field)
    if isinstance(value, (dict, list)):
        raise SpecError(f"{field}: value must be a scalar, got {raw!r}", field=field)
    return value


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k!r}")
        out[k] = v
    return out


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"integer with {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _json_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400 reads as inf
        raise ValueError(f"{text} is not a finite number")
    return value


def _json_constant(text: str) -> Any:
    raise ValueError(f"{text} is not JSON (no NaN or Infinity)")


def _depth(obj: Any, limit: int) -> int:
    """Nesting depth of parsed data, refusing past `limit` without recursing past it."""
    stack = [(obj, 1)]
    deepest = 0
    while stack:
        item, d = stack.pop()
        if d > limit:
            return d
        deepest = max(deepest, d)
        if isinstance(item, dict):
            stack.extend((v, d + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, d + 1) for v in item)
    return deepest


def parse_json(text: str, *, name: str = "<string>", field: str = "FILE") -> Any:
    """Parse JSON under the same rules (duplicate keys, integer digits, depth, no NaN)."""
    try:
        data = json.loads(
            text,
            object_pairs_hook=_json_pairs,
            parse_int=_json_int,
            parse_float=_json_float,
            parse_constant=_json_constant,
        )
    except RecursionError:
        raise SpecError(f"{name}: nesting deeper than {MAX_DEPTH} levels", field=field) from None
    except json.JSONDecodeError as e:
        raise SpecError(
            f"{name} is not valid JSON at line {e.lineno}, column {e.colno}: {e.msg}", field=field
        ) from None
    except ValueError as e:
        raise SpecError(f"{name} is not valid JSON: {e}", field=field) from None
    if _depth(data, MAX_DEPTH) > MAX_DEPTH:
        raise SpecError(f"{name}: nesting deeper than {MAX_DEPTH} levels", field=field)
    return data


def read_text(
    path: str | Path, *, field: str = "FILE", max_bytes: int = MAX_BYTES, label: str = "file"
) -> str:
    """A regular file's text: at most `max_bytes`, strict UTF-8 (a leading BOM is dropped).

    `label` names the file in messages ("spec file", "plan file")."""
    p = Path(path)
    try:
        st = os.stat(p)
    except OSError as e:
        raise SpecError(f"cannot read {label} {p}: {e.strerror}", field=field) from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise SpecError(f"{p} is {kind}; expected a regular file", field=field)
    if st.st_size > max_bytes:
        raise SpecError(
            f"{p} is {st.st_size:,} bytes; at most {max_bytes:,} bytes are read", field=field
        )
    try:
        # O_NONBLOCK: a file swapped for a FIFO between stat and open does not hang us.
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise SpecError(f"{p} is not a regular file", field=field)
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise SpecError(f"cannot read {label} {p}: {e.strerror}", field=field) from None
    if len(data) > max_bytes:
        raise SpecError(f"{p} is over {max_bytes:,} bytes", field=field)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise SpecError(
            f"{p} is not UTF-8: byte 0x{data[e.start]:02x} at offset {e.start} ({e.reason})",
            field=field,
            hint="save the file as UTF-8 (not UTF-16, Latin-1 or a binary format)",
        ) from None
    return text.removeprefix("\ufeff")


def load_mapping(
    path: str | Path,
    *,
    field: str = "FILE",
    fmt: str | None = None,
    max_bytes: int = MAX_BYTES,
    label: str = "file",
) -> dict[str, Any]:
    """Read a YAML or JSON file (by suffix, or `fmt`) that must hold a mapping at the top."""
    p = Path(path)
    text = read_text(p, field=field, max_bytes=max_bytes, label=label)
    kind = fmt or ("json" if p.suffix.lower() == ".json" else "yaml")
    data = (
        parse_json(text, name=str(p), field=field)
        if kind == "json"
        else parse_yaml(text, name=str(p), field=field)
    )
    if not isinstance(data, dict):
        got = "an empty file" if data is None else type(data).__name__
        raise SpecError(f"{p}: expected a mapping at the top, got {got}", field=field)
    return data
