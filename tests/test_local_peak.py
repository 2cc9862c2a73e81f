"""The local peak matmul rate is bounded (issue 37, item 8): `train/peak.measure` takes the best
call once it is stable, so a machine busy for most of the measurement does not make the peak
low (run-local printed MFU 6.27 against a mean taken on a busy machine). The clock is scripted:
every call but one is slowed 100x by other processes."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

import pytest

from blackwell_sm.train import peak

M, K, N = 64, 32, 48
FLOPS = 3 * 2.0 * M * K * N


def _clock(durations: list[float]) -> SimpleNamespace:
    """perf_counter for measure(): the start, then (t0, t1) per call lasting each duration."""
    times, now = [0.0], 0.0
    for d in durations:
        times += [now, now + d]
        now += d
    it = itertools.chain(times, itertools.repeat(now))
    return SimpleNamespace(perf_counter=lambda: next(it))


def test_a_busy_machine_does_not_lower_the_peak(monkeypatch):
    fast, slow = 1e-3, 1e-1  # one quiet moment among busy ones
    calls = [slow] * 5 + [fast] + [slow] * 20
    monkeypatch.setattr(peak, "time", _clock(calls))
    rate = peak.measure(M, K, N, budget_s=0.25)
    assert rate == pytest.approx(FLOPS / fast)
    mean = FLOPS * len(calls) / sum(calls)  # what the mean over the window gave
    assert rate > 50 * mean


def test_it_stops_once_stable_and_within_its_bound(monkeypatch):
    steady = [1e-2] * 1000
    monkeypatch.setattr(peak, "time", _clock(steady))
    assert peak.measure(M, K, N, budget_s=0.05) == pytest.approx(FLOPS / 1e-2)
    rising = [1.0 / (i + 1) for i in range(1000)]  # never settles: the bound stops it
    monkeypatch.setattr(peak, "time", _clock(rising))
    rate = peak.measure(M, K, N, budget_s=0.05, max_s=3.0)
    assert 0 < rate < FLOPS / rising[-1]
