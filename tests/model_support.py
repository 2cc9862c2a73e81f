"""Small models for CPU tests: one factory instead of a ModelSpec spelled out in every file."""

from __future__ import annotations

from typing import Any

from blackwell_sm.spec import ModelSpec

#: Two llama blocks, d_model 128, 4 heads over 2 K/V heads, SwiGLU 320, vocabulary 96.
SMALL: dict[str, Any] = dict(n_layers=2, d_model=128, n_heads=4, n_kv_heads=2, ffn_dim=320)


def small_spec(**change: Any) -> ModelSpec:
    """SMALL (vocabulary 96) with `change` made: any ModelSpec field."""
    return ModelSpec(**(SMALL | {"vocab_size": 96} | change))


def capture_sac_storages(model: Any) -> list[Any]:
    """The storages selective activation checkpointing fills in each block's forward: every
    block whose `ac_context_fn` is set is wrapped to hand its forward context's storage here."""
    storages: list[Any] = []
    for block in model.layers:
        original = block.ac_context_fn
        if original is None:
            continue

        def capture(original: Any = original) -> Any:
            fwd, recompute = original()
            storages.append(fwd.storage)
            return fwd, recompute

        block.ac_context_fn = capture
    return storages
