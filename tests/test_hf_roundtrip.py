"""Open models in and out through the real training loop (2 gloo processes, FSDP-sharded).

For each family, a tiny model built by transformers with random weights is saved as safetensors
(one family sharded with an index); the loop starts from it (`training.init_from`, each rank
reading only its slices), trains, and exports. Then:
- with lr 1e-12 and one step, the exported weights equal the imported ones (within 1e-6): the
  import put every slice in its place and the export gives it back;
- after a few real steps, the export reloads in transformers as the same class, with logits equal
  to ours on the same batch (fp32);
- a checkpoint that does not match the model is refused before step 0, with the names.
The fp32 logits of the imported model equal the transformers model's: tests/test_arch.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from hf_support import TINY, save_hf_model, save_tiny_tokenizer  # noqa: E402
from train_support import (  # noqa: E402
    free_port,
    local_plan,
    spawn,
    train_many_worker,
)

from blackwell_sm.errors import BsmError  # noqa: E402
from blackwell_sm.spec import ModelSpec, arch  # noqa: E402
from blackwell_sm.spec.hf import from_hf_config  # noqa: E402

pytestmark = pytest.mark.slow
SEQ = 16


def _spec(name: str) -> ModelSpec:
    return ModelSpec(name=name, **from_hf_config(TINY[name]))


def _plan(spec: ModelSpec, folder: Path, *, steps: int, lr: float):
    return local_plan(
        model=spec,
        steps=steps,
        seq_len=SEQ,
        micro_batch_size=1,
        grad_accum_steps=1,
        training={
            "init_from": str(folder),
            "optimizer": {"lr": lr, "weight_decay": 0.1},
            "schedule": {"warmup_steps": 0, "decay": "constant"},
            "checkpoint": {"interval_steps": None, "interval_minutes": None, "async_save": False},
        },
    )


def _hf_state(folder: Path) -> dict:
    from safetensors.torch import load_file

    state = {}
    for f in folder.glob("*.safetensors"):
        state.update(load_file(str(f)))
    return state


ROUND_TRIP = ["llama-rope-scaled", "mistral", "qwen2", "qwen3"]


@pytest.fixture(scope="module")
def round_trips(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """Each family imported, trained one step at lr 1e-12 and exported: name -> (src, opt_ml);
    and "trained": qwen3 trained 2 real steps, then run on to step 3 from its own checkpoint.
    All runs share one pair of processes (one after the other)."""
    root = tmp_path_factory.mktemp("roundtrip")
    jobs, out = [], {}
    for name in ROUND_TRIP:
        src = root / name / "src"
        save_hf_model(TINY[name], src, shard=name == "qwen3")
        plan = _plan(_spec(name), src, steps=1, lr=1e-12)
        jobs.append((plan.to_json(), str(root / name / "opt_ml")))
        out[name] = (src, root / name / "opt_ml")
    src, opt_ml = root / "trained" / "src", root / "trained" / "opt_ml"
    save_hf_model(TINY["qwen3"], src)
    save_tiny_tokenizer(src)
    for steps in (2, 3):
        jobs.append((_plan(_spec("qwen3"), src, steps=steps, lr=1e-2).to_json(), str(opt_ml)))
    out["trained"] = (src, opt_ml)
    ports = [free_port() for _ in jobs]
    spawn(train_many_worker, jobs, ports, nproc=2, tmp=root / "errors")
    return out


@pytest.mark.parametrize("name", ROUND_TRIP)
def test_one_step_at_lr_1e_12_exports_the_imported_weights(round_trips, name):
    spec = _spec(name)
    src, out = round_trips[name]
    if name == "qwen3":
        assert (src / "model.safetensors.index.json").exists()  # sharded input
    log = (out / "stdout-rank0.log").read_text()
    assert f"initialised {len(arch.param_table(spec))} tensors from {src}" in log
    cfg = json.loads((out / "model" / "config.json").read_text())
    assert cfg["torch_dtype"] == "float32"  # export_dtype auto: fp32 below 1B parameters
    before, after = _hf_state(src), _hf_state(out / "model")
    keys = {arch.hf_key(n) for n in arch.param_table(spec)}
    assert set(after) == keys
    for k in keys:
        torch.testing.assert_close(after[k], before[k], atol=1e-6, rtol=0, msg=k)


def _same_logits(spec, model_dir: Path, hf_class: str, seed: int) -> None:
    """The export loads in transformers as `hf_class` and gives our model's logits."""
    from blackwell_sm.train.export import load_exported
    from blackwell_sm.train.model import Transformer

    hf = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    assert type(hf).__name__ == hf_class
    ours = Transformer(spec, max_seq_len=SEQ)
    load_exported(ours, model_dir)
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, spec.vocab_size, (2, SEQ), generator=gen)
    with torch.no_grad():
        a, b = ours.eval()(tokens), hf.eval()(tokens).logits
    torch.testing.assert_close(a, b, atol=1e-5 * b.abs().max().item(), rtol=1e-5)


@pytest.mark.parametrize("name", ROUND_TRIP)
def test_export_reloads_as_the_same_class_with_our_logits(round_trips, name):

    spec = _spec(name)
    _, out = round_trips[name]
    cfg = json.loads((out / "model" / "config.json").read_text())
    assert cfg["architectures"] == [arch.FAMILIES[spec.family].hf_class]
    _same_logits(spec, out / "model", arch.FAMILIES[spec.family].hf_class, seed=3)


def test_trained_then_resumed_a_newer_checkpoint_wins_over_init_from(round_trips):
    """qwen3 (q/k norms, head_dim != d_model / n_heads) trained from the import, resumed from its
    own checkpoint at step 2 (not from init_from), exported: reloads as Qwen3 with our logits."""

    spec = _spec("qwen3")
    src, out = round_trips["trained"]
    log = (out / "stdout-rank0.log").read_text()  # the second run's
    assert "resumed from step-00000002 at step 2 (newer than init_from" in log
    assert "initialised" not in log
    moved = _hf_state(out / "model")["model.norm.weight"] - _hf_state(src)["model.norm.weight"]
    assert moved.abs().max() > 1e-4  # it trained
    _same_logits(spec, out / "model", "Qwen3ForCausalLM", seed=4)
    # the same tokenizer and generation settings leave with it
    tok_in = transformers.AutoTokenizer.from_pretrained(src)
    tok_out = transformers.AutoTokenizer.from_pretrained(out / "model")
    chat = [{"role": "user", "content": "hello cat"}, {"role": "assistant", "content": "hi"}]
    assert tok_out.apply_chat_template(chat) == tok_in.apply_chat_template(chat)
    gen = transformers.GenerationConfig.from_pretrained(out / "model")
    assert (gen.bos_token_id, gen.eos_token_id) == (5, 6)


def test_a_mismatched_checkpoint_is_refused_with_names(tmp_path):
    from blackwell_sm.train.hf_import import check_checkpoint

    spec = _spec("qwen3")
    src = tmp_path / "src"
    save_hf_model(TINY["llama-rope-scaled"], src)  # another family and shape
    with pytest.raises(BsmError) as e:
        check_checkpoint(spec, src)
    msg = str(e.value)
    assert e.value.field == "training.init_from"
    assert "missing" in msg and "self_attn.q_norm.weight" in msg
    assert "wrong shape" in msg and "model.embed_tokens.weight [97, 64] (model: [101, 64])" in msg
