"""train/model.py and train/activation_checkpoint.py: the llama model against its spec."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from blackwell_sm.spec import PRESETS, get_preset
from blackwell_sm.train.activation_checkpoint import apply_activation_checkpointing
from blackwell_sm.train.model import Transformer

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_parameter_count_matches_the_spec(name):
    spec = get_preset(name)
    with torch.device("meta"):
        model = Transformer(spec)
    assert sum(p.numel() for p in model.parameters()) == spec.n_params


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3"])
def test_checkpointing_modes_give_the_same_gradients(family):
    spec = get_preset("tiny").model_copy(update={"family": family})
    tokens = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    grads = {}
    for mode in ("none", "selective", "selective-op", "full"):
        model = Transformer(spec, max_seq_len=16)
        model.init_weights(0)
        apply_activation_checkpointing(model, mode)
        model(tokens).float().logsumexp(-1).mean().backward()
        grads[mode] = [p.grad for p in model.parameters()]
    for mode in ("selective", "selective-op", "full"):
        for a, b in zip(grads["none"], grads[mode], strict=True):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_initial_loss_is_chance_level():
    model = Transformer(get_preset("tiny"), max_seq_len=32)
    model.init_weights(0)
    tokens = torch.randint(0, 256, (4, 33), generator=torch.Generator().manual_seed(0))
    logits = model(tokens[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), tokens[:, 1:].reshape(-1))
    assert loss.item() == pytest.approx(math.log(256), abs=0.1)
