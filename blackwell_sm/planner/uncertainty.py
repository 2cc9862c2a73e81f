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

from typing import TYPE_CHECKING, NamedTuple

from blackwell_sm.planner import calibration as C

if TYPE_CHECKING:
    from blackwell_sm.hardware import GpuSpec
    from blackwell_sm.spec.model import ModelSpec


class SpeedRange(NamedTuple):
    low: float  # tokens/s/GPU
    high: float
    evidence: str
    best_published: tuple[float, str] | None  # (tokens/s/GPU, source), see published_ceiling


def published_ceiling(
    gpu: GpuSpec, model: ModelSpec, precision: str, seq_len: int
) -> tuple[float, str] | None:
    """The best published tokens/s/GPU that bounds a plan of `model` at `precision` and `seq_len`
    on `gpu`, with its source; None when nothing published applies.

    A published row is a rate of model FLOPs, so it is converted to this plan's FLOPs per token:
    the same model at another sequence length is bounded too (a 4k plan may not claim more
    FLOP/s than the 8k record). The row at this precision applies; without one, the best row at a
    precision whose peak is at least this one's does (bf16 never beats the fp8 record).
    """
    key = C.gpu_key(gpu.name)
    rows = [(k, v) for k, v in C.PUBLISHED_BEST.items() if k[0] == key and k[1] == model.name]
    same = [(k, v) for k, v in rows if k[2] == precision]
    if not same and precision in gpu.peak_tflops:
        peak = gpu.peak_tflops[precision]
        same = [(k, v) for k, v in rows if gpu.peak_tflops.get(k[2], 0.0) >= peak]
    if not same:
        return None
    (_, _, prec, seq), (figure, source) = max(
        same, key=lambda kv: kv[1][0] * model.flops_per_token(kv[0][3])
    )
    tokens = figure * model.flops_per_token(seq) / model.flops_per_token(seq_len)
    if (prec, seq) != (precision, seq_len):
        source = f"{source}: {figure:,.0f} at {prec}, seq {seq}, converted by model FLOPs per token"
    return tokens, source


def speed_range(
    tokens_per_s: float,
    gpu: GpuSpec,
    model: ModelSpec,
    precision: str,
    seq_len: int,
    constants: C.Constants | None = None,
) -> SpeedRange:
    """The range of tokens/s/GPU around the point estimate `tokens_per_s`; its width is that of
    `constants` (a calibration profile's, which may be narrower), default the GPU's evidence."""
    k = constants or C.constants_for(gpu.name)
    below, above = k.range
    best = published_ceiling(gpu, model, precision, seq_len)
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
