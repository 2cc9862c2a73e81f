"""Training-loop pieces in one process: schedule, triggers, precision checks, model, export."""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from train_support import async_checkpoint_worker, free_port, local_plan, spawn

from blackwell_sm.errors import CapabilityError
from blackwell_sm.hardware import H100
from blackwell_sm.spec import PRESETS, ScheduleSpec, get_preset
from blackwell_sm.spec.training import CheckpointSpec
from blackwell_sm.train.activation_checkpoint import apply_activation_checkpointing
from blackwell_sm.train.export import export_model, hf_name, load_exported
from blackwell_sm.train.model import Transformer
from blackwell_sm.train.optim import lr_at
from blackwell_sm.train.precision import check_precision
from blackwell_sm.train.triggers import EXPIRY_ENV, Triggers, deadline_from_env, parse_unix_time

REPO = Path(__file__).resolve().parents[1]


def test_lr_warmup_then_cosine_to_the_floor():
    s = ScheduleSpec(warmup_steps=10, decay="cosine", min_lr_ratio=0.1)
    lrs = [lr_at(i, peak=1.0, total_steps=110, schedule=s) for i in range(110)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert lrs[10] == pytest.approx(1.0)
    assert lrs[60] == pytest.approx(0.55)  # half-way down the cosine
    assert lr_at(110, peak=1.0, total_steps=110, schedule=s) == pytest.approx(0.1)
    assert all(a >= b for a, b in itertools.pairwise(lrs[10:]))
    lin = ScheduleSpec(warmup_steps=0, decay="linear", min_lr_ratio=0.0)
    assert lr_at(5, peak=2.0, total_steps=10, schedule=lin) == pytest.approx(1.0)


def test_capacity_expiry_accepts_seconds_and_milliseconds():
    assert parse_unix_time("1767225600") == 1767225600.0
    assert parse_unix_time("1767225600000") == 1767225600.0
    env = {EXPIRY_ENV: "1767225600000", "BSM_JOB_START_UNIX": "1767200000",
           "BSM_MAX_RUNTIME_S": "3600"}  # fmt: skip
    assert deadline_from_env(env) == (1767203600.0, "job max runtime")
    env["BSM_MAX_RUNTIME_S"] = "86400"
    assert deadline_from_env(env) == (1767225600.0, "capacity block expiry")
    assert deadline_from_env({}) is None


def test_save_triggers():
    spec = CheckpointSpec(interval_steps=5, interval_minutes=1.0, expiry_margin_s=600)
    t = Triggers(spec=spec, last_save_time=0.0)
    assert t.check(5, now_mono=1.0) == (True, False)
    assert t.check(6, now_mono=1.0) == (False, False)
    assert t.check(6, now_mono=61.0) == (True, False)  # M minutes since the last save
    import time

    t = Triggers(spec=spec, deadline=(time.time() + 300, "capacity block expiry"))
    assert t.check(1) == (True, False)  # inside the margin: one insurance save...
    t.saved()
    assert t.check(2) == (False, False)  # ...not one every step
    t.stop_requested = True
    assert t.check(3) == (True, True)


def test_fp8_and_mxfp8_are_refused_on_cpu_with_the_reason():
    with pytest.raises(CapabilityError, match=r"fp8 training but this worker runs on cpu.*8\.9"):
        check_precision("fp8", torch.device("cpu"))
    with pytest.raises(CapabilityError, match=r"mxfp8.*10\.0.*Blackwell"):
        check_precision("mxfp8", torch.device("cpu"))
    check_precision("bf16", torch.device("cpu"))


def test_an_fp8_plan_fails_before_step_0(tmp_path):
    plan = local_plan(nproc=1, precision="fp8", gpu=H100)  # an H100 plan, run on a CPU worker
    (tmp_path / "plan.json").write_text(plan.to_json())
    env = os.environ | {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "BSM_DEVICE": "cpu",
                        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}  # fmt: skip
    r = subprocess.run(
        [sys.executable, "-m", "blackwell_sm.train.main", "--plan", str(tmp_path / "plan.json"),
         "--opt-ml", str(tmp_path / "ml")],
        env=env, capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert r.returncode != 0
    assert "fp8 training but this worker runs on cpu" in r.stderr
    assert "refusing to fall back" in r.stderr
    assert "[bsm-step]" not in r.stdout
    assert not (tmp_path / "ml/checkpoints").exists()


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_parameter_count_matches_the_spec(name):
    spec = get_preset(name)
    with torch.device("meta"):
        model = Transformer(spec)
    assert sum(p.numel() for p in model.parameters()) == spec.n_params


def test_checkpointing_modes_give_the_same_gradients():
    spec = get_preset("tiny")
    tokens = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    grads = {}
    for mode in ("none", "selective", "full"):
        model = Transformer(spec, max_seq_len=16)
        model.init_weights(0)
        apply_activation_checkpointing(model, mode)
        model(tokens).float().logsumexp(-1).mean().backward()
        grads[mode] = [p.grad for p in model.parameters()]
    for mode in ("selective", "full"):
        for a, b in zip(grads["none"], grads[mode], strict=True):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


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
    assert len(written) == len(files) + 2
    back = Transformer(spec, max_seq_len=32)
    load_exported(back, tmp_path)
    hf = LlamaForCausalLM.from_pretrained(tmp_path, torch_dtype=torch.float32).eval()
    tokens = torch.randint(0, 256, (1, 32), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.equal(model(tokens), back(tokens))
        torch.testing.assert_close(model(tokens), hf(tokens).logits, atol=1e-4, rtol=1e-4)


def test_container_side_never_imports_aws_libraries():
    code = (
        "import sys, pkgutil, importlib, blackwell_sm.train as t\n"
        "for m in pkgutil.iter_modules(t.__path__):\n"
        "    importlib.import_module('blackwell_sm.train.' + m.name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('boto3', 'botocore', 'sagemaker'))\n"
        "print(bad)\n"
    )  # fmt: skip
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                       timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"


def test_initial_loss_is_chance_level():
    model = Transformer(get_preset("tiny"), max_seq_len=32)
    model.init_weights(0)
    tokens = torch.randint(0, 256, (4, 33), generator=torch.Generator().manual_seed(0))
    logits = model(tokens[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), tokens[:, 1:].reshape(-1))
    assert loss.item() == pytest.approx(math.log(256), abs=0.1)


def test_async_save_marks_complete_only_after_the_write(tmp_path):
    spawn(async_checkpoint_worker, str(tmp_path / "ck"), tmp=tmp_path / "errors")


def test_prune_keeps_the_last_complete_and_find_latest_skips_unmarked(tmp_path):
    from blackwell_sm.train.checkpoint import MARKER, Checkpointer, find_latest
    from blackwell_sm.train.distributed import Env

    for step, complete in [(2, True), (4, False), (6, True), (8, True), (9, False)]:
        d = tmp_path / f"step-{step:08d}"
        d.mkdir()
        if complete:
            (d / MARKER).write_text(json.dumps({"step": step}))
    (tmp_path / ".step-00000010.tmp").mkdir()
    env = Env(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))
    Checkpointer(tmp_path, env, keep_last=2, async_save=False)._prune()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "step-00000006", "step-00000008", "step-00000009",
    ]  # fmt: skip
    logged: list[str] = []
    assert find_latest(tmp_path, log=logged.append) == (8, tmp_path / "step-00000008")
    assert logged == ["[bsm] skipping incomplete checkpoint step-00000009 (no COMPLETE marker)"]


@pytest.mark.parametrize("precision", ["fp8", "mxfp8"])
def test_low_precision_conversion_skips_the_head_and_odd_dims(precision):
    """The conversion itself runs on CPU (meta device); only training needs the GPU."""
    from blackwell_sm.train.precision import convert_precision

    spec = get_preset("tiny").model_copy(update={"ffn_dim": 200})  # 200 % 16 != 0
    with torch.device("meta"):
        model = Transformer(spec, max_seq_len=32)
    assert convert_precision(model, precision) == 4 * spec.n_layers  # q, k, v, o per block
    converted = {
        n for n, m in model.named_modules()
        if isinstance(m, torch.nn.Linear)
        and (type(m) is not torch.nn.Linear or type(m.weight) is not torch.nn.Parameter)
    }  # fmt: skip
    assert converted == {f"layers.{i}.self_attn.{p}_proj" for i in range(2) for p in "qkvo"}


def test_run_identity_names_what_differs():
    from blackwell_sm.train.checkpoint import other_run, run_identity

    mine = run_identity(local_plan())
    assert other_run({"step": 4}, mine) is None  # a marker from before run identities
    assert other_run({"run": mine}, mine) is None
    assert run_identity(local_plan(training={"optimizer": {"lr": 1e-4}})) == mine  # may change
    theirs = run_identity(local_plan(training={"seed": 5}))
    assert other_run({"run": theirs}, mine) == "seed: 5 there, 0 in this plan"


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
