"""Fine-tuning loss: packed samples equal samples alone, and prompt tokens carry no gradient.

A packed row (several samples, a block-diagonal causal mask via document ids) gives each sample
the loss it has alone; the masked loss's gradients equal those of a loss computed only over
completion tokens, and changing what the prompt positions would be asked to predict changes
nothing, while the unmasked loss does change (so the test can fail).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from model_support import small_spec  # noqa: E402

from blackwell_sm.train.loss import counted_targets, loss_sum  # noqa: E402
from blackwell_sm.train.model import Transformer  # noqa: E402

SPEC = small_spec(
    family="qwen3", d_model=64, head_dim=32, ffn_dim=128, vocab_size=50, max_seq_len=64
)


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = Transformer(SPEC, max_seq_len=64)
    m.init_weights(1)
    return m.float()


def _sample(n: int, seed: int) -> torch.Tensor:
    return torch.randint(0, SPEC.vocab_size, (n,), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("mode", ["none", "selective-op", "full"])
def test_packed_loss_equals_the_per_sample_loss(model, mode):
    from blackwell_sm.train.activation_checkpoint import apply_activation_checkpointing

    apply_activation_checkpointing(model, mode)
    samples = [_sample(n, i) for i, n in enumerate((9, 14, 6))]
    masks = [torch.tensor([0] * 3 + [1] * (len(s) - 3)) for s in samples]
    alone = sum(
        loss_sum(model, s[None], m[None]).item() for s, m in zip(samples, masks, strict=True)
    )
    n_alone = sum(
        counted_targets(s[None], m[None], None) for s, m in zip(samples, masks, strict=True)
    )
    pad = 3  # padding at the end: its own document, never counted
    tokens = torch.cat([*samples, torch.zeros(pad, dtype=torch.long)])[None]
    mask = torch.cat([*masks, torch.zeros(pad, dtype=torch.long)])[None]
    docs = torch.cat([torch.full((len(s),), i) for i, s in enumerate([*samples, tokens[0, :pad]])])
    packed = loss_sum(model, tokens, mask, docs[None])
    assert counted_targets(tokens, mask, docs[None]) == n_alone
    assert packed.item() == pytest.approx(alone, rel=1e-5)
    # without the document mask the samples would see each other: a different loss
    assert loss_sum(model, tokens, mask, None).item() != pytest.approx(alone, rel=1e-4)
    apply_activation_checkpointing(model, "none")


def _grads(model, tokens, mask):
    model.zero_grad(set_to_none=True)
    loss_sum(model, tokens, mask).backward()
    return [p.grad.clone() for p in model.parameters()]


def test_prompt_tokens_carry_no_gradient(model):
    prompt, completion = 7, 9
    tokens = _sample(prompt + completion, 5)[None]
    mask = torch.tensor([[0] * prompt + [1] * completion])
    g = _grads(model, tokens, mask)
    # reference: cross-entropy over the completion targets only
    model.zero_grad(set_to_none=True)
    logits = model(tokens[:, :-1]).float()
    targets = tokens[:, 1:].clone()
    targets[:, : prompt - 1] = -100
    torch.nn.functional.cross_entropy(
        logits.reshape(-1, SPEC.vocab_size), targets.reshape(-1), reduction="sum"
    ).backward()
    for a, p in zip(g, model.parameters(), strict=True):
        torch.testing.assert_close(a, p.grad, atol=1e-6, rtol=1e-5)
    # the prompt positions' targets (what they would be asked to predict) change: same gradients
    # under the mask (inputs kept: the last prompt token is also the first completion's input)
    changed = tokens.clone()
    changed[0, 1 : prompt - 1] = (changed[0, 1 : prompt - 1] + 7) % SPEC.vocab_size

    def grads_with_targets(t, weights):  # inputs from `tokens`, targets from `t`
        model.zero_grad(set_to_none=True)
        logits = model(tokens[:, :-1]).float()
        ce = torch.nn.functional.cross_entropy(
            logits.reshape(-1, SPEC.vocab_size), t[:, 1:].reshape(-1), reduction="none"
        )
        (ce * weights).sum().backward()
        return [p.grad.clone() for p in model.parameters()]

    w = mask[:, 1:].reshape(-1).float()
    for a, b in zip(grads_with_targets(tokens, w), grads_with_targets(changed, w), strict=True):
        assert torch.equal(a, b)  # masked: the same gradients
    ones = torch.ones_like(w)
    unmasked = zip(grads_with_targets(tokens, ones), grads_with_targets(changed, ones), strict=True)
    assert any(not torch.equal(a, b) for a, b in unmasked)  # unmasked: they would differ
