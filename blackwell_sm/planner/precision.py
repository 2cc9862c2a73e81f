"""`precision: auto` — when low precision (fp8, mxfp8) is worth it, and why.

The reasoning, in order: (1) the GPU must support it (mxfp8 is Blackwell-only); (2) every block
linear must convert — torchao needs both dims divisible by 16 (fp8) or by the 32-element MX block
(mxfp8), otherwise layers silently stay bf16 and the prediction would lie; (3) the model must be
large enough (≥ LOWP_MIN_PARAMS): small models spend their time in the bf16 head, attention and
memory-bound ops and are the most sensitive to fp8 numerics; (4) the run must not be a fine-tune
(`task: finetune`: a trained checkpoint's small updates are the most sensitive to fp8 numerics;
`precision: fp8` asks for it); (5) the predicted time to train must drop by at least
LOWP_MIN_GAIN. If bf16 does not fit at all but a low precision does, that wins (with the reason
said). Between fp8 and mxfp8 the faster wins; ties go to fp8 (tensorwise scaling
is the more proven recipe).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, get_args

from blackwell_sm.hardware import GpuSpec
from blackwell_sm.planner import calibration as C
from blackwell_sm.planner.notes import Note, reason
from blackwell_sm.spec import ModelSpec, Precision, arch

if TYPE_CHECKING:
    from blackwell_sm.planner.search import Evaluation

#: The precisions the planner searches, simplest first (the spec's `Precision`): the planner's
#: one home for which precisions exist, which are low and how they rank in a tie.
PRECISIONS: tuple[str, ...] = get_args(Precision)
LOW_PRECISIONS: tuple[str, ...] = tuple(p for p in PRECISIONS if p != "bf16")
RANK: dict[str, int] = {p: i for i, p in enumerate(PRECISIONS)}
#: Between low precisions the faster wins; a tie goes to this one (the more proven recipe).
PREFERRED_LOW = "fp8"
DIVISOR = arch.LOWP_DIVISOR
lowp_ineligible = arch.lowp_ineligible


def is_low(precision: str) -> bool:
    """Whether `precision` is a low precision (fp8 or mxfp8: torchao's linears, a GPU's fp8)."""
    return precision in LOW_PRECISIONS


def bf16_unless_it_cannot_fit(model: ModelSpec, finetune: bool = False) -> bool:
    """Whether `choose_precision` keeps bf16 whenever bf16 fits, however much faster a low
    precision would be (models below LOWP_MIN_PARAMS, and fine-tunes)."""
    return finetune or model.n_params < C.LOWP_MIN_PARAMS


def _skipped(text: str) -> Note:
    return reason("precision_skipped", f"precision: {text}")


def choose_precision(
    model: ModelSpec, gpu: GpuSpec, bests: dict[str, Evaluation | None], finetune: bool = False
) -> tuple[str, list[Note]]:
    """Pick among the best configuration of each precision searched on one instance count (None:
    nothing fits at that precision; `finetune`: the spec's `task: finetune`); the notes say
    why."""
    notes: list[Note] = []
    base = bests["bf16"]
    options = []
    for p in LOW_PRECISIONS:
        if p not in bests:
            notes.append(_skipped(f"{p}: not supported on {gpu.name}"))
            continue
        why = lowp_ineligible(model, p)
        if why:
            notes.append(_skipped(f"{p}: not eligible ({why})"))
            continue
        best = bests[p]
        if best is None:
            notes.append(_skipped(f"{p}: no configuration fits"))
            continue
        options.append((best.hours, p))
    if not options:
        return "bf16", notes
    hours, p = min(
        options, key=lambda o: o[0] * (1 - C.TIE_FRACTION) if o[1] == PREFERRED_LOW else o[0]
    )
    if base is None:
        notes.append(
            reason(
                "precision_chosen",
                f"precision: chose {p}: bf16 does not fit in memory, {p} does"
                + (" (a fine-tune: compare its loss with a bf16 run's)" if finetune else ""),
            )
        )
        return p, notes
    gain = 1.0 - hours / base.hours
    if model.n_params < C.LOWP_MIN_PARAMS:
        text = (
            f"precision: kept bf16: {p} would be {gain:.0%} faster, but the model "
            f"({model.n_params / 1e9:.1f}B) is below {C.LOWP_MIN_PARAMS / 1e9:.0f}B, where fp8 "
            "gains little and risks numerics"
        )
        notes.append(reason("precision_kept_bf16", text))
        return "bf16", notes
    if finetune:
        text = (
            f"precision: kept bf16: {p} would be {gain:.0%} faster, but this is a fine-tune "
            "(training.task finetune), where a trained checkpoint's small updates are the most "
            f"sensitive to low-precision numerics; set training.precision: {p} to take it"
        )
        notes.append(reason("precision_kept_bf16", text))
        return "bf16", notes
    if gain < C.LOWP_MIN_GAIN:
        text = (
            f"precision: kept bf16: {p} predicted only {gain:.0%} faster (< "
            f"{C.LOWP_MIN_GAIN:.0%} needed to take on low-precision numerics)"
        )
        notes.append(reason("precision_kept_bf16", text))
        return "bf16", notes
    text = (
        f"precision: chose {p}: predicted {gain:.0%} faster than bf16 ({hours:.1f} h vs "
        f"{base.hours:.1f} h), supported on {gpu.name}, all block linears divisible by "
        f"{DIVISOR[p]}, model large enough"
    )
    notes.append(reason("precision_chosen", text))
    return p, notes
