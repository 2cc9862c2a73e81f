"""RunSpec: the whole user spec (model + training + compute + optional job), and its loading."""

from __future__ import annotations

from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from blackwell_sm.errors import SpecError
from blackwell_sm.spec.compute import ComputeSpec
from blackwell_sm.spec.defaults import model_context
from blackwell_sm.spec.job import JobSpec
from blackwell_sm.spec.model import ModelSpec
from blackwell_sm.spec.peft import check_peft_model
from blackwell_sm.spec.presets import PRESETS, get_preset
from blackwell_sm.spec.suggest import UnknownNameError, did_you_mean
from blackwell_sm.spec.training import TrainingSpec
from blackwell_sm.spec.types import KeyedValueError


class RunSpec(BaseModel):
    """Everything a user says about a run. `model` may be a preset name, or a mapping with
    `preset:` and overrides, or a full ModelSpec."""

    model_config = ConfigDict(extra="forbid")

    model: ModelSpec = Field(
        description="Preset name, {preset: NAME, ...overrides}, {hf: PATH, ...overrides} (a "
        "Hugging Face config.json or its folder), or a shape."
    )
    training: TrainingSpec = Field(default_factory=TrainingSpec, validate_default=True)
    compute: ComputeSpec = Field(default_factory=ComputeSpec)
    job: JobSpec | None = Field(None, description="SageMaker settings; needed only to submit.")

    @property
    def notes(self) -> list[str]:
        """Defaults the spec lowered so that it stays valid, each in words (spec/defaults.py)."""
        return list(self.training._notes)

    @field_validator("model", mode="before")
    @classmethod
    def _resolve_preset(cls, v: Any) -> Any:
        if isinstance(v, str):
            if v not in PRESETS:
                raise UnknownNameError("model preset", v, PRESETS)
            return PRESETS[v]
        if isinstance(v, dict) and "preset" in v:
            v = dict(v)
            name = v.pop("preset")
            if not isinstance(name, str) or name not in PRESETS:
                raise UnknownNameError("model preset", name, PRESETS)
            # Only what the preset sets: derived fields (head_dim) follow the overrides.
            base = PRESETS[name].model_dump(exclude_unset=True)
            base.update(v)
            return base
        if isinstance(v, dict) and "hf" in v:
            from blackwell_sm.spec.hf import from_hf_config, read_hf_config
            from blackwell_sm.spec.hub import local_source

            v = dict(v)
            source, name = local_source(v.pop("hf"))  # a hub id: its cached snapshot
            cfg, where = read_hf_config(source)
            base = {"name": name or where.parent.name or "hf", **from_hf_config(cfg, str(where))}
            base.update(v)
            assert isinstance(source, (str, Path))  # read_hf_config refuses anything else
            _check_hf_folder(base, source)
            return base
        return v

    @field_validator("training", mode="wrap")
    @classmethod
    def _training_for_model(cls, v: Any, handler: Any, info: ValidationInfo) -> Any:
        """Validate `training` knowing the model's context length (its seq_len default bends
        to it); a TrainingSpec instance is validated again from what was set in it."""
        model = info.data.get("model")
        if isinstance(v, TrainingSpec):
            v = v.model_dump(exclude_unset=True)
        with model_context(model.max_seq_len if isinstance(model, ModelSpec) else None):
            return handler(v)

    @model_validator(mode="after")
    def _seq_fits_model(self) -> RunSpec:
        check_peft_model(self.training.peft, self.model)
        if self.training.seq_len > self.model.max_seq_len:
            raise KeyedValueError(
                f"{self.training.seq_len} exceeds the model's max_seq_len "
                f"{self.model.max_seq_len} (the longest its RoPE setting covers); allowed: "
                f"1..{self.model.max_seq_len}",
                key="training.seq_len",
            )
        return self


def _check_hf_folder(fields: dict[str, Any], source: str | Path) -> None:
    """The `model.hf` folder's weights and tokenizer against the model it describes (headers
    only, `spec/hf_files.py`); a shape that does not validate is left to the spec's own errors."""
    from blackwell_sm.spec.hf_files import check_model_folder

    try:
        spec = ModelSpec.model_validate(fields)
    except ValidationError:
        return
    check_model_folder(spec, source, field="model.hf")


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str] | None:
    """Field names allowed at `loc` (the parent of an unknown key), walking nested models."""
    current: Any = model
    for part in loc:
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(str(part))
        if field is None:
            return None
        current = field.annotation
        for arg in getattr(current, "__args__", ()) or ():  # Optional[Model] / Model | None
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                current = arg
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return None


def _unwrap(annotation: Any) -> Any:
    """The model, dict or tuple type inside `X | None` / `Annotated[X, ...]`, else `annotation`."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, UnionType):
        inner = [a for a in get_args(annotation) if a is not type(None)]
        if len(inner) == 1:
            return _unwrap(inner[0])
    return annotation


def _clean_loc(root: type[BaseModel], loc: tuple[Any, ...]) -> tuple[Any, ...]:
    """The spec path of an error location: field names, mapping keys and list indexes only.

    pydantic also puts the tag of a union member (`constrained-int`, `literal['auto']`) or of a
    validator (`function-after[...]`) in `loc`; those are not places in the spec.
    """
    out: list[Any] = []
    current: Any = root
    for part in loc:
        if isinstance(part, str) and part.startswith("function-"):
            continue
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            out.append(part)
            current = _unwrap(field.annotation) if field is not None else None
        elif get_origin(current) is dict:
            out.append(part)
            current = _unwrap(get_args(current)[1])
        elif get_origin(current) in (tuple, list) and isinstance(part, int):
            out.append(part)
            args = get_args(current)
            current = _unwrap(args[min(part, len(args) - 1)]) if args else None
        elif current is None:
            out.append(part)
        # else: a union member's tag, not a path
    return tuple(out)


_YAML11_WORDS = {"yes", "no", "on", "off", "y", "n"}


def _shown(value: Any) -> str:
    """A short literal view of a refused value (with the YAML 1.1 trap explained)."""
    text = repr(value) if not isinstance(value, str) or len(value) <= 40 else repr(value[:40] + "…")
    if isinstance(value, str) and value.lower() in _YAML11_WORDS:
        text += ", text: YAML 1.2 reads yes/no/on/off as strings; write true/false or a number"
    return text


def spec_error(
    err: ValidationError, *, root: type[BaseModel] = RunSpec, source: str = "spec"
) -> SpecError:
    """Turn a pydantic ValidationError into a SpecError naming each field and what is allowed."""
    lines, hints = [], []
    first_field = None
    for e in err.errors():
        loc = _clean_loc(root, e["loc"])
        cause = (e.get("ctx") or {}).get("error")
        if isinstance(cause, KeyedValueError):  # one entry of a mapping: name its key
            loc = (*loc, cause.key)
        path = ".".join(str(p) for p in loc) or "(top level)"
        first_field = first_field or path
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            allowed = _allowed_keys(root, loc[:-1])
            msg = "unknown key" + (f"; allowed: {', '.join(allowed)}" if allowed else "")
        elif e["type"] == "missing":
            msg = "required field is missing"
        elif e["type"] in ("model_type", "dict_type", "model_attributes_type"):
            allowed = _allowed_keys(root, loc)
            msg = "expected a mapping" + (
                f" with keys among: {', '.join(allowed)}" if allowed else ""
            )
            if loc == ("model",):
                msg += f"; or a preset name: {', '.join(PRESETS)}"
            msg += f" (got {type(e.get('input')).__name__})"
        elif e["type"] != "value_error" and isinstance(e.get("input"), (str, int, float, bool)):
            msg += f" (got {_shown(e['input'])})"
        lines.append(f"  {path}: {msg}")
        hint = _did_you_mean(e, root, loc)
        if hint and hint not in hints:
            hints.append(f"{path}: {hint}")
    return SpecError(
        f"invalid {source}:\n" + "\n".join(lines), field=first_field, hint="; ".join(hints) or None
    )


def _did_you_mean(e: Any, root: type[BaseModel], loc: tuple[Any, ...]) -> str | None:
    """The near misses of an unknown key or name, for the error's hint (spec/suggest.py)."""
    cause = (e.get("ctx") or {}).get("error")
    if isinstance(cause, UnknownNameError):
        return did_you_mean(cause.name, cause.choices)
    if e["type"] == "extra_forbidden" and loc:
        return did_you_mean(loc[-1], _allowed_keys(root, loc[:-1]) or ())
    return None


def parse_spec(data: Any, *, source: str = "spec") -> RunSpec:
    """Validate a mapping (e.g. parsed YAML) into a RunSpec, or raise SpecError."""
    if not isinstance(data, dict):
        raise SpecError(
            f"invalid {source}: expected a mapping with keys {', '.join(RunSpec.model_fields)}, "
            f"got {type(data).__name__}",
            field="(top level)",
        )
    try:
        return RunSpec.model_validate(data)
    except ValidationError as e:
        raise spec_error(e, source=source) from None


def load_spec(path: str | Path) -> RunSpec:
    """Read a YAML (or JSON) spec file into a RunSpec: the one spec-loading path.

    The file goes through `blackwell_sm.safe_load` (regular file, size cap, UTF-8, YAML 1.2
    scalars, no duplicate keys, depth and integer limits); any problem is a SpecError naming
    the field.
    """
    from blackwell_sm.safe_load import load_mapping

    data = load_mapping(path, field="SPEC", label="spec file")
    return parse_spec(data, source=str(path))


def spec_from_preset(name: str) -> RunSpec:
    """A RunSpec with the named preset and all defaults."""
    return RunSpec(model=get_preset(name))


_CONFIG_KEYS_ON_TRAINING = {"seq_len", "precision", "activation_checkpointing"}


def override_path(key: str) -> str:
    """The dotted spec path an override key sets (`seq_len` -> `training.seq_len`)."""
    from blackwell_sm.spec.training import PlannerPins

    if key in _CONFIG_KEYS_ON_TRAINING:
        return f"training.{key}"
    if key in PlannerPins.model_fields:
        return f"training.pins.{key}"
    if "." in key and all(key.split(".")):
        return key
    allowed = sorted(_CONFIG_KEYS_ON_TRAINING | set(PlannerPins.model_fields))
    raise SpecError(
        f"unknown --set key {key!r}; allowed: {', '.join(allowed)} or a dotted spec path "
        "such as training.optimizer.lr",
        field=key,
    )


def with_overrides(spec: RunSpec, overrides: dict[str, Any]) -> RunSpec:
    """Apply `--set key=value` style overrides (plan `config` keys or dotted spec paths).

    Plan config keys map to their spec home: seq_len/precision/activation_checkpointing on
    `training`, the other knobs on `training.pins`. Dotted paths (`training.optimizer.lr`) set
    that field. The result is validated again.
    """
    # Only what was set: defaults (and defaults adjusted to the spec) follow the overrides.
    data = spec.model_dump(mode="python", exclude_unset=True)
    if "head_dim" not in spec.model.model_fields_set:
        data["model"]["head_dim"] = None  # derived: follows a changed d_model / n_heads
    for key, value in overrides.items():
        path = override_path(key).split(".")
        node = data
        for part in path[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {} if node.get(part) is None else node[part]
            node = node[part]
            if not isinstance(node, dict):
                raise SpecError(f"cannot set {key!r}: {part} is not a mapping", field=key)
        node[path[-1]] = value
    return parse_spec(data, source="spec with overrides")
