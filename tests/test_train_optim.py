"""train/optim.py: the learning-rate schedule and grad-norm clipping."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import torch

from blackwell_sm.spec import ScheduleSpec
from blackwell_sm.train.optim import lr_at

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


def test_grad_norm_stays_on_the_device_and_clips():
    """The norm comes back as a tensor (no host sync until a logged step reads it), equal to the
    global 2-norm of the gradients, which are scaled to `max_norm`."""
    from blackwell_sm.train.optim import clip_grad_norm

    model = torch.nn.Linear(3, 2, bias=False)
    model.weight.grad = torch.full((2, 3), 2.0)  # norm sqrt(6 * 4)
    norm = clip_grad_norm(model, 1.0)
    assert isinstance(norm, torch.Tensor) and norm.ndim == 0
    assert math.isclose(float(norm), math.sqrt(24.0), rel_tol=1e-6)
    assert math.isclose(float(model.weight.grad.norm()), 1.0, rel_tol=1e-4)
