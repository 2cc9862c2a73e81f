"""What a plan is asked of, read once for `bsm plan` and `blackwell_sm.plan()`: the spec (a
RunSpec, a mapping, a preset name or a file), the common flags as spec overrides, and the
refusals both front doors share (a flag and an override setting one field; an unknown key)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from blackwell_sm.errors import SpecError

if TYPE_CHECKING:  # pydantic loads only when a spec is read: `bsm --help` stays instant
    from blackwell_sm.spec import RunSpec


class Flag(NamedTuple):
    """A common `bsm plan` flag: its `plan()` keyword, its CLI name, the spec paths it sets."""

    keyword: str
    cli: str
    paths: tuple[str, ...]


#: The flags `bsm plan` offers and `plan()` takes as keywords, in one table.
FLAGS: tuple[Flag, ...] = (
    Flag("model", "--model", ("model",)),
    Flag("instance_type", "--instance-type", ("compute.instance_type",)),
    Flag("instance_count", "--instance-count", ("compute.instance_count",)),
    Flag("seq_len", "--seq-len", ("training.seq_len",)),
    Flag(
        "global_batch_tokens",
        "--global-batch-tokens",
        ("training.global_batch_tokens", "training.global_batch_seqs"),
    ),
    Flag("total_tokens", "--total-tokens", ("training.total_tokens", "training.total_steps")),
    Flag("calibration", "--calibration", ("compute.calibration",)),
    Flag("optimize", "--optimize", ("compute.optimize",)),
)

Optimize = Literal["time", "cost"]


def flag_overrides(
    *,
    instance_type: str | None = None,
    instance_count: int | Literal["auto"] | None = None,
    seq_len: int | None = None,
    global_batch_tokens: int | None = None,
    total_tokens: int | None = None,
    optimize: Optimize | None = None,
) -> dict[str, Any]:
    """The common flags as `with_overrides` keys (a token budget clears the step count it
    replaces, a batch in tokens the batch in sequences)."""
    out: dict[str, Any] = {}
    if instance_type:
        out["compute.instance_type"] = instance_type
    if instance_count is not None:
        out["compute.instance_count"] = instance_count
    if seq_len is not None:
        out["seq_len"] = seq_len
    if global_batch_tokens is not None:
        out["training.global_batch_tokens"] = global_batch_tokens
        out["training.global_batch_seqs"] = None
    if total_tokens is not None:
        out["training.total_tokens"] = total_tokens
        out["training.total_steps"] = None
    if optimize is not None:
        out["compute.optimize"] = optimize
    return out


def check_flag_conflicts(flags: dict[str, Any], sets: dict[str, Any], *, cli: bool) -> None:
    """Refuse a flag (keyword) and a `--set` (override) that set the same spec field, naming both
    (exit 2). `flags` maps keywords to values; `cli` words the message with the flags' names."""
    from blackwell_sm.spec.run import override_path

    by_keyword = {f.keyword: f for f in FLAGS}
    for keyword, value in flags.items():
        if value is None:
            continue
        flag = by_keyword[keyword]
        name = flag.cli if cli else f"{keyword}="
        for key, set_value in sets.items():
            path = override_path(key)
            hit = next((p for p in flag.paths if path == p), None)
            if hit:
                other = f"--set {key}={set_value}" if cli else f"{key}={set_value!r}"
                raise SpecError(
                    f"{name}{' ' if cli else ''}{value} and {other} both set {hit}; give one",
                    field=hit,
                    hint=f"drop {name.rstrip('=')} or the {other.split('=')[0]}",
                )


def check_override_keys(overrides: dict[str, Any]) -> None:
    """An unknown override key is refused with the nearest keywords and keys (did-you-mean)."""
    from blackwell_sm.spec.run import override_path
    from blackwell_sm.spec.suggest import did_you_mean
    from blackwell_sm.spec.training import PlannerPins

    known = [f.keyword for f in FLAGS] + ["trace", "allow_infeasible", "instance"]
    known += ["seq_len", "precision", "activation_checkpointing", *PlannerPins.model_fields]
    for key in overrides:
        try:
            override_path(key)
        except SpecError as e:
            raise SpecError(
                f"plan() got an unknown keyword {key!r}: not a plan() keyword, a config knob or a "
                "dotted spec path",
                field=key,
                hint=did_you_mean(key, known) or e.message,
            ) from None


def read_spec(spec: RunSpec | str | Path | dict[str, Any]) -> RunSpec:
    """A RunSpec from what a notebook passes: a RunSpec, a mapping, a preset name (a near miss
    gets did-you-mean, as `bsm plan --model` does) or a YAML/JSON file."""
    from blackwell_sm.spec import RunSpec, load_spec, parse_spec

    if isinstance(spec, RunSpec):
        return spec
    if isinstance(spec, dict):
        return parse_spec(spec)
    if isinstance(spec, (str, Path)):
        if isinstance(spec, str) and _looks_like_a_name(spec):
            return parse_spec({"model": spec}, source="preset name")
        return load_spec(spec)
    raise SpecError(
        f"plan() takes a RunSpec, a path, a mapping or a preset name, not {type(spec).__name__}",
        field="spec",
    )


def _looks_like_a_name(text: str) -> bool:
    """A preset name rather than a file: no such file, no folder and no spec suffix."""
    if Path(text).expanduser().exists():
        return False
    return "/" not in text and not text.endswith((".yaml", ".yml", ".json"))
