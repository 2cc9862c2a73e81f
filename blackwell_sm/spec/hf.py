"""Hugging Face `config.json` <-> ModelSpec, for the four families in `arch.FAMILIES`.

`model: {hf: PATH}` reads a config (a folder holding config.json, or the file) and turns it into a
ModelSpec; anything the toolkit cannot train exactly is refused with the config key and the
reason (mixture of experts, sliding-window attention when it is on, another model_type, biases
or activations the family does not have, RoPE scalings other than Llama 3's). `to_hf_config` is
the way back, used by the exporter. Both read both config styles: transformers 5
(`rope_parameters`) and the `rope_theta` / `rope_scaling` keys most published checkpoints carry.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from blackwell_sm.errors import SpecError
from blackwell_sm.spec import arch

#: transformers' defaults for keys a config.json may omit (same for the four families, checked
#: against the config classes in tests/test_arch.py), except max_position_embeddings.
DEFAULTS = {"rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": False}
DEFAULT_MAX_POSITIONS = {"llama": 2048, "mistral": 131072, "qwen2": 32768, "qwen3": 32768}
_MOE_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size")
_FIELD = "model.hf"


def _refuse(path: str, key: str, value: Any, why: str) -> SpecError:
    return SpecError(
        f"{path}: {key}={value!r}: {why}",
        field=_FIELD,
        hint="families supported: " + ", ".join(arch.FAMILIES) + " (dense, full attention)",
    )


def _strict(cfg: dict[str, Any], where: str, key: str, kind: str, *, required: bool = False) -> Any:
    """`cfg[key]` if it has the JSON type `kind` (int, number, bool, str, int-or-list), None when
    absent or null (refused if `required`). Nothing is coerced: `true`, `2.0` or `"4096"` where
    an integer belongs is refused with the key, as is NaN or an infinite number."""
    if cfg.get(key) is None:
        if required:
            raise _refuse(where, key, None, "required key is missing")
        return None
    v = cfg[key]
    ok = {
        "int": type(v) is int,
        "number": type(v) in (int, float) and math.isfinite(v),
        "bool": type(v) is bool,
        "str": type(v) is str,
        "ids": type(v) is int or (type(v) is list and bool(v) and all(type(i) is int for i in v)),
        "strs": type(v) is list and all(type(i) is str for i in v),
    }[kind]
    if not ok:
        expected = {
            "int": "an integer",
            "number": "a finite number",
            "bool": "true or false",
            "str": "a string",
            "ids": "a token id or a non-empty list of ids",
            "strs": "a list of strings",
        }[kind]
        raise _refuse(where, key, v, f"expected {expected} (nothing is converted)")
    return v


def read_hf_config(path: object) -> tuple[dict[str, Any], Path]:
    """The parsed config.json at `path` (a folder or the file), and the file it came from,
    through the project's safe loader (a regular UTF-8 file of at most 1 MiB, a JSON object)."""
    from blackwell_sm.safe_load import load_mapping

    if not isinstance(path, (str, Path)) or not str(path):
        raise SpecError(f"model.hf must be a path, got {path!r}", field=_FIELD)
    p = Path(path).expanduser()
    f = p / "config.json" if p.is_dir() else p
    if not f.exists():
        raise SpecError(f"no Hugging Face config at {f}", field=_FIELD)
    return load_mapping(f, field=_FIELD, fmt="json", label="Hugging Face config"), f


def _rope(cfg: dict[str, Any], where: str) -> tuple[float, dict[str, Any] | None]:
    """(rope_theta, rope_scaling for ModelSpec or None) from either config style."""
    params = cfg.get("rope_parameters")
    scaling = cfg.get("rope_scaling")
    theta = _strict(cfg, where, "rope_theta", "number")
    for key, value in (("rope_parameters", params), ("rope_scaling", scaling)):
        if value is not None and not isinstance(value, dict):
            raise _refuse(where, key, value, "expected a mapping or null")
    if isinstance(params, dict):
        theta = _strict(params, f"{where}: rope_parameters", "rope_theta", "number") or theta
        if params.get("rope_type", "default") != "default":
            scaling = params
    kind = None
    if isinstance(scaling, dict):
        kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind in (None, "default"):
        return float(theta or DEFAULTS["rope_theta"]), None
    if kind != "llama3":
        raise _refuse(where, "rope_type", kind, "only Llama 3 RoPE scaling is supported")
    assert isinstance(scaling, dict)  # kind came from it
    keys = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
    missing = [k for k in keys if k not in scaling]
    if missing:
        raise _refuse(where, "rope_scaling", scaling, f"llama3 scaling lacks {', '.join(missing)}")
    inner = f"{where}: rope_scaling"
    out = {k: _strict(scaling, inner, k, "number", required=True) for k in keys[:3]}
    out[keys[3]] = _strict(scaling, inner, keys[3], "int", required=True)
    return float(theta or DEFAULTS["rope_theta"]), out


def _refuse_unsupported(cfg: dict[str, Any], where: str, family: str) -> None:
    """Mixture of experts, sliding windows, other attention kinds, activations and biases."""
    for k in _MOE_KEYS:
        if cfg.get(k):
            raise _refuse(where, k, cfg[k], "mixture-of-experts models are not supported")
    sliding = _strict(cfg, where, "use_sliding_window", "bool")
    window = cfg.get("sliding_window")
    if window is not None and type(window) is not int:
        raise _refuse(where, "sliding_window", window, "expected an integer or null")
    if sliding or (family == "mistral" and window):
        key = "use_sliding_window" if sliding else "sliding_window"
        raise _refuse(where, key, cfg[key], "sliding-window attention is not supported")
    layer_types = _strict(cfg, where, "layer_types", "strs") or []
    if any(t != "full_attention" for t in layer_types):
        raise _refuse(where, "layer_types", sorted(set(layer_types)), "only full attention")
    act = _strict(cfg, where, "hidden_act", "str")
    if act not in (None, "silu"):
        raise _refuse(where, "hidden_act", act, "the MLP is SwiGLU (silu)")
    for k in ("attention_bias", "mlp_bias"):
        if _strict(cfg, where, k, "bool") and family != "qwen2":
            raise _refuse(where, k, cfg[k], f"{family} is trained here without that bias")
    classes = _strict(cfg, where, "architectures", "strs")
    want = arch.FAMILIES[family].hf_class
    if classes and want not in classes:
        raise _refuse(where, "architectures", classes, f"model_type {family} is {want}")


#: ModelSpec field -> the config.json key it comes from (to name the key when a value is refused).
_KEYS = {
    "n_layers": "num_hidden_layers",
    "d_model": "hidden_size",
    "n_heads": "num_attention_heads",
    "n_kv_heads": "num_key_value_heads",
    "ffn_dim": "intermediate_size",
    "vocab_size": "vocab_size",
    "head_dim": "head_dim",
    "norm_eps": "rms_norm_eps",
    "rope_theta": "rope_theta",
    "max_seq_len": "max_position_embeddings",
    "bos_token_id": "bos_token_id",
    "eos_token_id": "eos_token_id",
    "rope_scaling": "rope_scaling",
}


def _bounded(fields: dict[str, Any], where: str) -> None:
    """Each value within the ModelSpec field's bounds, refused with its config.json key (checks
    between fields wait for the spec's own overrides)."""
    from pydantic import ValidationError

    from blackwell_sm.spec.model import ModelSpec

    try:
        ModelSpec.model_validate(fields)
    except ValidationError as e:
        for err in e.errors():
            if err["loc"] and err["loc"][0] in _KEYS:
                key = _KEYS[str(err["loc"][0])]
                sub = "".join(f".{p}" for p in err["loc"][1:])
                raise _refuse(where, key + sub, err.get("input"), err["msg"]) from None


def from_hf_config(cfg: dict[str, Any], where: str = "config.json") -> dict[str, Any]:
    """ModelSpec fields for a Hugging Face config, or SpecError(field='model.hf') with the key."""
    family = cfg.get("model_type")
    if not isinstance(family, str) or family not in arch.FAMILIES:
        raise _refuse(where, "model_type", family, "not a supported family")
    _refuse_unsupported(cfg, where, family)
    theta, scaling = _rope(cfg, where)
    nh = _strict(cfg, where, "num_attention_heads", "int", required=True)
    fields: dict[str, Any] = {
        "family": family,
        "n_layers": _strict(cfg, where, "num_hidden_layers", "int", required=True),
        "d_model": _strict(cfg, where, "hidden_size", "int", required=True),
        "n_heads": nh,
        "n_kv_heads": _strict(cfg, where, "num_key_value_heads", "int") or nh,
        "ffn_dim": _strict(cfg, where, "intermediate_size", "int", required=True),
        "vocab_size": _strict(cfg, where, "vocab_size", "int", required=True),
    }
    # Qwen2 has no head_dim key: its heads are hidden_size / num_attention_heads.
    head_dim = _strict(cfg, where, "head_dim", "int")
    if head_dim and family != "qwen2":
        fields["head_dim"] = head_dim
    bos, eos = (
        _strict(cfg, where, "bos_token_id", "int"),
        _strict(cfg, where, "eos_token_id", "ids"),
    )
    if bos is not None:
        fields["bos_token_id"] = bos
    if eos is not None:
        fields["eos_token_id"] = (eos,) if type(eos) is int else tuple(eos)
    tie = _strict(cfg, where, "tie_word_embeddings", "bool")
    eps = _strict(cfg, where, "rms_norm_eps", "number")
    positions = _strict(cfg, where, "max_position_embeddings", "int")
    fields.update(
        tie_embeddings=DEFAULTS["tie_word_embeddings"] if tie is None else tie,
        rope_theta=theta,
        rope_scaling=scaling,
        norm_eps=float(DEFAULTS["rms_norm_eps"] if eps is None else eps),
        max_seq_len=positions or DEFAULT_MAX_POSITIONS[family],
    )
    _bounded(fields, where)
    return fields


def to_hf_config(spec: Any, dtype: str = "float32") -> dict[str, Any]:
    """The Hugging Face config of `spec`'s family (a `*Config` dict, both RoPE styles written)."""
    fam = arch.FAMILIES[spec.family]
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": spec.rope_theta}
    scaling = None
    if spec.rope_scaling is not None:
        scaling = spec.rope_scaling.model_dump()
        rope = {**scaling, "rope_theta": spec.rope_theta}
    cfg: dict[str, Any] = {
        "architectures": [fam.hf_class],
        "model_type": fam.model_type,
        "hidden_size": spec.d_model,
        "intermediate_size": spec.ffn_dim,
        "num_hidden_layers": spec.n_layers,
        "num_attention_heads": spec.n_heads,
        "num_key_value_heads": spec.n_kv_heads,
        "vocab_size": spec.vocab_size,
        "max_position_embeddings": spec.max_seq_len,
        "rms_norm_eps": spec.norm_eps,
        "rope_theta": spec.rope_theta,
        "rope_scaling": scaling,
        "rope_parameters": rope,
        "hidden_act": "silu",
        "tie_word_embeddings": spec.tie_embeddings,
        "torch_dtype": dtype,
        "dtype": dtype,
    }
    cfg.update(generation_config(spec))
    if spec.family != "qwen2":
        cfg["head_dim"] = spec.head_dim
    if spec.family in ("llama", "qwen3"):
        cfg["attention_bias"] = False
    if spec.family == "llama":
        cfg["mlp_bias"] = False
    if spec.family in ("qwen2", "qwen3"):
        cfg.update(use_sliding_window=False, sliding_window=None)
    if spec.family == "mistral":
        cfg["sliding_window"] = None
    return cfg


def generation_config(spec: Any) -> dict[str, Any]:
    """The token ids a `generation_config.json` (and the model config) carry for `spec`."""
    out: dict[str, Any] = {}
    if spec.bos_token_id is not None:
        out["bos_token_id"] = spec.bos_token_id
    if spec.eos_token_id is not None:
        eos = list(spec.eos_token_id)
        out["eos_token_id"] = eos[0] if len(eos) == 1 else eos
    return out
