"""Hugging Face `config.json` <-> ModelSpec, for the four families in `arch.FAMILIES`.

`model: {hf: PATH}` reads a config (a folder holding config.json, or the file) and turns it into a
ModelSpec; anything the toolkit cannot train exactly is refused with the config key and the
reason (mixture of experts, sliding-window attention when it is on, another model_type, biases
or activations the family does not have, RoPE scalings other than Llama 3's). `to_hf_config` is
the way back, used by the exporter. Both read both config styles: transformers 5
(`rope_parameters`) and the `rope_theta` / `rope_scaling` keys most published checkpoints carry.
"""

from __future__ import annotations

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


def read_hf_config(path: str | Path) -> tuple[dict[str, Any], Path]:
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
    theta = cfg.get("rope_theta")
    if isinstance(params, dict):
        theta = params.get("rope_theta", theta)
        if params.get("rope_type", "default") != "default":
            scaling = params
    kind = None
    if isinstance(scaling, dict):
        kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind in (None, "default"):
        return float(theta or DEFAULTS["rope_theta"]), None
    if kind != "llama3":
        raise _refuse(where, "rope_type", kind, "only Llama 3 RoPE scaling is supported")
    keys = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
    missing = [k for k in keys if k not in scaling]
    if missing:
        raise _refuse(where, "rope_scaling", scaling, f"llama3 scaling lacks {', '.join(missing)}")
    return float(theta or DEFAULTS["rope_theta"]), {k: scaling[k] for k in keys}


def from_hf_config(cfg: dict[str, Any], where: str = "config.json") -> dict[str, Any]:
    """ModelSpec fields for a Hugging Face config, or SpecError(field='model.hf') with the key."""
    family = cfg.get("model_type")
    if family not in arch.FAMILIES:
        raise _refuse(where, "model_type", family, "not a supported family")
    for k in _MOE_KEYS:
        if cfg.get(k):
            raise _refuse(where, k, cfg[k], "mixture-of-experts models are not supported")
    if cfg.get("use_sliding_window") or (family == "mistral" and cfg.get("sliding_window")):
        key = "use_sliding_window" if cfg.get("use_sliding_window") else "sliding_window"
        raise _refuse(where, key, cfg[key], "sliding-window attention is not supported")
    layer_types = cfg.get("layer_types") or []
    if any(t != "full_attention" for t in layer_types):
        raise _refuse(where, "layer_types", sorted(set(layer_types)), "only full attention")
    if cfg.get("hidden_act", "silu") != "silu":
        raise _refuse(where, "hidden_act", cfg["hidden_act"], "the MLP is SwiGLU (silu)")
    for k in ("attention_bias", "mlp_bias"):
        if k in cfg and cfg[k] and family != "qwen2":
            raise _refuse(where, k, cfg[k], f"{family} is trained here without that bias")
    theta, scaling = _rope(cfg, where)
    try:
        h, nh = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
        fields: dict[str, Any] = {
            "family": family,
            "n_layers": int(cfg["num_hidden_layers"]),
            "d_model": h,
            "n_heads": nh,
            "n_kv_heads": int(cfg.get("num_key_value_heads") or nh),
            "ffn_dim": int(cfg["intermediate_size"]),
            "vocab_size": int(cfg["vocab_size"]),
        }
    except KeyError as e:
        raise _refuse(where, e.args[0], None, "required key is missing") from None
    except (TypeError, ValueError) as e:
        raise SpecError(f"{where}: a size is not an integer ({e})", field=_FIELD) from None
    # Qwen2 has no head_dim key: its heads are hidden_size / num_attention_heads.
    if cfg.get("head_dim") and family != "qwen2":
        fields["head_dim"] = int(cfg["head_dim"])
    bos, eos = cfg.get("bos_token_id"), cfg.get("eos_token_id")
    if isinstance(bos, int):
        fields["bos_token_id"] = bos
    if isinstance(eos, int):
        fields["eos_token_id"] = (eos,)
    elif isinstance(eos, list) and eos and all(isinstance(e, int) for e in eos):
        fields["eos_token_id"] = tuple(eos)
    fields.update(
        tie_embeddings=bool(cfg.get("tie_word_embeddings", DEFAULTS["tie_word_embeddings"])),
        rope_theta=theta,
        rope_scaling=scaling,
        norm_eps=float(cfg.get("rms_norm_eps", DEFAULTS["rms_norm_eps"])),
        max_seq_len=int(cfg.get("max_position_embeddings") or DEFAULT_MAX_POSITIONS[family]),
    )
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
