"""Model presets by name. Counts are checked against the published ones in the tests."""

from __future__ import annotations

from blackwell_sm.errors import SpecError
from blackwell_sm.spec.model import ModelSpec

_L3_VOCAB = 128256
_QWEN_VOCAB, _QWEN25_VOCAB = 151936, 152064
# Special token ids as the published configs give them (base models).
_L3_IDS = {"bos_token_id": 128000, "eos_token_id": (128001,)}
_L2_IDS = {"bos_token_id": 1, "eos_token_id": (2,)}
_QWEN25_IDS = {"bos_token_id": 151643, "eos_token_id": (151643,)}
_QWEN3_IDS = {"bos_token_id": 151643, "eos_token_id": (151645,)}


def _llama3(factor: float) -> dict:
    """Llama 3.1 / 3.2 RoPE scaling (original context 8192)."""
    return {
        "factor": factor,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    }


# Shapes as the models' published config.json files give them; tests/test_arch.py checks each
# preset against `from_hf_config` of that config and against the transformers model built from it
# on the meta device (tests/data/hf_configs.json holds the configs).
PRESETS: dict[str, ModelSpec] = {
    m.name: m
    for m in [
        ModelSpec(
            name="llama-3.2-1b",
            n_layers=16,
            d_model=2048,
            n_heads=32,
            n_kv_heads=8,
            ffn_dim=8192,
            vocab_size=_L3_VOCAB,
            tie_embeddings=True,
            max_seq_len=131072,
            rope_scaling=_llama3(32.0),
            **_L3_IDS,
        ),
        ModelSpec(
            name="llama-3.2-3b",
            n_layers=28,
            d_model=3072,
            n_heads=24,
            n_kv_heads=8,
            ffn_dim=8192,
            vocab_size=_L3_VOCAB,
            tie_embeddings=True,
            max_seq_len=131072,
            rope_scaling=_llama3(32.0),
            **_L3_IDS,
        ),
        ModelSpec(
            name="llama-3.1-8b",
            n_layers=32,
            d_model=4096,
            n_heads=32,
            n_kv_heads=8,
            ffn_dim=14336,
            vocab_size=_L3_VOCAB,
            max_seq_len=131072,
            rope_scaling=_llama3(8.0),
            **_L3_IDS,
        ),
        ModelSpec(
            name="llama-2-13b",
            n_layers=40,
            d_model=5120,
            n_heads=40,
            n_kv_heads=40,
            ffn_dim=13824,
            vocab_size=32000,
            rope_theta=10000.0,
            max_seq_len=4096,
            **_L2_IDS,
        ),
        ModelSpec(
            name="codellama-34b",
            n_layers=48,
            d_model=8192,
            n_heads=64,
            n_kv_heads=8,
            ffn_dim=22016,
            vocab_size=32000,
            rope_theta=1000000.0,
            max_seq_len=16384,
            **_L2_IDS,
        ),
        # llama-64b: our own shape — llama-3.1-70b cut from 80 to 72 blocks, everything else equal:
        # 63,708,471,296 parameters (-0.46% of 64B). The largest size the toolkit promises on one node.
        ModelSpec(
            name="llama-64b",
            n_layers=72,
            d_model=8192,
            n_heads=64,
            n_kv_heads=8,
            ffn_dim=28672,
            vocab_size=_L3_VOCAB,
            max_seq_len=131072,
            rope_scaling=_llama3(8.0),
            **_L3_IDS,
        ),
        ModelSpec(
            name="llama-3.1-70b",
            n_layers=80,
            d_model=8192,
            n_heads=64,
            n_kv_heads=8,
            ffn_dim=28672,
            vocab_size=_L3_VOCAB,
            max_seq_len=131072,
            rope_scaling=_llama3(8.0),
            **_L3_IDS,
        ),
        ModelSpec(
            name="mistral-7b-v0.3",
            family="mistral",
            n_layers=32,
            d_model=4096,
            n_heads=32,
            n_kv_heads=8,
            ffn_dim=14336,
            vocab_size=32768,
            rope_theta=1e6,
            max_seq_len=32768,
            **_L2_IDS,
        ),
        ModelSpec(
            name="qwen2.5-7b",
            family="qwen2",
            n_layers=28,
            d_model=3584,
            n_heads=28,
            n_kv_heads=4,
            ffn_dim=18944,
            vocab_size=_QWEN25_VOCAB,
            rope_theta=1e6,
            norm_eps=1e-6,
            max_seq_len=131072,
            **_QWEN25_IDS,
        ),
        ModelSpec(
            name="qwen2.5-14b",
            family="qwen2",
            n_layers=48,
            d_model=5120,
            n_heads=40,
            n_kv_heads=8,
            ffn_dim=13824,
            vocab_size=_QWEN25_VOCAB,
            rope_theta=1e6,
            max_seq_len=131072,
            **_QWEN25_IDS,
        ),
        ModelSpec(
            name="qwen2.5-32b",
            family="qwen2",
            n_layers=64,
            d_model=5120,
            n_heads=40,
            n_kv_heads=8,
            ffn_dim=27648,
            vocab_size=_QWEN25_VOCAB,
            rope_theta=1e6,
            max_seq_len=131072,
            **_QWEN25_IDS,
        ),
        ModelSpec(
            name="qwen3-4b",
            family="qwen3",
            n_layers=36,
            d_model=2560,
            n_heads=32,
            n_kv_heads=8,
            head_dim=128,
            ffn_dim=9728,
            vocab_size=_QWEN_VOCAB,
            tie_embeddings=True,
            rope_theta=1e6,
            norm_eps=1e-6,
            max_seq_len=40960,
            **_QWEN3_IDS,
        ),
        ModelSpec(
            name="qwen3-8b",
            family="qwen3",
            n_layers=36,
            d_model=4096,
            n_heads=32,
            n_kv_heads=8,
            head_dim=128,
            ffn_dim=12288,
            vocab_size=_QWEN_VOCAB,
            rope_theta=1e6,
            norm_eps=1e-6,
            max_seq_len=40960,
            **_QWEN3_IDS,
        ),
        ModelSpec(
            name="qwen3-14b",
            family="qwen3",
            n_layers=40,
            d_model=5120,
            n_heads=40,
            n_kv_heads=8,
            head_dim=128,
            ffn_dim=17408,
            vocab_size=_QWEN_VOCAB,
            rope_theta=1e6,
            norm_eps=1e-6,
            max_seq_len=40960,
            **_QWEN3_IDS,
        ),
        ModelSpec(
            name="qwen3-32b",
            family="qwen3",
            n_layers=64,
            d_model=5120,
            n_heads=64,
            n_kv_heads=8,
            head_dim=128,
            ffn_dim=25600,
            vocab_size=_QWEN_VOCAB,
            rope_theta=1e6,
            norm_eps=1e-6,
            max_seq_len=40960,
            **_QWEN3_IDS,
        ),
        # A tiny model for CPU smoke runs, tests and `make demo`.
        ModelSpec(
            name="tiny",
            n_layers=2,
            d_model=64,
            n_heads=4,
            n_kv_heads=2,
            ffn_dim=192,
            vocab_size=256,
            max_seq_len=512,
        ),
    ]
}


def get_preset(name: str) -> ModelSpec:
    """The preset called `name`, or a SpecError listing the names there are."""
    try:
        return PRESETS[name]
    except KeyError:
        from blackwell_sm.spec.suggest import did_you_mean

        raise SpecError(
            f"unknown model preset {name!r}; allowed: {', '.join(PRESETS)}",
            field="model",
            hint=did_you_mean(name, PRESETS),
        ) from None
