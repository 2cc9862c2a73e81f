"""The LoRA model on one CPU process: frozen bf16 base, PEFT's start (the base model's output),
the same gradients in every checkpointing mode, and what selective checkpointing keeps of an
adapter (lora_A's rank-wide output, never lora_B's)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from model_support import capture_sac_storages  # noqa: E402

from blackwell_sm.spec import ModelSpec  # noqa: E402
from blackwell_sm.spec.peft import PeftSpec  # noqa: E402
from blackwell_sm.train.activation_checkpoint import apply_activation_checkpointing  # noqa: E402
from blackwell_sm.train.lora import adapter_layers, apply_lora, init_adapters  # noqa: E402
from blackwell_sm.train.model import Transformer  # noqa: E402

SPEC = ModelSpec(
    name="t",
    n_layers=2,
    d_model=64,
    n_heads=4,
    n_kv_heads=2,
    ffn_dim=160,
    vocab_size=96,
    max_seq_len=64,
)
RANK = 3  # no base width equals it


def _model(seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(SPEC, max_seq_len=32)
    model.init_weights(seed)
    apply_lora(model, PeftSpec(rank=RANK, alpha=6.0))
    init_adapters(model, seed)
    return model


def test_the_base_is_frozen_bf16_and_the_adapters_start_at_zero():
    model = _model()
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trained == {n for n in trained if ".lora_" in n} and len(trained) == 2 * 7 * 2
    for n, p in model.named_parameters():
        assert p.dtype == (torch.float32 if p.requires_grad else torch.bfloat16), n
    tokens = torch.randint(0, 96, (2, 16), generator=torch.Generator().manual_seed(1))
    plain = Transformer(SPEC, max_seq_len=32)
    plain.load_state_dict(
        {k: v.float() for k, v in model.state_dict().items() if ".lora_" not in k}
    )
    with torch.no_grad():
        assert torch.equal(model.float()(tokens), plain(tokens))  # lora_B = 0: the base model


def _grads(mode: str) -> tuple[dict[str, torch.Tensor], list[torch.Tensor]]:
    model = _model()
    with torch.no_grad():
        for layer in adapter_layers(model).values():
            layer.lora_B.weight.normal_(0, 0.02, generator=torch.Generator().manual_seed(2))
    model = model.to(torch.bfloat16)
    apply_activation_checkpointing(model, mode)
    kept = capture_sac_storages(model)
    tokens = torch.randint(0, 96, (2, 16), generator=torch.Generator().manual_seed(3))
    loss = model(tokens).float().square().mean()
    outs = [v for storage in kept for per_op in storage.values() for v in _tensors(per_op)]
    loss.backward()
    return {n: p.grad for n, p in model.named_parameters() if p.requires_grad}, outs


def _tensors(obj) -> list[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        return [t for x in obj for t in _tensors(x)]
    val = getattr(obj, "val", None)
    return _tensors(val) if val is not None else []


@pytest.mark.parametrize("mode", ["selective", "selective-op", "full"])
def test_every_checkpointing_mode_gives_the_same_gradients(mode):
    ref, _ = _grads("none")
    got, kept = _grads(mode)
    assert ref.keys() == got.keys()
    for n in ref:
        assert ref[n] is not None and ref[n].abs().max() > 0, n
        torch.testing.assert_close(got[n], ref[n], msg=n)
    if mode.startswith("selective"):
        widths = [t.shape[-1] for t in kept if t.dim() >= 2]
        # every adapter's lora_A output is kept (7 per block, 2 blocks) ...
        assert widths.count(RANK) == 2 * 7
        # ... and the base matmuls kept are the full fine-tune's (selective: all 7; -op: 4 of 7)
        lin = {64, 32, 160}  # q/o/down out 64, k/v out 32, gate/up out 160
        assert sum(w in lin for w in widths) == 2 * (7 if mode == "selective" else 4)


def test_an_adapter_peft_saved_loads_with_peft_logits(tmp_path):
    """An adapter trained elsewhere (saved by the real peft, adapter name in its keys or not)
    continues here: loaded into our model it gives PEFT's logits; a rank that differs from
    training.peft is refused before any tensor is read."""
    peft = pytest.importorskip("peft")
    transformers = pytest.importorskip("transformers")
    from hf_support import TINY, hf_model

    from blackwell_sm.errors import BsmError
    from blackwell_sm.spec.hf import from_hf_config
    from blackwell_sm.train.hf_import import load_hf_weights
    from blackwell_sm.train.peft_adapter import load_adapter

    cfg = TINY["llama-rope-scaled"]
    hf_model(cfg).to(torch.bfloat16).save_pretrained(tmp_path / "base")  # our base is bf16
    base = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "base", dtype=torch.float32)
    targets = ["q_proj", "v_proj", "down_proj"]
    lora = peft.LoraConfig(r=2, lora_alpha=5, target_modules=targets, init_lora_weights=False)
    theirs = peft.get_peft_model(base, lora).eval()
    theirs.save_pretrained(tmp_path / "adapter")
    spec = ModelSpec(name="t", **from_hf_config(cfg))
    ours = apply_lora(
        Transformer(spec, max_seq_len=16), PeftSpec(rank=2, alpha=5.0, target_modules=targets)
    )
    load_hf_weights(ours, spec, tmp_path / "base")
    assert load_adapter(ours, ours.lora, tmp_path / "adapter") == 2 * 3 * 2
    tokens = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        a, b = ours.float().eval()(tokens), theirs(input_ids=tokens).logits
    torch.testing.assert_close(a, b, atol=1e-5 * b.abs().max().item(), rtol=1e-5)
    with pytest.raises(BsmError, match=r"differs: r 2 \(training.peft: 4\)"):
        load_adapter(
            ours, PeftSpec(rank=4, alpha=5.0, target_modules=targets), tmp_path / "adapter"
        )
