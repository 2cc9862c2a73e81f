"""Honest uncertainty: the range around a plan's speed, hours and cost, and the check against the
best published figure for the same GPU, model, precision and sequence length.

The range's width comes from the evidence behind the step-time constants on that GPU
(`calibration.GPU_CALIBRATION`, `RANGE_BY_EVIDENCE`): fitted on measured FSDP rows, carried over
from another GPU, measured on this machine, or calibrated by a profile of the user's own runs
(`planner/profile.py`, which records the range its fit supports). The high end of speed never passes the best
published figure; hours and cost scale inversely with speed. Training-plan searches and
MaxRuntime use the pessimistic end (`RunEstimate.pessimistic_hours`).
"""

from __future__ import annotations

from typing import NamedTuple

from blackwell_sm.planner import calibration as C


class SpeedRange(NamedTuple):
    low: float  # tokens/s/GPU
    high: float
    evidence: str
    best_published: tuple[float, str] | None  # (tokens/s/GPU, source) for this GPU/model/precision


def speed_range(
    tokens_per_s: float,
    gpu_name: str,
    model_name: str,
    precision: str,
    seq_len: int,
    constants: C.Constants | None = None,
) -> SpeedRange:
    """The range of tokens/s/GPU around the point estimate `tokens_per_s`; its width is that of
    `constants` (a calibration profile's, which may be narrower), default the GPU's evidence."""
    k = constants or C.constants_for(gpu_name)
    below, above = k.range
    key = (C.gpu_key(gpu_name), model_name, precision, seq_len)
    best = C.PUBLISHED_BEST.get(key)
    high = tokens_per_s * (1.0 + above)
    if best is not None:
        high = max(tokens_per_s, min(high, best[0]))
    return SpeedRange(tokens_per_s * (1.0 - below), high, k.evidence, best)


def over_published(tokens_per_s: float, r: SpeedRange) -> str | None:
    """The warning for a point estimate above the best published figure, or None."""
    if r.best_published is None or tokens_per_s <= r.best_published[0]:
        return None
    figure, source = r.best_published
    return (
        f"predicted {tokens_per_s:,.0f} tokens/s/GPU is above the best published figure for this "
        f"GPU, model and precision ({figure:,.0f}, {source}): treat it as optimistic"
    )
