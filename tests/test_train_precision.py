"""train/precision.py: capability checks and the low-precision conversion."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
from cli_support import capture
from train_support import free_port, local_plan

from blackwell_sm.errors import CapabilityError
from blackwell_sm.hardware import H100
from blackwell_sm.spec import get_preset
from blackwell_sm.train.model import Transformer
from blackwell_sm.train.precision import check_precision

REPO = Path(__file__).resolve().parents[1]


def test_fp8_and_mxfp8_are_refused_on_cpu_with_the_reason():
    with pytest.raises(CapabilityError, match=r"fp8 training but this worker runs on cpu.*8\.9"):
        check_precision("fp8", torch.device("cpu"))
    with pytest.raises(CapabilityError, match=r"mxfp8.*10\.0.*Blackwell"):
        check_precision("mxfp8", torch.device("cpu"))
    check_precision("bf16", torch.device("cpu"))


def test_an_fp8_plan_fails_before_step_0(tmp_path):
    plan = local_plan(nproc=1, precision="fp8", gpu=H100)  # an H100 plan, run on a CPU worker
    (tmp_path / "plan.json").write_text(plan.to_json())
    env = os.environ | {
        "RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_RANK": "0",
        "BSM_DEVICE": "cpu",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
    }
    main = [sys.executable, "-m", "blackwell_sm.train.main", "--plan", tmp_path / "plan.json"]
    r = capture([*main, "--opt-ml", tmp_path / "ml"], env=env, timeout=120)
    assert r.returncode != 0
    assert "fp8 training but this worker runs on cpu" in r.stderr
    assert "refusing to fall back" in r.stderr
    assert "[bsm-step]" not in r.stdout
    assert not (tmp_path / "ml/checkpoints").exists()


@pytest.mark.parametrize("precision", ["fp8", "mxfp8"])
def test_low_precision_conversion_skips_the_head_and_odd_dims(precision):
    """The conversion itself runs on CPU (meta device); only training needs the GPU."""
    from blackwell_sm.train.precision import convert_precision

    spec = get_preset("tiny").model_copy(update={"ffn_dim": 200})  # 200 % 16 != 0
    with torch.device("meta"):
        model = Transformer(spec, max_seq_len=32)
    assert convert_precision(model, precision) == 4 * spec.n_layers  # q, k, v, o per block
    converted = {
        n
        for n, m in model.named_modules()
        if isinstance(m, torch.nn.Linear)
        and (type(m) is not torch.nn.Linear or type(m.weight) is not torch.nn.Parameter)
    }
    assert converted == {f"layers.{i}.self_attn.{p}_proj" for i in range(2) for p in "qkvo"}
