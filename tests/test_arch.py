"""The architecture description (spec/arch.py, spec/hf.py) against the real modules.

- Our module tree is `arch.param_table` exactly, for every family.
- The same tiny model built by transformers (random weights, fp32) and loaded into ours through
  `arch.hf_key` gives the same logits: proves the module tree, the q/k/v biases, the q/k norms,
  head_dim != d_model / n_heads, tied embeddings, each family's eps/theta and Llama 3 RoPE scaling.
- Every preset equals `from_hf_config` of its published config, and its parameter count equals the
  transformers model built from that config on the meta device.
- `model: {hf: PATH}` refuses what cannot be trained exactly, naming the key and the reason.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blackwell_sm.errors import SpecError
from blackwell_sm.spec import PRESETS, ModelSpec, arch, parse_spec
from blackwell_sm.spec.hf import DEFAULT_MAX_POSITIONS, DEFAULTS, from_hf_config, to_hf_config

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from hf_support import TINY, hf_model  # noqa: E402

CONFIGS = json.loads((Path(__file__).parent / "data" / "hf_configs.json").read_text())
CONFIGS.pop("_source")


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("name", TINY)
def test_module_tree_is_the_description_and_logits_equal_transformers(name):
    from blackwell_sm.train.model import Transformer

    cfg = TINY[name]
    spec = ModelSpec(name=name, **from_hf_config(cfg))
    ours = Transformer(spec)
    assert {n: tuple(p.shape) for n, p in ours.named_parameters()} == arch.param_table(spec)
    assert sum(p.numel() for p in ours.parameters()) == spec.n_params

    hf = hf_model(cfg)
    assert type(hf).__name__ == arch.FAMILIES[spec.family].hf_class
    hf_state = hf.state_dict()
    keys = {arch.hf_key(n) for n in arch.param_table(spec)}
    tied_head = {"lm_head.weight"} if spec.tie_embeddings else set()
    assert set(hf_state) - tied_head == keys
    assert sum(p.numel() for p in hf.parameters()) == spec.n_params
    ours.load_state_dict({n: hf_state[arch.hf_key(n)] for n in arch.param_table(spec)})
    ours.eval()
    tokens = torch.randint(0, spec.vocab_size, (2, 48), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a, b = ours(tokens), hf(tokens).logits
    assert torch.allclose(a, b, rtol=1e-5, atol=1e-5 * b.abs().max().item()), (a - b).abs().max()


@pytest.mark.parametrize("name", CONFIGS)
def test_preset_equals_its_published_config_and_the_meta_model(name):
    cfg = CONFIGS[name]
    spec = ModelSpec(name=name, **from_hf_config(cfg))
    assert spec == PRESETS[name]
    config = transformers.AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    assert sum(p.numel() for p in model.parameters()) == PRESETS[name].n_params
    assert type(model).__name__ == arch.FAMILIES[spec.family].hf_class


@pytest.mark.parametrize("name", TINY)
def test_hf_config_round_trip(name):
    spec = ModelSpec(name=name, **from_hf_config(TINY[name]))
    back = to_hf_config(spec, "bfloat16")
    assert ModelSpec(name=name, **from_hf_config(back)) == spec
    config = transformers.AutoConfig.for_model(**back)
    assert type(config).__name__.removesuffix("Config").lower() == spec.family


def test_defaults_are_transformers_defaults():
    for family in arch.FAMILIES:
        d = transformers.AutoConfig.for_model(family).to_dict()
        assert d["rms_norm_eps"] == DEFAULTS["rms_norm_eps"]
        assert d["rope_parameters"]["rope_theta"] == DEFAULTS["rope_theta"]
        assert d["tie_word_embeddings"] == DEFAULTS["tie_word_embeddings"]
        assert d["max_position_embeddings"] == DEFAULT_MAX_POSITIONS[family]


def _write(tmp_path: Path, cfg: dict) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return tmp_path


def test_model_hf_reads_a_folder_or_a_file_with_overrides(tmp_path):
    (tmp_path / "Qwen3-8B").mkdir()
    folder = _write(tmp_path / "Qwen3-8B", CONFIGS["qwen3-8b"])
    spec = parse_spec({"model": {"hf": str(folder)}})
    assert spec.model.n_params == PRESETS["qwen3-8b"].n_params and spec.model.name == "Qwen3-8B"
    spec = parse_spec({"model": {"hf": str(folder / "config.json"), "max_seq_len": 8192}})
    assert spec.model.max_seq_len == 8192 and spec.model.family == "qwen3"


@pytest.mark.parametrize(
    ("change", "key", "reason"),
    [
        ({"model_type": "qwen3_moe", "num_experts": 128}, "model_type", "not a supported family"),
        ({"num_experts": 8}, "num_experts", "mixture-of-experts"),
        ({"use_sliding_window": True}, "use_sliding_window", "sliding-window"),
        ({"model_type": "gemma"}, "model_type", "not a supported family"),
        ({"hidden_act": "gelu"}, "hidden_act", "SwiGLU"),
        ({"attention_bias": True}, "attention_bias", "without that bias"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_type", "Llama 3"),
    ],
)
def test_model_hf_refuses_with_field_and_reason(tmp_path, change, key, reason):
    folder = _write(tmp_path, {**CONFIGS["qwen3-8b"], **change})
    with pytest.raises(SpecError) as e:
        parse_spec({"model": {"hf": str(folder)}})
    assert e.value.field == "model.hf"
    assert key in e.value.message and reason in e.value.message


def test_mistral_sliding_window_refused_when_set(tmp_path):
    folder = _write(tmp_path, {**CONFIGS["mistral-7b-v0.3"], "sliding_window": 4096})
    with pytest.raises(SpecError, match="sliding_window=4096: sliding-window") as e:
        parse_spec({"model": {"hf": str(folder)}})
    assert e.value.field == "model.hf"


def test_missing_config_is_a_spec_error(tmp_path):
    with pytest.raises(SpecError, match="no Hugging Face config") as e:
        parse_spec({"model": {"hf": str(tmp_path)}})
    assert e.value.field == "model.hf"


def test_preset_override_rederives_head_dim():
    spec = parse_spec({"model": {"preset": "llama-3.1-8b", "d_model": 2048}})
    assert spec.model.head_dim == 64
    spec = parse_spec({"model": {"preset": "qwen3-8b", "d_model": 2048}})
    assert spec.model.head_dim == 128  # set by the preset: a Qwen3 head stays 128 wide


def test_lowp_rule_is_one_rule_for_planner_and_trainer():
    from blackwell_sm.train.model import Transformer
    from blackwell_sm.train.precision import lowp_filter

    # Every dim divisible by 16, ffn_dim (336) not by 32.
    spec = ModelSpec(n_layers=1, d_model=64, n_heads=4, n_kv_heads=2, ffn_dim=336, vocab_size=64)
    model = Transformer(spec)
    for precision in ("fp8", "mxfp8"):
        keep = lowp_filter(precision)
        converted = {fqn for fqn, m in model.named_modules() if keep(m, fqn)}
        planner_bad = arch.lowp_ineligible(spec, precision)
        if planner_bad is None:
            assert len(converted) == len(arch.block_linears(spec))
        else:
            assert "mlp" in planner_bad and not any("mlp" in c for c in converted)
    assert arch.lowp_ineligible(spec, "fp8") is None
    assert arch.lowp_ineligible(spec, "mxfp8") is not None


def test_flops_count_the_attention_width_not_d_model():
    spec = PRESETS["qwen3-4b"]  # q_dim 4096 > d_model 2560
    base = 6.0 * spec.n_matmul_params
    assert spec.flops_per_token(4096) == base + 12.0 * 36 * 4096 * 4096


def test_selective_op_keeps_q_v_gate_down_and_redoes_k_o_up():
    spec = PRESETS["llama-3.1-8b"]
    kept = [lin.name for lin in arch.saved_matmuls(spec, "selective-op")]
    assert kept == ["self_attn.q_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.down_proj"]
    lin, attn = arch.recompute_flops_per_token(spec, 8192, "selective-op")
    h, kv, f = 4096, 1024, 14336
    assert (lin, attn) == (2.0 * 32 * (h * kv + h * h + h * f), 0.0)


def test_the_spec_family_literal_is_the_description_table():
    from typing import get_args

    from blackwell_sm.spec.model import Family

    assert set(get_args(Family)) == set(arch.FAMILIES)


def test_the_json_schema_takes_model_hf():
    jsonschema = pytest.importorskip("jsonschema")
    from blackwell_sm.spec.schema import spec_json_schema

    schema = spec_json_schema()
    jsonschema.validate({"model": {"hf": "/m/Qwen3-8B", "max_seq_len": 8192}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"model": {"hf": "/m/Qwen3-8B", "experts": 8}}, schema)


def test_set_override_rederives_a_derived_head_dim():
    from blackwell_sm.spec import spec_from_preset, with_overrides

    spec = with_overrides(spec_from_preset("llama-3.1-8b"), {"model.d_model": 2048})
    assert spec.model.head_dim == 64 and spec.model.q_dim == 2048
    spec = with_overrides(spec_from_preset("qwen3-8b"), {"model.d_model": 2048})
    assert spec.model.head_dim == 128  # set by the preset
