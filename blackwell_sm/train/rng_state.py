"""Each rank's random number generators' states: saved in every checkpoint, restored on resume."""

from __future__ import annotations

from typing import Any

import torch


def rng_state() -> dict[str, Any]:
    """This rank's random states (torch, Python, NumPy, CUDA when in use), saved with a checkpoint."""
    import random

    import numpy as np

    state = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": np.random.get_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what `rng_state` returned, so a resumed run draws what the uninterrupted one would."""
    import random

    import numpy as np

    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
