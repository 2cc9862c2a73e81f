"""`precision: auto` — when low precision (fp8, mxfp8) is worth it, and why.

The reasoning, in order: (1) the GPU must support it (mxfp8 is Blackwell-only); (2) every block
linear must convert — torchao needs both dims divisible by 16 (fp8) or by the 32-element MX block
(mxfp8), otherwise layers silently stay bf16 and the prediction would lie; (3) the model must be
large enough (≥ LOWP_MIN_PARAMS): small models spend their time in the bf16 head, attention and
memory-bound ops and are the most sensitive to fp8 numerics; (4) the predicted time to train must
drop by at least LOWP_MIN_GAIN. If bf16 does not fit at all but a low precision does, that wins
(with the reason said). Between fp8 and mxfp8 the faster wins; ties go to fp8 (tensorwise scaling
is the more proven recipe).
"""

from __future__ import annotations

from blackwell_sm.hardware import GpuSpec
from blackwell_sm.planner import calibration as C
from blackwell_sm.planner.search import SearchResult
from blackwell_sm.spec import ModelSpec, arch

DIVISOR = arch.LOWP_DIVISOR
lowp_ineligible = arch.lowp_ineligible


def choose_precision(
    model: ModelSpec, gpu: GpuSpec, results: dict[str, SearchResult]
) -> tuple[str, list[str]]:
    """Pick among per-precision search results (keys: the precisions searched); say why."""
    reasons: list[str] = []
    base = results["bf16"]
    options = []
    for p in ("fp8", "mxfp8"):
        if p not in results:
            reasons.append(f"{p}: not supported on {gpu.name}")
            continue
        why = lowp_ineligible(model, p)
        if why:
            reasons.append(f"{p}: not eligible ({why})")
            continue
        r = results[p]
        if not r.feasible:
            reasons.append(f"{p}: no configuration fits")
            continue
        options.append((r.best.hours, p, r))
    if not options:
        return "bf16", reasons
    hours, p, r = min(options, key=lambda o: o[0] * (1 - C.TIE_FRACTION) if o[1] == "fp8" else o[0])
    if not base.feasible:
        reasons.append(f"chose {p}: bf16 does not fit in memory, {p} does")
        return p, reasons
    gain = 1.0 - hours / base.best.hours
    if model.n_params < C.LOWP_MIN_PARAMS:
        reasons.append(
            f"kept bf16: {p} would be {gain:.0%} faster, but the model ({model.n_params / 1e9:.1f}B) "
            f"is below {C.LOWP_MIN_PARAMS / 1e9:.0f}B, where fp8 gains little and risks numerics"
        )
        return "bf16", reasons
    if gain < C.LOWP_MIN_GAIN:
        reasons.append(
            f"kept bf16: {p} predicted only {gain:.0%} faster (< {C.LOWP_MIN_GAIN:.0%} needed to "
            "take on low-precision numerics)"
        )
        return "bf16", reasons
    reasons.append(
        f"chose {p}: predicted {gain:.0%} faster than bf16 ({hours:.1f} h vs "
        f"{base.best.hours:.1f} h), supported on {gpu.name}, all block linears divisible by "
        f"{DIVISOR[p]}, model large enough"
    )
    return p, reasons
