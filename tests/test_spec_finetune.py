"""Fine-tuning knobs: task: finetune (lower default lr), epochs -> total_steps, no decay of norms
and biases."""

from __future__ import annotations

import pytest

from blackwell_sm.errors import SpecError
from blackwell_sm.spec import parse_spec
from blackwell_sm.spec.training import FINETUNE_LR


def _t(**training):
    return parse_spec({"model": "tiny", "training": {"seq_len": 64, **training}}).training


def test_finetune_lowers_the_default_lr_but_keeps_an_explicit_one():
    assert _t().optimizer.lr == 3e-4
    assert _t(task="finetune").optimizer.lr == FINETUNE_LR == 2e-5
    assert _t(task="finetune", optimizer={"lr": 1e-4}).optimizer.lr == 1e-4


def test_epochs_set_total_steps_and_survive_a_round_trip():
    tr = _t(
        task="finetune",
        epochs=2,
        data={"sequences": 100},
        global_batch_seqs=8,
        schedule={"warmup_steps": 5},
    )
    assert tr.total_steps == 25  # ceil(2 x 100 / 8)
    again = parse_spec({"model": "tiny", "training": tr.model_dump()}).training
    assert again.total_steps == 25 and again.optimizer.lr == FINETUNE_LR


@pytest.mark.parametrize(
    ("training", "words"),
    [
        ({"epochs": 1}, "data.sequences"),
        ({"epochs": 1, "data": {"sequences": 10}, "total_tokens": 1000}, "not both"),
        ({"epochs": 1, "data": {"sequences": 10}, "total_steps": 7}, "epochs gives"),
    ],
)
def test_epochs_conflicts_are_refused(training, words):
    with pytest.raises(SpecError) as e:
        _t(**training)
    assert words in str(e.value) and e.value.field.startswith("training")


def test_norms_and_biases_never_decay():
    torch = pytest.importorskip("torch")
    from blackwell_sm.spec import ModelSpec
    from blackwell_sm.spec.training import OptimizerSpec
    from blackwell_sm.train.model import Transformer
    from blackwell_sm.train.optim import build_optimizer

    spec = ModelSpec(
        family="qwen2", n_layers=1, d_model=32, n_heads=2, n_kv_heads=1, ffn_dim=64, vocab_size=40
    )
    model = Transformer(spec, max_seq_len=8)
    opt = build_optimizer(model, OptimizerSpec(weight_decay=0.1), torch.device("cpu"))
    names = {id(p): n for n, p in model.named_parameters()}
    no_decay = {
        names[id(p)] for g in opt.param_groups if g["weight_decay"] == 0 for p in g["params"]
    }
    assert {n for n in names.values() if n.endswith((".bias", "norm.weight"))} == no_decay
    assert any(n.endswith("q_proj.bias") for n in no_decay)


def test_the_planner_counts_the_mask_of_packed_fine_tuning_rows():
    from blackwell_sm.planner.api import make_plan

    def plan(task):
        return make_plan(
            parse_spec(
                {
                    "model": "qwen3-8b",
                    "training": {
                        "task": task,
                        "seq_len": 4096,
                        "total_steps": 100,
                        "precision": "bf16",
                        "activation_checkpointing": "selective-op",
                        "pins": {"micro_batch_size": 1, "compile": True},
                    },
                }
            )
        )

    pre, fine = plan("pretrain"), plan("finetune")
    extra = fine.memory_gib.activations - pre.memory_gib.activations
    assert extra == pytest.approx(4096**2 / 1024**3, abs=2e-3)  # one bool mask, b = 1
    assert fine.throughput.step_time_s > pre.throughput.step_time_s  # no causal half skipped
