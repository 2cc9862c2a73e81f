"""One safe loader for every file the toolkit reads: specs, manifests, plan.json, profiles.

Client and container both import it (stdlib + PyYAML only). Every file is checked the same way:

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
import os
import re
import stat
from pathlib import Path
from typing import Any, ClassVar

import yaml

from blackwell_sm.errors import SpecError

MAX_BYTES = 1 << 20  # 1 MiB: a spec is a few KiB; anything near this is not a spec
MAX_DEPTH = 32
MAX_NODES = 100_000
MAX_INT_DIGITS = 30  # 2**64 has 20 digits; int() refuses > 4300 digits with a traceback


class SafeYamlLoader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 core-schema resolvers, no duplicate keys, depth/int limits."""

    # Own (empty) table, filled below with the YAML 1.2 core schema only.
    yaml_implicit_resolvers: ClassVar[dict[Any, list[tuple[str, re.Pattern[str]]]]] = {}

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(
                    None, None, f"nesting deeper than {MAX_DEPTH} levels", mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    hash(key)
                except TypeError:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        "found an unhashable key", key_node.start_mark,
                    ) from None  # fmt: skip
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"duplicate key {key!r} (first at line {seen[key].line + 1})",
                        key_node.start_mark,
                    )  # fmt: skip
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


# YAML 1.2 core schema (https://yaml.org/spec/1.2.2/#1032-tag-resolution).
_CORE = {
    "tag:yaml.org,2002:null": (r"^(?:~|null|Null|NULL|)$", [*"~nN", ""]),
    "tag:yaml.org,2002:bool": (r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
    "tag:yaml.org,2002:int": (
        r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$",
        list("-+0123456789"),
    ),
    "tag:yaml.org,2002:float": (
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        list("-+.0123456789"),
    ),
}
for _tag, (_rx, _first) in _CORE.items():
    SafeYamlLoader.add_implicit_resolver(_tag, re.compile(_rx), _first)


def _construct_bool(loader: SafeYamlLoader, node: Any) -> bool:
    return loader.construct_scalar(node).lower() == "true"


def _construct_int(loader: SafeYamlLoader, node: Any) -> int:
    text = loader.construct_scalar(node)
    digits = text.lstrip("+-")
    if len(digits) > MAX_INT_DIGITS:
        raise yaml.constructor.ConstructorError(
            None, None, f"integer with {len(digits)} digits (at most {MAX_INT_DIGITS})",
            node.start_mark,
        )  # fmt: skip
    sign = -1 if text.startswith("-") else 1
    if digits.startswith("0o"):
        return sign * int(digits[2:], 8)
    if digits.startswith("0x"):
        return sign * int(digits[2:], 16)
    return sign * int(digits, 10)


def _construct_float(loader: SafeYamlLoader, node: Any) -> float:
    text = loader.construct_scalar(node).lower()
    if text.endswith(".inf"):
        return float("-inf") if text.startswith("-") else float("inf")
    if text == ".nan":
        return float("nan")
    return float(text)


SafeYamlLoader.add_constructor("tag:yaml.org,2002:bool", _construct_bool)
SafeYamlLoader.add_constructor("tag:yaml.org,2002:int", _construct_int)
SafeYamlLoader.add_constructor("tag:yaml.org,2002:float", _construct_float)
# YAML 1.1 types the core schema lacks: an explicit !!timestamp / !!set / !!binary is refused.
for _tag in ("timestamp", "set", "binary", "omap", "pairs"):
    SafeYamlLoader.add_constructor(
        f"tag:yaml.org,2002:{_tag}", yaml.constructor.SafeConstructor.construct_undefined
    )


def _count_nodes(node: Any, memo: dict[int, int], depth: int = 0) -> int:
    """Nodes in `node` with every alias expanded (memoised, so a bomb is counted, not built)."""
    key = id(node)
    if key in memo:
        return memo[key]
    if isinstance(node, yaml.MappingNode):
        n = 1 + sum(_count_nodes(k, memo) + _count_nodes(v, memo) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        n = 1 + sum(_count_nodes(v, memo) for v in node.value)
    else:
        n = 1
    memo[key] = n
    return n


def _mark(e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None)
    return f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""


def parse_yaml(text: str, *, name: str = "<string>", field: str = "SPEC") -> Any:
    """Parse one YAML document under the rules above (any top-level type)."""
    loader = None
    try:
        loader = SafeYamlLoader(text)  # the reader refuses control characters right here
        node = loader.get_single_node()
        if node is None:
            return None
        count = _count_nodes(node, {})
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
