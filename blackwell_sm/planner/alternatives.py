"""Runner-ups, part of the explain step: the best candidate that differs in each knob, why it
lost, and the `bsm plan --set` flags that select it (checked by re-running the pick's rule).

Every name shown to the user is a plan config name (the names `--set` takes).
"""

from __future__ import annotations

from typing import Any

from blackwell_sm.planner import calibration as C
from blackwell_sm.planner.memory import GIB
from blackwell_sm.planner.pick import best_of
from blackwell_sm.planner.plan import Alternative, PlanConfig
from blackwell_sm.planner.search import Candidate, Context, Evaluation, Pins, usable_bytes

#: The knobs a row of alternatives[] can differ in, in the order its `set` flags list them.
KNOBS = tuple(f for f in Candidate._fields if f != "instance_count")


def to_config(c: Candidate, seq_len: int) -> PlanConfig:
    """`c` as the plan's config: its knobs carry PlanConfig's names (the count is not one)."""
    knobs = c._asdict()
    del knobs["instance_count"]
    return PlanConfig(seq_len=seq_len, **knobs)


def does_not_fit(e: Evaluation, usable_gib: float) -> str:
    """The one wording of a memory miss: against the usable limit (capacity less headroom)."""
    return f"does not fit: needs {e.memory_gib:.1f} GiB of the usable {usable_gib:.1f} GiB"


def why_not(e: Evaluation, best: Evaluation, usable_gib: float) -> str:
    if not e.fits:
        return does_not_fit(e, usable_gib)
    if not best.fits:
        return "fits, but only by changing a pinned knob"
    slower = e.hours / best.hours - 1.0
    if slower > C.TIE_FRACTION:
        return f"{slower:.0%} slower ({e.hours:.1f} h vs {best.hours:.1f} h)"
    if slower < -C.TIE_FRACTION:
        return f"{-slower:.0%} faster, but below the gain low precision must bring"
    if e.mem.total > best.mem.total * 1.001:
        return f"as fast (within {C.TIE_FRACTION:.0%}) but less free memory"
    return f"as fast (within {C.TIE_FRACTION:.0%}) but less simple"


def flag(name: str, value: object) -> str:
    return f"{name}={str(value).lower() if isinstance(value, bool) else value}"


def differs(e: Evaluation, best: Evaluation) -> list[str]:
    """`name=value` for each knob in which `e` differs from `best`."""
    a, b = e.cand, best.cand
    return [flag(n, getattr(a, n)) for n in KNOBS if getattr(a, n) != getattr(b, n)]


def _matches(c: Candidate, pins: dict[str, object]) -> bool:
    return all(getattr(c, k) == v for k, v in pins.items())


def select_flags(
    e: Evaluation, best: Evaluation, evals: list[Evaluation], pins: Pins, usable: float
) -> list[str]:
    """The `--set` flags that make `bsm plan` choose `e`: the knobs it differs in (and its
    precision when the spec leaves precision to the planner), checked by re-running the choice
    over the evaluated candidates; every knob when that does not single it out."""
    user = {k: v for k, v in pins._asdict().items() if v is not None}
    names = [n for n in KNOBS if getattr(e.cand, n) != getattr(best.cand, n)]
    if pins.precision is None and "precision" not in names:
        names.insert(0, "precision")
    chosen = {n: getattr(e.cand, n) for n in names}
    if e.fits:
        ok = [x for x in evals if x.fits and _matches(x.cand, user | chosen)]
        if ok and best_of(ok, usable)[0].cand == e.cand:
            return [flag(n, v) for n, v in chosen.items()]
    return [flag(n, getattr(e.cand, n)) for n in KNOBS]


def _rank(e: Evaluation) -> tuple[int, float]:
    """Higher is a better runner-up: fitting and fast, else needing the least memory."""
    return (1, -e.hours) if e.fits else (0, -e.mem.total)


def alternatives(
    evals: list[Evaluation],
    best: Evaluation,
    ctx: Context,
    pins: Pins,
    *,
    count_auto: bool = False,
) -> list[Alternative]:
    """The best candidate that differs in each knob, i.e. the runner-up per decision."""
    picks: dict[Candidate, Evaluation] = {}
    for knob in (
        "activation_checkpointing",
        "precision",
        "cp_degree",
        "shard_degree",
        "reshard_after_forward",
        "compile",
        "micro_batch_size",
    ):
        ref = getattr(best.cand, knob)
        by_value: dict[Any, Evaluation] = {}
        for e in evals:
            v = getattr(e.cand, knob)
            if v == ref:
                continue
            cur = by_value.get(v)
            if cur is None or _rank(e) > _rank(cur):
                by_value[v] = e
        for e in by_value.values():
            picks.setdefault(e.cand, e)
    ranked = sorted(picks.values(), key=lambda e: (not e.fits, e.hours))[:6]
    usable = usable_bytes(ctx.instance)
    out = []
    for e in ranked:
        flags = select_flags(e, best, evals, pins, usable)
        if count_auto:
            flags.append(f"compute.instance_count={e.cand.instance_count}")
        out.append(
            Alternative(
                config=to_config(e.cand, ctx.seq_len),
                instance_count=e.cand.instance_count,
                feasible=e.fits,
                memory_total_gib=round(e.memory_gib, 2),
                tokens_per_s_per_gpu=round(e.tokens_per_s_per_gpu, 1),
                hours=round(e.hours, 3),
                why_not=f"{', '.join(differs(e, best))}: {why_not(e, best, usable / GIB)}",
                set=flags,
            )
        )
    return out
