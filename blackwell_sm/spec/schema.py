"""The spec's JSON schema (what `bsm schema` prints), and the list of its bounded fields.

pydantic writes the schema of the validated shape; the `model` field also takes a preset name,
`{preset: NAME, ...overrides}` or `{hf: PATH, ...overrides}` (a Hugging Face config.json), which
a `before` validator resolves, so the schema states those forms too (every shipped template validates against it; a test runs `jsonschema`).
"""

from __future__ import annotations

import copy
from typing import Any

_BOUND_KEYS = (
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "pattern",
)


def spec_json_schema() -> dict[str, Any]:
    """RunSpec's JSON schema, with `model` as preset name | preset + overrides | Hugging Face
    config + overrides | full shape."""
    from blackwell_sm.spec.presets import PRESETS
    from blackwell_sm.spec.run import RunSpec

    schema = RunSpec.model_json_schema()
    shape = schema["$defs"]["ModelSpec"]
    names = list(PRESETS)
    overrides = {
        "type": "object",
        "description": "A preset with some fields changed.",
        "properties": {
            "preset": {"enum": names, "description": "The preset to start from."},
            **copy.deepcopy(shape["properties"]),
        },
        "required": ["preset"],
        "additionalProperties": False,
    }
    hf = {
        "type": "object",
        "description": "A Hugging Face config.json (or its folder) with some fields changed.",
        "properties": {
            "hf": {
                "type": "string",
                "minLength": 1,
                "description": "config.json or its folder, or a Hugging Face Hub id "
                "ORG/NAME[@REVISION] (docs/hub-ids.md).",
            },
            **copy.deepcopy(shape["properties"]),
        },
        "required": ["hf"],
        "additionalProperties": False,
    }
    model = schema["properties"]["model"]
    schema["properties"]["model"] = {
        "description": model.get("description", ""),
        "anyOf": [
            {"enum": names, "description": "A preset name."},
            overrides,
            hf,
            {"$ref": "#/$defs/ModelSpec"},
        ],
    }
    return schema


def bounded_fields(schema: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every spec field with a bound: dotted path, bounds, description (docs and tests)."""
    schema = schema or spec_json_schema()
    defs = schema.get("$defs", {})
    out: list[dict[str, Any]] = []

    def resolve(node: dict[str, Any]) -> dict[str, Any]:
        ref = node.get("$ref")
        return defs[ref.rsplit("/", 1)[-1]] if ref else node

    def walk(props: dict[str, Any], prefix: str, seen: tuple[str, ...]) -> None:
        for name, prop in props.items():
            path = f"{prefix}{name}"
            variants = [prop, *prop.get("anyOf", []), *prop.get("prefixItems", [])]
            bounds = {k: v for var in variants for k, v in var.items() if k in _BOUND_KEYS}
            if bounds:
                out.append(
                    {"field": path, "bounds": bounds, "description": prop.get("description", "")}
                )
            for var in variants:
                ref = var.get("$ref")
                if ref and ref not in seen:
                    walk(resolve(var).get("properties", {}), path + ".", (*seen, ref))

    walk(schema.get("properties", {}), "", ())
    return out
