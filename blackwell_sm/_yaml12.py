"""The YAML half of `blackwell_sm.safe_load`: a PyYAML SafeLoader with YAML 1.2 rules.

Kept apart so that `safe_load` imports PyYAML only when a YAML file is read (the training
container reads only JSON and has no PyYAML). Use `safe_load.parse_yaml`, not this module.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import yaml

from blackwell_sm.safe_load import MAX_DEPTH, MAX_INT_DIGITS

MAX_NODES = 100_000


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
                if key is None:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        "found a null key (~, null or an empty key): every key needs a name",
                        key_node.start_mark,
                    )
                try:
                    hash(key)
                except TypeError:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        "found an unhashable key",
                        key_node.start_mark,
                    ) from None
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"duplicate key {key!r} (first at line {seen[key].line + 1})",
                        key_node.start_mark,
                    )
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
            None,
            None,
            f"integer with {len(digits)} digits (at most {MAX_INT_DIGITS})",
            node.start_mark,
        )
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


class RecursiveAlias(yaml.YAMLError):
    """An anchor used inside itself (`a: &a {b: *a}`): a document without end."""

    def __init__(self, mark: Any) -> None:
        super().__init__()
        self.problem = "an alias refers to its own anchor (a recursive structure)"
        self.problem_mark = mark


_ACTIVE = -1  # memo value of a node being counted: meeting it again is recursion


def count_nodes(node: Any, memo: dict[int, int], depth: int = 0) -> int:
    """Nodes in `node` with every alias expanded (memoised, so a bomb is counted, not built);
    RecursiveAlias for an anchor used inside itself."""
    key = id(node)
    if key in memo:
        if memo[key] == _ACTIVE:
            raise RecursiveAlias(node.start_mark)
        return memo[key]
    memo[key] = _ACTIVE
    if isinstance(node, yaml.MappingNode):
        n = 1 + sum(count_nodes(k, memo) + count_nodes(v, memo) for k, v in node.value)
    elif isinstance(node, yaml.SequenceNode):
        n = 1 + sum(count_nodes(v, memo) for v in node.value)
    else:
        n = 1
    memo[key] = n
    return n
