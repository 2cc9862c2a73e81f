"""LoRA through the real loop (2 gloo processes, FSDP2) from a Hugging Face checkpoint, and its
export checked with the real `peft` on the real `transformers` model.

One module-scoped set of runs: `bsm run-local` of a LoRA spec file (the real launcher, the plan
run-local makes) for STEPS steps, and that same plan in one pair of spawned processes, stopped by
SIGTERM at step STOP then resumed to STEPS (and a context-parallel run). The tiny model is saved
in bf16, so its weights are exactly the frozen base's (bf16) and transformers' fp32 copy.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")
import yaml  # noqa: E402
from cli_support import run_local_process  # noqa: E402
from hf_support import TINY, hf_model  # noqa: E402
from train_support import free_port, local_plan, lora_jobs_worker, spawn  # noqa: E402

from blackwell_sm.local import plan_local  # noqa: E402
from blackwell_sm.spec import ModelSpec, arch, load_spec  # noqa: E402
from blackwell_sm.spec.hf import from_hf_config  # noqa: E402

pytestmark = pytest.mark.slow
NAME, SEQ, STEPS, STOP = "llama-rope-scaled", 16, 6, 3
PEFT = {
    "rank": 4,
    "alpha": 8.0,
    "target_modules": ["q_proj", "v_proj", "o_proj", "gate_proj", "down_proj"],
    "modules_to_save": ["embed_tokens"],  # trained in full beside the adapters (fp32)
    "export_merged": True,
}


def _spec() -> ModelSpec:
    return ModelSpec(name=NAME, **from_hf_config(TINY[NAME]))


def _plan(src: Path, cp_degree: int = 1):
    return local_plan(
        model=_spec(),
        steps=STEPS,
        seq_len=SEQ,
        micro_batch_size=1,
        grad_accum_steps=2,
        cp_degree=cp_degree,
        activation_checkpointing="selective-op" if cp_degree == 1 else "full",
        training={
            "task": "finetune",
            "init_from": str(src),
            "peft": PEFT,
            "optimizer": {"lr": 2e-2, "weight_decay": 0.0},
            "schedule": {"warmup_steps": 0, "decay": "constant"},
            "checkpoint": {"interval_steps": 2, "interval_minutes": None, "async_save": False},
        },
    )


def _spec_file(src: Path, path: Path) -> Path:
    """What a user writes for `_plan(src)`: the same training section, the layout pinned."""
    t = _plan(src).spec.training
    training = t.model_dump(mode="json", exclude_unset=True)
    training["pins"] = {"micro_batch_size": 1, "grad_accum_steps": 2, "compile": False}
    doc = {"model": _spec().model_dump(mode="json", exclude_unset=True), "training": training}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("lora")
    src = root / "src"
    hf_model(TINY[NAME]).to(torch.bfloat16).save_pretrained(src)
    spec_file = _spec_file(src, root / "lora.yaml")
    whole = run_local_process(spec_file, root / "whole", timeout=300)
    assert whole.returncode == 0, whole.stderr[-4000:]
    # The plan run-local made, run again in spawned workers (the stop hook needs them).
    plan_obj = plan_local(load_spec(spec_file), nproc=2)
    c = plan_obj.config
    assert (c.micro_batch_size, c.grad_accum_steps, c.activation_checkpointing) == (
        1,
        2,
        "selective-op",
    )
    plan = plan_obj.to_json()
    jobs = [
        (plan, str(root / "resumed"), STOP),
        (plan, str(root / "resumed"), None),
        (_plan(src, cp_degree=2).to_json(), str(root / "cp"), None),  # context parallel
    ]
    spawn(lora_jobs_worker, jobs, [free_port() for _ in jobs], nproc=2, tmp=root / "errors")
    return {"src": src, "whole": root / "whole", "resumed": root / "resumed", "cp": root / "cp"}


def _losses(root: Path) -> dict[int, float]:
    lines = (root / "output/data/metrics.jsonl").read_text().splitlines()
    return {r["step"]: r["loss"] for r in map(json.loads, lines) if r["kind"] == "train"}


def _safetensors(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path))


def test_loss_goes_down_and_the_resume_is_exact(runs):
    whole = _losses(runs["whole"])
    assert sorted(whole) == list(range(1, STEPS + 1))
    assert whole[STEPS] < whole[1] - 0.05
    # The resumed directory's log holds both runs' records: each step once, equal to the whole's.
    assert _losses(runs["resumed"]) == whole
    log = (runs["resumed"] / "stdout-rank0.log").read_text()  # the second run's
    assert f"resumed from step-{STOP:08d} at step {STOP}" in log
    assert "LoRA r 4 on q_proj, v_proj, o_proj, gate_proj, down_proj: " in log
    a = _safetensors(runs["whole"] / "model/adapter_model.safetensors")
    b = _safetensors(runs["resumed"] / "model/adapter_model.safetensors")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_context_parallel_trains_the_adapters_too(runs):
    """Both ranks share each sequence (cp 2, full checkpointing): V gathered from the adapted
    v_proj; the loss falls and the base stays as imported."""
    losses = _losses(runs["cp"])
    assert sorted(losses) == list(range(1, STEPS + 1)) and losses[STEPS] < losses[1] - 0.05
    src = _safetensors(runs["src"] / "model.safetensors")
    frozen = torch.load(runs["cp"] / "frozen-after.pt")
    assert all(torch.equal(t, src[arch.hf_key(n)]) for n, t in frozen.items())


def test_the_base_is_bit_identical_and_not_in_checkpoints(runs):
    from torch.distributed.checkpoint import FileSystemReader

    src = _safetensors(runs["src"] / "model.safetensors")
    for run in ("resumed",):  # spawned: the hook writes what the trained model holds
        frozen = torch.load(runs[run] / "frozen-after.pt")
        assert {arch.hf_key(n) for n in frozen} == set(src) - {"model.embed_tokens.weight"}
        for name, t in frozen.items():
            assert t.dtype == torch.bfloat16 and torch.equal(t, src[arch.hf_key(name)]), name
    ckpt = runs["whole"] / f"checkpoints/step-{STEPS:08d}"
    keys = set(FileSystemReader(str(ckpt)).read_metadata().state_dict_metadata)
    model_keys = {k for k in keys if k.startswith("model.")}
    assert "model.layers.0.self_attn.q_proj.lora_A.weight" in model_keys
    assert "model.embed_tokens.weight" in model_keys  # modules_to_save
    assert all(".lora_" in k for k in model_keys - {"model.embed_tokens.weight"})  # no base
    assert any(k.startswith("optim.state.layers.0.mlp.down_proj.lora_B") for k in keys)


def _peft_model(runs):
    base = transformers.AutoModelForCausalLM.from_pretrained(runs["src"], dtype=torch.float32)
    return peft.PeftModel.from_pretrained(base, runs["resumed"] / "model").eval()


def _ours(runs):
    from blackwell_sm.spec.peft import PeftSpec
    from blackwell_sm.train.hf_import import load_hf_weights
    from blackwell_sm.train.lora import apply_lora
    from blackwell_sm.train.model import Transformer
    from blackwell_sm.train.peft_adapter import load_adapter

    spec = _spec()
    model = apply_lora(Transformer(spec, max_seq_len=SEQ), PeftSpec(**PEFT))
    load_hf_weights(model, spec, runs["src"])
    load_adapter(model, model.lora, runs["resumed"] / "model")
    return model.float().eval()


def test_peft_loads_the_adapter_with_our_logits(runs):
    cfg = json.loads((runs["resumed"] / "model/adapter_config.json").read_text())
    assert (cfg["peft_type"], cfg["r"], cfg["base_model_name_or_path"]) == (
        "LORA",
        4,
        str(runs["src"]),
    )
    tokens = torch.randint(0, 97, (2, SEQ), generator=torch.Generator().manual_seed(5))
    theirs = _peft_model(runs)
    with torch.no_grad():
        a, b = _ours(runs)(tokens), theirs(input_ids=tokens).logits
        base = theirs.get_base_model()
        with theirs.disable_adapter():
            plain = base(input_ids=tokens).logits
    assert (b - plain).abs().max() > 1e-3  # the adapters changed the model
    adapter = _safetensors(runs["resumed"] / "model/adapter_model.safetensors")
    assert "base_model.model.model.embed_tokens.weight" in adapter
    torch.testing.assert_close(a, b, atol=1e-5 * b.abs().max().item(), rtol=1e-5)


def test_the_merged_export_equals_peft_merge(runs):
    merged = _peft_model(runs).merge_and_unload().state_dict()
    ours = _safetensors(runs["resumed"] / "model/merged/model.safetensors")
    assert set(ours) == set(merged)
    for k, v in ours.items():
        torch.testing.assert_close(v, merged[k], atol=1e-6, rtol=1e-6, msg=k)
    cfg = json.loads((runs["resumed"] / "model/merged/config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"]
