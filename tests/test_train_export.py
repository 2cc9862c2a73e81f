"""train/export.py: safetensors export."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from blackwell_sm.spec import get_preset
from blackwell_sm.train.export import export_model, hf_name, load_exported
from blackwell_sm.train.model import Transformer

REPO = Path(__file__).resolve().parents[1]


def test_export_tied_embeddings_in_several_files(tmp_path):
    from transformers import LlamaForCausalLM

    spec = get_preset("tiny").model_copy(update={"tie_embeddings": True})
    model = Transformer(spec, max_seq_len=32)
    model.init_weights(3)
    written = export_model(model, spec, tmp_path, is_main=True, max_shard_bytes=200_000)
    files = sorted(p.name for p in tmp_path.glob("*.safetensors"))
    assert len(files) > 1 and files[0].endswith(f"-of-{len(files):05d}.safetensors")
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == {hf_name(n) for n, _ in model.named_parameters()}
    assert "lm_head.weight" not in index["weight_map"]
    assert len(written) == len(files) + 3  # + config.json, index, generation_config.json
    back = Transformer(spec, max_seq_len=32)
    load_exported(back, tmp_path)
    hf = LlamaForCausalLM.from_pretrained(tmp_path, torch_dtype=torch.float32).eval()
    tokens = torch.randint(0, 256, (1, 32), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.equal(model(tokens), back(tokens))
        torch.testing.assert_close(model(tokens), hf(tokens).logits, atol=1e-4, rtol=1e-4)


def test_export_unwraps_low_precision_weights(tmp_path):
    from safetensors.torch import load_file

    from blackwell_sm.train.precision import convert_precision

    spec = get_preset("tiny")
    model = Transformer(spec, max_seq_len=32)
    model.init_weights(0)
    ref = {n: p.detach().clone() for n, p in model.named_parameters()}
    convert_precision(model, "fp8")
    export_model(model, spec, tmp_path, is_main=True)
    saved = load_file(str(tmp_path / "model.safetensors"))
    for n, t in ref.items():
        assert type(saved[hf_name(n)]) is torch.Tensor and torch.equal(saved[hf_name(n)], t), n


def test_export_dtype_auto_is_bf16_from_1b_and_fp32_below(tmp_path):
    from safetensors import safe_open

    from blackwell_sm.train.export import export_dtype

    assert export_dtype(get_preset("qwen3-8b")) == torch.bfloat16
    assert export_dtype(get_preset("tiny")) == torch.float32
    assert export_dtype(get_preset("qwen3-8b"), "float32") == torch.float32
    spec = get_preset("tiny")
    model = Transformer(spec, max_seq_len=16)
    model.init_weights(0)
    export_model(model, spec, tmp_path, is_main=True, dtype=torch.bfloat16)
    assert json.loads((tmp_path / "config.json").read_text())["torch_dtype"] == "bfloat16"
    with safe_open(str(tmp_path / "model.safetensors"), framework="pt") as f:
        assert f.get_tensor("model.norm.weight").dtype == torch.bfloat16
    assert (tmp_path / "generation_config.json").is_file()


def test_export_ships_the_tokenizer_that_made_the_data(tmp_path):
    """`bsm data prepare --tokenizer` keeps the tokenizer beside the shards; the export copies it
    beside the model, so `AutoTokenizer.from_pretrained(model_dir)` gives the training ids."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import AutoTokenizer

    from blackwell_sm.data.prepare import prepare
    from blackwell_sm.train.data import ShardDataset

    text = "the cat sat on the mat and the dog ran. " * 20
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator([text], trainers.WordLevelTrainer(special_tokens=["<unk>", "</s>"]))
    tok.save(str(tmp_path / "words.json"))  # a bare tokenizer.json, no Hugging Face folder
    (tmp_path / "in.txt").write_text(text)
    prepare([tmp_path / "in.txt"], tmp_path / "ch", tokenizer=tmp_path / "words.json")
    ds = ShardDataset(tmp_path / "ch", seq_len=8, vocab_size=256)
    spec = get_preset("tiny")
    model = Transformer(spec, max_seq_len=32)
    model.init_weights(0)
    out = tmp_path / "model"
    written = export_model(model, spec, out, is_main=True, tokenizer=ds.tokenizer_dir)
    assert out / "tokenizer.json" in written
    loaded = AutoTokenizer.from_pretrained(out)
    ids = tok.encode("the dog sat", add_special_tokens=False).ids
    assert loaded("the dog sat", add_special_tokens=False)["input_ids"] == ids
    assert loaded.eos_token == "</s>"
    # the exported tokenizer reads the training data back as its text
    assert loaded.decode(ds.sequence(0).tolist()) == "the cat sat on the mat and the dog"
