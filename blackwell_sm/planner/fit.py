"""Least-squares fit of the planner's constants to measured rows, per GPU kind (`bsm calibrate`).

A row is one measured run: its configuration (a search `Context` and `Candidate`, predicted by
the same `search.evaluate` as every plan) with its measured tokens/s/GPU and, when known, its peak
memory. The residual of a row is log(predicted / measured) for each figure it has. The fit is SciPy's
bounded `least_squares` (trust-region reflective, finite differences) on the constants of
`calibration.FITTABLE` that the rows can identify. SciPy is the `[calibrate]` extra, imported only
when a fit runs (`require_scipy`): 0.4 s to import, and the client otherwise needs no numpy.

Identifiability: a constant is fitted only when some row's prediction depends on it (its
Jacobian column, scaled to a relative change, is not ~0) and that dependence is not already
explained by the constants chosen before it (the part of its column outside their span is at
least `MIN_INDEPENDENCE` of its norm), and at most one constant per figure less one (one from
a single figure): with as many constants as figures any rows fit exactly and prove nothing.
The rest keep their defaults and are reported with the reason.

Exact by construction: a figure (speed, memory) with no more measurements than fitted constants
that move it is matched by any fit; its error after the fit proves nothing, and the fit says so
(`GpuFit.exact`) instead of reporting it as a 0 % error.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any, NamedTuple

from blackwell_sm.planner import calibration as C
from blackwell_sm.planner.memory import GIB
from blackwell_sm.planner.search import Candidate, Context, evaluate

#: A constant whose direction has less than this fraction of its norm outside the span of the
#: constants already chosen is not separable from them by these rows (kept at its default).
MIN_INDEPENDENCE = 0.15
#: A constant whose scaled Jacobian column is below this (log-residual per unit relative change,
#: root-sum-square over the rows) moves no prediction: the rows do not see it.
MIN_SENSITIVITY = 1e-3
#: Bounds of each constant while fitting.
BOUNDS: dict[str, tuple[float, float]] = {
    "matmul_efficiency": (0.01, 2.0),
    "attention_efficiency": (0.01, 2.0),
    "comm_overlap": (0.0, 1.0),
    "nvlink_efficiency": (0.01, 2.0),
    "efa_efficiency": (0.01, 2.0),
    "hbm_efficiency": (0.01, 2.0),
    "fragmentation": (0.0, 1.0),
}
#: Order in which constants are offered to the identifiability check: the dominant terms first,
#: so a constant that is confounded with a larger one is the one kept.
PRIORITY = (
    "matmul_efficiency",
    "fragmentation",
    "attention_efficiency",
    "comm_overlap",
    "efa_efficiency",
    "nvlink_efficiency",
    "hbm_efficiency",
)
#: Narrowest speed range a calibrated profile records (fraction below and above).
MIN_RANGE = 0.05


class Row(NamedTuple):
    """One measured run, ready to predict."""

    id: str
    ctx: Context
    cand: Candidate
    tokens_per_s_per_gpu: float | None
    memory_gib: float | None = None
    memory_kind: str = "total"  # "max_reserved": compare with the allocator-visible part
    source: str = ""

    @property
    def gpu(self) -> str:
        return C.gpu_key(self.ctx.instance.gpu.name)


class Prediction(NamedTuple):
    tokens_per_s_per_gpu: float
    memory_gib: float
    step_time_s: float


def predict(row: Row, k: C.Constants | None = None) -> Prediction:
    """The planner's prediction of `row` with the constants `k` (default: calibration.py's)."""
    e = evaluate(row.ctx._replace(constants=k), row.cand)
    mem = e.mem.reserved if row.memory_kind == "max_reserved" else e.mem.total
    return Prediction(e.tokens_per_s_per_gpu, mem / GIB, e.time.step_s)


class RowError(NamedTuple):
    """Relative errors (predicted / measured - 1) of one row, before and after the fit."""

    id: str
    speed_before: float | None
    speed_after: float | None
    memory_before: float | None
    memory_after: float | None


def row_errors(row: Row, k: C.Constants | None) -> tuple[float | None, float | None]:
    p = predict(row, k)
    s = (
        None
        if not row.tokens_per_s_per_gpu
        else p.tokens_per_s_per_gpu / row.tokens_per_s_per_gpu - 1
    )
    m = None if not row.memory_gib else p.memory_gib / row.memory_gib - 1
    return s, m


class GpuFit(NamedTuple):
    """The fit on one GPU kind."""

    gpu: str
    base: C.Constants
    constants: C.Constants
    fitted: dict[str, tuple[float, float]]  # name -> (default, fitted)
    kept: dict[str, str]  # name -> why it kept its default
    errors: list[RowError]
    speed_range: tuple[float, float] | None
    #: The figures ("speed", "memory") with no more measurements than fitted constants moving
    #: them: their errors after the fit are 0 by construction and validate nothing.
    exact: tuple[str, ...] = ()

    def median_abs(self, attr: str) -> float | None:
        vals = [abs(getattr(e, attr)) for e in self.errors if getattr(e, attr) is not None]
        return statistics.median(vals) if vals else None


# ---------------------------------------------------------------------------------------------
# Parameters: names like "matmul_efficiency.bf16+compile" or "comm_overlap"
# ---------------------------------------------------------------------------------------------


def _mm_key(name: str) -> tuple[str, bool]:
    from blackwell_sm.planner.profile import parse_matmul_key

    return parse_matmul_key(name.split(".", 1)[1])


def get_param(k: C.Constants, name: str) -> float:
    if name.startswith("matmul_efficiency."):
        return k.matmul_efficiency[_mm_key(name)]
    return float(getattr(k, name))


def set_params(k: C.Constants, names: Sequence[str], values: Sequence[float]) -> C.Constants:
    mm = dict(k.matmul_efficiency)
    upd: dict[str, Any] = {}  # Constants fields by name
    for name, v in zip(names, values, strict=True):
        if name.startswith("matmul_efficiency."):
            mm[_mm_key(name)] = v
        else:
            upd[name] = v
    return k._replace(matmul_efficiency=mm, **upd)


def _bounds(name: str) -> tuple[float, float]:
    return BOUNDS[name.split(".", 1)[0]]


def candidate_params(rows: Sequence[Row]) -> list[str]:
    """Every constant the rows could depend on, in PRIORITY order (matmul keys of their
    precisions and compile settings, and bf16 for the output head)."""
    from blackwell_sm.planner.profile import matmul_key

    # The keys the rows' linears run at first (most rows first), then bf16 keys used only by the
    # output head of low-precision rows: a head-only key is the one that yields when confounded.
    own: dict[tuple[str, bool], int] = {}
    for r in rows:
        key = (r.cand.precision, r.cand.compile)
        own[key] = own.get(key, 0) + 1
    keys = sorted(own, key=lambda pk: (-own[pk], pk))
    keys += [
        ("bf16", c)
        for c in (False, True)
        if any(r.cand.compile == c for r in rows) and ("bf16", c) not in own
    ]
    names: list[str] = []
    for group in PRIORITY:
        if group == "matmul_efficiency":
            names.extend(f"matmul_efficiency.{matmul_key(*key)}" for key in keys)
        else:
            names.append(group)
    return names


# ---------------------------------------------------------------------------------------------
# Residuals, Jacobian, a small linear solver
# ---------------------------------------------------------------------------------------------


def figure_kinds(rows: Sequence[Row]) -> list[str]:
    """ "speed" or "memory" for each entry of `residuals(rows, ...)`, in the same order."""
    out: list[str] = []
    for r in rows:
        out += ["speed"] * bool(r.tokens_per_s_per_gpu) + ["memory"] * bool(r.memory_gib)
    return out


def exact_figures(
    rows: Sequence[Row], names: Sequence[str], cols: Sequence[Sequence[float]]
) -> tuple[tuple[str, ...], int]:
    """(the figures the fitted `names` match by construction, the speed figures left over after
    the constants that move speed: the residuals' degrees of freedom)."""
    kinds = figure_kinds(rows)
    exact: list[str] = []
    speed_dof = 0
    for kind in ("speed", "memory"):
        n = kinds.count(kind)
        moving = sum(
            1
            for col in cols
            if math.sqrt(sum(v * v for v, k in zip(col, kinds, strict=True) if k == kind))
            >= MIN_SENSITIVITY
        )
        if n and moving >= n:
            exact.append(kind)
        if kind == "speed":
            speed_dof = n - moving
    return tuple(exact), speed_dof


def residuals(rows: Sequence[Row], k: C.Constants) -> list[float]:
    """log(predicted / measured) of every measured figure of every row."""
    out: list[float] = []
    for r in rows:
        p = predict(r, k)
        if r.tokens_per_s_per_gpu:
            out.append(math.log(p.tokens_per_s_per_gpu / r.tokens_per_s_per_gpu))
        if r.memory_gib:
            out.append(math.log(p.memory_gib / r.memory_gib))
    return out


def jacobian(
    rows: Sequence[Row], k: C.Constants, names: Sequence[str], r0: list[float]
) -> list[list[float]]:
    """d residual / d (relative change of each constant): columns scaled by the value, so that
    constants of different sizes compare (one-sided differences, inward at a bound)."""
    cols: list[list[float]] = []
    for name in names:
        x = get_param(k, name)
        hi = _bounds(name)[1]
        h = max(abs(x), 0.01) * 1e-4
        if x + h > hi:
            h = -h
        r1 = residuals(rows, set_params(k, [name], [x + h]))
        scale = max(abs(x), 0.01)
        cols.append([(a - b) / h * scale for a, b in zip(r1, r0, strict=True)])
    return cols


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def identifiable(
    names: Sequence[str], cols: Sequence[Sequence[float]], n_figures: int
) -> tuple[list[str], dict[str, str]]:
    """(the constants the rows identify, {constant: why not} for the others): greedy in the order
    given, Gram-Schmidt against the columns already chosen."""
    chosen: list[str] = []
    basis: list[list[float]] = []
    why: dict[str, str] = {}
    for name, col in zip(names, cols, strict=True):
        norm = math.sqrt(_dot(col, col))
        if norm < MIN_SENSITIVITY:
            why[name] = "no measured row depends on it"
            continue
        rest = list(col)
        for q in basis:
            c = _dot(rest, q)
            rest = [a - c * b for a, b in zip(rest, q, strict=True)]
        left = math.sqrt(_dot(rest, rest))
        if left < MIN_INDEPENDENCE * norm:
            shown = ", ".join(chosen[:2]) + (f" (+{len(chosen) - 2})" if len(chosen) > 2 else "")
            why[name] = f"not separable from {shown} by these rows"
            continue
        if len(chosen) >= max(1, n_figures - 1):
            why[name] = f"the {n_figures} measured figures support no more constants"
            continue
        chosen.append(name)
        basis.append([a / left for a in rest])
    return chosen, why


def require_scipy() -> None:
    """SciPy is there, or a BsmError that says how to install it (called before any source is
    read, so nothing is fetched for a fit that cannot run)."""
    try:
        import scipy.optimize  # noqa: F401
    except ImportError:
        from blackwell_sm.errors import MissingExtraError

        raise MissingExtraError("scipy", "`bsm calibrate` (its least-squares solver)") from None


def least_squares(rows: Sequence[Row], k: C.Constants, names: Sequence[str]) -> C.Constants:
    """`k` with `names` fitted: SciPy's bounded least squares on the log residuals, each
    constant scaled by its size (so that efficiencies near 0.5 and fragmentation near 0.05 move
    alike), from `k`'s values (held inside BOUNDS)."""
    from scipy.optimize import least_squares as solve

    bounds = [_bounds(n) for n in names]
    x0 = [min(hi, max(lo, get_param(k, n))) for n, (lo, hi) in zip(names, bounds, strict=True)]
    res = solve(
        lambda x: residuals(rows, set_params(k, names, [float(v) for v in x])),
        x0,
        bounds=([lo for lo, _ in bounds], [hi for _, hi in bounds]),
        x_scale=[max(abs(v), 0.01) for v in x0],
        diff_step=1e-6,
        xtol=1e-12,
        ftol=1e-12,
        gtol=1e-12,
        method="trf",
    )
    return set_params(k, names, [float(v) for v in res.x])


def speed_range(
    base: C.Constants, errors: Sequence[RowError], dof: int
) -> tuple[float, float] | None:
    """The speed range a fit supports: 1.5 x its largest remaining speed error (at least
    MIN_RANGE), never wider than the GPU's range without the profile. With fewer than two
    figures more than fitted constants the residuals prove nothing: halfway between the GPU's
    range and RANGE_BY_EVIDENCE['calibrated']."""
    spread = [abs(e.speed_after) for e in errors if e.speed_after is not None]
    if not spread:
        return None
    below, above = base.range
    if dof < 2:
        cal_below, cal_above = C.RANGE_BY_EVIDENCE["calibrated"]
        return (
            round(min(below, (below + cal_below) / 2), 3),
            round(min(above, (above + cal_above) / 2), 3),
        )
    w = max(MIN_RANGE, round(1.5 * max(spread), 3))
    return min(w, below), min(w, above)


def fit_gpu(rows: Sequence[Row], base: C.Constants | None = None) -> GpuFit:
    """Fit the constants the rows (all of one GPU kind) identify, from `base` (default: the
    GPU's constants in calibration.py)."""
    if not rows:
        raise ValueError("no rows to fit")
    gpu = rows[0].gpu
    base = base or C.constants_for(rows[0].ctx.instance.gpu.name)
    names = candidate_params(rows)
    r0 = residuals(rows, base)
    chosen, kept = identifiable(names, jacobian(rows, base, names, r0), len(r0))
    k = least_squares(rows, base, chosen) if chosen else base
    # Re-check at the solution: a constant that stopped mattering there (comm fully hidden
    # again, say) is not claimed as fitted.
    if chosen:
        r1 = residuals(rows, k)
        again, why = identifiable(chosen, jacobian(rows, k, chosen, r1), len(r1))
        for name in chosen:
            if name not in again:
                k = set_params(k, [name], [get_param(base, name)])
                kept[name] = why[name]
        chosen = again
        if chosen:
            k = least_squares(rows, k, chosen)
    errors = []
    for row in rows:
        sb, mb = row_errors(row, base)
        sa, ma = row_errors(row, k)
        errors.append(RowError(row.id, sb, sa, mb, ma))
    exact: tuple[str, ...] = ()
    rng = None
    if chosen:
        exact, speed_dof = exact_figures(
            rows, chosen, jacobian(rows, k, chosen, residuals(rows, k))
        )
        rng = speed_range(base, errors, speed_dof)
        k = k._replace(evidence="calibrated", speed_range=rng)
    fitted = {name: (get_param(base, name), get_param(k, name)) for name in chosen}
    return GpuFit(gpu, base, k, fitted, kept, errors, rng, exact)


def fit(rows: Sequence[Row]) -> dict[str, GpuFit]:
    """A fit per GPU kind of `rows`."""
    by_gpu: dict[str, list[Row]] = {}
    for r in rows:
        by_gpu.setdefault(r.gpu, []).append(r)
    return {gpu: fit_gpu(rs) for gpu, rs in by_gpu.items()}
