"""Honest uncertainty: the range around a plan's speed, hours and cost, and the check against the
best published figure for the same GPU, model, precision and sequence length.

The range's width comes from the evidence behind the step-time constants on that GPU
(`calibration.GPU_CALIBRATION`, `RANGE_BY_EVIDENCE`): fitted on measured FSDP rows, carried over
from another GPU, or measured on this machine. The high end of speed never passes the best
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
    tokens_per_s: float, gpu_name: str, model_name: str, precision: str, seq_len: int
) -> SpeedRange:
    """The range of tokens/s/GPU around the point estimate `tokens_per_s`."""
    cal = C.gpu_calibration(gpu_name)
    below, above = C.RANGE_BY_EVIDENCE[cal.evidence]
    key = (gpu_name.split()[0] if gpu_name else "", model_name, precision, seq_len)
    best = C.PUBLISHED_BEST.get(key)
    high = tokens_per_s * (1.0 + above)
    if best is not None:
        high = max(tokens_per_s, min(high, best[0]))
    return SpeedRange(tokens_per_s * (1.0 - below), high, cal.evidence, best)


def over_published(tokens_per_s: float, r: SpeedRange) -> str | None:
    """The warning for a point estimate above the best published figure, or None."""
    if r.best_published is None or tokens_per_s <= r.best_published[0]:
        return None
    figure, source = r.best_published
    return (
        f"predicted {tokens_per_s:,.0f} tokens/s/GPU is above the best published figure for this "
        f"GPU, model and precision ({figure:,.0f}, {source}): treat it as optimistic"
    )
