"""Reading older and hand-edited plans (`Plan._read`): a version-1 plan's lists as notes, and
`seq_len`, which a plan stores once (`config.seq_len`), put back into the spec. Works on the
raw mapping, before pydantic validates it.
"""

from __future__ import annotations

from typing import Any


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


def from_v1(data: dict[str, Any]) -> None:
    """A version-1 plan's lists as notes (code `v1`); its second seq_len checked and removed."""
    data["notes"] = [
        {"kind": kind, "code": "v1", "text": text}
        for kind, key in (("warning", "warnings"), ("reason", "reasons"), ("advice", "advice"))
        for text in data.get(key) or []
    ]
    spec: Any = data.get("spec")  # raw input: a mapping, a model or missing
    training = _get(spec, "training")
    if isinstance(training, dict) and "seq_len" in training:
        training = dict(training)
        seq = training.pop("seq_len")
        config_seq = _get(data.get("config"), "seq_len")
        if seq != config_seq:
            raise ValueError(
                f"schema_version 1 plan: spec.training.seq_len {seq} disagrees with "
                f"config.seq_len {config_seq}"
            )
        data["spec"] = {**spec, "training": training}


def seq_len_into_spec(data: dict[str, Any]) -> None:
    """`spec.training.seq_len` from `config.seq_len`; a plan that states it twice is refused."""
    seq = _get(data.get("config"), "seq_len")
    spec: Any = data.get("spec")
    training = _get(spec, "training")
    if seq is None or training is None:
        return  # pydantic names what is missing
    if isinstance(training, dict):
        if "seq_len" in training:
            raise ValueError(
                "spec.training.seq_len: the plan holds seq_len once, in config.seq_len"
            )
        data["spec"] = {**dict(spec), "training": {**training, "seq_len": seq}}
    elif training.seq_len != seq:
        raise ValueError(
            f"config.seq_len {seq} and spec.training.seq_len {training.seq_len} differ: a plan "
            "has one sequence length"
        )
