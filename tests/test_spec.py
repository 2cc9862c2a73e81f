"""Specs: exact preset parameter counts, FLOPs per token, validation errors that name the field."""

import pytest

from blackwell_sm.errors import SpecError
from blackwell_sm.spec import PRESETS, parse_spec, with_overrides

PUBLISHED = {
    "llama-3.2-1b": 1_235_814_400,
    "llama-3.2-3b": 3_212_749_824,
    "llama-3.1-8b": 8_030_261_248,
    "llama-2-13b": 13_015_864_320,
    "codellama-34b": 33_743_970_304,
    "llama-3.1-70b": 70_553_706_496,
}


@pytest.mark.parametrize("name,count", PUBLISHED.items())
def test_preset_counts_match_published(name, count):
    assert PRESETS[name].n_params == count


def test_llama_64b_is_64b_within_one_percent():
    assert abs(PRESETS["llama-64b"].n_params / 64e9 - 1) <= 0.01


def test_flops_per_token_excludes_input_embedding_only():
    m = PRESETS["llama-3.1-8b"]
    non_emb = m.n_params - m.vocab_size * m.d_model
    assert m.flops_per_token(8192) == 6 * non_emb + 12 * 32 * 4096 * 8192
    tied = PRESETS["llama-3.2-1b"]  # the shared matrix is still the output projection
    assert tied.flops_per_token(1) == 6 * tied.n_params + 12 * 16 * 2048


def test_preset_with_overrides():
    spec = parse_spec({"model": {"preset": "llama-3.1-8b", "n_layers": 16}})
    assert spec.model.n_layers == 16 and spec.model.d_model == 4096


@pytest.mark.parametrize(
    "data,field,words",
    [
        ({"model": "llama-9b"}, "model", "allowed: llama-3.2-1b"),
        ({"model": "tiny", "trainig": {}}, "trainig", "allowed: model, training"),
        ({"model": "tiny", "training": {"precision": "fp4"}}, "training.precision", "'mxfp8'"),
        ({"model": "tiny", "training": {"seq_len": 0}}, "training.seq_len", "greater than 0"),
        ({"model": "tiny", "training": {"seq_len": 100000}}, "", "max_seq_len"),
        (
            {"model": {"preset": "tiny", "n_heads": 5}},
            "model",
            "must divide d_model",
        ),
        (
            {"model": "tiny", "compute": {"training_plan": "arn:aws:x"}},
            "compute.training_plan",
            "ARN",
        ),
    ],
)
def test_validation_errors_name_the_field(data, field, words):
    with pytest.raises(SpecError) as e:
        parse_spec(data)
    assert field in str(e.value) and words in str(e.value)
    assert e.value.exit_code == 2


def test_overrides_map_config_keys():
    spec = parse_spec({"model": "tiny"})
    out = with_overrides(spec, {"micro_batch_size": 2, "precision": "bf16", "seq_len": 128})
    assert out.training.pins.micro_batch_size == 2
    assert out.training.precision == "bf16" and out.training.seq_len == 128
    with pytest.raises(SpecError, match="unknown --set key"):
        with_overrides(spec, {"batch": 3})
